"""The capture stage on CPU: MACs by hand and against torch's FLOP counter, range names and nesting, manifest.

The profilers themselves only run on the GPU host; what runs here is every
profiler-free path: the hooks (with the NVTX and record_function calls
replaced by recorders), the shape pass, the manifest, the layer_shapes
normalizer, and one real ``tracepipe capture torch --device cpu`` run whose
chrome trace is read back with plain json.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from click.testing import CliRunner
from torch.utils.flop_counter import FlopCounterMode

from pipeline.capture import macs
from pipeline.capture.annotate import GlobalAnnotator, LayerRecorder, ModelAnnotator, RangeBackend, name_depth
from pipeline.capture.cli import NCU_METRICS, capture_ncu, make_job, requested_metrics, user_script
from pipeline.capture.manifest import build_manifest
from pipeline.capture.runner import load_factory
from pipeline.cli import main
from pipeline.errors import BadInputError
from pipeline.normalize import normalize_file
from pipeline.normalize.source import detect_format
from tests.conftest import SAMPLES, q


class Recorder(RangeBackend):
    """A RangeBackend whose NVTX and record_function calls are recorded instead of made."""

    def __init__(self) -> None:
        super().__init__(use_nvtx=False, use_record_function=False)
        self.events: list[str] = []

    def push(self, name: str) -> None:
        self.events.append(f"+{name}")
        super().push(name)

    def pop(self) -> None:
        self.events.append("-")
        super().pop()


def SmallCNN() -> nn.Module:
    """The model of sample_traces/h200_smallcnn*, loaded from the capture's own factory file (the one
    `tracepipe capture -m capture_model.py:make` ran), so the test and the sample cannot drift apart.
    Note ``relu`` is called twice per forward."""
    return load_factory(f"{SAMPLES / 'h200_smallcnn_annotated' / 'capture_model.py'}:make")()


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(8 * 6 * 6, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stem(x))


# ---------------------------------------------------------------- MACs


def test_conv_macs_by_hand() -> None:
    # Conv2d(3->16, k3, pad 1) on 8x3x64x64: 8 * 16 * 64*64 * 3 * 9
    assert macs.conv_macs(8, 3, 16, (64, 64), (3, 3)) == 14_155_776
    # groups 4, stride 2, padding 2, dilation 2 on 17x17: out = (17 + 4 - 2*2 - 1) // 2 + 1 = 9
    assert macs.conv_macs(2, 32, 64, (9, 9), (3, 3), groups=4) == 2 * 64 * 81 * 8 * 9 == 746_496
    # Conv1d and Conv3d: same rule, other spatial ranks.
    assert macs.conv_macs(4, 6, 12, (98,), (3,), groups=3) == 4 * 12 * 98 * 2 * 3
    assert macs.conv_macs(1, 2, 4, (3, 4, 5), (1, 2, 3)) == 4 * 60 * 2 * 6
    with pytest.raises(ValueError):
        macs.conv_macs(1, 3, 6, (4, 4), (3, 3), groups=2)


@pytest.mark.parametrize(
    ("module", "shape"),
    [
        (nn.Conv2d(32, 64, 3, stride=2, padding=2, dilation=2, groups=4), (2, 32, 17, 17)),
        (nn.Conv1d(6, 12, 3, groups=3), (4, 6, 100)),
        (nn.Conv3d(2, 4, (1, 2, 3), padding=(0, 1, 1)), (1, 2, 3, 4, 5)),
        (nn.Conv2d(4, 8, 3, padding="same"), (2, 4, 7, 9)),
        (nn.Linear(32, 10), (4, 5, 32)),
        (nn.MultiheadAttention(64, 4), (16, 2, 64)),
    ],
)
def test_module_macs_match_torch_flop_counter(module: nn.Module, shape: tuple[int, ...]) -> None:
    """torch's FlopCounterMode counts 2 FLOPs per MAC for conv, addmm and bmm: an independent check."""
    x = torch.randn(*shape)
    args = (x, x, x) if isinstance(module, nn.MultiheadAttention) else (x,)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        out = module(*args)
    assert macs.module_macs(module, args, {}, out) * 2 == counter.get_total_flops()


def test_linear_by_hand() -> None:
    assert macs.linear_macs((4, 5, 32), 32, 10) == 4 * 5 * 32 * 10
    with pytest.raises(ValueError):
        macs.linear_macs((4, 5, 31), 32, 10)


def test_mha_macs_by_hand_and_layout() -> None:
    # N=2, L=S=16, E=64: 2 * (4 * 16*64*64 + 2 * 16*16*64)
    assert macs.mha_macs((16, 2, 64), (16, 2, 64), (16, 2, 64), 64, 4) == 589_824
    assert macs.mha_macs((2, 16, 64), (2, 16, 64), (2, 16, 64), 64, 4, batch_first=True) == 589_824
    # cross-attention with other key/value widths: S=10, kdim=32, vdim=48
    n, length, s, e = 3, 7, 10, 64
    expect = n * (length * e * e + s * 32 * e + s * 48 * e + 2 * length * s * e + length * e * e)
    assert macs.mha_macs((length, n, e), (s, n, 32), (s, n, 48), e, 8, kdim=32, vdim=48) == expect


def test_elementwise_types_are_zero_and_unknown_leaves_none() -> None:
    x = torch.randn(1, 2, 4, 4)
    for m in (nn.ReLU(), nn.MaxPool2d(2), nn.BatchNorm2d(2), nn.Dropout(), nn.Identity()):
        assert macs.module_macs(m, (x,), {}, m.eval()(x)) == 0, type(m).__name__

    class Mystery(nn.Module):
        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return t @ t.transpose(-1, -2)

    assert macs.module_macs(Mystery(), (x,), {}, x) is None


# ---------------------------------------------------------------- annotation


def test_ranges_are_qualified_names_nested_and_hooks_return_none() -> None:
    model = SmallCNN().eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        expected = model(x)
    rec = Recorder()
    ann = ModelAnnotator(model, rec, root_name="model")
    with torch.no_grad():
        got = model(x)
    assert torch.equal(got, expected)  # the hooks changed nothing
    pairs = ["+conv1", "-", "+relu", "-", "+conv2", "-", "+relu", "-", "+pool", "-", "+fc", "-"]
    assert rec.events == ["+model", *pairs, "-"]
    # A pre-hook returning a value would replace the input: every hook must return None.
    module = model.conv1
    for hook in module._forward_pre_hooks.values():
        assert hook(module, (x,), {}) is None
    for hook in module._forward_hooks.values():
        assert hook(module, (x,), x) is None
    ann.remove()
    rec.events.clear()
    with torch.no_grad():
        model(x)
    assert rec.events == []


def test_depth_limit_and_sequential_names() -> None:
    model = Nested().eval()
    rec = Recorder()
    ModelAnnotator(model, rec, root_name="net", depth=1)
    with torch.no_grad():
        model(torch.randn(1, 3, 8, 8))
    assert rec.events == ["+net", "+stem", "-", "+head", "-", "-"]
    assert [name_depth(n) for n in ("", "stem", "stem.0", "layer1.0.conv1")] == [0, 1, 2, 3]

    rec = Recorder()
    recorder = LayerRecorder()
    recorder.active = True
    ModelAnnotator(Nested().eval(), rec, recorder=recorder)
    with torch.no_grad():
        model2 = Nested().eval()
        ModelAnnotator(model2, Recorder(), recorder=recorder)
        model2(torch.randn(1, 3, 8, 8))
    rows = {(c.layer, c.call_index): c for c in recorder.calls}
    assert [c.layer for c in recorder.calls] == ["model", "stem", "stem.0", "stem.1", "head", "head.0", "head.1"]
    assert (rows[("stem.0", 0)].parent, rows[("head.1", 0)].parent, rows[("model", 0)].parent) == (
        "stem",
        "head",
        None,
    )
    conv = rows[("stem.0", 0)]
    assert (conv.input_shapes, conv.input_dtypes, conv.output_shapes) == ([[1, 3, 8, 8]], ["float32"], [[1, 8, 6, 6]])
    assert conv.macs == 1 * 8 * 36 * 3 * 9
    assert rows[("head.1", 0)].macs == 288 * 4
    root = rows[("model", 0)]
    assert root.macs is None  # a custom module's own forward is not analysed ...
    assert root.macs_inclusive == conv.macs + 288 * 4 and root.macs_complete  # ... its children explain it
    assert root.params == sum(p.numel() for p in model2.parameters())


def test_reused_module_gets_call_indices() -> None:
    recorder = LayerRecorder()
    recorder.active = True
    model = SmallCNN().eval()
    ModelAnnotator(model, Recorder(), recorder=recorder)
    with torch.no_grad():
        model(torch.randn(2, 3, 8, 8))
    relus = [(c.call_index, c.call_seq, c.input_shapes) for c in recorder.calls if c.layer == "relu"]
    assert relus == [(0, 2, [[2, 16, 8, 8]]), (1, 4, [[2, 32, 8, 8]])]


def test_global_hooks_name_modules_of_an_unseen_model() -> None:
    rec = Recorder()
    ann = GlobalAnnotator(rec, root_name="model")
    try:
        with torch.no_grad():
            Nested().eval()(torch.randn(1, 3, 8, 8))
            nn.ReLU()(torch.randn(2))  # a second root
    finally:
        ann.remove()
    first = ["+model", "+stem", "+stem.0", "-", "+stem.1", "-", "-", "+head", "+head.0", "-", "+head.1", "-", "-", "-"]
    assert rec.events == [*first, "+model_1", "-"]


def test_record_function_ranges_reach_the_chrome_trace(tmp_path: Path) -> None:
    """The real backend on CPU: ranges appear as user_annotation events named by module (read with json)."""
    model = SmallCNN().eval()
    backend = RangeBackend()  # real nvtx (a no-op without a tool) and record_function
    ModelAnnotator(model, backend)
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof, backend.range("step"):
        model(torch.randn(2, 3, 8, 8))
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    names = [e["name"] for e in events if e.get("cat") == "user_annotation"]
    assert sorted(names) == sorted(["step", "model", "conv1", "relu", "conv2", "relu", "pool", "fc"])
    spans = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "user_annotation"}
    assert spans["step"][0] <= spans["model"][0] <= spans["conv1"][0] <= spans["conv1"][1] <= spans["model"][1]


# ---------------------------------------------------------------- CLI, manifest, normalizer


def test_user_script_command_and_help() -> None:
    assert user_script(("python3", "train.py", "--x")) == ["train.py", "--x"]
    assert user_script(("/usr/bin/python3.12", "a.py")) == ["a.py"]
    with pytest.raises(Exception, match=r"python script\.py"):
        user_script(("bash", "run.sh"))
    result = CliRunner().invoke(main, ["capture", "ncu", "--help"])
    assert result.exit_code == 0 and "--launch-count" in result.output and "--nvtx-include" in result.output


def test_manifest_fields_from_probes() -> None:
    answers = {
        "nvidia-smi": "0, NVIDIA H200, 580.159.04, 143771, GPU-abc, 00000000:00:05.0",
        "/opt/ncu": "NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 (build 1)",
    }
    m = build_manifest(
        capture_id="cap1",
        command=["tracepipe", "capture", "all"],
        model="torchvision.models:resnet18",
        factory_kwargs=None,
        input_shapes=[[8, 3, 224, 224]],
        dtype="float32",
        warmup=3,
        iters=3,
        root_name="model",
        depth=None,
        tools={"ncu": "/opt/ncu", "nsys": None},
        steps=[{"step": "shapes", "ok": True}],
        run=lambda cmd: answers.get(cmd[0]),
        with_torch=False,
    )
    assert m["gpus"] == [
        {
            "index": "0",
            "name": "NVIDIA H200",
            "driver_version": "580.159.04",
            "memory_total_mib": "143771",
            "uuid": "GPU-abc",
            "pci_bus_id": "00000000:00:05.0",
        }
    ]
    assert m["driver_version"] == "580.159.04"
    assert m["versions"]["ncu_version"] == "Version 2025.3.1.0 (build 1)"
    assert m["versions"]["nsys_version"] is None
    assert (m["capture_id"], m["model"], m["input_shapes"], m["command"]) == (
        "cap1",
        "torchvision.models:resnet18",
        [[8, 3, 224, 224]],
        ["tracepipe", "capture", "all"],
    )


@pytest.fixture(scope="module")
def cpu_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real ``tracepipe capture torch`` on CPU of the small CNN (shape pass + profiler run)."""
    out = tmp_path_factory.mktemp("caps") / "cpu_smallcnn"
    model = Path(__file__).resolve().parents[1] / "sample_traces/h200_smallcnn_annotated/capture_model.py"
    args = ["capture", "torch", "-m", f"{model}:make", "-i", "2,3,16,16", "-o", str(out), "--device", "cpu"]
    result = CliRunner().invoke(main, [*args, "--warmup", "1", "--iters", "2"])
    assert result.exit_code == 0, result.output
    return out


def test_cpu_capture_writes_trace_layers_and_manifest(cpu_capture: Path) -> None:
    with gzip.open(cpu_capture / "torch_trace.json.gz") as f:
        trace = json.load(f)
    names = [e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]
    # 2 measured steps, each: step, model, conv1, relu x2, conv2, pool, fc; warm-up and shape pass not recorded.
    assert {n: names.count(n) for n in set(names)} == {
        "step": 2,
        "model": 2,
        "conv1": 2,
        "relu": 4,
        "conv2": 2,
        "pool": 2,
        "fc": 2,
    }
    manifest = json.loads((cpu_capture / "manifest.json").read_text())
    assert manifest["input_shapes"] == [[2, 3, 16, 16]] and manifest["measured_iters"] == 2
    assert [s["step"] for s in manifest["steps"]] == ["shapes", "torch profiler"]
    assert all(s["ok"] for s in manifest["steps"]) and manifest["versions"]["torch"] == torch.__version__


def test_layer_shapes_normalize(cpu_capture: Path, tmp_path: Path) -> None:
    path = cpu_capture / "layer_shapes.json"
    assert detect_format(path) == "layer-shapes"
    raw = json.loads(path.read_text())["layers"]
    out = tmp_path / "norm"
    result = normalize_file(path, out)
    assert result.trace_id == "cpu_smallcnn.layer_shapes" and result.rows["layer_shapes"] == len(raw) == 7
    rows = q(
        out, "SELECT capture_id, layer, call_index, module_type, macs, input_shapes FROM layer_shapes ORDER BY call_seq"
    )
    assert rows[0] == ("cpu_smallcnn", "model", 0, "Net", None, "[[2,3,16,16]]")
    assert rows[1] == ("cpu_smallcnn", "conv1", 0, "Conv2d", 2 * 16 * 256 * 27, "[[2,3,16,16]]")
    assert [(r[1], r[2]) for r in rows if r[1] == "relu"] == [("relu", 0), ("relu", 1)]
    total = q(out, "SELECT macs_inclusive FROM layer_shapes WHERE layer = 'model'")[0][0]
    assert total == sum(r["macs"] for r in raw if r["macs"] is not None)


def test_layer_shapes_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "layer_shapes.json"
    bad.write_text('{"tracepipe_layers": 1, "layers": [{"layer": "conv1"}]}')
    with pytest.raises(BadInputError, match="lacks call_index, module_type"):
        normalize_file(bad, tmp_path / "out")
    bad.write_text('{"tracepipe_layers": 99, "layers": []}')
    with pytest.raises(BadInputError, match="newer"):
        normalize_file(bad, tmp_path / "out")
    assert not (tmp_path / "out" / "layer_shapes").exists()


def test_sm_counters_and_metrics_passthrough_reach_ncu(tmp_path: Path) -> None:
    """A stand-in ncu records its argv: --sm-counters adds the .min/.max/.avg/.sum SM counters, --metrics
    passes names through (comma lists split), names the tool does not list are dropped."""
    log = tmp_path / "argv.json"
    fake = tmp_path / "ncu"
    fake.write_text(
        "#!/usr/bin/env python3\nimport json, sys, pathlib\n"
        "a = sys.argv[1:]\n"
        "if '--query-metrics' in a:\n"
        '    print(\'"Metric Name","Metric Type"\')\n'
        "    for n in ('sm__cycles_active', 'sm__inst_executed', 'sm__ctas_launched', 'sm__warps_launched',\n"
        "              'smsp__sass_thread_inst_executed_op_ffma_pred_on', 'dram__bytes'):\n"
        '        print(f\'"{n}","Counter"\')\n'
        "    sys.exit(0)\n"
        "if '--import' in a:\n"
        '    print(\'"ID","Process ID"\'); sys.exit(0)\n'
        f"pathlib.Path({str(log)!r}).write_text(json.dumps(a))\n"
        "pathlib.Path(a[a.index('-o') + 1] + '.ncu-rep').write_text('')\n"
    )
    fake.chmod(0o755)
    out = tmp_path / "cap"
    (out).mkdir()
    (out / "layer_shapes.json").write_text("{}")
    job = make_job(
        {
            "out": out,
            "model": "m:f",
            "factory_kwargs": "",
            "input_shape": ("1,2",),
            "device": "cpu",
            "dtype": "float32",
            "warmup": 0,
            "iters": 1,
            "root_name": "model",
            "step_name": "step",
            "depth": None,
            "script": (),
            "lib_dir": None,
            "gzip_sqlite": True,
        }
    )
    job.tools["ncu"] = str(fake)
    capture_ncu(job, 0, (), False, sm_counters=True, extra_metrics=("dram__bytes.sum,no__such.sum", "dram__bytes.sum"))
    argv = json.loads(log.read_text())
    metrics = argv[argv.index("--metrics") + 1].split(",")
    for counter in ("sm__cycles_active", "sm__inst_executed", "sm__ctas_launched", "sm__warps_launched"):
        for stat in ("min", "max", "avg", "sum"):
            assert f"{counter}.{stat}" in metrics
    assert "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum" in metrics
    assert metrics.count("dram__bytes.sum") == 1 and "no__such.sum" not in metrics
    assert "--section" in argv and "LaunchStats" in argv
    assert requested_metrics(False, ()) == list(NCU_METRICS)


EXITING_SCRIPT = """
import sys
import torch


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    return STATUS


if __name__ == "__main__":
    sys.exit(main())
"""


@pytest.mark.parametrize("status", [0, 3])
def test_a_script_ending_in_sys_exit_keeps_its_trace(tmp_path: Path, status: int) -> None:
    # `sys.exit(main())` raises SystemExit even on success: it skipped the trace's export, and the capture failed
    # (exit 1, "the PyTorch profiler run failed") with nothing to read. The trace is written either way; a non-zero
    # status is the script's, and the capture says so.
    script = tmp_path / "train.py"
    script.write_text(EXITING_SCRIPT.replace("STATUS", str(status)))
    out = tmp_path / "cap"
    args = ["capture", "torch", "--device", "cpu", "-o", str(out), "--", "python", str(script)]
    result = CliRunner().invoke(main, args)
    trace = json.loads((out / "torch_trace.json").read_text())
    names = [e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]
    # by hand: 2 steps of the root Sequential and its two children, 2 optimizer steps (and PyTorch's own ranges)
    assert {n: names.count(n) for n in set(names)} == {
        "model": 2, "0": 2, "1": 2, "optimizer": 2, "Optimizer.step#SGD.step": 2, "Optimizer.zero_grad#SGD.zero_grad": 2
    }  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["measured_iters"] is None and manifest["warmup_iters"] is None  # the script ran its own steps
    if status == 0:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 1
        assert "the PyTorch profiler run exited with status 3" in result.output


def test_a_scheduled_profilers_late_export_is_refused_saying_where_to_export(tmp_path: Path) -> None:
    # A user's own profiler with a schedule, exported after the with block: PyTorch hands each finished cycle to
    # on_trace_ready, and the late export holds no op (a new-user review). The refusal said only "record with
    # torch.profiler.profile(...) and export_chrome_trace", which the user had done.
    from torch.profiler import ProfilerActivity, profile, schedule

    model = torch.nn.Linear(8, 8)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2)) as prof:
        for _ in range(3):
            model(torch.randn(2, 8)).sum().backward()
            prof.step()
    prof.export_chrome_trace(str(tmp_path / "late.json"))
    events = json.loads((tmp_path / "late.json").read_text())["traceEvents"]
    assert not [e for e in events if e.get("cat") == "cpu_op"]  # the real export: no op in it
    with pytest.raises(BadInputError, match="with a schedule, export in on_trace_ready"):
        normalize_file(tmp_path / "late.json", tmp_path / "n")
