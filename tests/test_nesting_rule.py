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

from pipeline.normalize.nesting import nesting_sql, push_pop_nesting, with_nesting


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


def _odd_ranges(seed: int) -> pa.Table:
    """Ranges the push/pop rule must still number as sql/nvtx_nesting.sql does: overlapping (not nested) on
    one thread, negative and zero lengths, NULL ends and processes, domains NULL, '' and named, start/end."""
    rng = random.Random(seed)
    rows = []
    for i in range(rng.randint(0, 120)):
        start = rng.randint(0, 30)
        end = start + rng.choice([0, 0, 1, 2, 5, 10, -1])
        rows.append(
            {
                "range_id": 3 * i + 1,
                "kind": rng.choice(["push_pop"] * 5 + ["start_end"]),
                "pid": rng.choice([7, 8, None]),
                "tid": rng.choice([1, 2]),
                "start_ns": start,
                "end_ns": rng.choice([end] * 9 + [None]),
                "domain": rng.choice([None, "", "CCCL"]),
            }
        )
    rng.shuffle(rows)
    types = [("range_id", pa.int64()), ("kind", pa.string()), ("pid", pa.int64()), ("tid", pa.int64())]
    types += [("start_ns", pa.int64()), ("end_ns", pa.int64()), ("domain", pa.string())]
    return pa.Table.from_pylist(rows, schema=pa.schema(types))


def test_numpy_nesting_equals_the_sql_rule_on_odd_ranges() -> None:
    """push_pop_nesting (numpy) gives sql/nvtx_nesting.sql's depth and parent, row for row, whatever the input."""
    parents = nulls = 0
    for seed in range(150):
        t = _odd_ranges(seed)
        view, domain = t.drop_columns(["domain"]), t["domain"].combine_chunks()
        got = {r["range_id"]: (r["depth"], r["parent_id"]) for r in push_pop_nesting(view, domain).to_pylist()}
        want = {r["range_id"]: (r["depth"], r["parent_id"]) for r in nesting_sql(view, domain).to_pylist()}
        assert got == want, seed
        parents += sum(p is not None for _, p in got.values())
        nulls += sum(r is None for r in t["pid"].to_pylist())
    assert parents > 500 and nulls > 500  # nesting and NULL processes do occur
