"""Per-SM load model (sql/device_limits, kernel_geometry, kernel_occupancy, kernel_waves, kernel_sm_load,
layer_sm_load, layer_sm_imbalance) against what the hardware tools measured, and hand-computed cases.

Independent sources: Nsight Compute's own occupancy figures in ``ncu_raw.csv`` (a separate run of the same
model, read here with csv), the PyTorch profiler's ``blocks per SM`` / ``warps per SM`` / ``est. achieved
occupancy %`` in ``torch_trace.json.gz`` (read with json), and arithmetic done by hand in the comments.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from pipeline.analyze import connect
from pipeline.store import TraceWriter

from .conftest import SMALLCNN

TID = "h200_smallcnn.nsys"
LIMITS = ("warps", "registers", "shared_mem", "blocks")  # ncu launch__occupancy_limit_<name>


@pytest.fixture(scope="module")
def con(nsys_out: Path) -> duckdb.DuckDBPyConnection:
    return connect(nsys_out)


def num(s: str) -> float:
    return float(s.replace(",", ""))


def ncu_rows() -> list[dict[str, str]]:
    """ncu --csv --page raw: tool chatter (==PROF==, ==WARNING==, program output) before the header,
    then the header row, a units row, and one row per profiled launch."""
    lines = SMALLCNN.joinpath("ncu_raw.csv").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.DictReader(lines[start:]))
    return rows[1:]  # rows[0] is the units row


def launch_key(grid: tuple, block: tuple, regs: int, static: int, dynamic: int) -> tuple:
    return (*map(int, grid), *map(int, block), int(regs), int(static), int(dynamic))


def ncu_by_launch() -> dict[tuple, dict[str, str]]:
    out: dict[tuple, dict[str, str]] = {}
    for r in ncu_rows():
        key = launch_key(
            [num(r[f"launch__grid_dim_{a}"]) for a in "xyz"],
            [num(r[f"launch__block_dim_{a}"]) for a in "xyz"],
            num(r["launch__registers_per_thread"]),
            num(r["launch__shared_mem_per_block_static"]),
            num(r["launch__shared_mem_per_block_dynamic"]),
        )
        out.setdefault(key, r)
    return out


MODEL_SQL = """
SELECT k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.registers_per_thread,
       k.static_smem_bytes, k.dynamic_smem_bytes, k.kernel_id,
       o.limit_blocks, o.limit_warps, o.limit_registers, o.limit_shared_mem, o.resident_blocks_per_sm,
       o.limiters, o.theoretical_occupancy_pct, o.active_warps_per_sm, o.registers_per_thread_allocated,
       o.smem_per_block_allocated_bytes, o.est_carveout_bytes, w.waves_per_sm, w.waves, o.sm_count
FROM kernels k JOIN kernel_occupancy o USING (trace_id, kernel_id) JOIN kernel_waves w USING (trace_id, kernel_id)
ORDER BY k.kernel_id
"""


def model_rows(con: duckdb.DuckDBPyConnection) -> list[dict]:
    rel = con.sql(MODEL_SQL)
    return [dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()]


def test_device_limits_are_the_traced_h200(con: duckdb.DuckDBPyConnection) -> None:
    (r,) = con.sql(
        "SELECT sm_count, sm_count_source, max_warps_per_sm, max_blocks_per_sm, max_shared_mem_per_sm_bytes, "
        "reserved_shared_mem_per_block_bytes, shared_mem_alloc_unit_bytes, from_arch_table FROM device_limits"
    ).fetchall()
    ncu = ncu_rows()[0]
    assert r[:6] == (
        int(num(ncu["device__attribute_multiprocessor_count"])),
        "trace",
        int(num(ncu["device__attribute_max_warps_per_multiprocessor"])),
        int(num(ncu["device__attribute_max_blocks_per_multiprocessor"])),
        int(num(ncu["device__attribute_max_shared_memory_per_multiprocessor"])),
        int(num(ncu["device__attribute_reserved_shared_memory_per_block"])),
    )
    assert r[6] == 128 and r[7] == []  # the trace had every limit: nothing came from the arch table


def test_occupancy_equals_ncu_for_every_sample_kernel(con: duckdb.DuckDBPyConnection) -> None:
    ncu = ncu_by_launch()
    rows = model_rows(con)
    assert len(rows) == 33
    for m in rows:
        key = launch_key(
            (m["grid_x"], m["grid_y"], m["grid_z"]),
            (m["block_x"], m["block_y"], m["block_z"]),
            m["registers_per_thread"],
            m["static_smem_bytes"],
            m["dynamic_smem_bytes"],
        )
        n = ncu[key]  # every nsys launch configuration was also profiled by ncu
        lim = {name: int(num(n[f"launch__occupancy_limit_{name}"])) for name in LIMITS}
        resident = min(lim.values())
        ctx = (m["kernel_id"], n["Kernel Name"][:50])
        assert int(num(n["launch__occupancy_limit_barriers"])) >= resident, ctx  # barriers never bind here
        assert m["resident_blocks_per_sm"] == resident, ctx
        assert m["theoretical_occupancy_pct"] == pytest.approx(num(n["sm__maximum_warps_per_active_cycle_pct"])), ctx
        assert m["active_warps_per_sm"] == num(n["sm__maximum_warps_avg_per_active_cycle"]), ctx
        assert set(m["limiters"].split(",")) == {k for k, v in lim.items() if v == resident}, ctx
        assert (m["limit_blocks"], m["limit_warps"], m["limit_registers"]) == (
            lim["blocks"],
            lim["warps"],
            lim["registers"],
        ), ctx
        # Shared memory: ncu divides the carveout the driver configured (launch__shared_mem_config_size); the
        # model, like cudaOccupancy with the default preference, divides the full 228 KB.  The driver's carveout
        # always held the resident blocks, so the model's limit is >= ncu's and its minimal carveout <= the driver's.
        assert m["limit_shared_mem"] >= lim["shared_mem"], ctx
        assert m["limit_shared_mem"] == 233472 // int(num(n["launch__shared_mem_per_block_allocated"])), ctx
        assert m["est_carveout_bytes"] <= num(n["launch__shared_mem_config_size"]), ctx
        assert m["registers_per_thread_allocated"] == num(n["launch__registers_per_thread_allocated"]), ctx
        assert m["smem_per_block_allocated_bytes"] == num(n["launch__shared_mem_per_block_allocated"]), ctx
        # Waves: ncu prints blocks / (SMs * resident) to two decimals.
        assert round(m["waves_per_sm"], 2) == num(n["launch__waves_per_multiprocessor"]), ctx
        slots = num(n["launch__sm_count"]) * resident
        assert m["waves"] == math.ceil(num(n["launch__grid_size"]) / slots), ctx


def test_sample_covers_each_limiter_kind(con: duckdb.DuckDBPyConnection) -> None:
    # Guards the test above against a sample that never exercises a limit.  From ncu_raw.csv: the warm-up
    # randn kernel and, in each of the 4 forward passes, implicit_convolve_sgemm, the xmma conv and gemmSN are
    # register-bound (1 + 4 * 3); elementwise_kernel (2048 and 4096 blocks) is warp-bound (4 * 2); the two
    # vectorized_elementwise_kernel launches and reduce_kernel tie warps with registers (4 * 3).
    got = dict(con.sql("SELECT limiters, count(*) FROM kernel_occupancy GROUP BY ALL").fetchall())
    assert got == {"registers": 13, "warps": 8, "warps,registers": 12}


def test_profiler_per_sm_figures_match_the_pytorch_trace(con: duckdb.DuckDBPyConnection) -> None:
    """The PyTorch profiler (kineto) records blocks / SM count, that times threads / 32, and
    min(blocks per SM, cudaOccupancy resident blocks) * threads / max threads per SM, rounded."""
    with gzip.open(SMALLCNN / "torch_trace.json.gz") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]
    assert len(events) == 8
    model = {
        (tuple(r[:3]), tuple(r[3:6]), r[6]): r[7:]
        for r in con.sql(
            "SELECT DISTINCT k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.registers_per_thread, "
            "w.blocks_per_sm, w.warps_per_sm, w.est_achieved_occupancy_pct "
            "FROM kernels k JOIN kernel_waves w USING (trace_id, kernel_id)"
        ).fetchall()
    }
    for e in events:
        a = e["args"]
        blocks_per_sm, warps_per_sm, occ = model[(tuple(a["grid"]), tuple(a["block"]), a["registers per thread"])]
        # kineto computes in float32 and prints 6 decimals: agree to that precision.
        assert blocks_per_sm == pytest.approx(a["blocks per SM"], rel=1e-6, abs=1e-6), e["name"][:40]
        assert warps_per_sm == pytest.approx(a["warps per SM"], rel=1e-6, abs=1e-6), e["name"][:40]
        assert int(0.5 + occ) == a["est. achieved occupancy %"], e["name"][:40]


def test_1024_blocks_on_132_sms(con: duckdb.DuckDBPyConnection) -> None:
    # implicit_convolve_sgemm: 1024 blocks of 8x8 threads; 1024 = 7 * 132 + 100.
    (kid,) = con.sql("SELECT min(kernel_id) FROM kernels WHERE grid_x = 1024 AND block_x = 8").fetchall()[0]
    per_sm = con.sql(
        f"SELECT blocks, threads, warps, count(*) FROM kernel_sm_load WHERE kernel_id = {kid} GROUP BY ALL ORDER BY 1"
    ).fetchall()
    assert per_sm == [(7, 7 * 64, 7 * 2, 32), (8, 8 * 64, 8 * 2, 100)]
    first = con.sql(f"SELECT max(sm_id) FROM kernel_sm_load WHERE kernel_id = {kid} AND blocks = 8").fetchall()
    assert first == [(99,)]  # round-robin: dispatch slots 0..99 get the extra block


def test_layer_sm_load_equals_expanding_every_kernel(con: duckdb.DuckDBPyConnection) -> None:
    """The closed-form per-layer aggregation must equal the brute-force sum of kernel_sm_load."""
    diff = con.sql("""
        WITH brute AS (
            SELECT l.path, s.sm_id, sum(s.blocks) AS blocks, sum(s.threads) AS threads, sum(s.warps) AS warps,
                   sum(s.thread_ns) AS thread_ns, sum(s.busy_ns) AS busy_ns
            FROM kernel_sm_load s JOIN kernel_layers l USING (trace_id, kernel_id) GROUP BY ALL)
        SELECT count(*), count(*) FILTER (WHERE b.blocks = l.blocks AND b.threads = l.threads AND b.warps = l.warps
                                           AND abs(b.thread_ns - l.thread_ns) <= 1e-9 * b.thread_ns
                                           AND abs(b.busy_ns - l.busy_ns) <= 1e-9 * b.busy_ns)
        FROM brute b JOIN layer_sm_load l ON l.path IS NOT DISTINCT FROM b.path AND l.sm_id = b.sm_id
    """).fetchall()
    assert diff == [(11 * 132, 11 * 132)]  # 10 layer paths + "outside every range", 132 SMs each


def test_layer_sm_load_step_conv1(con: duckdb.DuckDBPyConnection) -> None:
    # step/conv1 runs implicit_convolve_sgemm (1024 blocks x 64 threads) and elementwise_kernel
    # (2048 blocks x 128 threads): 2048 = 15 * 132 + 68, so SM 0 gets 8 + 16 = 24 blocks, SM 131 gets 7 + 15 = 22.
    rows = dict(
        (sm, (b, t))
        for sm, b, t in con.sql(
            "SELECT sm_id, blocks, threads FROM layer_sm_load WHERE path = 'step/conv1' AND sm_id IN (0, 80, 131)"
        ).fetchall()
    )
    assert rows == {0: (24, 8 * 64 + 16 * 128), 80: (23, 8 * 64 + 15 * 128), 131: (22, 7 * 64 + 15 * 128)}
    # busy time: each kernel occupies every SM for its whole duration (8 blocks fit in one round of 16 resident;
    # 16 blocks in one round of 16), so every SM is busy for the sum of the two kernel durations.
    (dur,) = con.sql("SELECT sum(duration_ns) FROM kernel_layers WHERE path = 'step/conv1'").fetchall()[0]
    busy = con.sql("SELECT DISTINCT busy_ns FROM layer_sm_load WHERE path = 'step/conv1'").fetchall()
    assert busy == [(dur,)]


def test_layer_imbalance_of_the_fc_gemm(con: duckdb.DuckDBPyConnection) -> None:
    # step/fc is one gemmSN_TN_kernel of 2 blocks: 2 SMs busy, 130 idle, max/mean = 1 / (2/132) = 66.
    (r,) = con.sql(
        "SELECT kernels, blocks, idle_sms, blocks_imbalance, busy_imbalance FROM layer_sm_imbalance "
        "WHERE path = 'step/fc'"
    ).fetchall()
    assert r == (1, 2, 130, pytest.approx(66.0), pytest.approx(66.0))


# ---- hand-computed cases on a trace whose devices row only names the compute capability ----


def write_trace(out: Path, cc: tuple[int, int], kernels: list[dict], **device: object) -> None:
    with TraceWriter(out, "hand") as w:
        w.write(
            "kernels",
            pa.Table.from_pylist(
                [
                    {
                        "kernel_id": i,
                        "device_id": 0,
                        "start_ns": 1000 * i,
                        "duration_ns": 100,
                        "grid_y": 1,
                        "grid_z": 1,
                        "block_y": 1,
                        "block_z": 1,
                        "static_smem_bytes": 0,
                        "dynamic_smem_bytes": 0,
                        **k,
                    }
                    for i, k in enumerate(kernels)
                ]
            ),
        )
        w.write(
            "devices",
            pa.Table.from_pylist([{"device_id": 0, "compute_major": cc[0], "compute_minor": cc[1], **device}]),
        )
        w.write("trace_meta", pa.Table.from_pylist([{"source_format": "test"}]))
        w.commit()


def occupancy(out: Path) -> list[tuple]:
    return (
        connect(out)
        .sql(
            "SELECT limit_blocks, limit_warps, limit_registers, limit_shared_mem, resident_blocks_per_sm, limiters, "
            "round(theoretical_occupancy_pct, 4) FROM kernel_occupancy ORDER BY kernel_id"
        )
        .fetchall()
    )


def test_rtx3090_from_the_arch_table(tmp_path: Path) -> None:
    # cc 8.6, nothing else recorded: 82 SMs, 48 warps, 16 blocks, 64K registers, 100 KB shared, 1 KB reserved.
    # 1000 blocks x 256 threads (8 warps), 32 registers:
    #   warps 48 // 8 = 6; registers 32*32 = 1024/warp, 16384 // 1024 = 16 warps per sub-partition -> 64 // 8 = 8;
    #   shared (0 + 1 KB reserved) -> 102400 // 1024 = 100; blocks 16 -> 6 resident, warps-limited, 48/48 = 100 %.
    write_trace(tmp_path, (8, 6), [{"grid_x": 1000, "block_x": 256, "registers_per_thread": 32}])
    con = connect(tmp_path)
    (d,) = con.sql(
        "SELECT sm_count, sm_count_source, max_threads_per_sm, max_blocks_per_sm, max_registers_per_sm, "
        "max_shared_mem_per_sm_bytes, list_contains(from_arch_table, 'max_blocks_per_sm') FROM device_limits"
    ).fetchall()
    assert d == (82, "arch_table:GeForce RTX 3090", 1536, 16, 65536, 102400, True)
    assert occupancy(tmp_path) == [(16, 6, 8, 100, 6, "warps", 100.0)]
    # 82 * 6 = 492 slots: waves 1000/492 = 2.03 -> 3, the last holding 1000 - 984 = 16 blocks.
    (w,) = con.sql(
        "SELECT waves, tail_wave_blocks, round(tail_wave_utilization, 6), blocks_per_sm FROM kernel_waves"
    ).fetchall()
    assert w == (3, 16, round(16 / 492, 6), 1000 / 82)
    # 1000 = 12 * 82 + 16: 16 SMs run 13 blocks, 66 run 12.
    split = con.sql("SELECT blocks, count(*) FROM kernel_sm_load GROUP BY ALL ORDER BY 1").fetchall()
    assert split == [(12, 66), (13, 16)]


def test_older_nsys_layout_gets_blocks_and_warps_from_the_table(tmp_path: Path) -> None:
    # The trace has SM count and threads per SM but not maxBlocksPerSm / maxWarpsPerSm (older export).
    write_trace(tmp_path, (9, 0), [{"grid_x": 8, "block_x": 64}], sm_count=114, warp_size=32, max_threads_per_sm=2048)
    (d,) = (
        connect(tmp_path)
        .sql("SELECT sm_count, max_warps_per_sm, max_blocks_per_sm, from_arch_table FROM device_limits")
        .fetchall()
    )
    assert d[:3] == (114, 64, 32)  # the trace's 114 SMs (an H100 PCIe) win over the table's 132
    assert "sm_count" not in d[3] and "max_blocks_per_sm" in d[3]


def test_register_limited_kernel(tmp_path: Path) -> None:
    # cc 8.6, 128 threads (4 warps), 128 registers: 4096 registers/warp, 16384 // 4096 = 4 warps per
    # sub-partition -> 16 warps -> 4 blocks; warps allow 48 // 4 = 12, shared 100, blocks 16.
    # 4 blocks * 4 warps = 16 of 48 warps = 33.3333 %.
    # Second launch: 1024 threads x 255 registers -> 8192/warp * 32 warps > 65536 per block: cannot launch,
    # yet the trace says it ran -- the recorded values or the limits are wrong: NULL occupancy and the reason,
    # not 0 %.  limit_registers = 0 shows which resource.
    write_trace(
        tmp_path,
        (8, 6),
        [
            {"grid_x": 100, "block_x": 128, "registers_per_thread": 128},
            {"grid_x": 100, "block_x": 1024, "registers_per_thread": 255},
        ],
    )
    assert occupancy(tmp_path) == [
        (16, 12, 4, 100, 4, "registers", 33.3333),
        (16, 1, 0, 100, None, None, None),
    ]
    issues = connect(tmp_path).sql("SELECT occupancy_issue FROM kernel_occupancy ORDER BY kernel_id").fetchall()
    assert issues == [(None,), ("the launch as recorded fits no SM of this device: 255 registers per thread",)]


def test_shared_memory_limited_kernel(tmp_path: Path) -> None:
    # cc 8.6, 128 threads, 32 registers (-> 16 blocks), dynamic 40000 B: 40000 + 1024 reserved = 41024,
    # rounded to 128 B = 41088; 102400 // 41088 = 2 blocks -> 8 of 48 warps = 16.6667 %; the smallest
    # carveout holding 2 * 41088 = 82176 B is 100 KB.
    # Second: 60000 B dynamic (> 48 KB, so it opted in): 61024 -> 61056 B, fits the 99 KB + 1 KB opt-in
    # limit, 102400 // 61056 = 1 block.  Third: 110000 B exceeds the opt-in limit: cannot launch (NULL + reason).
    write_trace(
        tmp_path,
        (8, 6),
        [
            {"grid_x": 10, "block_x": 128, "registers_per_thread": 32, "dynamic_smem_bytes": 40000},
            {"grid_x": 10, "block_x": 128, "registers_per_thread": 32, "dynamic_smem_bytes": 60000},
            {"grid_x": 10, "block_x": 128, "registers_per_thread": 32, "dynamic_smem_bytes": 110000},
        ],
    )
    assert occupancy(tmp_path) == [
        (16, 12, 16, 2, 2, "shared_mem", 16.6667),
        (16, 12, 16, 1, 1, "shared_mem", 8.3333),
        (16, 12, 16, 0, None, None, None),
    ]
    carve = connect(tmp_path).sql("SELECT est_carveout_bytes FROM kernel_occupancy ORDER BY kernel_id").fetchall()
    assert carve == [(102400,), (65536,), (None,)]


def test_unknown_architecture_gives_no_guess(tmp_path: Path) -> None:
    # cc 5.2 is not in the table and the trace recorded nothing else: limits stay NULL, never another GPU's.
    write_trace(tmp_path, (5, 2), [{"grid_x": 10, "block_x": 128, "registers_per_thread": 32}])
    assert occupancy(tmp_path) == [(None,) * 7]
