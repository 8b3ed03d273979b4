"""The tie rule for ranges on one thread (docs/schema.md, nvtx_ranges): same start and end -> the one first
in the source is the outer, the later one the inner that gets the kernel; same start, different ends -> the
shorter is the inner, whatever the order.  Hand-made chrome traces and nsys exports; expected values by hand.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pipeline.analyze import connect
from pipeline.normalize import normalize_file


def attribution(out: Path) -> tuple[list, list]:
    con = connect(out)
    layers = con.sql("SELECT layer, path FROM kernel_layers").fetchall()
    nesting = con.sql(
        "SELECT r.text, r.depth, p.text FROM nvtx_ranges r LEFT JOIN nvtx_ranges p ON p.range_id = r.parent_id "
        "ORDER BY r.depth"
    ).fetchall()
    return layers, nesting


def chrome(tmp_path: Path, ranges: list[tuple[str, float, float]]) -> Path:
    """One launch at 10 us on thread 1/1, its kernel, and user_annotation ranges in the given file order."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": n, "pid": 1, "tid": 1, "ts": ts, "dur": dur}
        for n, ts, dur in ranges
    ]
    events += [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10.0, "dur": 1.0,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 12.0, "dur": 2.0,
         "args": {"correlation": 1, "device": 0, "stream": 7}},
    ]  # fmt: skip
    tmp_path.mkdir()
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "out"
    normalize_file(path, out)
    return out


def nsys(tmp_path: Path, ranges: list[tuple[str, int, int]]) -> Path:
    """The same in an nsys export: NVTX push/pop rows inserted in the given order."""
    tmp_path.mkdir()
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute(
        'CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, "end" INTEGER, correlationId INTEGER, '
        "globalPid INTEGER, demangledName INTEGER)"
    )
    con.execute(
        'CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, "end" INTEGER, correlationId INTEGER, '
        "globalTid INTEGER, nameId INTEGER)"
    )
    con.execute(
        'CREATE TABLE NVTX_EVENTS (start INTEGER, "end" INTEGER, eventType INTEGER, globalTid INTEGER, text TEXT)'
    )
    gtid = (1 << 24) | 1
    con.execute("INSERT INTO StringIds VALUES (1, 'k'), (2, 'cudaLaunchKernel')")
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (10000, 11000, 1, ?, 2)", (gtid,))
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (12000, 14000, 1, ?, 1)", (1 << 24,))
    for text, start, end in ranges:
        con.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?)", (start, end, gtid, text))
    con.commit()
    con.close()
    out = tmp_path / "out"
    normalize_file(path, out)
    return out


@pytest.mark.parametrize("first, second", [("a", "b"), ("b", "a")])
def test_same_start_and_end_the_later_in_the_source_is_inner(tmp_path: Path, first: str, second: str) -> None:
    want = ([(second, f"{first}/{second}")], [(first, 0, None), (second, 1, first)])
    assert attribution(chrome(tmp_path / "c", [(first, 5.0, 20.0), (second, 5.0, 20.0)])) == want
    assert attribution(nsys(tmp_path / "n", [(first, 5000, 25000), (second, 5000, 25000)])) == want


def test_same_start_the_shorter_is_inner_whatever_the_order(tmp_path: Path) -> None:
    want = ([("short", "long/short")], [("long", 0, None), ("short", 1, "long")])
    assert attribution(chrome(tmp_path / "c", [("short", 5.0, 15.0), ("long", 5.0, 25.0)])) == want
    assert attribution(nsys(tmp_path / "n", [("short", 5000, 20000), ("long", 5000, 30000)])) == want
