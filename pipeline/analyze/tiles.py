"""Tile sizes that GEMM / implicit-GEMM kernel names carry, as a data table (one row per library pattern).

cuDNN, cuBLAS and CUTLASS name their kernels after the output tile one thread block computes
(``..._tilesize128x64x32_...``, ``cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc``,
``nvjet_sm90_tst_64x8_64x16_...``).  ``sql/kernel_tiles.sql`` applies every row's ``pattern`` to every kernel
name (first matching row by ``priority`` wins) and reads the tile from the capture groups: group 1 is the
tile's M (output rows), group 2 its N (output columns), group 3 the reduction step (K per main-loop
iteration; leave it out when the name does not carry it).  A row without groups marks a compute (MAC)
kernel whose name carries no tile.  A new library or naming scheme is a new row, not new SQL.

Other columns, each a property of the library's kernels, not of one launch:

* ``orientation``: ``'positions_x_channels'`` when tile M always runs over output positions (implicit-GEMM
  convolutions: M = N*P*Q, N = output channels K, the "nhwckrsc" layout) or ``'either'`` for GEMMs, whose
  operands a library may transpose (cuBLAS computes C^T for row-major PyTorch): the view then takes the
  orientation whose tile count is nearest the grid's blocks.
* ``split_k``: regex that, when it matches, says the grid also splits the reduction (``segment_k_on``):
  blocks beyond the output tiles share tiles rather than pad them.
* ``reduction_padding``: how the kernel pads the reduction for a convolution: ``'per_tap'`` pads the input
  channels of every filter tap to the K step (CUTLASS "optimized" fprop iterators: a 3-channel 7x7 conv with
  K step 32 does 32/3 the MACs), ``'flattened'`` pads C*R*S as one length (xmma "indexed" kernels: 147 ->
  160 with K step 16).  Linear layers have one tap, where the two agree.

Rows were read off the kernel names of the committed H200 captures (sample_traces/h200_*): cuDNN 9.19 xmma
sm80/sm90 convolution kernels, cuBLAS xmma GEMMs, CUTLASS tensor-op fprop/GEMM kernels, cuBLASLt nvjet.
"""

from __future__ import annotations

import pyarrow as pa

COLUMNS: dict[str, tuple[pa.DataType, str]] = {
    "library": (pa.string(), "library / naming scheme"),
    "priority": (pa.int32(), "lower is tried first; the first matching row wins"),
    "pattern": (pa.string(), "regex over the kernel name with the tile sizes as capture groups"),
    "orientation": (pa.string(), "'positions_x_channels' | 'either'"),
    "split_k": (pa.string(), "regex: the grid also splits the reduction (NULL: never)"),
    "reduction_padding": (pa.string(), "'per_tap' | 'flattened': how a conv's reduction is padded"),
    "example": (pa.string(), "a real kernel name the row was read from"),
}

TILE_PATTERNS: list[dict[str, object]] = [
    {
        "library": "cudnn xmma indexed fprop",
        "priority": 10,
        "pattern": r"xmma_fprop_implicit_gemm_indexed\w*_tilesize(\d+)x(\d+)x(\d+)",
        "orientation": "positions_x_channels",
        "split_k": r"segment_k_on|split_?k",
        "reduction_padding": "flattened",
        "example": "sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc_"
        "tilesize128x32x16_stage1_warpsize4x1x1_g1_tensor16x8x8_aligna4_alignc8_execute_kernel__5x_cudnn",
    },
    {
        "library": "cudnn xmma fprop",
        "priority": 20,
        "pattern": r"xmma_fprop_implicit_gemm\w*_tilesize(\d+)x(\d+)x(\d+)",
        "orientation": "positions_x_channels",
        "split_k": r"segment_k_on|split_?k",
        "reduction_padding": "per_tap",
        "example": "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_"
        "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
    },
    {
        "library": "cublas xmma gemm",
        "priority": 30,
        "pattern": r"xmma_gemm\w*_tilesize(\d+)x(\d+)x(\d+)",
        "orientation": "either",
        "split_k": r"splitk|split_k",
        "reduction_padding": "flattened",
        "example": "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_"
        "alignc4_execute_kernel__5x_cublas",
    },
    {
        "library": "cutlass fprop",
        "priority": 40,
        "pattern": r"cutlass\w*_tensorop_\w*fprop\w*?_(\d+)x(\d+)_(\d+)x\d+_",
        "orientation": "positions_x_channels",
        "split_k": r"splitk|split_k",
        "reduction_padding": "per_tap",
        "example": "cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_"
        "nhwc_align8>",
    },
    {
        "library": "cutlass gemm",
        "priority": 50,
        "pattern": r"cutlass\w*_tensorop_\w*gemm\w*?_(\d+)x(\d+)_(\d+)x\d+_",
        "orientation": "either",
        "split_k": r"splitk|split_k",
        "reduction_padding": "flattened",
        "example": "cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x64_64x3_nn_align2>",
    },
    {
        "library": "cublasLt nvjet",
        "priority": 60,
        "pattern": r"nvjet_\w*?_(\d+)x(\d+)_\d+x\d+_",  # the second pair's meaning is not documented
        "orientation": "either",
        "split_k": r"_splitK|_sk_",
        "reduction_padding": "flattened",
        "example": "nvjet_sm90_tst_64x8_64x16_4x2_h_bz_bias_TNT",
    },
    # Compute kernels whose names carry no tile: they hold the call's MACs, coverage stays unknown.
    {
        "library": "cudnn implicit_convolve_sgemm",
        "priority": 80,
        "pattern": r"implicit_convolve_sgemm",
        "orientation": None,
        "split_k": None,
        "reduction_padding": None,
        "example": "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, 0, 0, 1>(...)",
    },
    {
        "library": "cublas gemv / small-N gemm",
        "priority": 81,
        "pattern": r"gemmSN_|gemv|gemmk1_",
        "orientation": None,
        "split_k": None,
        "reduction_padding": None,
        "example": "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, 0, ...>(cublasGemmSmallNParams<...>)",
    },
    {
        "library": "attention (fmha / flash)",
        "priority": 82,
        "pattern": r"fmha_|flash_fwd|flash_bwd|AttentionKernel",
        "orientation": None,
        "split_k": None,
        "reduction_padding": None,
        "example": "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)",
    },
    {
        "library": "other gemm / conv",
        "priority": 99,
        "pattern": r"(?i)gemm|conv(?:olve|2d|3d|1d)_|fprop|dgrad|wgrad",
        "orientation": None,
        "split_k": None,
        "reduction_padding": None,
        "example": "any other name saying gemm or convolution",
    },
]

TILE_PATTERNS_SCHEMA = pa.schema([pa.field(name, typ) for name, (typ, _) in COLUMNS.items()])


def tile_patterns_table() -> pa.Table:
    """GEMM / convolution kernel-name patterns and the tile, orientation and split-K each name says."""
    return pa.Table.from_pylist(TILE_PATTERNS, schema=TILE_PATTERNS_SCHEMA)
