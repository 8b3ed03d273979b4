"""pipeline.normalize.forked: results in order, Arrow tables intact, errors and dead children reported."""

from __future__ import annotations

import os
import time

import numpy as np
import pyarrow as pa
import pytest

from pipeline.normalize import forked


def _table(i: int) -> pa.Table:
    # Columns of different sizes and types (an odd-sized string buffer tests the padding between buffers).
    n = 1000 + 37 * i
    return pa.table(
        {
            "i": pa.array(np.arange(n, dtype=np.int64) + i),
            "name": pa.array([f"k{j % 7}" * (j % 3) for j in range(n)]),
            "x": pa.array([None if j % 5 == 0 else j / 3 for j in range(n)], pa.float64()),
        }
    )


def _slow_first(i: int) -> pa.Table:
    if i == 0:
        time.sleep(0.3)  # finishes after later indices: they must wait for it in the output
    return _table(i)


def test_results_come_back_in_order_and_equal() -> None:
    got = list(forked.imap(_slow_first, 25, 3))
    assert len(got) == 25
    for i, t in enumerate(got):
        assert t.equals(_table(i)), i


def test_work_is_shared_by_whoever_is_free() -> None:
    # Index 0 keeps one child busy; the others take the rest, so no index waits behind it.
    pids = list(forked.imap(lambda i: (time.sleep(0.5 if i == 0 else 0.01), os.getpid())[1], 20, 2))
    assert pids.count(pids[0]) == 1


def _fails_at_7(i: int) -> int:
    if i == 7:
        raise ValueError(f"bad piece {i}")
    return i


def test_an_exception_is_raised_when_its_result_is_due() -> None:
    it = forked.imap(_fails_at_7, 20, 2)
    assert [next(it) for _ in range(7)] == list(range(7))
    with pytest.raises(ValueError, match="bad piece 7"):
        next(it)


def test_a_dead_child_is_an_error_not_a_hang() -> None:
    def die_at_3(i: int) -> int:
        if i == 3:
            os._exit(9)  # as if killed for memory
        return i

    with pytest.raises(RuntimeError, match="worker died"):
        list(forked.imap(die_at_3, 10, 2))
