"""CPU cost of decoding a chrome trace's events: the msgspec pieces in use vs Arrow's and DuckDB's JSON readers.

An experiment's record (see ``chrome_readers.md``): neither reader decodes faster than the msgspec path, so
``pipeline/normalize/chrome.py`` does not use them.  Everything runs single-threaded in this process, so the
CPU seconds are the comparable figure on a shared machine; wall time and RSS are printed beside them, and the
kernels each reader found are checked one by one against the msgspec decode.

    PYTHONPATH=. python benchmarks/bench_chrome_readers.py --mb 500
"""

from __future__ import annotations

import argparse
import mmap
import resource
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import duckdb
import msgspec
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from benchmarks._measure import provenance
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


def _cpu(label: str, fn: Callable[[], object]) -> object:
    """Run one step; print its CPU (the comparable figure here) beside its wall time, and the process's
    RSS after it and its peak so far (one process: the readers run in it, single-threaded)."""
    w, t = time.perf_counter(), time.process_time()
    result = fn()
    cpu, wall = time.process_time() - t, time.perf_counter() - w
    rss, peak = psutil.Process().memory_info().rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        f"{label:58s} CPU {cpu:6.2f} s  wall {wall:6.2f} s  RSS {rss / 1e6:6.0f} MB (peak so far {peak / 1e6:.0f} MB)"
    )
    return result


def _kernels_of_events(pieces: list[list]) -> list[tuple[int, int]]:
    """The reference, per kernel: (correlation id, start ns) from the msgspec events (exact decimal ns)."""
    out = []
    for events in pieces:
        for e in events:
            if e.cat == "kernel" and e.ph == "X":
                corr = msgspec.json.decode(e.args)["correlation"]
                out.append((corr, int(Decimal(repr(e.ts)) * 1000)))
    return sorted(out)


def _check(label: str, got: list[tuple[int, int]], want: list[tuple[int, int]]) -> None:
    assert got == want, f"{label}: kernels differ from the msgspec decode ({len(got)} vs {len(want)})"
    print(f"{'':58s} per-kernel check: the same {len(want):,} kernels (correlation id, start ns)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=500)
    args = ap.parse_args()
    print(provenance())
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

        decoded = _cpu("msgspec: events only (shared fields, args raw)", lambda: [events(p) for p in pieces])
        want = _kernels_of_events(decoded)  # type: ignore[arg-type]
        del decoded
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
            tables = _cpu(
                label, lambda po=po: [pj.read_json(pa.BufferReader(p), read_options=ro, parse_options=po) for p in nd]
            )
            if fields and ts == pa.decimal128(20, 3):
                got = []
                for t in tables:  # type: ignore[union-attr]
                    k = t.filter(pc.equal(t["cat"], "kernel"))
                    corr = pc.struct_field(k["args"], "correlation").to_pylist()
                    got += [(c, int(x * 1000)) for c, x in zip(corr, k["ts"].to_pylist(), strict=True)]
                _check(label, sorted(got), want)
            del tables
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
        flat = _cpu(
            "duckdb read_json: flat columns of X events -> Arrow",
            lambda: con.sql(
                f"""SELECT cat, name, try_cast(pid AS BIGINT) AS pid, try_cast(tid AS BIGINT) AS tid,
                (ts::DECIMAL(38,3) * 1000)::BIGINT AS start_ns, (dur::DECIMAL(38,3) * 1000)::BIGINT AS duration_ns,
                args."External id" AS ext, args.correlation AS corr, args."Python id" AS py,
                args."Python parent id" AS pp, args."Input Dims"::VARCHAR AS dims, args."Input type"::VARCHAR AS types,
                args.device AS dev, args.stream AS st, args.grid[1] AS gx FROM {src} WHERE ph = 'X'"""
            ).to_arrow_table(),
        )
        k = flat.filter(pc.equal(flat["cat"], "kernel"))  # type: ignore[union-attr]
        _check("duckdb", sorted(zip(k["corr"].to_pylist(), k["start_ns"].to_pylist(), strict=True)), want)


if __name__ == "__main__":
    main()
