"""Property: on random nested ranges over several threads, the SQL attribution equals the reference."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reference import Call, Kernel, Range, innermost, path_of
from tests.test_attribution import write_trace


@st.composite
def traces(draw: st.DrawFn) -> tuple[list[Range], list[Call], list[Kernel]]:
    ranges: list[Range] = []
    for tid in range(draw(st.integers(1, 3))):
        # A push/pop program per thread: strictly increasing event times, as a real thread records them.
        t, stack = 0, []
        for op in draw(st.lists(st.sampled_from(["push", "pop"]), max_size=24)):
            t += draw(st.integers(1, 5))
            if op == "push":
                stack.append((t, f"r{len(ranges) + len(stack)}"))
            elif stack:
                start, text = stack.pop()
                ranges.append(Range(len(ranges), "push_pop", 1, tid, start, t, text))
        while stack:
            t += 1
            start, text = stack.pop()
            ranges.append(Range(len(ranges), "push_pop", 1, tid, start, t, text))
        if draw(st.booleans()):
            s = draw(st.integers(0, t))
            ender = draw(st.sampled_from([tid, tid + 10]))  # ended on its own thread, or on another
            ranges.append(
                Range(len(ranges), "start_end", 1, tid, s, s + draw(st.integers(0, 30)), f"se{tid}", end_tid=ender)
            )
    horizon = max([r.end for r in ranges], default=10) + 3
    calls, kernels = [], []
    for i in range(draw(st.integers(1, 30))):
        # Launch times land on range boundaries often: the closed-interval rule matters there.
        calls.append(Call(i, 1, draw(st.integers(0, 3)), draw(st.integers(0, horizon))))
        kernels += [Kernel(len(kernels) + j, i, 1) for j in range(draw(st.integers(1, 2)))]
    return ranges, calls, kernels


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_sql_attribution_equals_reference(trace: tuple[list[Range], list[Call], list[Kernel]]) -> None:
    ranges, calls, kernels = trace
    ref = innermost(kernels, calls, ranges)
    expected = {k: (path_of(r, ranges) if r is not None else None) for k, r in ref.items()}
    # write_trace numbers rows in the order given, so kernel_id == position and range_id == Range.range_id.
    rows = [
        {
            "text": r.text,
            "start_ns": r.start,
            "end_ns": r.end,
            "pid": r.pid,
            "tid": r.tid,
            "end_tid": r.tid if r.end_tid is None else r.end_tid,
            "kind": r.kind,
        }
        for r in ranges
    ]
    with tempfile.TemporaryDirectory() as tmp:
        write_trace(
            Path(tmp),
            "p",
            [{"correlation_id": k.correlation_id, "pid": k.pid} for k in kernels],
            [{"correlation_id": c.correlation_id, "start_ns": c.start, "pid": c.pid, "tid": c.tid} for c in calls],
            rows,
        )
        from pipeline.analyze import connect

        got = dict(
            connect(Path(tmp), views=["kernel_layers"]).execute("SELECT kernel_id, path FROM kernel_layers").fetchall()
        )
    assert got == expected
