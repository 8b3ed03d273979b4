"""nsys normalize reads kernels and runtime calls in the order the export stores them when that is start order
(nsys's own), numbering them itself, and falls back to sqlite's sort when it is not; a large export's kernels
are written by a forked child process. Every path gives the kernels and calls plain sqlite3 gives, in
(start, correlation id) order."""

from __future__ import annotations

import gzip
import os
import sqlite3
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import BadInputError
from pipeline.normalize import normalize_file, nsys
from pipeline.store import committed_file
from tests.conftest import SAMPLES

DECODER = SAMPLES / "h200_train_decoder" / "nsys.sqlite.gz"


def _sqlite(tmp_path: Path, reverse: tuple[str, ...] = ()) -> Path:
    """The decoder sample; the tables in ``reverse`` stored last row first (their rowids reversed)."""
    path = tmp_path / "cap" / "nsys.sqlite"
    path.parent.mkdir()
    path.write_bytes(gzip.decompress(DECODER.read_bytes()))
    db = sqlite3.connect(path)
    for table in reverse:
        db.execute(f"CREATE TABLE tmp AS SELECT * FROM {table} ORDER BY rowid DESC")
        db.execute(f"DELETE FROM {table}")
        db.execute(f"INSERT INTO {table} SELECT * FROM tmp")
        db.execute("DROP TABLE tmp")
    db.commit()
    db.close()
    return path


def _expected(path: Path) -> tuple[list[tuple], list[tuple]]:
    db = sqlite3.connect(path)
    kernels = db.execute(
        'SELECT start, "end", correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start, correlationId'
    ).fetchall()
    calls = db.execute(
        'SELECT start, "end", correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start, correlationId'
    ).fetchall()
    return kernels, calls


def _got(out: Path, table: str, id_col: str) -> list[tuple]:
    t = pq.read_table(committed_file(out, "cap.nsys", table)).sort_by(id_col)
    assert t[id_col].to_pylist() == list(range(t.num_rows))  # numbered 0..n-1 in start order
    return list(zip(*(t[c].to_pylist() for c in ("start_ns", "end_ns", "correlation_id")), strict=True))


@pytest.mark.parametrize("reverse", [(), ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")])
def test_kernels_and_calls_in_start_order_whatever_the_stored_order(tmp_path: Path, reverse: tuple) -> None:
    path = _sqlite(tmp_path, reverse)
    out = tmp_path / "out"
    normalize_file(path, out)
    kernels, calls = _expected(path)
    assert _got(out, "kernels", "kernel_id") == kernels
    assert _got(out, "api_calls", "call_id") == calls


def test_stored_order_check_rejects_a_row_out_of_order() -> None:
    batch = pa.record_batch({"call_id": [None, None, None], "start_ns": [1, 2, 2], "correlation_id": [5, 7, 6]})
    with pytest.raises(nsys._OutOfOrder):  # equal start, correlation id going down
        list(nsys._numbered_in_order([batch], "call_id"))
    later = pa.record_batch({"call_id": [None], "start_ns": [0], "correlation_id": [9]})
    ok = pa.record_batch({"call_id": [None, None], "start_ns": [1, 1], "correlation_id": [1, 2]})
    with pytest.raises(nsys._OutOfOrder):  # across batches
        list(nsys._numbered_in_order([ok, later], "call_id"))


def test_a_large_export_s_kernels_are_written_by_a_fresh_child_process_and_equal_the_serial_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child is a new interpreter, never a fork: importing pyarrow starts native threads (jemalloc's, Arrow's)
    that ``threading`` does not see, and a fork would copy a lock one of them held, held for good."""
    threads = os.listdir("/proc/self/task")
    assert len(threads) > 1  # why a fork here would not be safe
    path = _sqlite(tmp_path)
    serial = tmp_path / "serial"
    normalize_file(path, serial)
    started: list[list[str]] = []
    command = nsys._child_command

    def spy(args: list[str]) -> list[str]:
        started.append(command(args))
        return started[-1]

    def no_fork() -> int:
        raise AssertionError("normalize forked this multi-threaded process")

    monkeypatch.setattr(nsys, "_child_command", spy)
    monkeypatch.setattr(os, "fork", no_fork)
    monkeypatch.setattr(nsys, "PARALLEL_MIN_KERNELS", 1)
    monkeypatch.setattr(nsys, "cores", lambda: 2)
    parallel = tmp_path / "parallel"
    normalize_file(path, parallel)
    assert [c[1:3] for c in started] == [["-m", "pipeline.normalize.nsys_kernels"]]  # one fresh interpreter
    for table in ("kernels", "api_calls", "nvtx_ranges"):
        a = pq.read_table(committed_file(serial, "cap.nsys", table))
        b = pq.read_table(committed_file(parallel, "cap.nsys", table))
        assert a.drop_columns(["trace_id"]).equals(b.drop_columns(["trace_id"])), table


def test_a_child_that_fails_is_a_tool_error_naming_the_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _sqlite(tmp_path)
    monkeypatch.setattr(nsys, "PARALLEL_MIN_KERNELS", 1)
    monkeypatch.setattr(nsys, "cores", lambda: 2)
    monkeypatch.setattr(nsys, "_child_command", lambda args: ["false"])  # exits 1 without a word
    with pytest.raises(RuntimeError, match=r"writing the kernels of .*nsys\.sqlite: the process writing the kernels"):
        normalize_file(path, tmp_path / "out")


def test_inside_a_worker_process_the_kernels_are_written_in_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A normalize --jobs worker (or a Dask worker) has siblings on the other cores: no child of its own."""
    path = _sqlite(tmp_path)
    monkeypatch.setattr(nsys, "PARALLEL_MIN_KERNELS", 1)
    monkeypatch.setattr(nsys, "cores", lambda: 2)
    monkeypatch.setattr(nsys.multiprocessing, "parent_process", lambda: object())
    monkeypatch.setattr(nsys, "_child_command", lambda args: pytest.fail("started a kernels child in a worker"))
    normalize_file(path, tmp_path / "out")
    kernels, _ = _expected(path)
    assert _got(tmp_path / "out", "kernels", "kernel_id") == kernels


@pytest.mark.parametrize("reverse", [(), ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")])
def test_a_mid_size_export_s_kernels_and_calls_are_written_by_threads_and_equal_the_serial_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reverse: tuple
) -> None:
    """From THREAD_MIN_ROWS rows on, the kernels and the runtime calls are each read on a thread of their own
    (their own connection) while this one writes the rest: the same tables, in the same order, as one thread."""
    path = _sqlite(tmp_path, reverse)
    serial = tmp_path / "serial"
    normalize_file(path, serial)
    on: dict[str, str] = {}
    for name in ("write_kernels_in", "write_api_calls_in"):
        real = getattr(nsys, name)

        def spy(*args: object, _real=real, _name=name) -> object:
            on[_name] = threading.current_thread().name
            return _real(*args)

        monkeypatch.setattr(nsys, name, spy)
    monkeypatch.setattr(nsys, "THREAD_MIN_ROWS", 1)
    monkeypatch.setattr(nsys, "cores", lambda: 2)
    monkeypatch.setattr(nsys, "_child_command", lambda args: pytest.fail("started a kernels child below its size"))
    threaded = tmp_path / "threaded"
    normalize_file(path, threaded)
    assert sorted(on) == ["write_api_calls_in", "write_kernels_in"]
    assert all(t.startswith("tracepipe-normalize") for t in on.values()), on
    kernels, calls = _expected(path)
    assert _got(threaded, "kernels", "kernel_id") == kernels
    assert _got(threaded, "api_calls", "call_id") == calls
    for table in ("kernels", "api_calls", "nvtx_ranges"):
        a = pq.read_table(committed_file(serial, "cap.nsys", table))
        b = pq.read_table(committed_file(threaded, "cap.nsys", table))
        assert a.drop_columns(["trace_id"]).equals(b.drop_columns(["trace_id"])), table


def test_a_thread_that_fails_fails_the_input_and_commits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _sqlite(tmp_path)
    monkeypatch.setattr(nsys, "THREAD_MIN_ROWS", 1)
    monkeypatch.setattr(nsys, "cores", lambda: 2)

    def broken(path: Path, shown: Path, writer: object) -> None:
        raise BadInputError(shown, "sqlite query failed (disk I/O error)")

    monkeypatch.setattr(nsys, "write_api_calls_in", broken)
    with pytest.raises(BadInputError, match=r"nsys\.sqlite.*disk I/O error"):
        normalize_file(path, tmp_path / "out")
    assert not list((tmp_path / "out").rglob("*.parquet"))  # no table of the failed generation is visible
