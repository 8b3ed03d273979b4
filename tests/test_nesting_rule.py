"""The push/pop nesting rule of pipeline/normalize/sql/nvtx_nesting.sql against a nested-loop reference.

Reference (docs/schema.md's rule, written out plainly): on one thread and domain, order ranges by start, then
longer first, then range_id; a range's ancestors are the ranges ordered before it that have not ended by its
start (end > start: a range ending at t, zero-length ones included, has ended by t). depth = number of
ancestors, parent = the last of them in that order.  Random traces come from a push/pop simulation with many
equal timestamps and zero-length ranges, the cases the sort-based SQL gets wrong when its counts slip.
"""

from __future__ import annotations

import random

import pyarrow as pa

from pipeline.normalize.nesting import with_nesting


def simulated_ranges(seed: int, events: int = 60) -> list[tuple[int, int, int]]:
    """(tid, start, end) of properly pushed and popped ranges on two threads, times advancing by 0-2 ns."""
    rng = random.Random(seed)
    out = []
    for tid in (1, 2):
        t, stack = 0, []
        for _ in range(events):
            t += rng.choice((0, 0, 1, 2))
            if stack and rng.random() < 0.5:
                out.append((tid, stack.pop(), t))
            else:
                stack.append(t)
        while stack:
            t += rng.choice((0, 1))
            out.append((tid, stack.pop(), t))
    rng.shuffle(out)
    return out


def reference(ranges: list[tuple[int, int, int]]) -> dict[int, tuple[int, int | None]]:
    order = sorted(range(len(ranges)), key=lambda i: (ranges[i][0], ranges[i][1], -ranges[i][2], i))
    pos = {i: n for n, i in enumerate(order)}
    out = {}
    for i, (tid, start, _end) in enumerate(ranges):
        ancestors = [j for j, (t2, _s2, e2) in enumerate(ranges) if t2 == tid and pos[j] < pos[i] and e2 > start]
        out[i] = (len(ancestors), max(ancestors, key=pos.get) if ancestors else None)
    return out


def nested(ranges: list[tuple[int, int, int]]) -> dict[int, tuple[int, int | None]]:
    rows = [
        {"range_id": i, "kind": "push_pop", "pid": 7, "tid": tid, "start_ns": s, "end_ns": e}
        for i, (tid, s, e) in enumerate(ranges)
    ]
    got = with_nesting(pa.Table.from_pylist(rows)).to_pylist()
    return {r["range_id"]: (r["depth"], r["parent_id"]) for r in got}


def test_a_range_starting_with_a_zero_length_mark_is_its_parent() -> None:
    # [100,200] and [100,100]: the longer encloses (equal starts); it was given depth -1 before.
    assert nested([(1, 100, 200), (1, 100, 100)]) == {0: (0, None), 1: (1, 0)}
    # two zero-length ranges at one instant are siblings: the first has ended when the second starts.
    assert nested([(1, 100, 100), (1, 100, 100)]) == {0: (0, None), 1: (0, None)}


def test_depth_and_parent_equal_the_nested_loop_rule_on_random_push_pop_traces() -> None:
    zero_length = 0
    for seed in range(40):
        ranges = simulated_ranges(seed)
        zero_length += sum(s == e for _, s, e in ranges)
        assert nested(ranges) == reference(ranges), seed
    assert zero_length > 100  # the generator does exercise zero-length ranges
