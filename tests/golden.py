"""Golden tests of the views, in the style of Perfetto's trace-processor diff tests: a trace of a few rows
written by hand, a query over one view, and the table it must give written inline, worked out by hand.

    def test_launch_inside_a_range_is_forward(tmp_path: Path) -> None:
        write(tmp_path, "t.nsys", nvtx_ranges=[push_pop("conv1", 0, 100)], api_calls=[launch(1, 10)],
              kernels=[kernel(1)])
        expect(tmp_path, "SELECT kernel_id, layer, pass FROM kernel_layers ORDER BY kernel_id", '''
            kernel_id | layer | pass
            0         | conv1 | forward
        ''')

The rows are dicts of the normalized schema's columns (``docs/schema.md``); ids left out are the row's
position, ``pid`` 100 and ``tid`` 1, and normalize's derived columns (range nesting, durations) are filled
the way normalize fills them.  Cells are compared as text: ``NULL`` for NULL, integers as they are, a float
to 6 decimals with trailing zeros dropped (4/3 is ``1.333333``, 2.0 is ``2``), booleans ``true``/``false``.
A mismatch prints both tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.analyze import connect
from pipeline.schema import TABLES
from pipeline.store import TraceWriter

#: The id column of each table that has one: rows without it are numbered by position.
_IDS = {
    "kernels": "kernel_id",
    "api_calls": "call_id",
    "nvtx_ranges": "range_id",
    "ops": "op_id",
    "memcpy": "copy_id",
    "memset": "set_id",
}
PID, TID = 100, 1


def push_pop(text: str, start_ns: int, end_ns: int, tid: int = TID, **kw: Any) -> dict[str, Any]:
    """An NVTX push/pop range (a module call) on CPU thread ``tid``."""
    return {"text": text, "start_ns": start_ns, "end_ns": end_ns, "tid": tid, **kw}


def launch(correlation_id: int, start_ns: int, tid: int = TID) -> dict[str, Any]:
    """A cudaLaunchKernel call at ``start_ns`` on thread ``tid``: the launch of the GPU op with its correlation id."""
    return {"correlation_id": correlation_id, "start_ns": start_ns, "tid": tid}


def kernel(correlation_id: int, **kw: Any) -> dict[str, Any]:
    """A kernel launched by the API call of the same correlation id (1 block of 1 thread unless given)."""
    return {"correlation_id": correlation_id, **kw}


def op(name: str, start_ns: int, end_ns: int, tid: int = TID, **kw: Any) -> dict[str, Any]:
    """A PyTorch CPU op (``sequence_number`` links a backward op to its forward op)."""
    return {"name": name, "start_ns": start_ns, "end_ns": end_ns, "tid": tid, **kw}


def _filled(table: str, i: int, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the columns normalize always writes: id, process and thread, end or duration."""
    names = TABLES[table].names
    out = {_IDS[table]: i} if table in _IDS else {}
    if "pid" in names:
        out["pid"] = PID
    if "tid" in names and table in ("api_calls", "nvtx_ranges", "ops"):
        out["tid"] = TID
    out |= row
    if table == "kernels":
        out = {"start_ns": 10_000 + i, "duration_ns": 1, "name": f"k{i}", **out}
        out = {"grid_x": 1, "grid_y": 1, "grid_z": 1, "block_x": 1, "block_y": 1, "block_z": 1, **out}
    if table == "api_calls":
        out = {"kind": "runtime", "name": "cudaLaunchKernel", "end_ns": out["start_ns"] + 1, **out}
    if table == "nvtx_ranges":
        out = {"kind": "push_pop", "source": "nvtx", "end_tid": out["tid"], **out}
    if "duration_ns" in names and out.get("start_ns") is not None:
        if out.get("end_ns") is None and out.get("duration_ns") is not None:
            out["end_ns"] = out["start_ns"] + out["duration_ns"]
        if out.get("duration_ns") is None and out.get("end_ns") is not None:
            out["duration_ns"] = out["end_ns"] - out["start_ns"]
    return out


def write(folder: Path, trace_id: str, **tables: list[dict[str, Any]]) -> Path:
    """Commit one trace of ``tables`` (name -> rows) into the normalized folder ``folder``."""
    from pipeline.normalize.nesting import with_nesting

    with TraceWriter(folder, trace_id) as w:
        for name, rows in tables.items():
            filled = [_filled(name, i, r) for i, r in enumerate(rows)]
            columns = list(dict.fromkeys(c for r in filled for c in r))  # from_pylist reads the first row's keys
            data = pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in filled])
            w.write(name, with_nesting(data) if name == "nvtx_ranges" else data)
        if "trace_meta" not in tables:
            w.write("trace_meta", pa.Table.from_pylist([{"source_format": "golden"}]))
        w.commit()
    return folder


def cell(value: object) -> str:
    """One value as the expected tables write it."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = f"{value:.6f}".rstrip("0").rstrip(".")
        return "0" if text == "-0" else text
    return str(value)


def parse(expected: str) -> list[list[str]]:
    """The rows of an inline table: one line per row, cells between '|', the first line the column names."""
    return [[c.strip() for c in line.split("|")] for line in expected.strip().splitlines() if line.strip()]


def aligned(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(map(len, rows)))]
    return "\n".join(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) for r in rows)


def query(folder: Path, sql: str, device: str | None = None) -> list[list[str]]:
    """The header and rows ``sql`` gives over ``folder`` with every view registered, as text cells."""
    rel = connect(folder, device=device).sql(sql)
    return [list(rel.columns), *([cell(v) for v in row] for row in rel.fetchall())]


def expect(folder: Path, sql: str, expected: str, device: str | None = None) -> None:
    """Fail, printing both tables, unless ``sql`` over ``folder`` gives exactly the rows of ``expected``."""
    got, want = query(folder, sql, device), parse(expected)
    assert got == want, f"\n--- expected\n{aligned(want)}\n--- got\n{aligned(got)}"
