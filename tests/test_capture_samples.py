"""The captures made by scripts/capture_samples.sh on the H200, checked against their raw files, and the
capture code's MACs recomputed on the same models.

Each folder holds one model's nsys export, PyTorch trace, ncu CSVs and layer_shapes.json
from one ``tracepipe capture all`` (3 measured forwards; ncu 1).  Counts are computed
independently with sqlite3 / json on the raw files; MACs come from running pipeline/capture on the
sample models here (CPU) and are checked against torch's FLOP counter and hand arithmetic.
"""

from __future__ import annotations

import collections
import gzip
import json
import sqlite3
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from pipeline.capture.annotate import LayerRecorder, ModelAnnotator, RangeBackend
from pipeline.capture.runner import load_factory
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


# ---- MACs: the capture code (pipeline/capture/annotate.py + macs.py) on the sample models, on CPU ----------
# Checked against torch's own FLOP counter (FlopCounterMode: 2 FLOPs per MAC for conv, mm, addmm, bmm) and
# against published totals, not against the layer_shapes.json the GPU host wrote.  Attention runs with the
# math SDPA backend, whose matmuls the counter sees (it does not count the fused CPU kernel).


def resnet18() -> nn.Module:
    """torchvision's resnet18 (BasicBlock, [2, 2, 2, 2]), written out with its module names: torchvision is
    not a dependency.  Weights do not matter here, only shapes."""

    class BasicBlock(nn.Module):
        def __init__(self, c_in: int, c_out: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c_out)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c_out)
            self.downsample = (
                nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
                if stride != 1 or c_in != c_out
                else None
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
            return self.relu(out + (self.downsample(x) if self.downsample is not None else x))

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            widths = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
            for i, (c_in, c_out, stride) in enumerate(widths, 1):
                setattr(self, f"layer{i}", nn.Sequential(BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out, 1)))
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(self.avgpool(x).flatten(1))

    return ResNet()


def sample_model(name: str) -> tuple[nn.Module, torch.Tensor]:
    """The model and input of each capture (manifest.json's factory, kwargs and input shape), smaller batch."""
    if name == "h200_smallcnn_annotated":
        return load_factory(str(SAMPLES / name / "capture_model.py") + ":make")(), torch.randn(2, 3, 64, 64)
    if name == "h200_resnet18":
        return resnet18(), torch.randn(1, 3, 224, 224)
    kwargs = json.loads((SAMPLES / name / "manifest.json").read_text())["factory_kwargs"]
    return nn.TransformerEncoderLayer(**kwargs), torch.randn(128, 2, 512)


def recorded_and_counted(model: nn.Module, x: torch.Tensor) -> tuple[LayerRecorder, dict[str, int]]:
    """One forward with the capture's recorder on and torch's FLOP counter around it."""
    recorder = LayerRecorder()
    annotator = ModelAnnotator(model.eval(), RangeBackend(use_nvtx=False, use_record_function=False), recorder=recorder)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        recorder.active = True
        model(x)
        recorder.active = False
    annotator.remove()
    root = type(model).__name__
    flops = {
        ("model" if k == root else k.removeprefix(root + ".")): sum(v.values())
        for k, v in counter.get_flop_counts().items()
        if k != "Global"
    }
    return recorder, flops


@pytest.mark.parametrize("name", CAPTURES)
def test_macs_of_each_sample_model_equal_torchs_flop_counter(name: str) -> None:
    recorder, flops = recorded_and_counted(*sample_model(name))
    ours: dict[str, int] = collections.Counter()
    for call in recorder.calls:
        ours[call.layer] += call.macs_inclusive  # the counter sums a module's calls too
        assert call.macs_complete, call.layer
    assert {k: 2 * v for k, v in ours.items() if v} == flops
    assert flops  # the counter saw the model's work


def test_resnet18_macs_are_the_known_total() -> None:
    """ResNet-18 at 224x224 is 1,814,073,344 MACs per image (the figure thop/fvcore report)."""
    recorder, _ = recorded_and_counted(*sample_model("h200_resnet18"))
    by = {c.layer: c for c in recorder.calls}
    assert by["model"].macs_inclusive == 1_814_073_344
    assert by["conv1"].macs == 64 * 112 * 112 * 3 * 49  # 7x7/2 conv 3->64 on 224 -> 112
    assert sum(c.module_type == "Conv2d" for c in recorder.calls) == 20


def test_transformer_macs_by_hand() -> None:
    recorder, _ = recorded_and_counted(*sample_model("h200_transformer"))
    by = {c.layer: c for c in recorder.calls}
    n, length, e, ff = 2, 128, 512, 2048
    attn = n * (4 * length * e * e + 2 * length * length * e)
    assert by["self_attn"].macs == attn
    assert by["linear1"].macs == by["linear2"].macs == n * length * e * ff
    assert by["model"].macs_inclusive == attn + 2 * n * length * e * ff
    assert by["self_attn"].input_shapes == [[128, 2, 512]] * 3


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
