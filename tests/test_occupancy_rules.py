"""Hand-computed occupancy and wave cases for rules no real sample exercises (see scripts/mutants.py)."""

from __future__ import annotations

from pathlib import Path

from pipeline.analyze import connect
from tests.test_sm_load import occupancy, write_trace


def test_a_partial_warp_takes_a_whole_warp_slot(tmp_path: Path) -> None:
    # cc 8.6 (48 warps, 16 blocks per SM), 48 threads = 1.5 warps -> 2 warp slots per block:
    # warps allow 48 // 2 = 24 blocks, registers (32/thread: 1024 per warp, 16 warps per sub-partition) 64 // 2 = 32,
    # blocks 16 -> 16 resident, 32 of 48 warps = 66.6667 %.  (Counting 1 warp per block would give 33.3333 %.)
    write_trace(tmp_path, (8, 6), [{"grid_x": 1000, "block_x": 48, "registers_per_thread": 32}])
    assert occupancy(tmp_path) == [(16, 24, 32, 100, 16, "blocks", 66.6667)]


def test_an_exact_multiple_of_the_slots_is_that_many_waves(tmp_path: Path) -> None:
    # cc 8.6: 82 SMs; 256 threads, 32 registers -> 6 resident blocks (warps-limited), 492 slots.
    # 492 blocks: 1 full wave; 984: 2 full waves; 985: a third wave holding 1 block.
    write_trace(
        tmp_path,
        (8, 6),
        [{"grid_x": n, "block_x": 256, "registers_per_thread": 32} for n in (492, 984, 985)],
    )
    got = connect(tmp_path).sql(
        "SELECT waves, tail_wave_blocks, waves_per_sm, wave_efficiency FROM kernel_waves ORDER BY kernel_id"
    )
    assert got.fetchall() == [(1, 492, 1.0, 1.0), (2, 984 - 492, 2.0, 1.0), (3, 1, 985 / 492, 985 / (3 * 492))]


def test_summary_limiter_is_the_most_common_known_one_ties_alphabetical(tmp_path: Path) -> None:
    # One group (same name, grid and block, no range): cc 9.0, 256 threads. 64 registers: 65536 / (64 * 256) = 4
    # blocks ('registers', 4 * 8 of 64 warps = 50 %); 16 registers: 16 blocks, warps allow 8 ('warps', 100 %);
    # no register count: limiter and occupancy unknown. Unknown is the most common (3) but is no limiter; the
    # known two tie at 2 each: 'registers' comes first alphabetically. Occupancy: the mean of the four known.
    kernels = [
        {"grid_x": 100, "block_x": 256, "registers_per_thread": r, "name": "gemm"}
        for r in (16, 64, 16, 64, None, None, None)
    ]
    write_trace(tmp_path, (9, 0), kernels, sm_count=132, name="H200")
    got = connect(tmp_path).sql("SELECT launches, limiter, theoretical_occupancy_pct FROM layer_kernel_summary")
    assert got.fetchall() == [(7, "registers", 75.0)]
    # one more 'warps' launch: the most common is 'warps'
    write_trace(tmp_path, (9, 0), [*kernels, {**kernels[0]}], sm_count=132, name="H200")
    got = connect(tmp_path).sql("SELECT launches, limiter, theoretical_occupancy_pct FROM layer_kernel_summary")
    assert got.fetchall() == [(8, "warps", 80.0)]
