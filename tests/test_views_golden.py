"""One golden table per view rule (tests/golden.py): a trace of a few hand-written rows, the view's query, and
the table it must give, worked out by hand in the comments.  Each is built so that a tempting wrong rule
gives a different table (scripts/mutants.py breaks each rule on purpose and checks that its test fails)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import expect, kernel, launch, op, push_pop, write

# ---------------------------------------- gpu_op_attribution: the backward and optimizer rules of launch_point_layers

#: Each kernel's launch (thread, instant), its layer range, pass, and the backward op / linked forward op around it.
LAUNCH_POINTS = """
SELECT op_row_id AS kernel, launch_tid AS tid, launch_start_ns AS t, layer, pass, bwd_op_id, fwd_op_id
FROM gpu_op_attribution ORDER BY launch_start_ns
"""


def test_recomputed_forward_ops_are_no_backward_link_targets(tmp_path: Path) -> None:
    # Thread 1 runs the forward: op 0 (aten::linear, sequence number 7) inside `layer1`.  The autograd thread
    # (2) first runs a checkpoint's backward (op 1), which recomputes the forward: op 2 is aten::linear again,
    # and the autograd thread's own counter gave it sequence number 7 too.  Then LinearBackward0 (op 3, 7)
    # runs: its forward op is op 0 (the latest op 7 started before it that is not inside a backward op), so
    # its kernel (launched at 350) lands on layer1.  Op 2 started later (210) but inside op 1: taking it would
    # give the kernel op 2's layer, none (thread 2 has no range).  The recomputation's own kernel (215) is
    # backward work of op 1, whose sequence number 5 no forward op has: no link, no range.
    write(
        tmp_path,
        "ckpt.nsys",
        nvtx_ranges=[push_pop("layer1", 0, 100)],
        ops=[
            op("aten::linear", 10, 20, sequence_number=7),
            op("CheckpointFunctionBackward", 200, 290, tid=2, sequence_number=5, fwd_thread_id=1),
            op("aten::linear", 210, 220, tid=2, sequence_number=7),
            op("LinearBackward0", 300, 400, tid=2, sequence_number=7, fwd_thread_id=1),
        ],
        api_calls=[launch(1, 15), launch(2, 215, tid=2), launch(3, 350, tid=2)],
        kernels=[kernel(1), kernel(2), kernel(3)],
    )
    expect(
        tmp_path,
        LAUNCH_POINTS,
        """
        kernel | tid | t   | layer  | pass     | bwd_op_id | fwd_op_id
        0      | 1   | 15  | layer1 | forward  | NULL      | NULL
        1      | 2   | 215 | NULL   | backward | 1         | NULL
        2      | 2   | 350 | layer1 | backward | 3         | 0
        """,
    )


def test_optimizer_step_inside_a_backward_op_is_optimizer(tmp_path: Path) -> None:
    # Optimizer-in-backward: a post-accumulate-grad hook steps the optimizer inside AccumulateGrad (op 0, a
    # backward op without sequence number) on the autograd thread, in an `optimizer` range [500, 600].  The
    # launch at 490 accumulates the gradient: backward, no range open.  The one at 550 is in both the
    # backward op and the optimizer step: the optimizer rule is tested first, so `optimizer` on the
    # optimizer range (its backward op is still named: op 0 encloses the launch).
    write(
        tmp_path,
        "hook.nsys",
        nvtx_ranges=[push_pop("optimizer", 500, 600, tid=2)],
        ops=[op("torch::autograd::AccumulateGrad", 480, 620, tid=2)],
        api_calls=[launch(1, 490, tid=2), launch(2, 550, tid=2)],
        kernels=[kernel(1), kernel(2)],
    )
    expect(
        tmp_path,
        LAUNCH_POINTS,
        """
        kernel | tid | t   | layer     | pass      | bwd_op_id | fwd_op_id
        0      | 2   | 490 | NULL      | backward  | 0         | NULL
        1      | 2   | 550 | optimizer | optimizer | 0         | NULL
        """,
    )


def test_tracepipes_optimizer_range_wins_over_pytorchs_step_range_inside_it(tmp_path: Path) -> None:
    # A user's own `optimizer` range [100, 300] (our capture's name) around opt.step(), inside which PyTorch's
    # Optimizer.step#SGD.step range runs [150, 250]: range ids go by start, so PyTorch's is the higher one and
    # the innermost at 200.  tracepipe's range wins for every launch inside it (rule 3): 120 and 200 on
    # `optimizer`, not on PyTorch's range (the highest range id would be); 350 is outside both, no pass.
    write(
        tmp_path,
        "opt.nsys",
        nvtx_ranges=[push_pop("optimizer", 100, 300), push_pop("Optimizer.step#SGD.step", 150, 250)],
        api_calls=[launch(1, 120), launch(2, 200), launch(3, 350)],
        kernels=[kernel(1), kernel(2), kernel(3)],
    )
    expect(
        tmp_path,
        LAUNCH_POINTS,
        """
        kernel | tid | t   | layer     | pass      | bwd_op_id | fwd_op_id
        0      | 1   | 120 | optimizer | optimizer | NULL      | NULL
        1      | 1   | 200 | optimizer | optimizer | NULL      | NULL
        2      | 1   | 350 | NULL      | NULL      | NULL      | NULL
        """,
    )


def test_a_range_opened_at_the_backward_ops_start_wins_over_the_link(tmp_path: Path) -> None:
    # Forward: aten::mm (op 0, sequence number 9) at 40 inside `block` on thread 1.  Its backward, MmBackward0
    # (op 1, 9), runs on thread 2 over [700, 800], inside a `backward` range opened before it (650); a
    # `recompute` range opens at the backward op's own start instant, 700, and closes at 760.  A range opened
    # inside the backward op (from its start on, inclusive) encloses recomputed work and wins: the launch at
    # 720 is in `recompute`.  At 780 the innermost range is `backward`, opened before the op: the link to
    # op 0 wins, `block`.
    write(
        tmp_path,
        "bwd.nsys",
        nvtx_ranges=[
            push_pop("block", 0, 100),
            push_pop("backward", 650, 900, tid=2),
            push_pop("recompute", 700, 760, tid=2),
        ],
        ops=[
            op("aten::mm", 40, 50, sequence_number=9),
            op("MmBackward0", 700, 800, tid=2, sequence_number=9, fwd_thread_id=1),
        ],
        api_calls=[launch(1, 45), launch(2, 720, tid=2), launch(3, 780, tid=2)],
        kernels=[kernel(1), kernel(2), kernel(3)],
    )
    expect(
        tmp_path,
        LAUNCH_POINTS,
        """
        kernel | tid | t   | layer     | pass     | bwd_op_id | fwd_op_id
        0      | 1   | 45  | block     | forward  | NULL      | NULL
        1      | 2   | 720 | recompute | backward | 1         | 0
        2      | 2   | 780 | block     | backward | 1         | 0
        """,
    )


# ------------------------------------------------------------------ kernel_tiles and layer_work_map: a CNN on 4 SMs

#: Kernel names with their tiles (pipeline/analyze/tiles.py): cuDNN's xmma fprop (tile 64 positions x 32
#: channels, K step 16, reduction padded per filter tap) and a CUTLASS split-K GEMM (64 x 64, K step 32, padded
#: as one flattened length).
XMMA = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x32x16_stage4_execute_kernel_cudnn"
CUTLASS_SPLITK = "cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_splitk_64x64_32x3_nn_align4>"


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two convolutions on a 4-SM GPU (the trace's SM count wins over the H200's 132 of the arch table).

    conv1: 2x3x8x8 -> 2x40x8x8 (3x3, padding 1): 5120 outputs, 27 MACs each (3 channels x 9 taps) = 138240.
        kernel 0, xmma, grid 2x2 = 4 blocks; kernel 1, a bias add (no MAC kernel), 6 blocks.
    conv2: 2x40x8x8 -> 2x16x8x8: 2048 outputs, 360 MACs each (40 x 9) = 737280.
        kernel 2, xmma, 2 blocks; kernel 3, CUTLASS split-K GEMM, grid 4x2 = 8 blocks: two MAC kernels in one
        call, so the view does not split the call's MACs between them.
    Every block has 128 threads."""
    folder = tmp_path_factory.mktemp("cnn")
    blocks = {"block_x": 128, "registers_per_thread": 32, "device_id": 0, "static_smem_bytes": 0}
    write(
        folder,
        "cnn.nsys",
        nvtx_ranges=[push_pop("conv1", 0, 100), push_pop("conv2", 200, 300)],
        api_calls=[launch(1, 10), launch(2, 20), launch(3, 210), launch(4, 220)],
        kernels=[
            kernel(1, name=XMMA, grid_x=2, grid_y=2, **blocks),
            kernel(2, name="void add_bias_kernel(float*)", grid_x=6, **blocks),
            kernel(3, name=XMMA, grid_x=2, **blocks),
            kernel(4, name=CUTLASS_SPLITK, grid_x=4, grid_y=2, **blocks),
        ],
        devices=[{"device_id": 0, "name": "NVIDIA H200", "compute_major": 9, "compute_minor": 0, "sm_count": 4}],
        layer_shapes=[
            {"capture_id": "cnn", "layer": "conv1", "call_index": 0, "module_type": "Conv2d",
             "input_shapes": "[[2, 3, 8, 8]]", "output_shapes": "[[2, 40, 8, 8]]", "macs": 138240},
            {"capture_id": "cnn", "layer": "conv2", "call_index": 0, "module_type": "Conv2d",
             "input_shapes": "[[2, 40, 8, 8]]", "output_shapes": "[[2, 16, 8, 8]]", "macs": 737280},
        ],
    )  # fmt: skip
    return folder


def test_kernel_tiles_round_partial_tiles_up(cnn: Path) -> None:
    # Positions are tile M's rows, channels tile N's columns (implicit-GEMM convolution; the split-K GEMM's two
    # orientations need 2 tiles each here, a tie that keeps positions x channels).
    # kernel 0: 2*8*8 = 128 positions / 64 = 2 tiles x ceil(40 channels / 32) = 2 -> 4 tiles = its 4 blocks.
    #   4 * 64 * 32 / 5120 = 1.6.  Reduction per tap: 3 input channels padded to the K step 16: 16/3 = 5.333333;
    #   predicted MACs ratio 1.6 * 16/3 = 8.533333.
    # kernel 2: 128 / 64 = 2 x ceil(16 / 32) = 1 -> 2 tiles = its 2 blocks: 2 * 64 * 32 / 2048 = 2.
    #   40 channels padded to 48: 1.2; predicted 2 * 1.2 = 2.4.
    # kernel 3: 2 x ceil(16 / 64) = 1 -> 2 tiles; split-K: 8 blocks share them, 8 / (8 // 2) = 2 launched tiles,
    #   2 * 64 * 64 / 2048 = 4.  Flattened reduction 360 padded to 12 * 32 = 384: 1.066667; predicted 4.266667.
    expect(
        cnn,
        "SELECT kernel_id, layer, blocks, tile_m, tile_n, tile_k, orientation, tiles_needed, launched_tiles "
        "FROM kernel_tiles ORDER BY kernel_id",
        """
        kernel_id | layer | blocks | tile_m | tile_n | tile_k | orientation          | tiles_needed | launched_tiles
        0         | conv1 | 4      | 64     | 32     | 16     | positions_x_channels | 4            | 4
        2         | conv2 | 2      | 64     | 32     | 16     | positions_x_channels | 2            | 2
        3         | conv2 | 8      | 64     | 64     | 32     | positions_x_channels | 2            | 2
        """,
    )
    expect(
        cnn,
        "SELECT kernel_id, min_coverage, output_coverage, reduction_coverage, predicted_macs_ratio, reason "
        "FROM kernel_tiles ORDER BY kernel_id",
        """
        kernel_id | min_coverage | output_coverage | reduction_coverage | predicted_macs_ratio | reason
        0         | 1.6          | 1.6             | 5.333333           | 8.533333             | NULL
        2         | 2            | 2               | 1.2                | 2.4                  | NULL
        3         | 4            | 4               | 1.066667           | 4.266667             | NULL
        """,
    )


def test_layer_work_map_splits_each_calls_work_over_blocks_and_sms(cnn: Path) -> None:
    # outputs_per_block = the call's outputs / blocks; macs_per_block the call's MACs / blocks for the call's
    # only MAC kernel, 0 for other kernels, NULL when two MAC kernels share the call.  Round-robin over 4 SMs:
    # kernel 0: 4 blocks = exactly 1 per SM: max 1 = min 1 on all 4 SMs.  5120 / 4 = 1280 outputs,
    #   138240 / 4 = 34560 MACs per block, on the busiest SM 1 * 34560.
    # kernel 1: 6 = 4 + 2: 2 SMs run 2 blocks, 2 run 1.  5120 / 6 = 853.333333 outputs per block; no MACs.
    # kernel 2: 2 blocks: 2 SMs run 1, 2 run none.  2048 / 2 = 1024 outputs per block.
    # kernel 3: 8 blocks = exactly 2 per SM on all 4.  2048 / 8 = 256.
    expect(
        cnn,
        "SELECT kernel_id, layer, is_mac_kernel, mac_kernels_in_call, blocks, outputs_per_block, macs_per_block, "
        "reason FROM layer_work_map ORDER BY kernel_id",
        """
        kernel_id | layer | is_mac_kernel | mac_kernels_in_call | blocks | outputs_per_block | macs_per_block | reason
        0         | conv1 | true          | 1                   | 4      | 1280              | 34560          | NULL
        1         | conv1 | false         | 1                   | 6      | 853.333333        | 0              | NULL
        2         | conv2 | true          | 2                   | 2      | 1024              | NULL           | {SPLIT}
        3         | conv2 | true          | 2                   | 8      | 256               | NULL           | {SPLIT}
        """.format(SPLIT="2 MAC kernels in one call: the MACs are not split among them"),
    )
    expect(
        cnn,
        "SELECT kernel_id, max_blocks_per_sm, min_blocks_per_sm, sms_at_max, idle_sms, macs_per_sm_max "
        "FROM layer_work_map ORDER BY kernel_id",
        """
        kernel_id | max_blocks_per_sm | min_blocks_per_sm | sms_at_max | idle_sms | macs_per_sm_max
        0         | 1                 | 1                 | 4          | 0        | 34560
        1         | 2                 | 1                 | 2          | 0        | 0
        2         | 1                 | 0                 | 2          | 2        | NULL
        3         | 2                 | 2                 | 4          | 0        | NULL
        """,
    )


# ------------------------------------------------------------------ kernel_sm_spread: the dispatch model beside ncu


def ncu_launch(launch_id: int, layer_path: str, grid_x: int, metrics: dict[str, float]) -> tuple[dict, list[dict]]:
    """One ncu launch (256 threads per block) and its raw-page metrics (ncu_metrics rows, base units)."""
    launch_row = {"launch_id": launch_id, "name": "k", "grid_x": grid_x, "grid_y": 1, "grid_z": 1, "block_x": 256}
    launch_row |= {"block_y": 1, "block_z": 1, "nvtx_push_pop": layer_path}
    return launch_row, [{"launch_id": launch_id, "metric": m, "value": v} for m, v in metrics.items()]


def test_kernel_sm_spread_model_rounds_beside_measured_cycles(tmp_path: Path) -> None:
    # A 4-SM GPU.  Launch 0: 9 blocks, 2 resident per SM (registers).  Round-robin: 9 = 2*4 + 1, so 1 SM runs 3
    # blocks = ceil(3/2) = 2 rounds, 3 SMs run 2 blocks = 1 round.  Mean rounds (1*2 + 3*1) / 4 = 1.25; the
    # busiest SM's 2 rounds / 1.25 = 1.6.  ncu measured that SM at 2000 active cycles and the others at 1000
    # (mean 1250): 2000 / 1250 = 1.6 too, so cycle_vs_model = 1: the model's time spread holds.
    # Launch 1: 3 blocks, 1 resident: 3 SMs run 1 block (1 round), one runs none.  Mean rounds 3/4 = 0.75,
    # max 1: 1.333333.  Measured cycles 1200, 800, 800, 0 (mean 700): 1200/700 = 1.714286, and
    # 1.714286 / 1.333333 = 9/7 = 1.285714: one block took longer than the block counts explain.
    limits = {"launch__sm_count": 4, "launch__occupancy_limit_blocks": 32, "launch__occupancy_limit_warps": 8}
    limits |= {"launch__occupancy_limit_shared_mem": 16, "launch__occupancy_limit_barriers": 32}
    l0, m0 = ncu_launch(
        0,
        "model/conv1",
        9,
        limits
        | {"launch__occupancy_limit_registers": 2, "gpu__time_duration.sum": 5000}
        | {"sm__ctas_launched.min": 2, "sm__ctas_launched.max": 3, "sm__ctas_launched.avg": 2.25}
        | {"sm__cycles_active.min": 1000, "sm__cycles_active.max": 2000, "sm__cycles_active.avg": 1250},
    )
    l1, m1 = ncu_launch(
        1,
        "model/fc",
        3,
        limits
        | {"launch__occupancy_limit_registers": 1, "gpu__time_duration.sum": 1500}
        | {"sm__ctas_launched.min": 0, "sm__ctas_launched.max": 1, "sm__ctas_launched.avg": 0.75}
        | {"sm__cycles_active.min": 0, "sm__cycles_active.max": 1200, "sm__cycles_active.avg": 700},
    )
    write(tmp_path, "spread.ncu_raw", ncu_kernels=[l0, l1], ncu_metrics=m0 + m1)
    expect(
        tmp_path,
        "SELECT launch_id AS id, layer, blocks, sm_count AS sms, resident_blocks_per_sm AS resident, "
        "model_max_blocks, model_min_blocks, model_mean_blocks, model_idle_sms FROM kernel_sm_spread ORDER BY 1",
        """
        id | layer | blocks | sms | resident | model_max_blocks | model_min_blocks | model_mean_blocks | model_idle_sms
        0  | conv1 | 9      | 4   | 2        | 3                | 2                | 2.25              | 0
        1  | fc    | 3      | 4   | 1        | 1                | 0                | 0.75              | 1
        """,
    )
    expect(
        tmp_path,
        "SELECT launch_id AS id, model_max_rounds, model_mean_rounds, model_round_imbalance, "
        "measured_cycle_imbalance, cycle_vs_model FROM kernel_sm_spread ORDER BY 1",
        """
        id | model_max_rounds | model_mean_rounds | model_round_imbalance | measured_cycle_imbalance | cycle_vs_model
        0  | 2                | 1.25              | 1.6                   | 1.6                      | 1
        1  | 1                | 0.75              | 1.333333              | 1.714286                 | 1.285714
        """,
    )
    expect(
        tmp_path,
        "SELECT launch_id, ctas_min, ctas_max, blocks_as_modelled, measured_block_imbalance "
        "FROM kernel_sm_spread ORDER BY launch_id",
        """
        launch_id | ctas_min | ctas_max | blocks_as_modelled | measured_block_imbalance
        0         | 2        | 3        | true               | 1.333333
        1         | 0        | 1        | true               | 1.333333
        """,
    )


# ------------------------------------------------------------------ layer_memory_ops: copies beside kernels


def test_layer_memory_ops_share_of_the_paths_gpu_time(tmp_path: Path) -> None:
    # `step` launches a kernel of 600 ns, a 3000-byte host-to-device copy of 300 ns and a 4000-byte memset of
    # 100 ns: 1000 ns of GPU time on that path, so the copy is 30 % of it and the memset 10 %.  A copy of
    # 50 ns launched outside every range is all of its path's (NULL) GPU time.  GB/s = bytes / ns.
    write(
        tmp_path,
        "mem.nsys",
        nvtx_ranges=[push_pop("step", 0, 1000)],
        api_calls=[launch(1, 10), launch(2, 20), launch(3, 30), launch(4, 2000)],
        kernels=[kernel(1, start_ns=5000, duration_ns=600)],
        memcpy=[
            {"correlation_id": 2, "start_ns": 6000, "duration_ns": 300, "bytes": 3000, "kind": "HtoD"},
            {"correlation_id": 4, "start_ns": 9000, "duration_ns": 50, "bytes": 1000, "kind": "DtoH"},
        ],
        memset=[{"correlation_id": 3, "start_ns": 7000, "duration_ns": 100, "bytes": 4000}],
    )
    expect(
        tmp_path,
        "SELECT path, op_kind, copy_kind, count, bytes, duration_ns, gb_per_s, share_of_path_gpu_ns "
        "FROM layer_memory_ops ORDER BY path NULLS LAST, op_kind",
        """
        path | op_kind | copy_kind | count | bytes | duration_ns | gb_per_s | share_of_path_gpu_ns
        step | memcpy  | HtoD      | 1     | 3000  | 300         | 10       | 30
        step | memset  | NULL      | 1     | 4000  | 100         | 40       | 10
        NULL | memcpy  | DtoH      | 1     | 1000  | 50          | 20       | 100
        """,
    )


def test_launch_point_layers_has_one_row_per_launch_point(tmp_path: Path) -> None:
    # The forward op's instant (10) is looked up to link the backward launch, but it is no launch point: the view
    # has the two launch points (15 on thread 1, 350 on thread 2), once each.
    write(
        tmp_path,
        "points.nsys",
        nvtx_ranges=[push_pop("layer1", 0, 100)],
        ops=[
            op("aten::linear", 10, 20, sequence_number=7),
            op("LinearBackward0", 300, 400, tid=2, sequence_number=7, fwd_thread_id=1),
        ],
        api_calls=[launch(1, 15), launch(2, 350, tid=2)],
        kernels=[kernel(1), kernel(2)],
    )
    expect(
        tmp_path,
        "SELECT tid, launch_start_ns, pass FROM launch_point_layers ORDER BY launch_start_ns",
        """
        tid | launch_start_ns | pass
        1   | 15              | forward
        2   | 350             | backward
        """,
    )
