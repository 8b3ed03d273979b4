"""The findings' thresholds and kernel classes, in one place, as two data tables the ``sql/findings.sql`` view reads.

A finding is a rule of thumb an engineer applies to a profile ("the last wave is under half full", "backward
takes more than three times the forward"); ``sql/findings.sql`` applies each rule (a CTE each) to the analysis
views and ranks what they found by the GPU time at stake.  The numbers those rules compare
against live here and nowhere else: ``finding_thresholds`` (one row per number, with its unit and why it is
what it is) and ``finding_kernel_classes`` (the regular expressions that tell a convolution from a layout
transform or a tensor-core GEMM by its name).  Change a threshold here and every view, the CLI and the report
follow; ``tracepipe sql DIR "SELECT * FROM finding_thresholds"`` lists them; ``docs/findings.md`` explains them.

Why each value (the reasoning, not a measurement; figures measured here cite their results file):

* ``min_at_stake_ns`` / ``min_at_stake_pct``: a finding must be worth a look: at least 1 µs and 0.5 % of its
  trace's summed kernel time.
* ``layout_min_share_pct`` 5: NCHW <-> NHWC transforms under 5 % of a convolution layer's time are the normal
  cost of a one-off input conversion; above it channels_last pays (ResNet-18's conv1: 25.9 %).
* ``tail_min_waves`` 2, ``tail_max_fill`` 0.5: a one-wave grid has no tail (its blocks all run at once); on a
  grid of two or more waves a last wave under half full leaves more than half of the SM slots idle for one
  wave's time (Nsight Compute's "tail effect" reasoning).
* ``occupancy_max_pct`` 25: below a quarter of the SM's warp slots, a kernel that waits on memory has too few
  warps to hide the latency; ``occupancy_min_mean_ns`` 5 µs: a shorter kernel's time is mostly its launch and
  ramp, which no occupancy changes.
* ``launch_bound_min_ops`` 8: one short kernel between long ones is noise; eight in a row, each shorter than
  the host took to issue it, is a pattern CUDA graphs or fusion remove.  ``launch_bound_max_gap_ns`` 1 ms: an
  idle gap that long is a host stall (data loading, a synchronisation), not the cost of launching.
* ``fp32_min_compute_major`` 7: tensor cores exist from Volta (cc 7.0: fp16; TF32 and bf16 from Ampere, cc 8.0).
  ``tensor_core_speedup`` 2: the at-stake time assumes the kernel would run in half the time on tensor cores, a
  deliberately low guess (the peak ratio is several times that, but small GEMMs are bound by memory and
  launch); ``benchmarks/results/tf32_speedup_h100.txt`` measures the sample's own GEMM shapes.
* ``backward_max_ratio`` 3, ``backward_expected_ratio`` 2: a layer's backward computes two products for its
  forward's one (the input gradient and the weight gradient), so about 2x; above 3x something else runs
  (an atomic scatter, a separate reduction, a sort), and what is above 2x is at stake.
* ``straggler_min_slowdown`` 1.2: the slowest rank of a layer 20 % above the median rank of its job; below that,
  run-to-run noise of one GPU is of the same size.
"""

from __future__ import annotations

import pyarrow as pa

#: rule, name, value, unit, meaning: the numbers the rules of sql/findings.sql compare against.
THRESHOLDS: list[tuple[str, str, float, str, str]] = [
    ("all", "min_at_stake_ns", 1_000, "ns", "a finding in `findings` has at least this much GPU time at stake"),
    ("all", "min_at_stake_pct", 0.5, "%", "... and at least this share of its trace's summed kernel time"),
    ("layout_conversion", "layout_min_share_pct", 5.0, "%", "layout transforms' share of the conv layer's GPU time"),
    ("tail_wave", "tail_min_waves", 2, "waves", "grids of at least this many waves of resident blocks"),
    ("tail_wave", "tail_max_fill", 0.5, "fraction", "last wave filled less than this share of the GPU's slots"),
    ("low_occupancy", "occupancy_max_pct", 25.0, "%", "theoretical occupancy below this"),
    ("low_occupancy", "occupancy_min_mean_ns", 5_000, "ns", "mean kernel duration at least this (long enough)"),
    ("launch_bound", "launch_bound_min_ops", 8, "ops", "consecutive starved GPU operations that make a stretch"),
    ("launch_bound", "launch_bound_max_gap_ns", 1_000_000, "ns", "an idle gap longer than this breaks a stretch"),
    ("fp32_no_tensor_cores", "fp32_min_compute_major", 7, "cc major", "devices with tensor cores (Volta and later)"),
    ("fp32_no_tensor_cores", "tensor_core_speedup", 2.0, "x", "assumed speed-up on tensor cores (at stake)"),
    ("slow_backward", "backward_max_ratio", 3.0, "x", "backward GPU time above this multiple of the forward's"),
    ("slow_backward", "backward_expected_ratio", 2.0, "x", "the backward a layer should take, times its forward"),
    ("straggler_rank", "straggler_min_slowdown", 1.2, "x", "slowest rank / median rank of the job, per layer"),
]

#: class, pattern (RE2, as DuckDB's regexp_matches reads it), meaning, example: kernel families by name.
KERNEL_CLASSES: list[tuple[str, str, str, str]] = [
    (
        "convolution",
        # not a bare `fprop`: cuDNN's attention kernels are `..._sdpa_..._flash_fprop_...` (forward propagation);
        # CUTLASS's tensor-op convolutions put the MMA shape before it (`cutlass_tensorop_s1688fprop_..._tf32_...`
        # in a real A4000 trace: taken for a TF32 GEMM, it had the FP32 GEMMs told TF32 was on)
        r"(?i)(xmma_fprop|[0-9]fprop|implicit_gemm|dgrad|wgrad|convolve|convolution|conv[123]d|[123]dconv|winograd"
        r"|scudnn)",
        "a convolution kernel (cuDNN implicit GEMM fprop/dgrad/wgrad, scudnn, implicit_convolve_sgemm, CUTLASS conv)",
        "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32_...",
    ),
    (
        "layout_conversion",
        r"(?i)(nchwtonhwc|nhwctonchw|nchw2nhwc|nhwc2nchw|transpose)",
        "a tensor layout transform (cuDNN's NCHW <-> NHWC kernels, transposes)",
        "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, ...>(...)",
    ),
    (
        "library_tiled",
        r"(?i)(gemm|gemv|xmma|cutlass|nvjet|cublas|cudnn|fmha|flash|sdpa|attention|wgmma|fprop|dgrad|wgrad|convolve)",
        "a library GEMM / convolution / attention kernel: its tile (registers, shared memory) sets its occupancy "
        "by design, so low_occupancy leaves it out",
        "nvjet_sm90_tst_64x8_64x16_2x4_h_bz_bias_TNT",
    ),
    (
        "communication",
        r"(?i)(nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|sendrecv)",
        "a collective (NCCL/RCCL): it waits on the interconnect, not on latency hiding; low_occupancy leaves it out",
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
    ),
    (
        "fp32_simt",
        r"(?i)(sgemm|ffma|gemm\w*<float,|f32f32_f32f32)",
        "an FP32 GEMM or convolution on the CUDA cores (FFMA): cuBLAS/cuDNN sgemm, xmma ..._ffma_ kernels",
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_...",
    ),
    (
        "tensor_core",
        r"(?i)(tf32|bf16|f16|fp16|h16|hmma|imma|tensor[0-9]|wgmma|s16816|s1688|h884|h1688|i8816|e4m3|e5m2|fp8)",
        "a kernel whose name says it runs on tensor cores (TF32, bf16, fp16, fp8, int8 MMA)",
        "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x64x32_...",
    ),
]


def finding_thresholds_table() -> pa.Table:
    """Thresholds of the findings rules: rule, name, value, unit, meaning (pipeline/analyze/finding_rules.py)."""
    rule, name, value, unit, meaning = (list(col) for col in zip(*THRESHOLDS, strict=True))
    return pa.table(
        {
            "rule": pa.array(rule, pa.string()),
            "name": pa.array(name, pa.string()),
            "value": pa.array([float(v) for v in value], pa.float64()),
            "unit": pa.array(unit, pa.string()),
            "meaning": pa.array(meaning, pa.string()),
        }
    )


def finding_kernel_classes_table() -> pa.Table:
    """Kernel families by name for the findings rules: class, pattern, meaning, example (finding_rules.py)."""
    cls, pattern, meaning, example = (list(col) for col in zip(*KERNEL_CLASSES, strict=True))
    return pa.table(
        {
            "class": pa.array(cls, pa.string()),
            "pattern": pa.array(pattern, pa.string()),
            "meaning": pa.array(meaning, pa.string()),
            "example": pa.array(example, pa.string()),
        }
    )


def threshold(name: str) -> float:
    """One threshold's value (Python callers: the CLI's and report's notes quote them)."""
    return next(v for _, n, v, _, _ in THRESHOLDS if n == name)
