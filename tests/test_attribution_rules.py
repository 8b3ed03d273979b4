"""One hand-made trace per attribution rule that the random property test cannot reach (its event times are
strictly increasing, its correlation ids unique, one start/end range per thread).  Each case is chosen so
that the tempting wrong rule gives a different answer; `make mutants` (scripts/mutants.py) checks that."""

from __future__ import annotations

from pathlib import Path

from pipeline.analyze import connect
from tests.test_attribution import K, L, R, layers, write_trace


def test_equal_start_ties_go_to_the_inner_range(tmp_path: Path) -> None:
    # `fwd` [0,100] and `conv` [0,50] are pushed at the same ns (a module whose first op opens its own range);
    # `conv` ends first, so it is the inner one.  Launches at 0 and 10 are in conv, at 60 only fwd is open.
    # A third range `mm` [0,20] also starts at 0, inside conv: the deepest of the three wins at 10.
    ranges = [R("fwd", 0, 100), R("conv", 0, 50), R("mm", 0, 20), R("x", 0, 100, tid=2), R("y", 0, 40, tid=2)]
    calls = [L(1, 0), L(2, 10), L(3, 30), L(4, 60), L(5, 5, tid=2)]
    write_trace(tmp_path, "t", [K(c) for c in range(1, 6)], calls, ranges)
    assert layers(tmp_path) == {
        0: ("mm", "fwd/conv/mm", 2),
        1: ("mm", "fwd/conv/mm", 2),
        2: ("conv", "fwd/conv", 1),
        3: ("fwd", "fwd", 0),
        4: ("y", "x/y", 1),
    }


def test_the_earliest_call_of_a_correlation_id_is_the_launch(tmp_path: Path) -> None:
    # Two API calls share correlation id 1 (a launch and a later call CUPTI tagged with the same id): the
    # launch is the earliest, at 10 inside `a`; the call at 50 sits inside `b`.  Listed latest first, so
    # the earliest is not also the first row or the lowest call_id.
    ranges = [R("a", 0, 20), R("b", 40, 60)]
    calls = [L(1, 50), L(1, 10), L(2, 45), L(2, 55, tid=2)]
    write_trace(tmp_path, "t", [K(1), K(2)], calls, ranges)
    assert layers(tmp_path)[0][0] == "a"
    assert layers(tmp_path)[1][0] == "b"
    got = connect(tmp_path).sql("SELECT kernel_id, launch_call_id, launch_start_ns, launch_tid FROM kernel_layers")
    assert sorted(got.fetchall()) == [(0, 1, 10, 1), (1, 2, 45, 1)]


def test_overlapping_start_end_ranges_innermost_wins(tmp_path: Path) -> None:
    # Thread 1: `epoch` [0,100] contains `eval` [20,80]: a launch at 50 is in eval, at 90 in epoch.
    # Thread 2: `p` [0,60] and `q` [40,100] cross: at 50 both are open and q started last, so q; at 30 only p.
    se = {"kind": "start_end"}
    ranges = [
        R("epoch", 0, 100, **se),
        R("eval", 20, 80, **se),
        R("p", 0, 60, tid=2, **se),
        R("q", 40, 100, tid=2, **se),
    ]
    calls = [L(1, 50), L(2, 90), L(3, 50, tid=2), L(4, 30, tid=2)]
    write_trace(tmp_path, "t", [K(c) for c in range(1, 5)], calls, ranges)
    got = layers(tmp_path)
    assert [got[i][0] for i in range(4)] == ["eval", "epoch", "q", "p"]


def test_a_launch_at_a_ranges_end_after_a_child_closed_is_inside(tmp_path: Path) -> None:
    # `fwd` [0,50] had a child `conv` [10,20]; a launch exactly at 50 (fwd's end, closed interval) is in fwd
    # even though the latest-started range (conv) is long closed: the open-range count must not count fwd as
    # ended at 50.
    write_trace(tmp_path, "t", [K(1), K(2)], [L(1, 50), L(2, 51)], [R("fwd", 0, 50), R("conv", 10, 20)])
    got = layers(tmp_path)
    assert got[0] == ("fwd", "fwd", 0) and got[1] == (None, None, None)
