"""step_gpu_idle against a plain Python sweep on random traces: steps that overlap (other threads of the process,
equal starts), windows that overlap, operations spanning several windows, zero-length operations and operations
without a launching call. The view finds step and window membership with equality joins on time buckets; the
reference compares every operation with every step and window."""

from __future__ import annotations

import random

import duckdb
import pytest

from pipeline.analyze import create_views

COLS = (
    "trace_id, step, step_name, range_id, device_id, cpu_start_ns, cpu_end_ns, window_start_ns, window_end_ns, "
    "wall_ns, ops, kernels, kernel_ns, memop_ns, busy_ns, idle_ns, launch_gap_ns, host_wait_ns, launch_gaps, "
    "host_waits"
)


def reference(ranges: list[tuple], ops: list[tuple]) -> list[tuple]:
    """ranges: (trace, range_id, pid, text, start, end, depth); ops: (trace, device, kind, start, end, pid, call)."""
    out = []
    for trace in sorted({o[0] for o in ops} | {r[0] for r in ranges}):
        cand = [r for r in ranges if r[0] == trace and (r[3].startswith("ProfilerStep#") or r[3] == "step")]
        top = min((r[6] for r in cand), default=None)
        steps = sorted((r for r in cand if r[6] == top), key=lambda r: (r[4], r[1]))
        t_ops = [o for o in ops if o[0] == trace]
        windows = []  # (step, name, range_id, device, cpu_start, cpu_end, own ops)
        if steps:
            for n, (_, rid, pid, text, s0, s1, _) in enumerate(steps, 1):
                own = [o for o in t_ops if o[5] == pid and o[6] is not None and s0 <= o[6] <= s1]
                for dev in sorted({o[1] for o in own}):
                    windows.append((n, text, rid, dev, s0, s1, [o for o in own if o[1] == dev]))
        else:
            for dev in sorted({o[1] for o in t_ops}):
                windows.append((0, "(whole trace)", None, dev, None, None, [o for o in t_ops if o[1] == dev]))
        for step, name, rid, dev, c0, c1, own in windows:
            w0 = c0 if c0 is not None else min(o[3] for o in own)
            w1 = max([e for e in (c1, max(o[4] for o in own)) if e is not None])
            clipped = sorted(
                ((max(o[3], w0), min(o[4], w1), o[6], o[2]) for o in t_ops if o[1] == dev and o[3] < w1 and o[4] > w0),
                key=lambda c: c[:2],  # equal (start, end) only where clipped to the window start: one island
            )
            kernel_ns = sum(e - s for s, e, _, k in clipped if k == "kernel")
            memop_ns = sum(e - s for s, e, _, k in clipped if k != "kernel")
            busy_end, launch_gap, host, launch_gaps, host_waits = None, 0, 0, 0, 0
            for s, e, call, _ in clipped:
                if busy_end is None or s > busy_end:
                    gap = s - (w0 if busy_end is None else busy_end)
                    if busy_end is not None and call is not None and call <= busy_end:
                        launch_gap, launch_gaps = launch_gap + gap, launch_gaps + (gap > 0)
                    else:
                        host, host_waits = host + gap, host_waits + (gap > 0)
                    busy_end = e
                else:
                    busy_end = max(busy_end, e)
            trailing = w1 - busy_end if busy_end is not None else 0
            host_waits += busy_end is not None and busy_end < w1
            idle = launch_gap + host + trailing
            kernels = sum(o[2] == "kernel" for o in own)
            wall = w1 - w0
            row = (trace, step, name, rid, dev, c0, c1, w0, w1, wall, len(own), kernels, kernel_ns, memop_ns)
            out.append((*row, wall - idle, idle, launch_gap, host + trailing, launch_gaps, host_waits))
    return sorted(out, key=lambda r: (r[0], r[1], r[4]))


def random_trace(rng: random.Random) -> tuple[list[tuple], list[tuple]]:
    ranges, ops, rid = [], [], 0
    for trace in ("a", "b", "c"):
        if trace != "c":  # c has no step ranges: one whole-trace row per device
            for _ in range(rng.randint(1, 7)):
                rid += 1
                s = rng.choice([0, 100, 200, 300, 400]) + rng.choice([0, rng.randint(0, 120)])  # equal starts
                if ranges and ranges[-1][0] == trace and rng.random() < 0.3:
                    s = ranges[-1][5]  # starts the instant the previous one ends
                text = rng.choice(["ProfilerStep#1", "step", "forward"])
                ranges.append((trace, rid, rng.randint(1, 2), text, s, s + rng.randint(-5, 150), 0))
        bounds = [b for r in ranges if r[0] == trace for b in (r[4], r[5])]
        for dev in (0, 1):
            for start in rng.sample(range(0, 700), rng.randint(5, 60)):  # distinct starts: one sweep order
                kind = rng.choice(["kernel", "kernel", "memcpy"])
                call = None if rng.random() < 0.1 else start - rng.randint(0, 80)
                if bounds and rng.random() < 0.3:  # a call at a step's first or last instant
                    call = rng.choice(bounds)
                end = start + rng.choice([0, rng.randint(1, 40), rng.randint(1, 300)])
                if bounds and rng.random() < 0.2:  # ends the instant a step (so a window) starts or ends
                    end = max(start, rng.choice(bounds))
                ops.append((trace, dev, kind, start, end, rng.randint(1, 2), call))
    return ranges, ops


def view_rows(ranges: list[tuple], ops: list[tuple]) -> list[tuple]:
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE nvtx_ranges (trace_id VARCHAR, range_id BIGINT, pid BIGINT, text VARCHAR, start_ns BIGINT, "
        "end_ns BIGINT, depth INTEGER, kind VARCHAR)"
    )
    con.executemany("INSERT INTO nvtx_ranges VALUES (?, ?, ?, ?, ?, ?, ?, 'push_pop')", ranges)
    con.execute("CREATE TABLE api_calls (trace_id VARCHAR, call_id BIGINT, start_ns BIGINT)")
    con.executemany(
        "INSERT INTO api_calls VALUES (?, ?, ?)", [(o[0], i, o[6]) for i, o in enumerate(ops) if o[6] is not None]
    )
    con.execute(
        "CREATE TABLE gpu_op_layers (trace_id VARCHAR, device_id INTEGER, op_kind VARCHAR, start_ns BIGINT, "
        "end_ns BIGINT, launch_pid BIGINT, launch_call_id BIGINT, graph_node_id BIGINT, launch_start_ns BIGINT)"
    )
    # As gpu_op_layers has them: launch_start_ns is the launching call's start, except for a replayed graph node
    # (every 5th op here), whose launch point is where the node was made (earlier); its step is the graph launch's.
    rows = []
    for i, o in enumerate(ops):
        node = i if i % 5 == 0 else None
        made = None if o[6] is None else o[6] - 1000 if node is not None else o[6]
        rows.append((*o[:6], i, node, made))
    con.executemany("INSERT INTO gpu_op_layers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    create_views(con, only=["step_gpu_idle"], keep_existing=True)  # its stages, over the tables made here
    return con.execute(f"SELECT {COLS} FROM step_gpu_idle ORDER BY trace_id, step, device_id").fetchall()


def shifted(ranges: list[tuple], ops: list[tuple], by: int) -> tuple[list[tuple], list[tuple]]:
    """Every timestamp moved by ``by`` ns."""
    ranges = [(*r[:4], r[4] + by, r[5] + by, r[6]) for r in ranges]
    ops = [(*o[:3], o[3] + by, o[4] + by, o[5], None if o[6] is None else o[6] + by) for o in ops]
    return ranges, ops


@pytest.mark.parametrize("seed", range(40))
def test_step_gpu_idle_matches_a_plain_sweep(seed: int) -> None:
    ranges, ops = random_trace(random.Random(seed))
    assert view_rows(ranges, ops) == reference(ranges, ops)


# Steps and window segments are found by time buckets (integer division): timestamps across zero (a bucket
# either side of it), and near either end of BIGINT (the widths are computed wider than BIGINT).
@pytest.mark.parametrize("by", [-350, -(4 * 10**18), 9 * 10**18])
@pytest.mark.parametrize("seed", range(8))
def test_step_gpu_idle_matches_a_plain_sweep_far_from_zero(seed: int, by: int) -> None:
    ranges, ops = shifted(*random_trace(random.Random(seed)), by)
    assert view_rows(ranges, ops) == reference(ranges, ops)


def test_step_gpu_idle_steps_spanning_most_of_bigint() -> None:
    """A step from -10^18 and one ending at BIGINT's largest value (a range left open to the end): the buckets'
    width comes from a span wider than BIGINT."""
    big = 2**63 - 1
    ranges = [("a", 1, 1, "step", -(10**18), -(10**18) + 500, 0), ("a", 2, 1, "step", 1000, big, 0)]
    ops = [
        ("a", 0, "kernel", -(10**18) + 100, -(10**18) + 150, 1, -(10**18) + 20),
        ("a", 0, "kernel", -(10**18) + 300, -(10**18) + 900, 1, -(10**18) + 480),
        ("a", 0, "memcpy", 2000, 2500, 1, 1500),
        ("a", 0, "kernel", 5000, 7000, 1, 1600),
        ("a", 1, "kernel", 4000, 4100, 1, 10**17),
    ]
    assert view_rows(ranges, ops) == reference(ranges, ops)
