"""Per-architecture SM limits: the constants of the CUDA occupancy calculator, and AMD CDNA's per-CU limits.

A trace records what the device reported (nsys ``TARGET_INFO_GPU``, the chrome
trace's ``deviceProperties``), but older nsys exports lack ``maxBlocksPerSm`` /
``maxWarpsPerSm``, no trace records the allocation granularities, and a trace may
lack ``sm_count``.  The view ``device_limits`` takes the trace's values and fills
only the gaps from this table (``sql/device_limits.sql``).

Sources, so each number can be checked:

* Per-SM totals (threads, warps, blocks, registers, shared memory, opt-in per-block
  shared memory): CUDA C++ Programming Guide, "Technical Specifications per Compute
  Capability" and its "Compute Capability 7.x / 8.x / 9.0" shared-memory sections.
* Granularities and the allocation model: ``cuda_occupancy.h`` (CUDA toolkit):
  ``cudaOccSMemAllocationGranularity`` (256 B on cc 7.x, 128 B on cc >= 8),
  ``cudaOccRegAllocationGranularity`` (256 registers, allocated per warp),
  ``cudaOccSubPartitionsPerMultiprocessor`` (4), ``cudaOccMaxBlocksPerMultiprocessor``
  (cc 7.0: 32, 7.5: 16, 8.0: 32, 8.6/8.7: 16, 8.9: 24, 9.0: 32), the carveout sizes
  of ``cudaOccAlignUpShmemSizeVoltaPlus``, and ``cudaOccSMemPerBlock``, which adds the
  driver's ``reservedSharedMemPerBlock`` (1 KB) on cc >= 8.
* The H200 row agrees with the sample capture: nsys ``TARGET_INFO_GPU`` and ncu's
  ``device__attribute_*`` in ``sample_traces/h200_smallcnn`` (132 SMs, 64 warps,
  32 blocks, 233472 B shared memory per SM, 232448 B opt-in, 1024 B reserved).

* cc 6.0 (Pascal GP100: Tesla P100, Quadro GP100): 64 warps, 32 blocks, 64 KB shared memory per SM, 48 KB per
  block with no opt-in, 256 B shared-memory granularity, 2 sub-partitions (``cuda_occupancy.h``); a real trace of
  a Quadro GP100 (``sample_traces/external/gpupuzzlers_vector_flops1``) reports the same per-SM totals.
* cc 6.1 (Pascal GP10x): 64 warps, 32 blocks, 96 KB shared memory per SM (not configurable), 48 KB per
  block with no opt-in above it, 256 B shared-memory granularity, 4 sub-partitions (``cuda_occupancy.h``
  gives 2 only to cc 6.0).  cc 10.0 (B200): as 9.0 (64 warps, 32 blocks, 228 KB / 227 KB opt-in, the same
  carveouts).  cc 12.0 (RTX 50-series): 48 warps (1536 threads), 24 blocks, 100 KB shared memory per SM,
  99 KB opt-in, carveouts as 8.6: as the driver of a real RTX 5060 Ti reports them (``TARGET_INFO_GPU`` of the
  nsys export in ``sample_traces/external/lighttransport_gemm_no_kernels``: maxBlocksPerSm 24, which CUDA's
  occupancy API reads; the table had 32), ``tests/test_limits.py`` checks the row against it.
* AMD (``vendor = 'AMD'``, keyed by LLVM target ``gfx_arch``, never by compute capability: Kineto's
  ``deviceProperties`` report ``computeMajor`` 9 for an MI250, which is not Hopper): ROCm's "GPU hardware
  specifications" table (compute units per GCD/XCD partition as one device, wavefront 64, LDS 64 KiB per CU)
  and the CDNA ISA guides (4 SIMDs x 8 waves = 32 wavefronts = 2048 work-items per CU, 1024 per workgroup).
  The register and LDS allocation rules differ from CUDA's, so their occupancy columns are NULL (the view
  ``kernel_occupancy`` says why); geometry, waves and per-CU load use the rows.

``ref_sm_count`` is the SM count of one well-known part of that architecture, used
only when a trace does not say how many SMs it had (the view marks such rows).
``GPU_NAMES`` tells vendors and AMD architectures apart by device name (a data table, not code).
"""

from __future__ import annotations

import pyarrow as pa

KB = 1024

#: Column -> (arrow type, meaning).  Units are in the names.
COLUMNS: dict[str, tuple[pa.DataType, str]] = {
    "vendor": (pa.string(), "'NVIDIA' or 'AMD'"),
    "gfx_arch": (pa.string(), "AMD LLVM target (gfx90a...); NULL for NVIDIA rows (keyed by compute capability)"),
    "hip_compute_capability": (pa.string(), "HIP's major.minor that this gfx arch reports ('9.4')"),
    "hip_cu_counts": (
        pa.list_(pa.int32()),
        "where several gfx archs report that major.minor, the CUs per device of this one's parts; NULL: the "
        "major.minor alone names it",
    ),
    "compute_major": (pa.int32(), "compute capability major"),
    "compute_minor": (pa.int32(), "compute capability minor"),
    "arch_name": (pa.string(), "architecture"),
    "ref_part": (pa.string(), "reference part whose SM count is ref_sm_count"),
    "ref_sm_count": (pa.int32(), "SMs of the reference part (fallback for a trace without sm_count)"),
    "warp_size": (pa.int32(), "threads per warp"),
    "max_threads_per_sm": (pa.int32(), "resident threads per SM"),
    "max_warps_per_sm": (pa.int32(), "resident warps per SM"),
    "max_blocks_per_sm": (pa.int32(), "resident blocks per SM"),
    "max_threads_per_block": (pa.int32(), "threads per block"),
    "max_registers_per_sm": (pa.int32(), "32-bit registers per SM"),
    "max_registers_per_block": (pa.int32(), "32-bit registers per block"),
    "max_registers_per_thread": (pa.int32(), "registers a thread may use"),
    "register_alloc_unit": (pa.int32(), "registers are allocated per warp in multiples of this"),
    "register_alloc_granularity": (pa.string(), "'warp': allocation is per warp"),
    "sub_partitions_per_sm": (pa.int32(), "SM sub-partitions; the register file is split among them"),
    "max_shared_mem_per_sm_bytes": (pa.int64(), "largest shared-memory carveout per SM"),
    "max_shared_mem_per_block_bytes": (pa.int64(), "per-block limit without opt-in"),
    "max_shared_mem_per_block_optin_bytes": (pa.int64(), "per-block limit with opt-in"),
    "reserved_shared_mem_per_block_bytes": (pa.int64(), "shared memory the driver reserves per block"),
    "shared_mem_alloc_unit_bytes": (pa.int64(), "shared memory per block is rounded up to this"),
    "shared_mem_carveouts_bytes": (pa.list_(pa.int64()), "shared-memory sizes an SM can be configured to"),
}

_V100_CARVEOUTS = [0, 8, 16, 32, 64, 96]
_A100_CARVEOUTS = [0, 8, 16, 32, 64, 100, 132, 164]
_GA10X_CARVEOUTS = [0, 8, 16, 32, 64, 100]
_H100_CARVEOUTS = [0, 8, 16, 32, 64, 100, 132, 164, 196, 228]


def _row(
    cc: tuple[int, int],
    arch: str,
    part: str,
    sms: int,
    warps: int,
    blocks: int,
    smem_kb: int,
    optin_kb: int,
    reserved: int,
    smem_unit: int,
    carveouts_kb: list[int],
) -> dict[str, object]:
    return {
        "vendor": "NVIDIA",
        "gfx_arch": None,
        "hip_compute_capability": None,
        "hip_cu_counts": None,
        "compute_major": cc[0],
        "compute_minor": cc[1],
        "arch_name": arch,
        "ref_part": part,
        "ref_sm_count": sms,
        "warp_size": 32,
        "max_threads_per_sm": warps * 32,
        "max_warps_per_sm": warps,
        "max_blocks_per_sm": blocks,
        "max_threads_per_block": 1024,
        "max_registers_per_sm": 64 * KB,
        "max_registers_per_block": 64 * KB,
        "max_registers_per_thread": 255,
        "register_alloc_unit": 256,
        "register_alloc_granularity": "warp",
        "sub_partitions_per_sm": 4,
        "max_shared_mem_per_sm_bytes": smem_kb * KB,
        "max_shared_mem_per_block_bytes": 48 * KB,
        "max_shared_mem_per_block_optin_bytes": optin_kb * KB,
        "reserved_shared_mem_per_block_bytes": reserved,
        "shared_mem_alloc_unit_bytes": smem_unit,
        "shared_mem_carveouts_bytes": [c * KB for c in carveouts_kb],
    }


#: One row per compute capability.  (cc, arch, reference part, its SMs, warps/SM, blocks/SM,
#: shared KB/SM, opt-in KB/block, reserved B/block, shared alloc unit B, carveouts KB)
ARCH_ROWS: list[dict[str, object]] = [
    {**_row((6, 0), "Pascal", "Tesla P100", 56, 64, 32, 64, 48, 0, 256, [64]), "sub_partitions_per_sm": 2},
    _row((6, 1), "Pascal", "GeForce GTX 1080", 20, 64, 32, 96, 48, 0, 256, [96]),
    _row((7, 0), "Volta", "Tesla V100", 80, 64, 32, 96, 96, 0, 256, _V100_CARVEOUTS),
    _row((7, 5), "Turing", "Tesla T4", 40, 32, 16, 64, 64, 0, 256, [32, 64]),
    _row((8, 0), "Ampere", "A100", 108, 64, 32, 164, 163, KB, 128, _A100_CARVEOUTS),
    _row((8, 6), "Ampere", "GeForce RTX 3090", 82, 48, 16, 100, 99, KB, 128, _GA10X_CARVEOUTS),
    _row((8, 7), "Ampere", "Jetson AGX Orin", 16, 48, 16, 164, 163, KB, 128, _A100_CARVEOUTS),
    _row((8, 9), "Ada", "GeForce RTX 4090", 128, 48, 24, 100, 99, KB, 128, _GA10X_CARVEOUTS),
    _row((9, 0), "Hopper", "H100 SXM5 / H200", 132, 64, 32, 228, 227, KB, 128, _H100_CARVEOUTS),
    _row((10, 0), "Blackwell", "B200", 148, 64, 32, 228, 227, KB, 128, _H100_CARVEOUTS),
    _row((12, 0), "Blackwell", "GeForce RTX 5090", 170, 48, 24, 100, 99, KB, 128, _GA10X_CARVEOUTS),
]


def _amd_row(
    gfx: str, arch: str, part: str, cus: int, hip_cc: str, cu_counts: list[int] | None = None
) -> dict[str, object]:
    """A CDNA compute unit: wavefront 64, 32 waves (4 SIMDs x 8), 1024 work-items per workgroup, 64 KiB LDS.
    What a CUDA-style occupancy needs beyond that (allocation granularities, blocks per CU) stays NULL."""
    return {name: None for name in COLUMNS} | {
        "vendor": "AMD",
        "gfx_arch": gfx,
        "hip_compute_capability": hip_cc,
        "hip_cu_counts": cu_counts,
        "arch_name": arch,
        "ref_part": part,
        "ref_sm_count": cus,
        "warp_size": 64,
        "max_threads_per_sm": 32 * 64,
        "max_warps_per_sm": 32,
        "max_threads_per_block": 1024,
        "max_shared_mem_per_sm_bytes": 64 * KB,
        "max_shared_mem_per_block_bytes": 64 * KB,
        "max_shared_mem_per_block_optin_bytes": 64 * KB,
    }


#: AMD Instinct rows: one ROCm device is one GCD (MI200) or the whole partitioned MI300 in SPX mode.
#: HIP's hipDeviceProp major.minor follows the gfx number (gfx942 -> 9.4, gfx950 -> 9.5); gfx908 and gfx90a
#: both report 9.0, so 9.0 names no architecture alone: the device name does, else the CU count (Kineto's
#: numSms): the MI100 (gfx908) has 120 CUs, an MI210 or one GCD of an MI250 104 and of an MI250X 110 (gfx90a).
#: Kineto copies these into computeMajor/Minor, and ROCm 6 traces name every device "AMD Radeon Graphics".
ARCH_ROWS += [
    _amd_row("gfx908", "CDNA", "Instinct MI100", 120, "9.0", [120]),
    _amd_row("gfx90a", "CDNA2", "Instinct MI250X (one GCD)", 110, "9.0", [104, 110]),
    _amd_row("gfx942", "CDNA3", "Instinct MI300X", 304, "9.4"),
    _amd_row("gfx950", "CDNA4", "Instinct MI355X", 256, "9.5"),
]

#: Device name (case-insensitive regex) -> vendor and AMD architecture; first match by ``priority``.
#: vendor 'render-only' is an adapter that runs no compute (WSL lists one beside the real GPU).
GPU_NAMES: list[dict[str, object]] = [
    {"priority": 0, "pattern": r"basic render driver|basic display adapter", "vendor": "render-only", "gfx_arch": None},
    {"priority": 1, "pattern": r"mi100\b", "vendor": "AMD", "gfx_arch": "gfx908"},
    {"priority": 1, "pattern": r"mi2[0-9]0", "vendor": "AMD", "gfx_arch": "gfx90a"},
    {"priority": 1, "pattern": r"mi3[0-2][0-9]", "vendor": "AMD", "gfx_arch": "gfx942"},
    {"priority": 1, "pattern": r"mi35[0-9]", "vendor": "AMD", "gfx_arch": "gfx950"},
    {"priority": 1, "pattern": r"\b(gfx9[0-9a-f]+)\b", "vendor": "AMD", "gfx_arch": None},
    {"priority": 2, "pattern": r"\bamd\b|radeon|instinct", "vendor": "AMD", "gfx_arch": None},
    {"priority": 3, "pattern": r"nvidia|geforce|tesla|quadro|titan|rtx", "vendor": "NVIDIA", "gfx_arch": None},
]

GPU_NAMES_SCHEMA = pa.schema(
    [("priority", pa.int32()), ("pattern", pa.string()), ("vendor", pa.string()), ("gfx_arch", pa.string())]
)

ARCH_LIMITS = pa.schema([pa.field(name, typ) for name, (typ, _) in COLUMNS.items()])


def arch_limits_table() -> pa.Table:
    """SM limits per compute capability (CUDA occupancy calculator constants), to fill a trace's gaps.

    Registered as view ``arch_limits`` (see ``PY_TABLES``); the first line is its ``--help`` description.
    """
    return pa.Table.from_pylist(ARCH_ROWS, schema=ARCH_LIMITS)


def gpu_names_table() -> pa.Table:
    """Device-name patterns telling vendors and AMD architectures apart (first match by priority).

    Registered as view ``gpu_names``; the first line is its ``--help`` description.
    """
    return pa.Table.from_pylist(GPU_NAMES, schema=GPU_NAMES_SCHEMA)


# ---------------------------------------------------------------- projection onto another device

from pipeline.analyze.devices import DEVICE_PRESETS  # noqa: E402  (re-exported: the CLI imports it without pyarrow)

DEVICE_OVERRIDE = pa.schema(
    [
        pa.field("projected_device", pa.string()),
        pa.field("name", pa.string()),
        pa.field("compute_major", pa.int32()),
        pa.field("compute_minor", pa.int32()),
        pa.field("sm_count", pa.int32()),
    ]
)


def device_override_table(device: str | None = None) -> pa.Table:
    """The GPU of `--device` that views project onto (no row: the traced devices): name, compute capability, SMs."""
    if device is None:
        return DEVICE_OVERRIDE.empty_table()
    part, (major, minor), sms = DEVICE_PRESETS[device]
    row = {"projected_device": device, "name": part, "compute_major": major, "compute_minor": minor, "sm_count": sms}
    return pa.Table.from_pylist([row], schema=DEVICE_OVERRIDE)
