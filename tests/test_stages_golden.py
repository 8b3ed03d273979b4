"""One golden table per stage of the two staged views (tests/golden.py): launch_point_layers' stages
(_range_segments, _backward_links, _point_ranges, _optimizer_steps, _backward_threads) and step_gpu_idle's
(_gpu_op_calls, _steps, _step_windows, _window_ops), each on a trace of a few hand-written rows, worked out by
hand in the comments.  The public views' own golden tables are in test_views_golden.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import expect, kernel, launch, op, push_pop, write

# ------------------------------------------------------------------------------------ launch_point_layers' stages


def test_range_segments_walk_each_threads_innermost_open_range(tmp_path: Path) -> None:
    # Thread 1: model [0, 100] holds a [10, 20], b [20, 30] (starting the instant a ends) and c [40, 60], which
    # holds d [40, 50] (same start: d is deeper, so it is the innermost from 40).  A CUB range of the `CCCL`
    # domain [12, 14] is no layer (the default domain has ranges) and changes nothing.  Ends are inclusive: a range
    # hands the instant after its end to its first open ancestor, so b's segment ends before 31 (model again),
    # d's before 51 (c), c's before 61 (model), model's before 101 (none: NULL).  Thread 2: x [5, 15], then none.
    spans = [("model", 0, 100), ("a", 10, 20), ("b", 20, 30), ("c", 40, 60), ("d", 40, 50)]
    ranges = [push_pop(*span) for span in spans] + [push_pop("x", 5, 15, tid=2), push_pop("cub", 12, 14, domain="CCCL")]
    write(tmp_path, "seg.nsys", nvtx_ranges=ranges)
    expect(
        tmp_path,
        "SELECT s.tid, s.p, r.text AS range, s.next_p FROM _range_segments s "
        "LEFT JOIN nvtx_ranges r USING (trace_id, range_id) ORDER BY s.tid, s.p",
        """
        tid | p   | range | next_p
        1   | 0   | model | 10
        1   | 10  | a     | 20
        1   | 20  | b     | 31
        1   | 31  | model | 40
        1   | 40  | d     | 51
        1   | 51  | c     | 61
        1   | 61  | model | 101
        1   | 101 | NULL  | NULL
        2   | 5   | x     | 16
        2   | 16  | NULL  | NULL
        """,
    )


#: Forward ops on thread 1 and the autograd thread (2) evaluating their backward nodes.
TRAINING_OPS = [
    op("aten::linear", 10, 20, sequence_number=7, fwd_thread_id=0),  # 0
    op("aten::mm", 30, 40, sequence_number=8, fwd_thread_id=0),  # 1
    op("autograd::engine::evaluate_function: MmBackward0", 100, 200, tid=2, sequence_number=8),  # 2
    op("MmBackward0", 110, 190, tid=2, sequence_number=8, fwd_thread_id=1),  # 3, inside 2
    op("torch::autograd::AccumulateGrad", 210, 220, tid=2),  # 4
    op("CheckpointFunctionBackward", 300, 400, tid=2, sequence_number=5, fwd_thread_id=1),  # 5
    op("aten::linear", 310, 320, tid=2, sequence_number=7, fwd_thread_id=0),  # 6, recomputed inside 5
    op("LinearBackward0", 500, 600, tid=2, sequence_number=7, fwd_thread_id=1),  # 7
]


def test_backward_links_link_each_outermost_backward_op_to_its_forward_op(tmp_path: Path) -> None:
    # Op 2 (evaluate_function, sequence number 8) wraps MmBackward0 (op 3, same number): only the outermost is a
    # row, linked to aten::mm (op 1, number 8, started before it).  AccumulateGrad (op 4) has no number: a
    # backward op linked to nothing.  The checkpoint's backward (op 5, number 5) has no forward op of its number.
    # LinearBackward0 (op 7, number 7) links to op 0, not to the later op 6 of the same number: op 6 runs inside
    # the backward op 5 (a recomputation).
    write(tmp_path, "links.nsys", ops=TRAINING_OPS)
    expect(
        tmp_path,
        "SELECT bwd_op_id, tid, start_ns, end_ns, fwd_op_id, fwd_tid, fwd_start_ns FROM _backward_links "
        "ORDER BY start_ns",
        """
        bwd_op_id | tid | start_ns | end_ns | fwd_op_id | fwd_tid | fwd_start_ns
        2         | 2   | 100      | 200    | 1         | 1       | 30
        4         | 2   | 210      | 220    | NULL      | NULL    | NULL
        5         | 2   | 300      | 400    | NULL      | NULL    | NULL
        7         | 2   | 500      | 600    | 0         | 1       | 10
        """,
    )


def test_point_ranges_give_each_launch_and_linked_forward_op_its_innermost_range(tmp_path: Path) -> None:
    # Thread 1 has model [0, 100] > b [20, 30] and d [40, 50]; launches at -1 (before every range), 20 (b's
    # start), 30 (b's end: still inside), 100 (model's end), 101 (after it).  The forward op aten::mm starts at
    # 45 inside d; its backward op (thread 3) is linked to it, so 45 is looked up too, as no launch point.  The
    # launch inside that backward op (thread 3, 300) has no range there.  Thread 2's push/pop range x [5, 15] has
    # ended by its launch at 30: the start/end range se [0, 50] of thread 2 holds it (the fallback).
    thread_1 = [push_pop(*span) for span in (("model", 0, 100), ("b", 20, 30), ("d", 40, 50))]
    write(
        tmp_path,
        "points.nsys",
        nvtx_ranges=[*thread_1, push_pop("x", 5, 15, tid=2), push_pop("se", 0, 50, tid=2, kind="start_end")],
        ops=[
            op("aten::mm", 45, 46, sequence_number=3, fwd_thread_id=0),
            op("MmBackward0", 290, 310, tid=3, sequence_number=3, fwd_thread_id=1),
        ],
        api_calls=[launch(1, -1), launch(2, 20), launch(3, 30), launch(4, 100), launch(5, 101), launch(6, 30, tid=2),
                   launch(7, 300, tid=3)],
        kernels=[kernel(i) for i in range(1, 8)],
    )  # fmt: skip
    expect(
        tmp_path,
        "SELECT q.tid, q.t, q.is_launch, r.text AS range FROM _point_ranges q "
        "LEFT JOIN nvtx_ranges r USING (trace_id, range_id) ORDER BY q.tid, q.t",
        """
        tid | t   | is_launch | range
        1   | -1  | true      | NULL
        1   | 20  | true      | b
        1   | 30  | true      | b
        1   | 45  | false     | d
        1   | 100 | true      | model
        1   | 101 | true      | NULL
        2   | 30  | true      | se
        3   | 300 | true      | NULL
        """,
    )


def test_optimizer_steps_are_the_outermost_of_each_kind(tmp_path: Path) -> None:
    # Thread 1: PyTorch's Optimizer.step#SGD.step range [100, 200] holds tracepipe's `optimizer` range [110, 190]
    # (kept: the two kinds nest apart), which holds another `optimizer` [120, 130] (dropped), and PyTorch's own
    # [150, 160] (dropped: inside PyTorch's outer one).  PyTorch's op Optimizer.step#Adam.step [500, 600] and
    # nsys's torch.optim.SGD.step op on thread 2 [300, 400] are steps too, without a range.
    pytorch, ours = "Optimizer.step#SGD.step", "optimizer"
    spans = [(pytorch, 100, 200), (ours, 110, 190), (ours, 120, 130), (pytorch, 150, 160)]
    steps = [op("Optimizer.step#Adam.step", 500, 600), op("torch.optim.SGD.step", 300, 400, tid=2)]
    write(tmp_path, "opt.nsys", nvtx_ranges=[push_pop(*span) for span in spans], ops=steps)
    expect(
        tmp_path,
        "SELECT o.tid, o.start_ns, o.end_ns, r.text AS range, o.ours FROM _optimizer_steps o "
        "LEFT JOIN nvtx_ranges r USING (trace_id, range_id) ORDER BY o.tid, o.start_ns",
        """
        tid | start_ns | end_ns | range                   | ours
        1   | 100      | 200    | Optimizer.step#SGD.step | false
        1   | 110      | 190    | optimizer               | true
        1   | 500      | 600    | NULL                    | false
        2   | 300      | 400    | NULL                    | false
        """,
    )


def test_backward_threads_are_autograds_by_name_or_by_their_ops(tmp_path: Path) -> None:
    # Thread 5 is named pt_autograd_0.  Thread 2 runs only backward nodes (Fwd thread id > 0): autograd's engine.
    # Thread 1 runs a backward node too, but forward ops as well (Fwd thread id 0): not one.  Thread 3's op has no
    # sequence number: it says nothing.
    write(
        tmp_path,
        "threads.nsys",
        threads=[{"pid": 100, "tid": 5, "name": "pt_autograd_0"}, {"pid": 100, "tid": 6, "name": "main"}],
        ops=[
            op("aten::mm", 10, 20, sequence_number=1, fwd_thread_id=0),
            op("MmBackward0", 30, 40, sequence_number=1, fwd_thread_id=1),
            op("AddBackward0", 50, 60, tid=2, sequence_number=2, fwd_thread_id=1),
            op("aten::copy_", 70, 80, tid=3),
        ],
    )
    expect(
        tmp_path,
        "SELECT pid, tid FROM _backward_threads ORDER BY tid",
        """
        pid | tid
        100 | 2
        100 | 5
        """,
    )


# ---------------------------------------------------------------------------------------- step_gpu_idle's stages


def test_gpu_op_calls_place_a_graph_node_at_the_graph_launch(tmp_path: Path) -> None:
    # Kernel 0 is launched by the call at 10.  Kernel 1 is a replayed CUDA graph node: made at 5 (inside the
    # stream-captured call there), launched by the graph launch at 50 (correlation id 2): gpu_op_layers places it
    # at 5 (launch_start_ns, for its layer), its call at 50.  The copy has no launching call: call_ns NULL.
    write(
        tmp_path,
        "graph.nsys",
        api_calls=[launch(1, 10), {"correlation_id": 2, "start_ns": 50, "name": "cudaGraphLaunch"},
                   {"correlation_id": 3, "start_ns": 4, "name": "cudaLaunchKernel"}],
        graph_nodes=[{"graph_node_id": 9, "created_ns": 5, "pid": 100, "tid": 1}],
        kernels=[kernel(1, start_ns=100, duration_ns=10), kernel(2, start_ns=120, duration_ns=10, graph_node_id=9)],
        memcpy=[{"correlation_id": 77, "start_ns": 140, "duration_ns": 5, "bytes": 8, "kind": "HtoD", "device_id": 0}],
    )  # fmt: skip
    expect(
        tmp_path,
        "SELECT c.op_kind, c.start_ns, c.end_ns, c.pid, c.call_ns, l.launch_start_ns FROM _gpu_op_calls c "
        "JOIN gpu_op_layers l USING (trace_id, op_kind, start_ns) ORDER BY c.start_ns",
        """
        op_kind | start_ns | end_ns | pid | call_ns | launch_start_ns
        kernel  | 100      | 110    | 100 | 10      | 10
        kernel  | 120      | 130    | 100 | 50      | 5
        memcpy  | 140      | 145    | 100 | NULL    | NULL
        """,
    )


def test_steps_are_the_outermost_step_ranges_numbered_in_start_order(tmp_path: Path) -> None:
    # ProfilerStep#1 [0, 100] holds a `step` range [10, 20] (deeper: no step).  ProfilerStep#2 [100, 200] starts
    # the instant #1 ends: inside it (shared, found by the range join).  ProfilerStep#3 on another thread of the
    # process [300, 400] starts inside no earlier step.  A trace without step ranges has no row (step_gpu_idle
    # makes it one step 0).
    spans = [("ProfilerStep#1", 0, 100), ("step", 10, 20), ("ProfilerStep#2", 100, 200)]
    write(
        tmp_path,
        "steps.nsys",
        nvtx_ranges=[*(push_pop(*s) for s in spans), push_pop("ProfilerStep#3", 300, 400, tid=2)],
    )
    write(tmp_path, "none.nsys", nvtx_ranges=[push_pop("model", 0, 100)])
    expect(
        tmp_path,
        "SELECT trace_id, step, step_name, pid, start_ns, end_ns, shared FROM _steps ORDER BY trace_id, step",
        """
        trace_id  | step | step_name      | pid | start_ns | end_ns | shared
        steps.nsys | 1    | ProfilerStep#1 | 100 | 0        | 100    | false
        steps.nsys | 2    | ProfilerStep#2 | 100 | 100      | 200    | true
        steps.nsys | 3    | ProfilerStep#3 | 100 | 300      | 400    | false
        """,
    )


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two overlapping steps of one process and a trace without steps.

    steps.nsys: ProfilerStep#1 [0, 100] on thread 1, ProfilerStep#2 [50, 150] on thread 2 (it starts inside #1:
    shared).  Calls (CPU ns) and what they launched (GPU ns, same clock):
        10 (thread 1): kernel [20, 30] on device 0          -> step 1
        60 (thread 1): kernel [70, 120] on device 0         -> steps 1 and 2 (60 lies in both ranges)
        120 (thread 2): memcpy [130, 160] on device 0       -> step 2
        90 (thread 1): kernel [95, 98] on device 1          -> steps 1 and 2
        none: memcpy [140, 145] on device 0                 -> no step, but on the device's timeline
    flat.nsys: kernels [5, 10] and [20, 40], no step range."""
    folder = tmp_path_factory.mktemp("steps")
    write(
        folder,
        "steps.nsys",
        nvtx_ranges=[push_pop("ProfilerStep#1", 0, 100), push_pop("ProfilerStep#2", 50, 150, tid=2)],
        api_calls=[launch(1, 10), launch(2, 60), launch(3, 120, tid=2), launch(4, 90)],
        kernels=[
            kernel(1, start_ns=20, duration_ns=10, device_id=0),
            kernel(2, start_ns=70, duration_ns=50, device_id=0),
            kernel(4, start_ns=95, duration_ns=3, device_id=1),
        ],
        memcpy=[
            {"correlation_id": 3, "start_ns": 130, "duration_ns": 30, "bytes": 8, "kind": "HtoD", "device_id": 0},
            {"correlation_id": 99, "start_ns": 140, "duration_ns": 5, "bytes": 8, "kind": "DtoD", "device_id": 0},
        ],
    )
    write(
        folder,
        "flat.nsys",
        api_calls=[launch(1, 1), launch(2, 2)],
        kernels=[
            kernel(1, start_ns=5, duration_ns=5, device_id=0),
            kernel(2, start_ns=20, duration_ns=20, device_id=0),
        ],
    )
    return folder


def test_step_windows_span_what_each_step_launched(two_steps: Path) -> None:
    # Step 1 on device 0: the kernels of 10 and 60: window from its CPU start 0 to the later of its CPU end 100
    # and their last end 120.  Device 1: the kernel of 90, window [0, 100] (it ends at 98).  Step 2 on device 0:
    # the kernel of 60 and the copy of 120: [50, 160]; device 1: [50, 150].  The copy without a call is in no
    # step.  flat.nsys: step 0, from its first operation's start 5 to its last one's end 40.
    expect(
        two_steps,
        "SELECT trace_id, step, step_name, device_id, cpu_start_ns, cpu_end_ns, window_start_ns, window_end_ns, ops, "
        "kernels FROM _step_windows ORDER BY trace_id, step, device_id",
        """
        trace_id   | step | step_name      | device_id | cpu_start_ns | cpu_end_ns | window_start_ns | window_end_ns | ops | kernels
        flat.nsys  | 0    | (whole trace)  | 0         | NULL         | NULL       | 5               | 40            | 2   | 2
        steps.nsys | 1    | ProfilerStep#1 | 0         | 0            | 100        | 0               | 120           | 2   | 2
        steps.nsys | 1    | ProfilerStep#1 | 1         | 0            | 100        | 0               | 100           | 1   | 1
        steps.nsys | 2    | ProfilerStep#2 | 0         | 50           | 150        | 50              | 160           | 2   | 1
        steps.nsys | 2    | ProfilerStep#2 | 1         | 50           | 150        | 50              | 150           | 1   | 1
        """,  # noqa: E501
    )


def test_window_ops_clip_every_operation_of_the_device_to_each_window(two_steps: Path) -> None:
    # Device 0's windows: step 1 [0, 120], step 2 [50, 160].  Step 1 holds the kernels [20, 30] and [70, 120]; the
    # copies start at 130 and 140, past its end.  Step 2 holds [70, 120] (launched in both steps), the copy
    # [130, 160] and the call-less copy [140, 145] (every operation on the device counts); [20, 30] ends before
    # it starts.  Device 1's kernel [95, 98] lies in both of its windows.  flat.nsys's step 0 holds its two.
    expect(
        two_steps,
        "SELECT trace_id, step, device_id, window_start_ns, op_kind, call_ns, s, e FROM _window_ops "
        "ORDER BY trace_id, step, device_id, s",
        """
        trace_id   | step | device_id | window_start_ns | op_kind | call_ns | s   | e
        flat.nsys  | 0    | 0         | 5               | kernel  | 1       | 5   | 10
        flat.nsys  | 0    | 0         | 5               | kernel  | 2       | 20  | 40
        steps.nsys | 1    | 0         | 0               | kernel  | 10      | 20  | 30
        steps.nsys | 1    | 0         | 0               | kernel  | 60      | 70  | 120
        steps.nsys | 1    | 1         | 0               | kernel  | 90      | 95  | 98
        steps.nsys | 2    | 0         | 50              | kernel  | 60      | 70  | 120
        steps.nsys | 2    | 0         | 50              | memcpy  | 120     | 130 | 160
        steps.nsys | 2    | 0         | 50              | memcpy  | NULL    | 140 | 145
        steps.nsys | 2    | 1         | 50              | kernel  | 90      | 95  | 98
        """,
    )
