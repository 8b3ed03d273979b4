"""Device limits that lie and launch shapes no GPU can run: sql/device_limits, the NULL-on-impossible rules of
kernel_geometry / kernel_occupancy / kernel_waves / layer_sm_load, and the counted analysis_warnings.

Every expected number is computed here, by hand in the comments or with Python integers (exact, no 2^63 limit),
from the published limits: CUDA C++ Programming Guide "Technical Specifications per Compute Capability",
cuda_occupancy.h's rules, ROCm's "GPU hardware specifications" for AMD Instinct parts.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.analyze import connect, view_files
from pipeline.analyze.arch import ARCH_ROWS
from pipeline.store import TraceWriter
from tests.conftest import gunzip_to

ROOT = Path(__file__).resolve().parents[1]
LARGEST_GRID = (2**31 - 1, 65535, 65535)  # CUDA's maxGridSize on every GPU since cc 3.0


def write_trace(out: Path, devices: list[dict], kernels: list[dict], trace_id: str = "t") -> None:
    base = {"device_id": 0, "duration_ns": 100, "grid_y": 1, "grid_z": 1, "block_y": 1, "block_z": 1}
    base |= {"registers_per_thread": 32, "static_smem_bytes": 0, "dynamic_smem_bytes": 0}
    rows = [
        base | {"kernel_id": i, "start_ns": 1000 * i, "end_ns": 1000 * i + 100, "name": f"k{i}"} | k
        for i, k in enumerate(kernels)
    ]
    with TraceWriter(out, trace_id) as w:
        w.write("kernels", pa.Table.from_pylist(rows))
        w.write("devices", pa.Table.from_pylist(devices))
        w.write("trace_meta", pa.Table.from_pylist([{"source_format": "test"}]))
        w.commit()


def analyze(normalized: Path, out: Path, *views: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [a for v in views for a in ("--view", v)]
    cmd = [sys.executable, "-m", "pipeline.cli", "analyze", str(normalized), "--out", str(out), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)


def rows(out: Path, sql: str) -> list[tuple]:
    return connect(out).sql(sql).fetchall()


# ---------------------------------------------------------------- #15.7: extreme launch shapes, every view

H200 = {"device_id": 0, "name": "NVIDIA H200", "compute_major": 9, "compute_minor": 0}
NORMAL = {"grid_x": 1000, "block_x": 256}
EXTREMES = [
    NORMAL,  # 0
    {"grid_x": 10, "block_x": 0},  # 1: 0 threads
    {"grid_x": LARGEST_GRID[0], "grid_y": LARGEST_GRID[1], "grid_z": LARGEST_GRID[2], "block_x": 1024},  # 2
    {"grid_x": 10, "block_x": 128, "registers_per_thread": 0},  # 3: 0 registers
    {"grid_x": 10, "block_x": 128, "static_smem_bytes": 2**62, "dynamic_smem_bytes": 2**62},  # 4: 2^63 B
    {"grid_x": 10, "grid_y": 70000, "block_x": 32},  # 5: gridDim.y past 65535
]


@pytest.fixture(scope="module")
def extremes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("extremes")
    write_trace(out, [H200], EXTREMES)
    return out


def test_every_view_runs_on_the_extremes(extremes: Path, tmp_path: Path) -> None:
    # Before: "Overflow in multiplication of INT64 (9223090559730712575 * 1024)" for every view, exit 1.
    r = analyze(extremes, tmp_path, *view_files())  # on-request views (kernel_sm_load) too
    assert r.returncode == 0, r.stderr
    assert {p.stem for p in tmp_path.glob("*.parquet")} == set(view_files())
    # (the hand-built trace has no layer either: layer_coverage says so, tests/test_layer_coverage.py)
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:") and "has no layer" not in line]
    # One counted line per kind: empty launch, gridDim past the limit, 0 registers, shared memory past any SM.
    assert len(warnings) == 4, r.stderr
    assert any("1 kernel(s) with NULL occupancy: empty launch" in w and "kernel_id 1" in w for w in warnings)
    assert any("gridDim beyond" in w and "kernel_id 5" in w for w in warnings)
    assert any("registers per thread = 0" in w for w in warnings)
    assert any("fits no SM" in w and str(2**63 + 1024) in w for w in warnings)  # 2^63 + 1 KB reserve, 128 B units
    # HUGEINT columns land in Parquet as DOUBLE (no 128-bit integer there), not as an error.
    g = pq.read_table(tmp_path / "kernel_geometry.parquet").sort_by("kernel_id").to_pylist()
    assert g[2]["total_threads"] == pytest.approx(math.prod(LARGEST_GRID) * 1024)


def test_bad_shapes_are_null_and_named(extremes: Path) -> None:
    got = rows(
        extremes,
        "SELECT kernel_id, blocks, threads_per_block, warps_per_block, total_threads, launch_issue "
        "FROM kernel_geometry ORDER BY kernel_id",
    )
    assert got[1] == (1, None, None, None, None, "empty launch: a grid or block dimension is 0")
    assert got[5][1:5] == (None, None, None, None) and got[5][5].startswith("gridDim beyond")
    occ = rows(
        extremes,
        "SELECT kernel_id, resident_blocks_per_sm, theoretical_occupancy_pct, limiter, occupancy_issue "
        "FROM kernel_occupancy ORDER BY kernel_id",
    )
    for i in (1, 3, 4, 5):
        assert occ[i][1:4] == (None, None, None) and occ[i][4], occ[i]
    # Kernels without a legal shape are not in the per-SM views; the others are, with NULL occupancy.
    assert [r[0] for r in rows(extremes, "SELECT kernel_id FROM kernel_waves ORDER BY 1")] == [0, 2, 3, 4]


def test_the_normal_kernel_beside_them_is_exact(extremes: Path) -> None:
    # H200 (cc 9.0 row): 256 threads = 8 warps, 32 registers -> 1024 per warp; warps 64 // 8 = 8;
    # registers 65536 / 4 // 1024 = 16 per sub-partition * 4 = 64 warps // 8 = 8; shared (0 + 1 KB reserve)
    # 233472 // 1024 = 228; blocks 32.  Resident 8 (warps and registers tie) -> 64 / 64 warps = 100 %.
    (o,) = rows(
        extremes,
        "SELECT limit_blocks, limit_warps, limit_registers, limit_shared_mem, resident_blocks_per_sm, limiters, "
        "theoretical_occupancy_pct, occupancy_issue FROM kernel_occupancy WHERE kernel_id = 0",
    )
    assert o == (32, 8, 8, 228, 8, "warps,registers", 100.0, None)
    # 132 SMs * 8 = 1056 slots: one wave of 1000 blocks; 1000 = 7 * 132 + 76.
    (w,) = rows(
        extremes,
        "SELECT waves, tail_wave_blocks, full_blocks_per_sm, extra_block_sms FROM kernel_waves WHERE kernel_id = 0",
    )
    assert w == (1, 1000, 7, 76)


def test_the_largest_legal_grid_is_computed_exactly(extremes: Path) -> None:
    # A legal launch gets numbers, not NULL: 1024 threads = 32 warps -> warps 64 // 32 = 2, registers
    # 64 // 32 = 2 -> 2 resident blocks, 264 slots on 132 SMs.  Python integers have no 2^63 limit.
    blocks = math.prod(LARGEST_GRID)
    assert 2**63 - 1 - blocks > 0 and blocks * 1024 > 2**63  # blocks fit BIGINT; threads do not
    (g,) = rows(
        extremes,
        "SELECT blocks, total_threads, total_warps, launch_issue FROM kernel_geometry WHERE kernel_id = 2",
    )
    assert g == (blocks, blocks * 1024, blocks * 32, None)
    (w,) = rows(
        extremes,
        "SELECT resident_blocks_per_sm, waves, tail_wave_blocks, full_blocks_per_sm, extra_block_sms, "
        "max_blocks_on_sm, sm_waves_max FROM kernel_waves WHERE kernel_id = 2",
    )
    waves = -(-blocks // 264)
    full, extra = divmod(blocks, 132)
    assert w == (2, waves, blocks - (waves - 1) * 264, full, extra, full + 1, -(-(full + 1) // 2))
    # layer_sm_load (every kernel here is outside any range): SM 0 gets its share of kernels 0, 2, 3, 4
    # (1000 = 7*132+76, blocks of kernel 2, 10 and 10 blocks: one each on SMs 0..9).
    (sm0,) = rows(extremes, "SELECT kernels, blocks, warps FROM layer_sm_load WHERE sm_id = 0")
    assert sm0 == (4, 8 + (full + 1) + 1 + 1, 8 * 8 + (full + 1) * 32 + 4 + 4)


# ---------------------------------------------------------------- #23.2: one device per id, impossible values

RTX3090 = {
    "device_id": 0,
    "name": "NVIDIA GeForce RTX 3090",
    "compute_major": 8,
    "compute_minor": 6,
    "sm_count": 82,
    "warp_size": 32,
    "max_threads_per_sm": 1536,
    "max_registers_per_sm": 65536,
}
RENDER = {
    "device_id": 0,
    "name": "Microsoft Basic Render Driver",
    "compute_major": 0,
    "compute_minor": 0,
    "sm_count": 0,
    "warp_size": 0,
    "max_threads_per_sm": 0,
}
# cc 8.6, 1000 x 256 threads, 32 registers: warps 48 // 8 = 6, registers 8, shared 100, blocks 16 -> 6, 100 %.
RTX3090_OCC = (16, 6, 8, 100, 6, "warps", 100.0)
OCC_SQL = (
    "SELECT limit_blocks, limit_warps, limit_registers, limit_shared_mem, resident_blocks_per_sm, limiter, "
    "round(theoretical_occupancy_pct, 4) FROM kernel_occupancy ORDER BY kernel_id"
)


@pytest.mark.parametrize("order", ["render_first", "render_last"])
def test_wsl_render_adapter_sharing_id_0(tmp_path: Path, order: str) -> None:
    devices = [RENDER, RTX3090] if order == "render_first" else [RTX3090, RENDER]
    write_trace(tmp_path / "n", devices, [NORMAL])
    r = analyze(tmp_path / "n", tmp_path / "a")
    assert r.returncode == 0, r.stderr  # before: two rows for id 0, warp size 0, division by zero, exit 1
    (d,) = rows(tmp_path / "n", "SELECT name, sm_count, warp_size, duplicate_rows, issue FROM device_limits")
    assert d == ("NVIDIA GeForce RTX 3090", 82, 32, 1, None)
    assert rows(tmp_path / "n", OCC_SQL) == [RTX3090_OCC]  # each kernel once, not once per devices row
    assert "1 more devices row(s) for this id dropped" in r.stderr


def test_impossible_trace_values_come_from_the_table(tmp_path: Path) -> None:
    # maxBlocksPerSm = 0 (some pre-2023 exports), 0 warps, 0 SMs: before, 0 % occupancy on every kernel.
    lying = RTX3090 | {"max_blocks_per_sm": 0, "max_warps_per_sm": 0, "sm_count": 0}
    write_trace(tmp_path / "n", [lying], [NORMAL])
    (d,) = rows(
        tmp_path / "n",
        "SELECT sm_count, sm_count_source, max_blocks_per_sm, max_warps_per_sm, rejected_trace_values "
        "FROM device_limits",
    )
    # Warps: the trace's 1536 threads / 32 (its own, possible values) = 48, before the table's 48.
    assert d == (82, "arch_table:GeForce RTX 3090", 16, 48, ["sm_count=0", "max_warps_per_sm=0", "max_blocks_per_sm=0"])
    assert rows(tmp_path / "n", OCC_SQL) == [RTX3090_OCC]
    (w,) = rows(tmp_path / "n", "SELECT count, message FROM analysis_warnings WHERE view <> 'layer_coverage'")
    assert w[0] == 3 and "replaced from the architecture table (Ampere)" in w[1]


def test_device_without_compute_capability_is_left_out_with_a_warning(tmp_path: Path) -> None:
    write_trace(tmp_path / "n", [{"device_id": 0, "name": "Some GPU", "sm_count": 40}], [NORMAL])
    r = analyze(tmp_path / "n", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    (d,) = rows(tmp_path / "n", "SELECT sm_count, warp_size, max_warps_per_sm, issue FROM device_limits")
    assert d == (None, None, None, "no compute capability recorded: left out of the GPU views")
    assert rows(tmp_path / "n", OCC_SQL) == [(None,) * 7]
    assert rows(tmp_path / "n", "SELECT count(*) FROM kernel_waves") == [(0,)]
    assert "no compute capability recorded" in r.stderr


def test_render_adapter_alone_is_not_a_gpu(tmp_path: Path) -> None:
    write_trace(tmp_path / "n", [RENDER], [NORMAL])
    (d,) = rows(tmp_path / "n", "SELECT vendor, sm_count, rejected_trace_values, issue FROM device_limits")
    assert d == ("render-only", None, [], "render-only adapter (runs no kernels)")


# ---------------------------------------------------------------- #23.3: vendor-aware limits, new table rows

# Kineto deviceProperties of one MI250X GCD as ROCm reports it: computeMajor 9 (not Hopper), 64-wide waves.
MI250 = {
    "device_id": 0,
    "name": "AMD Instinct MI250X / MI250",
    "compute_major": 9,
    "compute_minor": 0,
    "sm_count": 104,
    "warp_size": 64,
    "max_threads_per_sm": 2048,
    "max_shared_mem_per_sm_bytes": 65536,
    "max_shared_mem_per_block_bytes": 65536,
}


def test_amd_mi250_is_not_hopper(tmp_path: Path) -> None:
    write_trace(tmp_path / "n", [MI250], [NORMAL])
    (d,) = rows(
        tmp_path / "n",
        "SELECT vendor, gfx_arch, arch_name, compute_capability, sm_count, warp_size, max_warps_per_sm, "
        "max_shared_mem_per_sm_bytes, max_shared_mem_per_block_optin_bytes, max_blocks_per_sm, "
        "register_alloc_unit FROM device_limits",
    )
    # The trace's 65536 B LDS and 104 CUs win; the gfx90a row fills the opt-in limit (64 KiB, no opt-in on
    # CDNA); nothing from the Hopper row (233472 B, 32 blocks, 256-register units).
    assert d == ("AMD", "gfx90a", "CDNA2", None, 104, 64, 32, 65536, 65536, None, None)
    # 256 work-items = 4 wavefronts of 64; 1000 blocks over 104 CUs.
    (g,) = rows(
        tmp_path / "n",
        "SELECT g.warps_per_block, w.blocks_per_sm, o.theoretical_occupancy_pct, o.occupancy_issue "
        "FROM kernel_geometry g JOIN kernel_waves w USING (kernel_id) JOIN kernel_occupancy o USING (kernel_id)",
    )
    assert g[:3] == (4, 1000 / 104, None) and g[3].startswith("AMD device")


def test_amd_impossible_lds_from_the_amd_row_and_unknown_amd_part(tmp_path: Path) -> None:
    mi300 = MI250 | {"name": "AMD Instinct MI300X", "sm_count": 0, "max_shared_mem_per_sm_bytes": 0}
    # HIP 9.0 names gfx908 or gfx90a, which the CU count tells apart (120; 104 or 110): 96 CUs is neither.
    radeon = MI250 | {"device_id": 1, "name": "AMD Radeon Graphics", "sm_count": 96}
    mi250 = MI250 | {"device_id": 2, "name": "AMD Radeon Graphics"}  # ROCm 6 names an MI250 GCD so (104 CUs)
    mi100 = MI250 | {"device_id": 3, "name": "AMD Radeon Graphics", "sm_count": 120}
    write_trace(tmp_path / "n", [mi300, radeon, mi250, mi100], [NORMAL])
    got = rows(
        tmp_path / "n",
        "SELECT device_id, gfx_arch, sm_count, max_shared_mem_per_sm_bytes, issue FROM device_limits ORDER BY 1",
    )
    assert got[0] == (0, "gfx942", 304, 65536, None)  # MI300X: 304 CUs, 64 KiB LDS (ROCm specs table)
    assert got[1][:4] == (1, None, 96, 65536) and got[1][4].startswith("AMD device without a known gfx")
    assert got[2:] == [(2, "gfx90a", 104, 65536, None), (3, "gfx908", 120, 65536, None)]


@pytest.mark.parametrize(
    ("cc", "kernel", "expected"),
    [
        # GTX 1080 (6.1): 64 warps, 32 blocks, 96 KB shared, no reserve: 256 threads x 32 regs -> warps 8,
        # registers 8, shared unlimited (0 B), blocks 32 -> 8 resident, 64/64 warps.
        ((6, 1), {"grid_x": 100, "block_x": 256}, (32, 8, 8, 2147483647, 8, "warps", 100.0)),
        # 6.1, 48 KB static: alloc 49152 (256 B units) -> 98304 // 49152 = 2 blocks -> 16 warps = 25 %.
        ((6, 1), {"grid_x": 100, "block_x": 256, "static_smem_bytes": 49152}, (32, 8, 8, 2, 2, "shared_mem", 25.0)),
        # B200 (10.0): 1024 threads x 64 regs: 2048 registers per warp -> 16384 // 2048 = 8 per sub-partition,
        # 32 warps // 32 = 1 block; warps 64 // 32 = 2 -> 1 resident, 32/64 = 50 %.
        ((10, 0), {"grid_x": 100, "block_x": 1024, "registers_per_thread": 64}, (32, 2, 1, 228, 1, "registers", 50.0)),
        # RTX 5090 (12.0): 48 warps, 24 blocks, 100 KB + 1 KB reserve: 256 threads -> warps 6, registers 8,
        # shared 102400 // 1024 = 100 -> 6 resident, 48/48 warps.
        ((12, 0), {"grid_x": 100, "block_x": 256}, (24, 6, 8, 100, 6, "warps", 100.0)),
        # 12.0, 32 threads: one warp a block, so 48 warps would allow 48 blocks; the 24-block cap binds: 50 %.
        ((12, 0), {"grid_x": 100, "block_x": 32}, (24, 48, 64, 100, 24, "blocks", 50.0)),
    ],
)
def test_new_table_rows(tmp_path: Path, cc: tuple[int, int], kernel: dict, expected: tuple) -> None:
    write_trace(tmp_path, [{"device_id": 0, "compute_major": cc[0], "compute_minor": cc[1]}], [kernel])
    assert rows(tmp_path, OCC_SQL) == [expected]


def test_consumer_blackwell_row_equals_a_real_rtx_5060_ti_s_driver(tmp_path: Path) -> None:
    # The driver's own limits of an sm_120 part, as nsys wrote them into a real export (TARGET_INFO_GPU of
    # lighttransport/gemm's capture, sample_traces/external): the 12.0 row must equal them.
    plain = gunzip_to(ROOT / "sample_traces/external/lighttransport_gemm_no_kernels.sqlite.gz", tmp_path / "t.sqlite")
    db = sqlite3.connect(plain)
    db.row_factory = sqlite3.Row
    gpu = dict(db.execute("SELECT * FROM TARGET_INFO_GPU").fetchone())
    db.close()
    (row,) = [r for r in ARCH_ROWS if (r["compute_major"], r["compute_minor"]) == (12, 0)]
    assert (gpu["computeMajor"], gpu["computeMinor"]) == (12, 0)
    driver = {
        "warp_size": gpu["threadsPerWarp"],
        "max_warps_per_sm": gpu["maxWarpsPerSm"],
        "max_blocks_per_sm": gpu["maxBlocksPerSm"],
        "max_threads_per_block": gpu["maxThreadsPerBlock"],
        "max_registers_per_sm": gpu["maxRegistersPerSm"],
        "max_registers_per_block": gpu["maxRegistersPerBlock"],
        "max_shared_mem_per_sm_bytes": gpu["maxShmemPerSm"],
        "max_shared_mem_per_block_bytes": gpu["maxShmemPerBlock"],
        "max_shared_mem_per_block_optin_bytes": gpu["maxShmemPerBlockOptin"],
    }
    assert driver == {column: row[column] for column in driver}


def test_hopper_row_and_launch_limits_equal_ncus_device_attributes() -> None:
    # The committed H200 capture: ncu's device__attribute_* columns (raw page), read with csv.  The table row
    # must equal them; kernel_geometry's launch limits (gridDim.y/z 65535, blockDim (1024, 1024, 64), 1024
    # threads) must equal the device's maxima.
    lines = (ROOT / "sample_traces/h200_smallcnn/ncu_raw.csv").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    dev = {k.removeprefix("device__attribute_"): v for k, v in list(csv.DictReader(lines[start:]))[1].items()}
    n = {k: int(v.replace(",", "")) for k, v in dev.items() if v.replace(",", "").isdigit()}
    (row,) = [r for r in ARCH_ROWS if (r["compute_major"], r["compute_minor"]) == (9, 0)]
    assert (n["compute_capability_major"], n["compute_capability_minor"]) == (9, 0)
    assert {
        "warp_size": n["warp_size"],
        "max_threads_per_sm": n["max_threads_per_multiprocessor"],
        "max_warps_per_sm": n["max_warps_per_multiprocessor"],
        "max_blocks_per_sm": n["max_blocks_per_multiprocessor"],
        "max_threads_per_block": n["max_threads_per_block"],
        "max_registers_per_sm": n["max_registers_per_multiprocessor"],
        "max_registers_per_block": n["max_registers_per_block"],
        "max_registers_per_thread": n["max_registers_per_thread"],
        "max_shared_mem_per_sm_bytes": n["max_shared_memory_per_multiprocessor"],
        "max_shared_mem_per_block_bytes": n["max_shared_memory_per_block"],
        "max_shared_mem_per_block_optin_bytes": n["max_shared_memory_per_block_optin"],
        "reserved_shared_mem_per_block_bytes": n["reserved_shared_memory_per_block"],
        "ref_sm_count": n["multiprocessor_count"],
    } == {k: row[k] for k in (
        "warp_size", "max_threads_per_sm", "max_warps_per_sm", "max_blocks_per_sm", "max_threads_per_block",
        "max_registers_per_sm", "max_registers_per_block", "max_registers_per_thread", "max_shared_mem_per_sm_bytes",
        "max_shared_mem_per_block_bytes", "max_shared_mem_per_block_optin_bytes",
        "reserved_shared_mem_per_block_bytes", "ref_sm_count",
    )}  # fmt: skip
    grid = (n["max_grid_dim_x"], n["max_grid_dim_y"], n["max_grid_dim_z"])
    block = (n["max_block_dim_x"], n["max_block_dim_y"], n["max_block_dim_z"])
    assert (grid, block, n["max_threads_per_block"]) == (LARGEST_GRID, (1024, 1024, 64), 1024)


def test_table_rows_are_self_consistent() -> None:
    # Published-table invariants every row must keep: threads = warps * warp size, the opt-in per-block limit
    # fits the SM's shared memory minus the driver's reserve, the largest carveout is the SM's shared memory.
    for r in ARCH_ROWS:
        key = r["gfx_arch"] or f"{r['compute_major']}.{r['compute_minor']}"
        assert r["max_threads_per_sm"] == r["max_warps_per_sm"] * r["warp_size"], key
        reserve = r["reserved_shared_mem_per_block_bytes"] or 0
        assert r["max_shared_mem_per_block_optin_bytes"] <= r["max_shared_mem_per_sm_bytes"] - reserve, key
        if r["shared_mem_carveouts_bytes"]:
            assert max(r["shared_mem_carveouts_bytes"]) == r["max_shared_mem_per_sm_bytes"], key
    ccs = {(r["compute_major"], r["compute_minor"]) for r in ARCH_ROWS if r["vendor"] == "NVIDIA"}
    assert {(6, 1), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)} <= ccs


# ---------------------------------------------------------------- real traces of other GPUs (sample_traces/external)

EXTERNAL = ROOT / "sample_traces/external"


@pytest.fixture(scope="module")
def external(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pipeline.normalize import normalize_file

    out = tmp_path_factory.mktemp("external")
    for name in (
        "tracelens_mi300_resnet_act_checkpoint",
        "tracelens_vllm_hip_graph_execution",
        "kineto_pt19_resnet50_worker0",
        "gpupuzzlers_vector_flops1",
    ):
        normalize_file(EXTERNAL / f"{name}.json.gz", out)
    return out


def test_real_mi300x_traces_are_amd_cdna3(external: Path) -> None:
    # TraceLens' MI300X traces: Kineto deviceProperties computeMajor 9 / computeMinor 4, warpSize 64, numSms 304,
    # maxSharedMemoryPerMultiProcessor 65536; the vLLM one leaves every device name empty ("").
    raw = {}
    for name in ("tracelens_mi300_resnet_act_checkpoint", "tracelens_vllm_hip_graph_execution"):
        with gzip.open(EXTERNAL / f"{name}.json.gz") as f:
            d = json.load(f)["deviceProperties"][0]
        raw[name] = (d["name"], d["computeMajor"], d["computeMinor"], d["warpSize"], d["numSms"])
    assert raw["tracelens_mi300_resnet_act_checkpoint"] == ("AMD Instinct MI300X", 9, 4, 64, 304)
    assert raw["tracelens_vllm_hip_graph_execution"] == ("", 9, 4, 64, 304)
    got = rows(
        external,
        "SELECT DISTINCT vendor, gfx_arch, arch_name, compute_capability, sm_count, warp_size, max_warps_per_sm, "
        "max_shared_mem_per_sm_bytes FROM device_limits WHERE trace_id LIKE '%tracelens%'",
    )
    assert got == [("AMD", "gfx942", "CDNA3", None, 304, 64, 32, 65536)]  # never Hopper, never cc 9.4
    (n,) = rows(
        external,
        "SELECT count(*) FILTER (WHERE theoretical_occupancy_pct IS NULL AND occupancy_issue LIKE 'AMD device%') "
        "= count(*) FROM kernel_occupancy WHERE trace_id LIKE '%tracelens%'",
    )
    assert n == (True,)


def profilers_figures_met(external: Path, trace: str) -> tuple[int, int, int, int]:
    """Kernels of the traces named like ``trace``, and how many the model gives Kineto's own blocks per SM, warps
    per SM and est. achieved occupancy (within the 0.5 the profiler's rounding of a float32 takes)."""
    (r,) = rows(
        external,
        "SELECT count(*), count(*) FILTER (WHERE abs(w.blocks_per_sm - k.profiler_blocks_per_sm) < 1e-3), "
        "count(*) FILTER (WHERE abs(w.warps_per_sm - k.profiler_warps_per_sm) < 1e-3), "
        "count(*) FILTER (WHERE abs(w.est_achieved_occupancy_pct - k.profiler_est_achieved_occupancy_pct) <= 0.5) "
        f"FROM kernels k JOIN kernel_waves w USING (trace_id, kernel_id) WHERE k.trace_id LIKE '%{trace}%'",
    )
    return r


def test_real_v100_trace_matches_the_profilers_per_sm_figures(external: Path) -> None:
    # Kineto (PyTorch 1.9, V100, cc 7.0) wrote its own blocks per SM, warps per SM and est. achieved occupancy
    # for 8,772 kernels; the model (trace limits + the 7.0 row) gives the same numbers.  The profiler rounds
    # a float32 occupancy, so 22.5 % exactly (7.2 blocks/SM x 64 threads / 2048) prints as 22: within 0.5.
    assert profilers_figures_met(external, "kineto") == (8772, 8772, 8772, 8772)
    (d,) = rows(
        external,
        "SELECT DISTINCT arch_name, sm_count, from_arch_table FROM device_limits WHERE trace_id LIKE '%kineto%'",
    )
    assert d == ("Volta", 80, ["max_blocks_per_sm"])  # Kineto records no maxBlocksPerSm: the 7.0 row's 32


def test_kinetos_zero_occupancy_of_opt_in_shared_memory_kernels_is_not_ours(tmp_path: Path) -> None:
    # Kineto's est. achieved occupancy asks CUDA's occupancy calculator with the default shared-memory limit
    # (libkineto CudaDeviceProperties.cpp: shmemLimitConfig FUNC_SHMEM_LIMIT_DEFAULT, maxDynamicSharedSizeBytes 0),
    # so a kernel with more shared memory than the device's sharedMemPerBlock (48 KiB; opted in up to
    # sharedMemPerBlockOptin) fits no block there and prints 0 %, though it ran. The H100 sample's 380 such nvjet and
    # cuDNN kernels: by hand, each takes more than half the SM's shared memory, so exactly one block a SM is resident:
    # 100 * min(blocks per SM, 1) * threads / maxThreadsPerMultiprocessor. Every other kernel: Kineto's own figure.
    from decimal import Decimal

    from pipeline.normalize import normalize_file

    trace = ROOT / "sample_traces" / "h100_compiled_reduce_overhead" / "torch_trace.json.gz"
    raw = json.loads(gzip.decompress(trace.read_bytes()), parse_float=Decimal)
    props = raw["deviceProperties"][0]
    assert (props["sharedMemPerBlock"], props["sharedMemPerMultiprocessor"]) == (49152, 233472)
    by_key = {}
    for e in raw["traceEvents"]:
        if e.get("cat") == "kernel":
            a = e["args"]
            by_key[(a["correlation"], int(e["ts"] * 1000))] = a
    normalize_file(trace, tmp_path)
    ours = rows(
        tmp_path,
        "SELECT k.correlation_id, k.start_ns, w.est_achieved_occupancy_pct FROM kernels k "
        "JOIN kernel_waves w USING (trace_id, kernel_id)",
    )
    assert len(ours) == len(by_key) == 12178
    opted_in = other = 0
    for corr, start, pct in ours:
        a = by_key[(corr, start)]
        if a["shared memory"] > props["sharedMemPerBlock"]:
            assert 2 * a["shared memory"] > props["sharedMemPerMultiprocessor"] and a["est. achieved occupancy %"] == 0
            threads = math.prod(a["block"])
            expected = 100 * min(float(a["blocks per SM"]), 1.0) * threads / props["maxThreadsPerMultiprocessor"]
            assert pct == pytest.approx(expected, rel=1e-5)  # blocks per SM as Kineto printed it, 6 digits
            opted_in += 1
        else:
            assert abs(pct - float(a["est. achieved occupancy %"])) <= 0.5
            other += 1
    assert (opted_in, other) == (380, 11798)


def test_real_gp100_trace_is_the_6_0_row_and_the_profilers_figures(external: Path) -> None:
    # A Quadro GP100 (cc 6.0) had no row: its 11 kernels got no occupancy. Its deviceProperties give the per-SM
    # totals the 6.0 row must hold, and Kineto's own blocks per SM, warps per SM and est. achieved occupancy the
    # figures the model must give (maxwell_sgemm_128x64_nn: 120 registers, 12,544 B of shared memory, 4 warps a
    # block: 16 warps of registers (2 sub-partitions of 32,768), 4 blocks of 64 warps: 25 %).
    trace = json.loads(gzip.decompress((EXTERNAL / "gpupuzzlers_vector_flops1.json.gz").read_bytes()))
    props = trace["deviceProperties"][0]
    (row,) = [r for r in ARCH_ROWS if (r["compute_major"], r["compute_minor"]) == (6, 0)]
    assert (props["computeMajor"], props["computeMinor"]) == (6, 0)
    assert {
        "max_threads_per_sm": props["maxThreadsPerMultiprocessor"],
        "max_registers_per_sm": props["regsPerMultiprocessor"],
        "max_registers_per_block": props["regsPerBlock"],
        "max_shared_mem_per_sm_bytes": props["sharedMemPerMultiprocessor"],
        "max_shared_mem_per_block_bytes": props["sharedMemPerBlock"],
        "max_shared_mem_per_block_optin_bytes": props["sharedMemPerBlockOptin"],
    } == {c: row[c] for c in ("max_threads_per_sm", "max_registers_per_sm", "max_registers_per_block",
                              "max_shared_mem_per_sm_bytes", "max_shared_mem_per_block_bytes",
                              "max_shared_mem_per_block_optin_bytes")}  # fmt: skip
    assert profilers_figures_met(external, "gpupuzzlers") == (11, 11, 11, 11)
    (sgemm,) = rows(
        external,
        "SELECT limit_registers, limit_shared_mem, resident_blocks_per_sm, theoretical_occupancy_pct "
        "FROM kernel_occupancy WHERE trace_id LIKE '%gpupuzzlers%' AND name = 'maxwell_sgemm_128x64_nn'",
    )
    assert sgemm == (4, 5, 4, 25.0)
