"""Each findings rule on hand-made traces: a case it must fire on, with its figures worked out by hand in the
comments, and cases it must not fire on, each chosen so that a wrong rule (a threshold off by one, a condition
dropped) answers differently.  scripts/mutants.py breaks each rule once and expects these tests to notice."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from pipeline.analyze import connect, view_body, view_files
from tests.hand_trace import HandTrace

XMMA_TF32 = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x64x32_stage5_execute_kernel"
SGEMM_FFMA = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_execute_kernel"
GEMM_TF32 = "sm80_xmma_gemm_tf32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4_execute_kernel"
#: a CUTLASS TF32 convolution of cuDNN (a real RTX A4000 trace, PyTorch ~1.11: willding123/Shift-Equivariant-Vision-
#: Transformers @fdc9ac6 : trace.json)
CUTLASS_CONV_TF32 = (
    "void cutlass_cudnn::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc>"
    "(cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc::Params)"
)
SDPA_FLASH = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1"  # an H100's


def rows(out: Path, rule: str, cols: str = "path, kernel, launches, gpu_time_ns, at_stake_ns") -> list[tuple]:
    """``cols`` of the findings of ``rule`` (``detail['name']`` reads one of the rule's own numbers).  Each view
    computed once into a table, as analyze computes them: as nested views DuckDB plans the whole tree under
    findings as one query, ~9 s on a four-kernel trace against 0.35."""
    con = connect(out, views=["findings"], materialize=True)
    return con.sql(f"SELECT {cols} FROM findings WHERE rule = $rule ORDER BY ALL", params={"rule": rule}).fetchall()


# --- layout_conversion ----------------------------------------------------------------------------------------


def test_layout_conversions_in_a_conv_layer_fire_with_their_share(tmp_path: Path) -> None:
    # conv1 runs a 60 µs convolution, two 10 µs nchwToNhwc and one 10 µs nhwcToNchw: the layer's 90 µs hold
    # 30 µs of transforms, 33.3 % >= 5 %: one row per transform kernel, all of its time at stake.
    t = HandTrace()
    t.range("conv1", 0, 10_000)
    t.kernel("nchwToNhwcKernel", 20_000, 10_000, launch_at=100)
    t.kernel("nchwToNhwcKernel", 31_000, 10_000, launch_at=200)
    t.kernel(XMMA_TF32, 42_000, 60_000, launch_at=300)
    t.kernel("nhwcToNchwKernel", 103_000, 10_000, launch_at=400)
    t.write(tmp_path)
    assert rows(tmp_path, "layout_conversion", "path, kernel, launches, at_stake_ns, round(value, 4)") == [
        ("conv1", "nchwToNhwcKernel", 2, 20_000, round(100 * 30 / 90, 4)),
        ("conv1", "nhwcToNchwKernel", 1, 10_000, round(100 * 30 / 90, 4)),
    ]


def test_layout_conversions_without_a_convolution_or_below_the_share_do_not_fire(tmp_path: Path) -> None:
    # attn: a transpose beside a GEMM and cuDNN's flash attention (`fprop`: forward propagation, no convolution).
    # conv2: 4.5 µs of transforms in 104.5 µs = 4.3 % < 5 %.
    t = HandTrace()
    t.range("attn", 0, 1_000)
    t.range("conv2", 2_000, 3_000)
    t.kernel("transpose_kernel", 10_000, 50_000, launch_at=100)
    t.kernel(GEMM_TF32, 61_000, 50_000, launch_at=200)
    t.kernel(SDPA_FLASH, 112_000, 5_000, launch_at=300)
    t.kernel("nchwToNhwcKernel", 120_000, 4_500, launch_at=2_100)
    t.kernel(XMMA_TF32, 130_000, 100_000, launch_at=2_200)
    t.write(tmp_path)
    assert rows(tmp_path, "layout_conversion") == []


# --- tail_wave --------------------------------------------------------------------------------------------------

# 128 threads, 32 registers, no shared memory on cc 9.0: warps 64 // 4 = 16 blocks, registers 16 warps a
# sub-partition -> 64 // 4 = 16, blocks 32: 16 resident; 132 SMs x 16 = 2112 slots.
SLOTS = 132 * 16


def test_a_last_wave_under_half_full_fires(tmp_path: Path) -> None:
    # 2212 blocks: 2 waves, the last 100 / 2112 = 4.7 % full.  At stake: 100 µs * (2 - 2212 / 2112) / 2.
    t = HandTrace()
    t.kernel("elementwise", 10_000, 100_000, launch_at=0, grid=(SLOTS + 100, 1, 1))
    t.write(tmp_path)
    got = rows(
        tmp_path, "tail_wave", "kernel, launches, at_stake_ns, round(value, 6), detail['waves'], detail['slots']"
    )
    assert got == [
        ("elementwise", 1, round(100_000 * (2 - (SLOTS + 100) / SLOTS) / 2), round(100 / SLOTS, 6), 2, SLOTS)
    ]


def test_one_wave_or_a_half_full_last_wave_does_not_fire(tmp_path: Path) -> None:
    # 1000 blocks: one wave.  2112 + 1056 blocks: the last wave exactly half full (not under half).
    t = HandTrace()
    t.kernel("one_wave", 10_000, 100_000, launch_at=0, grid=(1000, 1, 1))
    t.kernel("half_tail", 120_000, 100_000, launch_at=100, grid=(SLOTS + SLOTS // 2, 1, 1))
    t.write(tmp_path)
    assert rows(tmp_path, "tail_wave") == []


# --- low_occupancy ----------------------------------------------------------------------------------------------


def test_a_long_register_limited_kernel_fires(tmp_path: Path) -> None:
    # 32 threads, 255 registers: ceil(255 * 32 / 256) * 256 = 8192 registers a warp; 16384 a sub-partition hold 2
    # warps -> 8 warps an SM = 8 one-warp blocks (warps allow 64, blocks 32): 8 / 64 = 12.5 %, limited by
    # registers.  Two 100 µs launches; at stake 200 µs * (1 - 12.5 / 25) = 100 µs.
    t = HandTrace()
    t.range("norm", 0, 1_000)
    for i in range(2):
        t.kernel("rownorm_kernel", 10_000 + 200_000 * i, 100_000, launch_at=100 + i, block=(32, 1, 1), regs=255)
    t.write(tmp_path)
    got = rows(tmp_path, "low_occupancy", "path, kernel, launches, at_stake_ns, value, evidence, fix")
    assert [r[:5] for r in got] == [("norm", "rownorm_kernel", 2, 100_000, 12.5)]
    assert "limited by registers: 255 registers/thread" in got[0][5] and got[0][6].startswith("Fewer registers")


def test_short_library_or_quarter_occupancy_kernels_do_not_fire(tmp_path: Path) -> None:
    # the same launch as a library GEMM (its tile sets its occupancy); the same as a 4 µs kernel (shorter than
    # 5 µs); 128 registers: 4096 a warp, 4 warps a sub-partition, 16 one-warp blocks = 25 %, not below 25 %.
    t = HandTrace()
    t.kernel(SGEMM_FFMA, 10_000, 100_000, launch_at=0, block=(32, 1, 1), regs=255)
    t.kernel("short_kernel", 120_000, 4_000, launch_at=10, block=(32, 1, 1), regs=255)
    t.kernel("quarter", 130_000, 100_000, launch_at=20, block=(32, 1, 1), regs=128)
    t.write(tmp_path)
    assert rows(tmp_path, "low_occupancy") == []


# --- launch_bound -----------------------------------------------------------------------------------------------


def launches(t: HandTrace, n: int, duration: int, every: int = 20_000, graph: bool = False) -> None:
    """``n`` kernels launched every ``every`` ns inside step/model, each starting 5 µs after its launch."""
    t.range("step", 0, 10_000_000)
    t.range("model", 0, 10_000_000)
    for i in range(n):
        t.kernel(
            "tiny", 1_000 + every * i + 5_000, duration, launch_at=1_000 + every * i, graph_node_id=i if graph else None
        )


def test_kernels_shorter_than_their_launches_fire_with_the_idle_between(tmp_path: Path) -> None:
    # 10 kernels of 2 µs launched every 20 µs: the GPU idles 18 µs before each.  The first has no previous launch
    # (no issue interval): the stretch is kernels 2..10, 9 >= 8 operations; idle between them: 8 gaps of 18 µs.
    t = HandTrace()
    launches(t, 10, 2_000)
    t.write(tmp_path)
    got = rows(tmp_path, "launch_bound", "path, launches, gpu_time_ns, at_stake_ns, detail['stretches']")
    assert got == [("step/model", 9, 9 * 2_000, 8 * 18_000, 1)]


def test_a_stretch_s_medians_leave_out_its_first_operation_s_issue_interval(tmp_path: Path) -> None:
    # 10 kernels of 2 µs; launched at 0, then 50 µs later (the stretch's first: starved, its issue interval after the
    # busy-or-not kernel before), then 4 every 20 µs and 4 every 24 µs. The stretch is kernels 1..9; the intervals
    # between its launches are 20 x4 and 24 x4: median 22 µs (with the first's 50 µs it would be 24).
    t = HandTrace()
    t.range("step", 0, 10_000_000)
    launch = [1_000, 51_000]
    for every in [20_000] * 4 + [24_000] * 4:
        launch.append(launch[-1] + every)
    for at in launch:
        t.kernel("tiny", at + 5_000, 2_000, launch_at=at)
    t.write(tmp_path)
    got = rows(tmp_path, "launch_bound", "launches, detail['median_op_ns'], detail['median_issue_ns']")
    assert got == [(9, 2_000.0, 22_000.0)]


def test_busy_short_or_graph_replayed_stretches_do_not_fire(tmp_path: Path) -> None:
    # 30 µs kernels launched every 20 µs keep the GPU busy; 8 short kernels make a stretch of 7; a graph replay's
    # kernels were issued by one launch.
    for i, (n, duration, graph) in enumerate([(10, 30_000, False), (8, 2_000, False), (10, 2_000, True)]):
        t = HandTrace(f"case{i}")
        launches(t, n, duration, graph=graph)
        t.write(tmp_path)
    assert rows(tmp_path, "launch_bound") == []


# --- fp32_no_tensor_cores ---------------------------------------------------------------------------------------


def fp32_rows(out: Path) -> list[tuple]:
    return rows(out, "fp32_no_tensor_cores", "trace_id, path, launches, at_stake_ns, fix")


def test_an_fp32_gemm_on_a_tensor_core_gpu_fires_with_the_fix_it_needs(tmp_path: Path) -> None:
    # Two 10 µs FFMA GEMMs in fc on cc 9.0: at stake 20 µs * (1 - 1 / 2) = 10 µs, fix: TF32 matmuls.  On cc 7.0 the
    # fix is fp16.  A trace whose other GEMMs run TF32 already: the fix is not the flag; one whose only TF32 kernel
    # is a convolution (TF32 is on by default for convolutions, not for matmuls): the flag.
    cases = (
        ("h100", (9, 0), None),
        ("v100", (7, 0), None),
        ("mixed", (9, 0), GEMM_TF32),
        ("conv", (8, 6), CUTLASS_CONV_TF32),
    )
    for trace_id, cc, tf32 in cases:
        t = HandTrace(trace_id, cc=cc)
        t.range("fc", 0, 1_000)
        t.kernel(SGEMM_FFMA, 10_000, 10_000, launch_at=100)
        t.kernel(SGEMM_FFMA, 30_000, 10_000, launch_at=200)
        if tf32:
            t.kernel(tf32, 50_000, 10_000, launch_at=2_000)
        t.write(tmp_path)
    got = {r[0]: r[1:] for r in fp32_rows(tmp_path)}
    assert {k: v[:3] for k, v in got.items()} == {k: ("fc", 2, 10_000) for k in ("h100", "v100", "mixed", "conv")}
    assert got["h100"][3].startswith("Allow TF32 matmuls") and got["conv"][3].startswith("Allow TF32 matmuls")
    assert "float16" in got["v100"][3] and "TF32" not in got["v100"][3]
    assert got["mixed"][3].startswith("TF32 is on and the library still chose FP32")


def test_tensor_core_kernels_or_gpus_without_tensor_cores_do_not_fire(tmp_path: Path) -> None:
    # a TF32 GEMM on cc 9.0; the FFMA GEMM on a cc 6.1 GPU (no tensor cores)
    t = HandTrace("tc")
    t.kernel(GEMM_TF32, 10_000, 10_000, launch_at=0)
    t.write(tmp_path)
    t = HandTrace("pascal", cc=(6, 1), gpu="NVIDIA GeForce GTX 1080 Ti", sm_count=28)
    t.kernel(SGEMM_FFMA, 10_000, 10_000, launch_at=0)
    t.write(tmp_path)
    assert fp32_rows(tmp_path) == []


# --- pageable_h2d_copy ------------------------------------------------------------------------------------------


def test_a_pageable_copy_inside_a_step_fires(tmp_path: Path) -> None:
    # ProfilerStep#1 [0, 100 µs]: a 1,000,000-byte pageable copy launched at 1 µs, 5 µs on the GPU
    t = HandTrace()
    t.range("ProfilerStep#1", 0, 100_000)
    t.memcpy(2_000, 5_000, launch_at=1_000, nbytes=1_000_000)
    t.kernel("k", 10_000, 1_000, launch_at=3_000)
    t.write(tmp_path)
    got = rows(tmp_path, "pageable_h2d_copy", "path, kernel, launches, at_stake_ns, detail['bytes'], round(value, 3)")
    assert got == [("ProfilerStep#*", "[CUDA memcpy Host-to-Device]", 1, 5_000, 1_000_000, 200.0)]


def test_pinned_copies_and_copies_outside_steps_do_not_fire(tmp_path: Path) -> None:
    t = HandTrace("steps")
    t.range("ProfilerStep#1", 0, 100_000)
    t.memcpy(2_000, 5_000, launch_at=1_000, nbytes=1_000_000, src="Pinned")
    t.memcpy(300_000, 5_000, launch_at=200_000, nbytes=1_000_000)  # after the step
    t.kernel("k", 10_000, 1_000, launch_at=3_000)  # some GPU work: 5 µs of copies would be worth a look
    t.write(tmp_path)
    t = HandTrace("no_steps")  # no step range at all: nothing is "inside a step"
    t.range("model", 0, 100_000)
    t.memcpy(2_000, 5_000, launch_at=1_000, nbytes=1_000_000)
    t.kernel("k", 10_000, 1_000, launch_at=3_000)
    t.write(tmp_path)
    assert rows(tmp_path, "pageable_h2d_copy") == []


# --- slow_backward (on its declared inputs: the pass split comes from kernel_layers) --------------------------


def slow_backward(tmp: Path, kernel_layers: list[dict]) -> list[dict]:
    """The slow_backward findings of trace `t` when its kernel_layers are these hand-made rows: their pass split,
    whose backward attribution (autograd links) a hand trace would have to fake; every other input of the view is a
    real (small) trace's."""
    t = HandTrace("t")
    t.kernel("k", 10_000, 1_000, launch_at=100)
    # Every other view computed once (materialize), then these three put in place: planned as views over views,
    # findings took ~30 s to plan here.
    con = connect(t.write(tmp), materialize=True)
    hand = {"kernel_layers": kernel_layers}
    kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables").fetchall())
    for name in (*hand, "findings"):
        con.execute(f"DROP {'VIEW' if kinds[name] == 'VIEW' else 'TABLE'} {name}")
    for name, data in hand.items():
        con.register(f"_hand_{name}", pa.Table.from_pylist(data))
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM _hand_{name}")
    con.execute(f"CREATE VIEW findings AS {view_body(view_files()['findings'])}")
    rel = con.sql("SELECT * FROM findings WHERE rule = 'slow_backward' ORDER BY path")
    return [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]


def kl(path: str, name: str, ns: int, pass_: str = "backward") -> dict:
    return {"trace_id": "t", "kernel_id": 0, "device_id": 0, "path": path, "layer": path.rsplit("/", 1)[-1],
            "name": name, "short_name": name, "duration_ns": ns, "pass": pass_,
            "launch_pid": 1, "launch_tid": 1, "launch_start_ns": 0}  # fmt: skip


def test_a_backward_over_three_times_its_forward_fires(tmp_path: Path) -> None:
    # tok: forward 1 µs, backward 5 µs in two steps (3 + 2): ratio 5 > 3, at stake 5 - 2 * 1 = 3 µs; its top
    # backward kernel is the sort (2.5 + 1 = 3.5 µs over the scatter's 1.5).
    got = slow_backward(
        tmp_path,
        kernel_layers=[
            kl("ProfilerStep#1/tok", "radix_sort", 2_500),
            kl("ProfilerStep#2/tok", "radix_sort", 1_000),
            kl("ProfilerStep#1/tok", "scatter", 500),
            kl("ProfilerStep#2/tok", "scatter", 1_000),
            kl("ProfilerStep#1/tok", "gather", 600, "forward"),
            kl("ProfilerStep#2/tok", "gather", 400, "forward"),
        ],
    )
    assert [(r["path"], r["kernel"], r["at_stake_ns"], r["value"]) for r in got] == [
        ("ProfilerStep#*/tok", "radix_sort", 3_000, 5.0)
    ]


def test_a_backward_of_three_times_or_without_forward_does_not_fire(tmp_path: Path) -> None:
    # fc: backward exactly 3x (30 µs at stake would be worth a look if it fired); loss: no forward
    got = slow_backward(
        tmp_path,
        kernel_layers=[kl("fc", "gemm", 30_000), kl("fc", "gemm", 10_000, "forward"), kl("loss", "nll", 50_000)],
    )
    assert got == []


# --- straggler_rank ---------------------------------------------------------------------------------------------


def job(out: Path, times: list[int]) -> None:
    for r, ns in enumerate(times):
        t = HandTrace(f"rank{r}", meta={"source_path": f"/job/rank{r}/nsys.sqlite", "rank": r})
        t.range("layer", 0, 10_000)
        t.kernel("k", 20_000, ns, launch_at=100)
        t.write(out)


def test_a_rank_a_fifth_above_the_median_fires(tmp_path: Path) -> None:
    # ranks at 10, 10, 13 µs on `layer`: median 10 µs, rank 2 at 1.3x, 3 µs at stake
    job(tmp_path, [10_000, 10_000, 13_000])
    got = rows(
        tmp_path, "straggler_rank", "trace_id, path, at_stake_ns, value, detail['slowest_rank'], detail['ranks']"
    )
    assert got == [("rank2", "layer", 3_000, 1.3, 2.0, 3.0)]


def test_a_rank_under_a_fifth_above_the_median_does_not_fire(tmp_path: Path) -> None:
    job(tmp_path, [10_000, 10_000, 11_500])
    assert rows(tmp_path, "straggler_rank") == []


# --- findings: the union, its floors and its order ---------------------------------------------------------------


def test_findings_keep_what_is_worth_a_look_ranked_by_time_at_stake(tmp_path: Path) -> None:
    # One trace, 1,000 µs of kernels: an FFMA GEMM of 998 µs (499 µs at stake, fires) and a pageable copy of 0.9 µs
    # inside the step (below the 1 µs floor); another trace whose 10 ms of kernels hold a 20 µs FFMA GEMM (10 µs at
    # stake: 0.1 % of its kernel time, below 0.5 %).
    t = HandTrace("a")
    t.range("step", 0, 10_000)
    t.kernel(SGEMM_FFMA, 20_000, 998_000, launch_at=100)
    t.kernel("k", 1_020_000, 2_000, launch_at=200)
    t.memcpy(1_030_000, 900, launch_at=300, nbytes=4096)
    t.write(tmp_path)
    t = HandTrace("b")
    t.kernel(SGEMM_FFMA, 20_000, 20_000, launch_at=100)
    t.kernel("other", 50_000, 9_980_000, launch_at=200)
    t.write(tmp_path)
    got = connect(tmp_path, views=["findings"], materialize=True).sql(
        "SELECT trace_id, priority, rule, at_stake_ns, round(share_pct, 6) FROM findings"
    )
    # share: 499 µs of trace a's GPU wall (step window from 0 to the last operation's end, 1,030.9 µs)
    assert got.fetchall() == [("a", 1, "fp32_no_tensor_cores", 499_000, round(100 * 499_000 / 1_030_900, 6))]
