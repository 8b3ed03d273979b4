"""sql/layer_macs.sql on the H200 ResNet-18 capture: analytic MACs next to kernel time and ncu-measured MACs."""

from __future__ import annotations

import csv
import gzip
import io
import json

import pytest

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES

R18 = SAMPLES / "h200_resnet18"


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("r18")
    for f in ("nsys.sqlite.gz", "ncu_raw.csv.gz", "layer_shapes.json"):
        normalize_file(R18 / f, out)
    return connect(out)


def ncu_rows() -> tuple[list[str], list[list[str]]]:
    with gzip.open(R18 / "ncu_raw.csv.gz", "rt") as f:
        rows = list(csv.reader(io.StringIO(f.read())))
    return rows[0], rows[2:]


def test_analytic_side_equals_layer_shapes(con) -> None:
    doc = json.loads((R18 / "layer_shapes.json").read_text())
    total = sum(r["macs"] for r in doc["layers"] if r["macs"] is not None)
    rows = con.sql(
        "SELECT count(*), sum(analytic_macs), min(forwards), max(forwards) FROM layer_macs "
        "WHERE trace_id = 'h200_resnet18.nsys'"
    ).fetchall()
    assert rows == [(len({r["layer"] for r in doc["layers"]}), total, 3, 3)]


def test_measured_macs_are_the_ncu_counters_of_the_layer(con) -> None:
    """Independent: FFMA + HFMA + DFMA thread instructions plus tensor ops / 2, summed with csv over the
    launches whose NVTX stack ends in the layer."""
    header, data = ncu_rows()
    stack = header.index("thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg")
    fma = [header.index(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum") for op in ("ffma", "hfma", "dfma")]
    tensor = [i for i, h in enumerate(header) if h.startswith("sm__ops_path_tensor_src_") and h.endswith(".sum")]

    def num(x: str) -> float:
        return float(x.replace(",", "")) if x not in ("", "n/a") else 0.0

    for layer in ("conv1", "layer1.0.conv1", "fc"):
        launches = [r for r in data if r[stack].rstrip().endswith(f':REGISTERED:{layer}"')]
        expected = sum(sum(num(r[i]) for i in fma) + sum(num(r[i]) for i in tensor) / 2 for r in launches)
        got = con.sql(
            f"SELECT ncu_launches, measured_macs FROM layer_macs WHERE layer = '{layer}' "
            "AND trace_id = 'h200_resnet18.nsys'"
        ).fetchall()
        assert got == [(len(launches), pytest.approx(expected))], layer


def test_stride1_3x3_convs_measure_what_the_formula_says(con) -> None:
    """cuDNN's kernels for layer1's 64->64 3x3 convs do the analytic MACs within 0.1% (TF32 tensor path)."""
    rows = con.sql(
        "SELECT layer, analytic_macs, measured_vs_analytic FROM layer_macs "
        "WHERE trace_id = 'h200_resnet18.nsys' AND layer LIKE 'layer1.%.conv%'"
    ).fetchall()
    assert len(rows) == 4
    for layer, analytic, ratio in rows:
        assert analytic == 8 * 64 * 56 * 56 * 64 * 9, layer
        assert ratio == pytest.approx(1.0, rel=1e-3), layer
