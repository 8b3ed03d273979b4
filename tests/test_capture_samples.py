"""The captures made by scripts/capture_samples.sh on the H200, checked against their raw files.

Each folder holds one model's nsys export, PyTorch trace, ncu CSVs and layer_shapes.json
from one ``tracepipe capture all`` (3 measured forwards; ncu 1).  Counts are computed
independently with sqlite3 / json on the raw files and with hand-computed MACs.
"""

from __future__ import annotations

import collections
import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES, gunzip_to
from tests.test_nsys import q

CAPTURES = ("h200_smallcnn_annotated", "h200_resnet18", "h200_transformer")
ITERS = 3


def layer_calls(folder: Path) -> collections.Counter[str]:
    doc = json.loads((folder / "layer_shapes.json").read_text())
    return collections.Counter(row["layer"] for row in doc["layers"])


@pytest.mark.parametrize("name", CAPTURES)
def test_nsys_capture_has_one_range_per_module_call(name: str, tmp_path: Path) -> None:
    folder = SAMPLES / name
    raw = sqlite3.connect(gunzip_to(folder / "nsys.sqlite.gz", tmp_path / "raw.sqlite"))
    texts = raw.execute(
        "SELECT coalesce(n.text, s.value), count(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
        "WHERE n.eventType = 59 GROUP BY 1"
    ).fetchall()
    (raw_kernels,) = raw.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    out = tmp_path / "norm"
    normalize_file(folder / "nsys.sqlite.gz", out)
    assert dict(q(out, "SELECT text, count(*) FROM nvtx_ranges GROUP BY text")) == dict(texts)
    # Independently of nsys: the shape pass saw each module call once; 3 measured steps repeat them.
    expected = {layer: ITERS * n for layer, n in layer_calls(folder).items()} | {"step": ITERS}
    assert dict(texts) == expected
    assert q(out, "SELECT count(*) FROM kernels") == [(raw_kernels,)] and raw_kernels > 0
    assert raw_kernels % ITERS == 0  # the same kernels each step: warm-up stayed outside the window
    # Every module range nests in its step, and the root under it at depth 1.
    assert q(out, "SELECT DISTINCT depth FROM nvtx_ranges WHERE text = 'model'") == [(1,)]


@pytest.mark.parametrize("name", CAPTURES)
def test_torch_trace_has_user_annotations_per_module_call(name: str) -> None:
    folder = SAMPLES / name
    with gzip.open(folder / "torch_trace.json.gz") as f:
        events = json.load(f)["traceEvents"]
    names = collections.Counter(e["name"] for e in events if e.get("cat") == "user_annotation")
    expected = {layer: ITERS * n for layer, n in layer_calls(folder).items()} | {"step": ITERS}
    assert dict(names) == expected
    assert sum(1 for e in events if e.get("cat") == "kernel") > 0


def test_resnet18_macs_are_the_known_total() -> None:
    """ResNet-18 at 224x224 is 1,814,073,344 MACs per image (the figure thop/fvcore report)."""
    doc = json.loads((SAMPLES / "h200_resnet18" / "layer_shapes.json").read_text())
    root = doc["layers"][0]
    assert (root["layer"], root["macs_complete"]) == ("model", True)
    assert root["macs_inclusive"] == 8 * 1_814_073_344
    conv1 = next(r for r in doc["layers"] if r["layer"] == "conv1")
    # 7x7/2 conv 3->64 on 224 -> 112: 8 * 64 * 112*112 * 3 * 49
    assert conv1["macs"] == 8 * 64 * 112 * 112 * 3 * 49
    assert len([r for r in doc["layers"] if r["module_type"] == "Conv2d"]) == 20


def test_transformer_macs_by_hand() -> None:
    doc = json.loads((SAMPLES / "h200_transformer" / "layer_shapes.json").read_text())
    by = {r["layer"]: r for r in doc["layers"]}
    n, length, e, ff = 8, 128, 512, 2048
    attn = n * (4 * length * e * e + 2 * length * length * e)
    assert by["self_attn"]["macs"] == attn == 1_207_959_552
    assert by["linear1"]["macs"] == by["linear2"]["macs"] == n * length * e * ff
    assert by["model"]["macs_inclusive"] == attn + 2 * n * length * e * ff
    assert by["self_attn"]["input_shapes"] == [[128, 8, 512]] * 3


@pytest.mark.parametrize("name", CAPTURES)
def test_manifest_records_the_capture(name: str) -> None:
    m = json.loads((SAMPLES / name / "manifest.json").read_text())
    assert m["gpus"][0]["name"] == "NVIDIA H200" and m["driver_version"] == "580.159.04"
    assert m["versions"]["torch"].startswith("2.11") and m["versions"]["cuda_runtime"] == "13.0"
    assert m["versions"]["ncu_version"].startswith("Version 2025.3.1")
    assert m["versions"]["nsys_version"]
    assert [s["step"] for s in m["steps"] if s["ok"]] == [
        "shapes",
        "nsys profile",
        "nsys export",
        "torch profiler",
        "ncu profile",
        "ncu import raw",
        "ncu import details",
    ]


def test_ncu_csv_has_fma_and_tensor_counters(tmp_path: Path) -> None:
    """ncu ran the whole ResNet-18 forward: one launch per kernel of one nsys step."""
    import csv
    import io

    with gzip.open(SAMPLES / "h200_resnet18" / "ncu_raw.csv.gz", "rt") as f:
        text = f.read()
    rows = list(csv.reader(io.StringIO(text)))
    header, data = rows[0], rows[2:]  # rows[1] holds the units
    for metric in ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__ops_path_tensor_src_tf32_dst_fp32.sum"):
        assert metric in header
    nsys = sqlite3.connect(gunzip_to(SAMPLES / "h200_resnet18" / "nsys.sqlite.gz", tmp_path / "r.sqlite"))
    (kernels,) = nsys.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    assert len(data) == kernels // ITERS == 119
    stack = header.index("thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg")
    assert all(":step:" in r[stack] and ":model:" in r[stack] for r in data)
