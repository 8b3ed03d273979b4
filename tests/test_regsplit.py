"""Occupancy and waves against Nsight Compute on kernels where the register file's split over the SM's four
sub-partitions changes the resident blocks (sample_traces/h200_regsplit, captured on an H200).

The model's inputs are built here from ncu's own launch statistics and device attributes (read with csv), so
the comparison is the SQL model (sql/kernel_occupancy.sql, sql/kernel_waves.sql) against ncu's numbers."""

from __future__ import annotations

import csv
import gzip
import math
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.analyze import connect
from pipeline.store import TraceWriter
from tests.conftest import SAMPLES

FOLDER = SAMPLES / "h200_regsplit"


def num(s: str) -> float:
    return float(s.replace(",", ""))


def ncu_rows() -> list[dict[str, str]]:
    with gzip.open(FOLDER / "regsplit_raw.csv.gz", "rt") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    return list(csv.DictReader(lines[start:]))[1:]  # [0] is the units row


def write_launches(out: Path, rows: list[dict[str, str]]) -> None:
    attr = {
        k.removeprefix("device__attribute_"): int(num(v))
        for k, v in rows[0].items()
        if k.startswith("device__") and v and v.replace(",", "").isdigit()
    }
    with TraceWriter(out, "regsplit") as w:
        w.write(
            "kernels",
            pa.Table.from_pylist(
                [
                    {
                        "kernel_id": int(r["ID"]),
                        "device_id": 0,
                        "name": r["Kernel Name"],
                        "start_ns": 1000 * int(r["ID"]),
                        "duration_ns": 100,
                        **{f"grid_{a}": int(num(r[f"launch__grid_dim_{a}"])) for a in "xyz"},
                        **{f"block_{a}": int(num(r[f"launch__block_dim_{a}"])) for a in "xyz"},
                        "registers_per_thread": int(num(r["launch__registers_per_thread"])),
                        "static_smem_bytes": int(num(r["launch__shared_mem_per_block_static"])),
                        "dynamic_smem_bytes": int(num(r["launch__shared_mem_per_block_dynamic"])),
                    }
                    for r in rows
                ]
            ),
        )
        w.write(
            "devices",
            pa.Table.from_pylist(
                [
                    {
                        "device_id": 0,
                        "compute_major": attr["compute_capability_major"],
                        "compute_minor": attr["compute_capability_minor"],
                        "sm_count": attr["multiprocessor_count"],
                        "warp_size": attr["warp_size"],
                        "max_threads_per_sm": attr["max_threads_per_multiprocessor"],
                        "max_warps_per_sm": attr["max_warps_per_multiprocessor"],
                        "max_blocks_per_sm": attr["max_blocks_per_multiprocessor"],
                        "max_registers_per_sm": attr["max_registers_per_multiprocessor"],
                        "max_registers_per_block": attr["max_registers_per_block"],
                        "max_shared_mem_per_sm_bytes": attr["max_shared_memory_per_multiprocessor"],
                        "max_shared_mem_per_block_bytes": attr["max_shared_memory_per_block"],
                        "max_shared_mem_per_block_optin_bytes": attr["max_shared_memory_per_block_optin"],
                    }
                ]
            ),
        )
        w.write("trace_meta", pa.Table.from_pylist([{"source_format": "test"}]))
        w.commit()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict]:
    out = tmp_path_factory.mktemp("regsplit")
    write_launches(out, ncu_rows())
    rel = connect(out).sql(
        "SELECT o.kernel_id, o.limit_registers, o.limit_warps, o.limit_blocks, o.resident_blocks_per_sm, "
        "o.theoretical_occupancy_pct, o.registers_per_thread_allocated, w.waves_per_sm, w.waves, "
        "w.tail_wave_blocks FROM kernel_occupancy o JOIN kernel_waves w USING (trace_id, kernel_id)"
    )
    return {row[0]: dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()}


def test_sample_is_one_where_the_split_matters() -> None:
    # Guards the test below: with one undivided 64K file, 4 of the 5 kernels would hold one more block per SM.
    unsplit, split = set(), set()
    for r in ncu_rows():
        regs_per_warp = math.ceil(num(r["launch__registers_per_thread"]) * 32 / 256) * 256
        warps = math.ceil(num(r["launch__block_size"]) / 32)
        unsplit_limit = 65536 // regs_per_warp // warps
        ncu_limit = int(num(r["launch__occupancy_limit_registers"]))
        (split if unsplit_limit != ncu_limit else unsplit).add(r["Kernel Name"])
    assert split == {"regs40", "regs48", "regs80", "regs104"} and unsplit == {"regs64"}


def test_occupancy_and_waves_equal_ncu_on_every_launch(model: dict[int, dict]) -> None:
    rows = ncu_rows()
    assert len(rows) == len(model) == 15
    for r in rows:
        m = model[int(r["ID"])]
        ctx = (r["ID"], r["Kernel Name"], r["launch__grid_size"])
        lim = {k: int(num(r[f"launch__occupancy_limit_{k}"])) for k in ("registers", "warps", "blocks")}
        assert (m["limit_registers"], m["limit_warps"], m["limit_blocks"]) == (
            lim["registers"],
            lim["warps"],
            lim["blocks"],
        ), ctx
        resident = min(
            int(num(r[f"launch__occupancy_limit_{k}"]))
            for k in ("registers", "warps", "blocks", "shared_mem", "barriers")
        )
        assert m["resident_blocks_per_sm"] == resident, ctx
        assert m["theoretical_occupancy_pct"] == pytest.approx(num(r["sm__maximum_warps_per_active_cycle_pct"])), ctx
        assert m["registers_per_thread_allocated"] == num(r["launch__registers_per_thread_allocated"]), ctx
        # ncu prints waves as blocks / slots to two decimals ("1", "2", "2.00"); an exact multiple of the slots
        # is that many waves, one block more starts another.
        assert round(m["waves_per_sm"], 2) == num(r["launch__waves_per_multiprocessor"]), ctx
        slots = int(num(r["launch__sm_count"])) * resident
        blocks = int(num(r["launch__grid_size"]))
        assert m["waves"] == -(-blocks // slots), ctx
        assert m["tail_wave_blocks"] == (slots if blocks % slots == 0 else blocks % slots), ctx


def test_exact_multiples_are_whole_waves(model: dict[int, dict]) -> None:
    # The grids are 1 x slots, 2 x slots and 2 x slots + 1 per kernel (run.log): 1, 2 and 3 waves.
    assert sorted(
        {(m["waves"], m["tail_wave_blocks"] == m["resident_blocks_per_sm"] * 132) for m in model.values()}
    ) == [
        (1, True),
        (2, True),
        (3, False),
    ]
