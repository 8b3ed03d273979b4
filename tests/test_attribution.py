"""Kernel -> NVTX layer attribution (sql/kernel_layers.sql and the rollups built on it)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.analyze import connect
from pipeline.store import TraceWriter
from tests.reference import Call, Kernel, Range, innermost, path_of


def test_small_cnn_innermost_counts(nsys_out: Path) -> None:
    con = connect(nsys_out)
    counts = dict(con.sql("SELECT layer, count(*) FROM kernel_layers GROUP BY layer").fetchall())
    assert counts == {"conv1": 8, "conv2": 8, "relu": 8, "pool": 4, "fc": 4, None: 1}
    assert con.sql("SELECT kernels FROM layer_summary WHERE path = 'step/conv1'").fetchall() == [(2,)]
    assert con.execute("SELECT sum(kernels) FROM layer_summary").fetchone()[0] == 33


def test_small_cnn_matches_reference_on_the_raw_sqlite(nsys_out: Path, nsys_sqlite: Path) -> None:
    """Independent: the nsys projection rule applied by the reference to the sqlite's own tables."""
    raw = sqlite3.connect(nsys_sqlite)
    g = "globalTid"
    calls = [
        Call(c, (t >> 24) & 0xFFFFFF, t & 0xFFFFFF, s)
        for c, t, s in raw.execute(f"SELECT correlationId, {g}, start FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    ]
    ranges = [
        Range(i, "push_pop", (t >> 24) & 0xFFFFFF, t & 0xFFFFFF, s, e, x)
        for i, (t, s, e, x) in enumerate(
            raw.execute(f'SELECT {g}, start, "end", text FROM NVTX_EVENTS WHERE eventType = 59')
        )
    ]
    kernels = [
        Kernel(c, c, (p >> 24) & 0xFFFFFF)
        for c, p in raw.execute("SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL")
    ]
    ref = innermost(kernels, calls, ranges)
    expected = {c: (path_of(r, ranges) if r is not None else None) for c, r in ref.items()}
    got = dict(connect(nsys_out).sql("SELECT correlation_id, path FROM kernel_layers").fetchall())
    assert got == expected


def test_every_gpu_operation_carries_the_call_that_launched_it(nsys_out: Path, nsys_sqlite: Path) -> None:
    """Independent: each kernel, memcpy and memset of the raw export, once in gpu_op_layers, with the start and
    thread of the runtime API call sharing its correlationId (each kind is joined to its own attribution rows)."""
    raw = sqlite3.connect(nsys_sqlite)
    expected = Counter()
    for kind, table in (("kernel", "KERNEL"), ("memcpy", "MEMCPY"), ("memset", "MEMSET")):
        expected.update(
            (kind, c, s, t & 0xFFFFFF)
            for c, s, t in raw.execute(
                f"SELECT o.correlationId, r.start, r.globalTid FROM CUPTI_ACTIVITY_KIND_{table} o "
                "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)"
            )
        )
    assert {k for k, *_ in expected} == {"kernel", "memcpy", "memset"}
    got = (
        connect(nsys_out)
        .sql("SELECT op_kind, correlation_id, launch_start_ns, launch_tid FROM gpu_op_layers")
        .fetchall()
    )
    assert Counter(got) == expected


def test_layer_summary_times_add_up(nsys_out: Path, nsys_sqlite: Path) -> None:
    con = connect(nsys_out)
    raw = sqlite3.connect(nsys_sqlite)
    total = raw.execute('SELECT sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0]
    assert con.execute("SELECT sum(gpu_time_ns), round(sum(share_pct), 6) FROM layer_summary").fetchone() == (
        total,
        100,
    )
    # conv1 ran 4 times (3 warm-up + 1 in step), 2 kernels each: implicit_convolve_sgemm + bias elementwise.
    row = con.execute(
        "SELECT calls, kernels, launches_per_call, distinct_kernels FROM layer_name_summary WHERE layer = 'conv1'"
    ).fetchone()
    assert row == (4, 8, 2.0, 2)


def test_pass_columns_add_up_to_the_layers_time(nsys_out: Path, nsys_sqlite: Path) -> None:
    # An inference trace: every kernel is forward work or launched outside every range, the one case of no pass.
    # Independent: the kernels whose launch call is inside no NVTX push/pop range of its thread, read from the raw
    # export (1 kernel, 2,592 ns in the small CNN's capture).
    raw = sqlite3.connect(nsys_sqlite)
    outside = raw.execute(
        'SELECT count(*), sum(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k '
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
        "WHERE NOT EXISTS (SELECT 1 FROM NVTX_EVENTS n WHERE n.eventType = 59 AND n.globalTid = r.globalTid "
        'AND n.start <= r.start AND r.start <= n."end")'
    ).fetchone()
    assert outside[0] > 0
    con = connect(nsys_out)
    for view in ("layer_summary", "layer_name_summary"):
        assert con.execute(f"SELECT sum(no_pass_kernels), sum(no_pass_gpu_time_ns) FROM {view}").fetchone() == outside
        split = con.execute(
            "SELECT count(*) FILTER (forward_kernels + backward_kernels + optimizer_kernels + no_pass_kernels "
            "<> kernels OR forward_gpu_time_ns + backward_gpu_time_ns + optimizer_gpu_time_ns + no_pass_gpu_time_ns "
            f"<> gpu_time_ns), count(*) FROM {view}"
        ).fetchone()
        assert split[0] == 0 and split[1] > 1, (view, split)


def test_layer_timeline_step_spans_its_children(nsys_out: Path, nsys_sqlite: Path) -> None:
    con = connect(nsys_out)
    raw = sqlite3.connect(nsys_sqlite)
    s, e = raw.execute("SELECT start, \"end\" FROM NVTX_EVENTS WHERE text = 'step'").fetchone()
    # Independent: kernels whose launch call falls inside the step range, from the raw tables.
    kstart, kend, n = raw.execute(
        'SELECT min(k.start), max(k."end"), count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k '
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) WHERE r.start BETWEEN ? AND ?",
        (s, e),
    ).fetchone()
    row = con.execute(
        "SELECT cpu_start_ns, cpu_end_ns, kernels, gpu_start_ns, gpu_end_ns FROM layer_timeline WHERE layer = 'step'"
    ).fetchone()
    assert row == (s, e, n, kstart, kend) and n == 8


# --- hand-made edge cases -----------------------------------------------------------------------------------


def write_trace(out: Path, trace_id: str, kernels: list[dict], calls: list[dict], ranges: list[dict]) -> None:
    from pipeline.normalize.nesting import with_nesting

    with TraceWriter(out, trace_id) as w:
        w.write(
            "kernels",
            pa.Table.from_pylist(
                [
                    {
                        "kernel_id": i,
                        "start_ns": 10_000 + i,
                        "end_ns": 10_001 + i,
                        "duration_ns": 1,
                        "name": f"k{i}",
                        **k,
                    }
                    for i, k in enumerate(kernels)
                ]
            ),
        )
        w.write(
            "api_calls",
            pa.Table.from_pylist(
                [
                    {"call_id": i, "kind": "runtime", "name": "cudaLaunchKernel", "end_ns": c["start_ns"] + 1, **c}
                    for i, c in enumerate(calls)
                ]
            ),
        )
        rows = [{"range_id": i, "kind": "push_pop", "source": "nvtx", **r} for i, r in enumerate(ranges)]
        if rows:
            w.write("nvtx_ranges", with_nesting(pa.Table.from_pylist(rows)))
        w.write("trace_meta", pa.Table.from_pylist([{"source_format": "test"}]))
        w.commit()


def layers(out: Path) -> dict[int, tuple]:
    rows = (
        connect(out, views=["kernel_layers"]).sql("SELECT kernel_id, layer, path, depth FROM kernel_layers").fetchall()
    )
    return {k: (layer, path, d) for k, layer, path, d in rows}


def R(text: str, start: int, end: int, tid: int = 1, pid: int = 100, **kw: object) -> dict:
    return {"text": text, "start_ns": start, "end_ns": end, "pid": pid, "tid": tid, "end_tid": tid, **kw}


def L(corr: int, start: int, tid: int = 1, pid: int = 100) -> dict:
    return {"correlation_id": corr, "start_ns": start, "pid": pid, "tid": tid}


def K(corr: int, pid: int = 100) -> dict:
    return {"correlation_id": corr, "pid": pid}


def test_nested_ranges_pick_innermost_after_a_child_closed(tmp_path: Path) -> None:
    # step [0,100] > block [10,60] > conv [20,30]; a launch at 40 is back in `block`, at 80 in `step`.
    ranges = [R("step", 0, 100), R("block", 10, 60), R("conv", 20, 30)]
    calls = [L(1, 25), L(2, 40), L(3, 80), L(4, 150), L(5, 20), L(6, 30)]
    write_trace(tmp_path, "t", [K(c) for c in range(1, 7)], calls, ranges)
    assert layers(tmp_path) == {
        0: ("conv", "step/block/conv", 2),
        1: ("block", "step/block", 1),
        2: ("step", "step", 0),
        3: (None, None, None),
        4: ("conv", "step/block/conv", 2),
        5: ("conv", "step/block/conv", 2),
    }


def test_threads_and_processes_do_not_mix(tmp_path: Path) -> None:
    # Same times on two threads and another process: each launch sees only its own thread's ranges.
    ranges = [R("a", 0, 100, tid=1), R("b", 0, 100, tid=2), R("c", 0, 100, tid=1, pid=200)]
    calls = [L(1, 50, tid=1), L(2, 50, tid=2), L(1, 50, tid=1, pid=200), L(3, 50, tid=3)]
    write_trace(tmp_path, "t", [K(1), K(2), K(1, pid=200), K(3)], calls, ranges)
    got = layers(tmp_path)
    assert [got[i][0] for i in range(4)] == ["a", "b", "c", None]


def test_kernel_time_does_not_matter_only_the_launch(tmp_path: Path) -> None:
    # The kernel runs (GPU clock 10_000+) long after `fwd` ended; it still belongs to `fwd`.
    write_trace(tmp_path, "t", [K(1)], [L(1, 5)], [R("fwd", 0, 10)])
    assert layers(tmp_path)[0][0] == "fwd"


def test_cuda_graph_launch_gives_all_its_kernels_the_layer(tmp_path: Path) -> None:
    ranges = [R("graph_step", 0, 100)]
    write_trace(tmp_path, "t", [K(7), K(7), K(7), K(8)], [L(7, 50), L(8, 200)], ranges)
    got = layers(tmp_path)
    assert [got[i][0] for i in range(4)] == ["graph_step"] * 3 + [None]
    con = connect(tmp_path)
    assert con.execute(
        "SELECT calls, kernels, launches_per_call FROM layer_summary WHERE layer = 'graph_step'"
    ).fetchone() == (1, 3, 3.0)


def test_start_end_range_ending_on_another_thread(tmp_path: Path) -> None:
    # A start/end range started on thread 1 and ended on thread 2 is no thread's: nsys's nvtx_kern_sum reads only
    # start/end ranges without an endGlobalTid (sample_traces/h100_nvtx_start_end holds nsys's own reports of a real
    # one). `batch`, started and ended on thread 1, holds kernel 2 all the same.
    ranges = [
        R("epoch", 0, 1000, tid=1, kind="start_end", end_tid=2),
        R("fwd", 100, 200, tid=1),
        R("batch", 600, 700, tid=1, kind="start_end", end_tid=1),
    ]
    calls = [L(1, 150, tid=1), L(2, 650, tid=1), L(3, 500, tid=1), L(4, 500, tid=2)]
    write_trace(tmp_path, "t", [K(1), K(2), K(3), K(4)], calls, ranges)
    got = layers(tmp_path)
    assert got[0][0] == "fwd"  # push/pop is more specific
    assert got[1] == ("batch", "batch", 0)
    assert got[2][0] is None and got[3][0] is None  # inside epoch on its starting thread: nsys gives it no range


def test_kernel_without_a_matching_launch_is_counted_outside(tmp_path: Path) -> None:
    write_trace(tmp_path, "t", [K(1), K(99)], [L(1, 5)], [R("fwd", 0, 10)])
    con = connect(tmp_path)
    assert dict(con.sql("SELECT coalesce(layer, '-'), kernels FROM layer_summary").fetchall()) == {"fwd": 1, "-": 1}


@pytest.mark.parametrize("launch", [0, 10])
def test_launch_on_a_range_boundary_is_inside(tmp_path: Path, launch: int) -> None:
    write_trace(tmp_path, "t", [K(1)], [L(1, launch)], [R("fwd", 0, 10)])
    assert layers(tmp_path)[0][0] == "fwd"


def test_chrome_kernels_link_to_their_cpu_op(tmp_path: Path) -> None:
    import gzip
    import json

    from pipeline.normalize import normalize_file
    from tests.conftest import SMALLCNN

    normalize_file(SMALLCNN / "torch_trace.json.gz", tmp_path)
    events = json.loads(gzip.decompress((SMALLCNN / "torch_trace.json.gz").read_bytes()))["traceEvents"]
    op_by_ext = {e["args"]["External id"]: e["name"] for e in events if e.get("cat") == "cpu_op"}
    expected = sorted(
        (e["args"]["correlation"], op_by_ext[e["args"]["External id"]]) for e in events if e.get("cat") == "kernel"
    )
    got = connect(tmp_path).execute("SELECT correlation_id, op_name FROM kernel_layers ORDER BY 1").fetchall()
    assert got == expected and len(got) == 8


@pytest.mark.parametrize("capture", ["h200_smallcnn_annotated", "h200_resnet18", "h200_transformer"])
def test_nsys_and_torch_profiler_attribute_the_same_kernels_to_each_layer(capture: str, tmp_path: Path) -> None:
    """Two profilers of the same captured forwards: nsys (NVTX ranges, CUPTI runtime calls) and the PyTorch
    profiler (record_function ranges, Kineto runtime events). The same kernels must land on the same paths."""
    from pipeline.normalize import normalize_file
    from tests.conftest import SAMPLES

    normalize_file(SAMPLES / capture / "nsys.sqlite.gz", tmp_path)
    normalize_file(SAMPLES / capture / "torch_trace.json.gz", tmp_path)
    con = connect(tmp_path)
    per = {
        source: con.execute(
            "SELECT path, short_name, count(*) FROM kernel_layers WHERE trace_id = ? GROUP BY ALL ORDER BY ALL",
            [f"{capture}.{source}"],
        ).fetchall()
        for source in ("nsys", "torch_trace")
    }
    assert per["nsys"] == per["torch_trace"]
    assert (
        sum(n for *_, n in per["nsys"])
        == con.execute("SELECT count(*) FROM kernels WHERE trace_id = ?", [f"{capture}.nsys"]).fetchone()[0]
    )
    assert all(path is not None for path, *_ in per["nsys"])  # every kernel launched inside a module range


def _layers_at(tmp_path: Path, ranges: list[dict], times: list[int]) -> list[str | None]:
    """The layer of one kernel launched at each of ``times`` on thread 100/1."""
    write_trace(tmp_path, "t", [K(i) for i in range(len(times))], [L(i, t) for i, t in enumerate(times)], ranges)
    got = layers(tmp_path)
    return [got[i][0] for i in range(len(times))]


def test_ranges_ending_at_one_instant_hand_the_next_instant_to_their_open_ancestor(tmp_path: Path) -> None:
    # step [0,100] > block [10,50] > conv [20,50]: at 50 both inner ones are still open (ends are inclusive); at 51
    # both have ended, so the launch is step's, not block's (block's end is no later than conv's).
    ranges = [R("step", 0, 100), R("block", 10, 50), R("conv", 20, 50)]
    assert _layers_at(tmp_path, ranges, [50, 51, 101]) == ["conv", "step", None]


def test_a_sibling_starting_the_instant_after_one_ends(tmp_path: Path) -> None:
    # step [0,100] > a [10,19], b [20,30]: 19 is a's last instant, 20 b's first, 31 back in step.
    ranges = [R("step", 0, 100), R("a", 10, 19), R("b", 20, 30)]
    assert _layers_at(tmp_path, ranges, [19, 20, 31, 30]) == ["a", "b", "step", "b"]


def test_a_range_outliving_the_one_it_started_in(tmp_path: Path) -> None:
    # step [0,100] > block [10,40], and conv [20,45] starts inside block but ends after it (rounded chrome
    # durations do this): conv is the latest range started and open until 45; from 46 on only step is open.
    ranges = [R("step", 0, 100), R("block", 10, 40), R("conv", 20, 45)]
    assert _layers_at(tmp_path, ranges, [38, 42, 45, 46]) == ["conv", "conv", "conv", "step"]


def test_ranges_ending_at_the_last_representable_instant(tmp_path: Path) -> None:
    # step [0, 2^63-1] > a [10, 2^63-1]: the instant after their end is past every BIGINT, which must not overflow;
    # a launch at 5 is step's, at 50 and at the last instant a call can start (its end is one later) a's.
    last = 2**63 - 1
    ranges = [R("step", 0, last), R("a", 10, last)]
    assert _layers_at(tmp_path, ranges, [5, 50, last - 1]) == ["step", "a", "a"]


def test_a_thread_spanning_most_of_bigint(tmp_path: Path) -> None:
    # early [-10^18, -10^18 + 10], step [0, 2^63-1] > a [10, 2^63-3]: the instants looked up run from before the
    # first range (outside) to past a's end (step's), across a span wider than BIGINT.
    last, first = 2**63 - 1, -(10**18)
    ranges = [R("early", first, first + 10), R("step", 0, last), R("a", 10, last - 2)]
    got = _layers_at(tmp_path, ranges, [first - 5, first + 5, first + 11, 5, 50, last - 1])
    assert got == [None, "early", None, "step", "a", "step"]
