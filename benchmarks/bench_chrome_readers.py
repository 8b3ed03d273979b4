"""CPU cost of decoding a chrome trace's events: the msgspec pieces in use vs Arrow's and DuckDB's JSON readers.

An experiment's record (see ``chrome_readers.md``): neither reader decodes faster than the msgspec path, so
``pipeline/normalize/chrome.py`` does not use them.  Everything runs single-threaded in this process, so the
numbers are CPU seconds, comparable on a shared machine.

    PYTHONPATH=. python benchmarks/bench_chrome_readers.py --mb 500
"""

from __future__ import annotations

import argparse
import mmap
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.json as pj

from benchmarks.bench_chrome import generate
from pipeline.normalize import chrome_decode as chrome

_I, _S, _F = pa.int64(), pa.string(), pa.float64()
#: The union of the args keys the normalizer's categories use (unknown keys ignored, missing ones null).
_ARGS = [
    ("External id", _I),
    ("correlation", _I),
    ("device", _I),
    ("context", _I),
    ("stream", _I),
    ("registers per thread", _I),
    ("shared memory", _I),
    ("blocks per SM", _F),
    ("warps per SM", _F),
    ("est. achieved occupancy %", _F),
    ("grid", pa.list_(_I)),
    ("block", pa.list_(_I)),
    ("Sequence number", _I),
    ("Fwd thread id", _I),
    ("Input Dims", pa.list_(pa.list_(_I))),
    ("Input type", pa.list_(_S)),
    ("Python id", _I),
    ("Python parent id", _I),
    ("bytes", _I),
]
_TOP = [("ph", _S), ("cat", _S), ("name", _S), ("pid", _I), ("tid", _I)]
_DUCK_ARGS = ", ".join(
    f'"{k}" ' + {"list<item: int64>": "BIGINT[]", "int64": "BIGINT", "double": "DOUBLE"}.get(str(t), "JSON")
    for k, t in _ARGS
)
_DUCK_COLUMNS = (
    "{'ph': 'VARCHAR', 'cat': 'VARCHAR', 'name': 'VARCHAR', 'pid': 'VARCHAR', 'tid': 'VARCHAR', "
    f"'ts': 'DECIMAL(18,3)', 'dur': 'DECIMAL(18,3)', 'args': 'STRUCT({_DUCK_ARGS})'}}"
)


def _cpu(label: str, fn: Callable[[], object]) -> None:
    t = time.process_time()
    fn()
    print(f"{label:58s} {time.process_time() - t:6.2f} s CPU")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=500)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-readers-") as tmp:
        path = Path(tmp) / "trace.json"
        generate(path, args.mb)
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        _, ranges = chrome._split(data)
        # The first piece holds the metadata events, whose string pids ("Spans") no int64 column takes.
        ranges = ranges[1:]
        print(f"{path.stat().st_size / 1e6:.0f} MB, {len(ranges)} pieces of ~{chrome.CHUNK_BYTES >> 20} MB")
        pieces = [bytes(memoryview(data)[a:b]) for a, b in ranges]  # page cache warm, copies paid once here
        dec = chrome._GENERAL

        def events(p: bytes) -> list:
            return dec.decode(b"".join((b"[", p, b"]")))

        _cpu("msgspec: events only (shared fields, args raw)", lambda: [events(p) for p in pieces])
        _cpu(
            "msgspec: whole _Piece (args + Arrow columns, as in use)",
            lambda: [chrome.Piece(events(p)) for p in pieces],
        )
        nd = []
        _cpu(
            "separators '},\\n' -> '}\\n' (NDJSON for Arrow)",
            lambda: nd.extend(p.replace(b"},\n", b"}\n") for p in pieces),
        )
        ro = pj.ReadOptions(use_threads=False, block_size=4 << 20)
        for label, ts, fields in (
            ("arrow read_json: ts decimal128(20,3), full args", pa.decimal128(20, 3), _ARGS),
            ("arrow read_json: ts float64, full args", _F, _ARGS),
            ("arrow read_json: ts float64, no args at all", _F, []),
        ):
            cols = [*_TOP, ("ts", ts), ("dur", ts)] + ([("args", pa.struct(fields))] if fields else [])
            po = pj.ParseOptions(explicit_schema=pa.schema(cols), unexpected_field_behavior="ignore")
            _cpu(label, lambda po=po: [pj.read_json(pa.BufferReader(p), read_options=ro, parse_options=po) for p in nd])
        nd.clear()
        arr = Path(tmp) / "events.json"

        def write_array() -> None:
            with open(arr, "wb") as f:
                f.write(b"[")
                for i, p in enumerate(pieces):
                    f.write(b"," if i else b"")
                    f.write(p)
                f.write(b"]")

        _cpu("events copied to a JSON array file (for DuckDB)", write_array)
        con = duckdb.connect(config={"threads": 1})
        src = f"read_json('{arr}', format='array', columns={_DUCK_COLUMNS})"
        _cpu(
            "duckdb read_json: flat columns of X events -> Arrow",
            lambda: con.sql(
                f"""SELECT cat, name, try_cast(pid AS BIGINT) AS pid, try_cast(tid AS BIGINT) AS tid,
                (ts::DECIMAL(38,3) * 1000)::BIGINT AS start_ns, (dur::DECIMAL(38,3) * 1000)::BIGINT AS duration_ns,
                args."External id" AS ext, args.correlation AS corr, args."Python id" AS py,
                args."Python parent id" AS pp, args."Input Dims"::VARCHAR AS dims, args."Input type"::VARCHAR AS types,
                args.device AS dev, args.stream AS st, args.grid[1] AS gx FROM {src} WHERE ph = 'X'"""
            ).to_arrow_table(),
        )


if __name__ == "__main__":
    main()
