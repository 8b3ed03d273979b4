"""Issue 19: layer_work_map (outputs and MACs per block, thread, SM), kernel_tiles (tile coverage from kernel
names), kernel_sm_spread (dispatch model vs ncu's per-SM counters) and the --device projection.

Expected values are worked out by hand in each test from the kernel name, grid and the layer's shapes (the
arithmetic is in the comments); measured values come from the raw ncu CSV through the csv module."""

from __future__ import annotations

import csv
import gzip
import io
from fractions import Fraction
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from pipeline.analyze import connect
from pipeline.cli import main
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES
from tests.test_sm_load import write_trace

CAPTURES = {
    "h200_resnet50_bf16": ("ncu_raw.csv.gz", "layer_shapes.json"),
    "h200_sm_spread_resnet18": ("ncu_raw.csv.gz", "layer_shapes.json"),
    "h200_sm_spread_smallcnn": ("ncu_raw.csv.gz", "layer_shapes.json"),
    "h200_resnet18": ("nsys.sqlite.gz", "layer_shapes.json"),
    "h200_transformer": ("ncu_raw.csv.gz", "layer_shapes.json"),
    "h200_smallcnn_annotated": ("nsys.sqlite.gz", "layer_shapes.json"),
}


@pytest.fixture(scope="module")
def normalized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("work_map")
    for capture, files in CAPTURES.items():
        for f in files:
            normalize_file(SAMPLES / capture / f, out)
    normalize_file(SAMPLES / "h200_smallcnn" / "nsys.sqlite.gz", out)  # a capture without layer_shapes
    return out


@pytest.fixture(scope="module")
def con(normalized: Path) -> duckdb.DuckDBPyConnection:
    return connect(normalized)


def tile_row(con: duckdb.DuckDBPyConnection, trace: str, layer: str) -> dict:
    cur = con.execute(
        f"SELECT * FROM kernel_tiles WHERE trace_id = '{trace}' AND layer = '{layer}' AND tile_m IS NOT NULL "
        "ORDER BY launch_id, kernel_id LIMIT 1"
    )
    return dict(zip([d[0] for d in cur.description], cur.fetchall()[0], strict=True))


# ---------------------------------------------------------------- tile geometry (deliverable 2)


def test_resnet50_bf16_conv1_pads_3_channels_to_32(con: duckdb.DuckDBPyConnection) -> None:
    """cutlass ..._256x64_32x4_nhwc: tile 256 positions x 64 channels, K step 32.  Output 16x64x112x112:
    16*112*112 = 200704 positions / 256 = 784 tiles = the grid; 64 channels = one tile: no output padding.
    The reduction pads the 3 input channels of every 7x7 tap to 32: 32/3 the MACs (ncu measured 10.67)."""
    r = tile_row(con, "h200_resnet50_bf16.ncu_raw", "conv1")
    assert (r["library"], r["tile_m"], r["tile_n"], r["tile_k"]) == ("cutlass fprop", 256, 64, 32)
    assert (r["out_positions"], r["out_channels"], r["blocks"], r["tiles_needed"]) == (200704, 64, 784, 784)
    assert r["output_coverage"] == 1.0
    assert r["reduction_coverage"] == pytest.approx(32 / 3)
    assert r["predicted_macs_ratio"] == pytest.approx(32 / 3)
    assert r["measured_vs_analytic"] == pytest.approx(32 / 3, rel=2e-3)


def test_resnet50_bf16_layer4_rounds_784_positions_up(con: duckdb.DuckDBPyConnection) -> None:
    """layer4 outputs 16*7*7 = 784 positions.  64x64 tiles (conv2, 512 channels): ceil(784/64) = 13 tiles would
    cover 832 (832/784 = 1.061), but the grid has 112 = 14 x 8 blocks: 14*64 = 896 -> 896/784 = 8/7.
    128x64 tiles (conv3, 2048 channels): 7*128 = 896 -> 8/7 again, though only 120 blocks loop over the
    7*32 = 224 tiles (persistent).  ncu measured 1.1431 and 1.1451."""
    conv2 = tile_row(con, "h200_resnet50_bf16.ncu_raw", "layer4.1.conv2")
    assert (conv2["tile_m"], conv2["tile_n"], conv2["blocks"], conv2["tiles_needed"]) == (64, 64, 112, 13 * 8)
    assert conv2["min_coverage"] == pytest.approx(832 / 784)
    assert conv2["output_coverage"] == pytest.approx(896 / 784)
    assert conv2["measured_vs_analytic"] == pytest.approx(896 / 784, rel=1e-3)
    conv3 = tile_row(con, "h200_resnet50_bf16.ncu_raw", "layer4.1.conv3")
    assert (conv3["tile_m"], conv3["tile_n"], conv3["blocks"], conv3["tiles_needed"]) == (128, 64, 120, 7 * 32)
    assert conv3["launched_tiles"] == 224 and conv3["output_coverage"] == pytest.approx(896 / 784)
    assert conv3["measured_vs_analytic"] == pytest.approx(896 / 784, rel=3e-3)


def test_resnet50_bf16_fc_pads_1000_classes_to_1024(con: duckdb.DuckDBPyConnection) -> None:
    """nvjet_sm90_tst_64x8_...: a 64x8 tile.  fc: 16 x 1000.  Transposed (cuBLAS computes C^T): 1000 classes
    over 64 -> 16 tiles, 16 rows over 8 -> 2: 32 tiles = the grid (8,4,1); 32*64*8 / 16000 = 1.024."""
    r = tile_row(con, "h200_resnet50_bf16.ncu_raw", "fc")
    assert (r["tile_m"], r["tile_n"], r["orientation"], r["blocks"], r["tiles_needed"]) == (
        64,
        8,
        "channels_x_positions",
        32,
        32,
    )
    assert r["output_coverage"] == pytest.approx(1024 / 1000)
    assert r["measured_vs_analytic"] == pytest.approx(1.024, rel=1e-6)


def test_batched_gemm_splits_positions_per_image(con: duckdb.DuckDBPyConnection) -> None:
    """layer4.0.conv1 (1x1, 1024 -> 512 at 14x14) runs as cutlass ..._256x64_64x3_nn with grid (8,1,16): one
    GEMM per image of 196 positions: 16 * ceil(196/256) * 512/64 = 128 tiles; 128*256*64 / (3136*512) = 1.306."""
    r = tile_row(con, "h200_resnet50_bf16.ncu_raw", "layer4.0.conv1")
    assert (r["batch_split"], r["tiles_needed"], r["blocks"]) == (16, 128, 128)
    assert r["output_coverage"] == pytest.approx(Fraction(128 * 256 * 64, 3136 * 512))
    assert r["measured_vs_analytic"] == pytest.approx(float(Fraction(128 * 256 * 64, 3136 * 512)), rel=1e-4)


def test_resnet18_fp32_tiles(con: duckdb.DuckDBPyConnection) -> None:
    """conv1 (xmma indexed, 128x32x16): 8*112*112 = 100352 / 128 = 784 x 64/32 = 2 -> 1568 tiles = grid;
    the flattened reduction 3*7*7 = 147 pads to 160 (K step 16).  layer2.0.conv2 (sm90 64x128): 6272 / 64 = 98
    tiles, grid 104 (13 x 8) -> 104/98.  layer3.0.conv1 (split-K, 64x256): 1568/64 -> 25 tiles; 56 blocks =
    2 splits of 28 tiles -> 28*64/1568 = 8/7."""
    t = "h200_sm_spread_resnet18.ncu_raw"
    conv1 = tile_row(con, t, "conv1")
    assert (conv1["tiles_needed"], conv1["blocks"], conv1["output_coverage"]) == (1568, 1568, 1.0)
    assert conv1["reduction_coverage"] == pytest.approx(160 / 147)
    assert conv1["measured_vs_analytic"] == pytest.approx(160 / 147, rel=1e-3)
    l2 = tile_row(con, t, "layer2.0.conv2")
    assert (l2["tiles_needed"], l2["launched_tiles"]) == (98, 104)
    assert l2["measured_vs_analytic"] == pytest.approx(104 / 98, rel=1e-3)
    l3 = tile_row(con, t, "layer3.0.conv1")
    assert (l3["split_k"], l3["tiles_needed"], l3["blocks"], l3["launched_tiles"]) == (True, 25, 56, 28)
    assert l3["output_coverage"] == pytest.approx(8 / 7)
    assert l3["measured_vs_analytic"] == pytest.approx(8 / 7, rel=1e-3)


def test_transformer_and_smallcnn_tiles_cover_exactly(con: duckdb.DuckDBPyConnection) -> None:
    """linear1: 128*8 = 1024 rows x 2048, tile 128x128: 8 x 16 = 128 = grid (8,16,1).  smallcnn conv2:
    8*64*64 = 32768 positions / 128 = 256 tiles x 32/32 = the grid (1,256,1).  No padding in either."""
    lin = tile_row(con, "h200_transformer.ncu_raw", "linear1")
    assert (lin["tiles_needed"], lin["blocks"], lin["output_coverage"]) == (128, 128, 1.0)
    conv2 = tile_row(con, "h200_sm_spread_smallcnn.ncu_raw", "conv2")
    assert (conv2["tiles_needed"], conv2["blocks"], conv2["output_coverage"]) == (256, 256, 1.0)
    assert conv2["measured_vs_analytic"] == pytest.approx(1.0, rel=1e-3)


def test_coverage_is_at_least_one_and_reasons_fill_the_gaps(con: duckdb.DuckDBPyConnection) -> None:
    rows = con.execute(
        "SELECT min(output_coverage), count(*) FILTER (WHERE tile_m IS NULL AND reason IS NULL) FROM kernel_tiles"
    )
    assert rows.fetchall()[0] == (1.0, 0)
    reasons = dict(
        con.sql("SELECT layer, reason FROM kernel_tiles WHERE trace_id = 'h200_transformer.ncu_raw'").fetchall()
    )
    assert "not one GEMM" in reasons["self_attn"]


def test_the_patterns_are_a_table_each_row_matching_its_example() -> None:
    import re

    from pipeline.analyze.tiles import TILE_PATTERNS

    for row in TILE_PATTERNS:
        assert re.search(str(row["pattern"]), str(row["example"])), row["library"]


# ---------------------------------------------------------------- layer_work_map (deliverable 1)


def work_row(con: duckdb.DuckDBPyConnection, layer: str, name_like: str, trace: str = "h200_resnet18.nsys") -> dict:
    cur = con.execute(
        f"SELECT * FROM layer_work_map WHERE trace_id = '{trace}' AND layer = '{layer}' "
        f"AND name LIKE '{name_like}' ORDER BY kernel_id LIMIT 1"
    )
    return dict(zip([d[0] for d in cur.description], cur.fetchall()[0], strict=True))


def test_conv_outputs_and_macs_per_block_thread_sm(con: duckdb.DuckDBPyConnection) -> None:
    """layer1.0.conv1: 8x64x56x56 = 1,605,632 outputs, 924,844,032 MACs (64*9 per output).  The xmma kernel runs
    196 blocks of 128 threads: 8192 outputs per block (= its 128x64 tile), 64 per thread; 4,718,592 MACs per
    block, 36,864 per thread.  On 132 SMs: 196 = 132 + 64, so 64 SMs run 2 blocks (9,437,184 MACs), 68 run 1."""
    r = work_row(con, "layer1.0.conv1", "%xmma%")
    assert (r["output_elements"], r["analytic_macs"], r["blocks"], r["threads_per_block"]) == (
        1605632,
        924844032,
        196,
        128,
    )
    assert (r["outputs_per_block"], r["outputs_per_thread"], r["tile_outputs_per_block"]) == (8192, 64, 8192)
    assert (r["macs_per_block"], r["macs_per_thread"]) == (4718592, 36864)
    assert (r["sm_count"], r["max_blocks_per_sm"], r["min_blocks_per_sm"], r["sms_at_max"]) == (132, 2, 1, 64)
    assert (r["macs_per_sm_max"], r["macs_per_sm_min"]) == (2 * 4718592, 4718592)
    assert (r["outputs_per_sm_max"], r["is_mac_kernel"], r["mac_kernels_in_call"], r["reason"]) == (
        16384,
        True,
        1,
        None,
    )
    layout = work_row(con, "layer1.0.conv1", "%nchwToNhwc%")
    assert (layout["is_mac_kernel"], layout["macs_per_block"], layout["reason"]) == (False, 0, None)


def test_mac_kernels_in_call_counts_the_kernels_of_the_map(tmp_path: Path) -> None:
    """Three GEMM kernels outside every range (one module call: range NULL), one of them with an empty grid: no
    block runs, so it has no dispatch (kernel_waves) and no row here, and the call counts the other two; a copy
    kernel (no tile pattern) is no MAC kernel."""
    gemm = "cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x64_64x3_nn_align2>"
    kernels = [
        {"grid_x": 8, "block_x": 128, "registers_per_thread": 32, "name": gemm},
        {"grid_x": 4, "block_x": 128, "registers_per_thread": 32, "name": gemm},
        {"grid_x": 0, "block_x": 128, "registers_per_thread": 32, "name": gemm},
        {"grid_x": 4, "block_x": 128, "registers_per_thread": 32, "name": "void copy_kernel(float*)"},
    ]
    write_trace(tmp_path, (9, 0), kernels, sm_count=132, name="H200")
    rows = connect(tmp_path).sql(
        "SELECT kernel_id, is_mac_kernel, mac_kernels_in_call FROM layer_work_map ORDER BY kernel_id"
    )
    assert rows.fetchall() == [(0, True, 2), (1, True, 2), (3, False, 2)]


def test_elementwise_outputs_per_thread(con: duckdb.DuckDBPyConnection) -> None:
    """relu after conv1: 8x64x112x112 = 6,422,528 outputs over 6272 blocks of 128 threads: 1024 per block,
    8 per thread (vectorized by 4, unrolled twice); ReLU has no MACs."""
    r = work_row(con, "relu", "%elementwise%")
    assert (r["outputs_per_block"], r["outputs_per_thread"], r["macs_per_thread"]) == (1024, 8, 0)


def test_unknown_shapes_are_null_with_a_reason(con: duckdb.DuckDBPyConnection) -> None:
    """The small CNN reuses one ReLU on two shapes; the first small-CNN capture has no layer_shapes at all."""
    r = work_row(con, "relu", "%", trace="h200_smallcnn_annotated.nsys")
    assert r["output_elements"] is None and "differ in shape" in r["reason"]
    bare = con.execute(
        "SELECT count(*), count(output_elements), min(reason) FROM layer_work_map WHERE trace_id = 'h200_smallcnn.nsys'"
    ).fetchall()[0]
    assert bare[0] > 0 and bare[1] == 0 and bare[2] is not None


# ---------------------------------------------------------------- measured per-SM spread (deliverable 3)


def raw_csv(capture: str) -> list[dict[str, str]]:
    with gzip.open(SAMPLES / capture / "ncu_raw.csv.gz", "rt") as f:
        rows = list(csv.DictReader(io.StringIO(f.read())))
    return rows[1:]  # the units row


def num(s: str) -> float:
    return float(s.replace(",", ""))


@pytest.mark.parametrize("capture", ["h200_sm_spread_resnet18", "h200_sm_spread_smallcnn"])
def test_spread_counters_are_ncus_and_one_wave_grids_dispatch_as_modelled(
    con: duckdb.DuckDBPyConnection, capture: str
) -> None:
    """Independent: per launch from the CSV, blocks = grid product, the model's min/max blocks per SM
    (blocks // 132, ceil(blocks / 132)), and ncu's sm__ctas_launched.min/.max.  Every grid that fits in one wave
    (blocks <= 132 * resident) ran exactly the model's split."""
    rows = raw_csv(capture)
    got = {
        r[0]: r[1:]
        for r in con.sql(
            "SELECT launch_id, model_min_blocks, model_max_blocks, ctas_min, ctas_max, measured_cycle_imbalance, "
            f"blocks_as_modelled FROM kernel_sm_spread WHERE trace_id = '{capture}.ncu_raw'"
        ).fetchall()
    }
    assert len(got) == len(rows)
    one_wave = 0
    for r in rows:
        blocks = int(num(r["launch__grid_size"]))
        sms = int(num(r["launch__sm_count"]))
        resident = min(
            int(num(r[f"launch__occupancy_limit_{x}"])) for x in ("blocks", "registers", "shared_mem", "warps")
        )
        lo, hi = blocks // sms, -(-blocks // sms)
        cmin, cmax = num(r["sm__ctas_launched.min"]), num(r["sm__ctas_launched.max"])
        imbalance = num(r["sm__cycles_active.max"]) / num(r["sm__cycles_active.avg"])
        g = got[int(r["ID"])]
        assert g[:5] == (lo, hi, cmin, cmax, pytest.approx(imbalance))
        if blocks <= sms * resident:
            one_wave += 1
            assert (cmin, cmax) == (lo, hi), r["ID"]
            assert g[5] is True
    assert one_wave >= 5


# ---------------------------------------------------------------- projection (deliverable 4)


def test_projection_by_hand(tmp_path: Path) -> None:
    """1024 blocks x 256 threads, 32 registers, no shared memory.  H200: 64 warps / 8 = 8 blocks per SM
    (registers: 65536 / (32*256) = 8 too), 132*8 = 1056 slots: 1 wave; 1024 = 7*132 + 100.  Projected to an RTX
    3090: 48 warps / 8 = 6 blocks, 82*6 = 492 slots: ceil(1024/492) = 3 waves, tail 1024 - 984 = 40 blocks;
    1024 = 12*82 + 40 -> 40 SMs run 13 blocks, 42 run 12."""
    write_trace(
        tmp_path, (9, 0), [{"grid_x": 1024, "block_x": 256, "registers_per_thread": 32}], sm_count=132, name="H200"
    )
    sql = (
        "SELECT projected_device, sm_count, resident_blocks_per_sm, waves, tail_wave_blocks, full_blocks_per_sm, "
        "extra_block_sms FROM kernel_waves"
    )
    assert connect(tmp_path).sql(sql).fetchall() == [(None, 132, 8, 1, 1024, 7, 100)]
    assert connect(tmp_path, device="rtx3090").sql(sql).fetchall() == [("rtx3090", 82, 6, 3, 40, 12, 40)]
    limits = connect(tmp_path, device="rtx3090").sql(
        "SELECT name, max_threads_per_sm, max_blocks_per_sm, max_shared_mem_per_sm_bytes, max_registers_per_sm, "
        "sm_count_source FROM device_limits"
    )
    assert limits.fetchall() == [("GeForce RTX 3090", 1536, 16, 100 * 1024, 65536, "projection:rtx3090")]


def test_projection_cli_says_so(normalized: Path, tmp_path: Path) -> None:
    out = tmp_path / "analysis"
    result = CliRunner().invoke(
        main, ["analyze", str(normalized), "-o", str(out), "--device", "rtx3090", "--view", "kernel_waves"]
    )
    assert result.exit_code == 0, result.output
    assert "PROJECTION" in result.output and "RTX 3090" in result.output
    con = duckdb.connect()
    assert con.sql(f"SELECT DISTINCT projected_device, sm_count FROM '{out}/kernel_waves.parquet'").fetchall() == [
        ("rtx3090", 82)
    ]
    bad = CliRunner().invoke(main, ["analyze", str(normalized), "-o", str(out), "--device", "nosuch"])
    assert bad.exit_code == 2
    q = "SELECT DISTINCT projected_device, sm_count FROM device_limits"
    sql = CliRunner().invoke(main, ["sql", str(normalized), q, "--device", "rtx3090", "--format", "csv"])
    assert sql.exit_code == 0 and "rtx3090,82" in sql.output and "PROJECTION" in sql.output


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        # H200: 132 SMs, 3 resident (registers); 256 = 132 + 124: 124 SMs run 2 blocks, 8 run 1; one wave.
        (None, (132, 3, 1, 2, 1, 124, 2 * 589824, 589824, 8192, 4096)),
        # RTX 3090: 82 SMs, still 3 resident; 256 = 3*82 + 10: 10 SMs run 4, 72 run 3; 246 slots: 2 waves.
        ("rtx3090", (82, 3, 2, 4, 3, 10, 4 * 589824, 3 * 589824, 4 * 4096, 3 * 4096)),
    ],
)
def test_worked_example_smallcnn_conv2(normalized: Path, device: str | None, expected: tuple) -> None:
    """docs/sm_load.md's worked example: conv2 (16 -> 32 channels, 3x3, 8x16x64x64 input): 8*32*64*64 =
    1,048,576 outputs, 16*9 = 144 MACs each = 150,994,944.  xmma 128x32 tile, 256 blocks of 128 threads:
    4096 outputs (one tile) and 589,824 MACs per block, 32 outputs and 4608 MACs per thread.  166 registers:
    ceil(166*32/256)*256 = 5376 per warp, 16384 // 5376 = 3 warps per sub-partition, 12 warps = 3 blocks of 4."""
    con = connect(normalized, device=device)
    cur = con.execute(
        "SELECT m.output_elements, m.analytic_macs, m.outputs_per_block, m.outputs_per_thread, m.macs_per_block, "
        "m.macs_per_thread, m.sm_count, m.resident_blocks_per_sm, m.waves, m.max_blocks_per_sm, m.min_blocks_per_sm, "
        "m.sms_at_max, m.macs_per_sm_max, m.macs_per_sm_min, m.outputs_per_sm_max, m.outputs_per_sm_min, "
        "m.projected_device FROM layer_work_map m WHERE m.trace_id = 'h200_smallcnn_annotated.nsys' "
        "AND m.layer = 'conv2' AND m.is_mac_kernel ORDER BY m.kernel_id LIMIT 1"
    )
    row = cur.fetchall()[0]
    assert row[:6] == (1048576, 150994944, 4096, 32, 589824, 4608)
    assert row[6:16] == expected
    assert row[16] == device
