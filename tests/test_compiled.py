"""torch.compile'd models: capture works (the CPU repro of the crash runs in CI), the capture's side file says
which module each compiled launch computes, and the attribution puts each compiled kernel on that module.

References: the small model of ``sample_traces/cpu_compiled_train/compiled_script.py`` read by hand (which module
each op of its forward is in), Inductor's own provenance in the side file read with plain Python, and a
hand-built trace whose answer is written out.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES, q

CPU = SAMPLES / "cpu_compiled_train"


def test_capture_of_a_compiled_script_runs_and_records_its_graphs(tmp_path: Path) -> None:
    # Before: the global module hooks ran inside Dynamo's tracing and crashed it ("... is already tracked for
    # mutation"). Now the hooks do nothing while Dynamo traces, and the region compiles as one graph (a hook
    # breaking it would make more graphs), forward and backward recorded.
    out = tmp_path / "cap"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "capture", "torch", "--device", "cpu", "-o", str(out), "--",
         "python", str(CPU / "compiled_script.py")],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "compiled_kernels.json").read_text())
    assert [g["aot_graph"] for g in doc["graphs"]] == ["0_forward", "0_backward"]
    assert all("def call(" in g["call"] for g in doc["graphs"])
    assert all(g["key"] for g in doc["graphs"]) and doc["problems"] == []
    trace = json.loads((out / "torch_trace.json").read_text())
    assert trace["tracepipe_capture"] == "1"
    names = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"}
    assert {"model", "optimizer"} <= names  # the compiled model's root range, and the optimizer hooks' range
    assert {f"## Call CompiledFxGraph {g['key']} ##" for g in doc["graphs"]} <= names


# The forward of compiled_script.py's Net, by hand: per Block, fc1 (a GEMM), act (GELU), fc2 (a GEMM), then the
# residual add (Block.forward itself) and norm (LayerNorm), which Inductor fuses into one kernel: blocks.N's; the
# head's GEMM last.
FORWARD_BY_HAND = [
    ("aten::addmm", "blocks.0.fc1"),
    ("cpp_fused_gelu_0", "blocks.0.act"),
    ("aten::addmm", "blocks.0.fc2"),
    ("cpp_fused_add_native_layer_norm_1", "blocks.0"),
    ("aten::addmm", "blocks.1.fc1"),
    ("cpp_fused_gelu_0", "blocks.1.act"),
    ("aten::addmm", "blocks.1.fc2"),
    ("cpp_fused_add_native_layer_norm_native_layer_norm_backward_2", "blocks.1"),
    ("aten::addmm", "head"),
]


@pytest.fixture(scope="module")
def cpu_compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cpu_compiled")
    normalize_file(CPU / "compiled_kernels.json", out)
    return out


def test_forward_launches_sit_on_the_modules_read_by_hand(cpu_compiled: Path) -> None:
    rows = q(
        cpu_compiled,
        "SELECT launch_name, module FROM compiled_kernels WHERE graph = 'forward' ORDER BY launch_index",
    )
    assert rows == FORWARD_BY_HAND


def provenance_modules(doc: dict) -> dict[tuple[str, str], set[str]]:
    """(graph key, debug handle) -> the innermost modules of the post-grad nodes Inductor's provenance gives the
    launch (a backward node, which has no module stack, takes the modules of the forward nodes of its autograd
    sequence number)."""
    by_seq: dict[tuple, set] = {}
    for g in doc["graphs"]:
        for node in g["nodes"].values():
            if node["modules"] and node["seq_nr"] is not None:
                by_seq.setdefault((g["compile_id"], node["seq_nr"]), set()).add(node["modules"][-1])
    out = {}
    for g in doc["graphs"]:
        for handle, names in g["provenance"].items():
            mods: set[str] = set()
            for name in names:
                node = g["nodes"].get(name, {})
                if node.get("modules"):
                    mods.add(node["modules"][-1])
                elif node.get("seq_nr") is not None:
                    mods |= by_seq.get((g["compile_id"], node["seq_nr"]), set())
            out[(g["key"], handle)] = mods
    return out


def test_every_launch_lists_the_modules_of_inductors_provenance(cpu_compiled: Path) -> None:
    doc = json.loads((CPU / "compiled_kernels.json").read_text())
    want = provenance_modules(doc)
    rows = q(cpu_compiled, "SELECT graph_key, handle, modules FROM compiled_kernels")
    got = {(k, h): set(json.loads(m)) for k, h, m in rows}
    # every launch of call() has its handle in Inductor's provenance, and no launch was missed
    assert len(got) == len(want) == sum(len(g["provenance"]) for g in doc["graphs"]) > 20
    assert got == want
    # backward launches: each one's modules come through the sequence number (the backward graph's own nodes have
    # no module stack), and the weight-gradient GEMMs of fc1/fc2 sit on those modules
    back = q(cpu_compiled, "SELECT launch_name, module FROM compiled_kernels WHERE graph = 'backward'")
    assert ("aten::mm", "blocks.0.fc1") in back and ("aten::mm", "head") in back


def test_compiled_kernels_go_down_their_module_chain(tmp_path: Path) -> None:
    # A hand-built PyTorch trace of one compiled call: the root range `model` (the compiled module), Inductor's
    # `## Call CompiledFxGraph k1 ##`, two launches of the same Triton kernel and one extern GEMM; the side file
    # says launch 0 (the kernel's first occurrence) computes layers.0.mlp, its second occurrence layers.1.mlp, and
    # the GEMM (aten::mm) layers.0.attn.q.  A kernel launched in the call but outside every statement stays on
    # `model`.  Times in us.
    def x(cat: str, name: str, ts: int, dur: int, **args: object) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}

    def kernel(name: str, ts: int, corr: int) -> dict:
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 2,
                "args": {"correlation": corr, "device": 0, "stream": 7}}  # fmt: skip

    trace = {
        "tracepipe_capture": "1",
        "traceEvents": [
            x("user_annotation", "model", 0, 100),
            x("user_annotation", "## Call CompiledFxGraph k1 ##", 10, 80),
            x("cpu_op", "triton_poi_fused_add_0", 20, 5),
            x("cuda_driver", "cuLaunchKernel", 21, 1, correlation=1),
            x("cpu_op", "aten::mm", 30, 5),
            x("cuda_runtime", "cudaLaunchKernel", 31, 1, correlation=2),
            x("cpu_op", "triton_poi_fused_add_0", 40, 5),
            x("cuda_driver", "cuLaunchKernel", 41, 1, correlation=3),
            x("cuda_runtime", "cudaMemsetAsync", 50, 1, correlation=4),
            kernel("triton_poi_fused_add_0", 200, 1),
            kernel("sm90_gemm", 210, 2),
            kernel("triton_poi_fused_add_0", 220, 3),
            kernel("other", 230, 4),
        ],
    }

    call = """    def call(self, args):
        buf0 = empty_strided_cuda((4, 4), (4, 1), torch.float32)
        # Topologically Sorted Source Nodes: [a], Original ATen: [aten.add]
        # [Provenance debug handles] triton_poi_fused_add_0:1
        stream0 = get_raw_stream(0)
        triton_poi_fused_add_0.run(buf0, 16, stream=stream0)
        # Topologically Sorted Source Nodes: [b], Original ATen: [aten.mm]
        # [Provenance debug handles] extern_kernels.mm:2
        extern_kernels.mm(buf0, buf0, out=buf1)
        # [Provenance debug handles] triton_poi_fused_add_0:3
        triton_poi_fused_add_0.run(buf1, 16, stream=stream0)
        return (buf1, )
"""
    side = {
        "tracepipe_compiled": 2,
        "root_name": "model",
        "graphs": [
            {
                "key": "k1",
                "compile_id": "0/0",
                "aot_graph": "0_forward",
                "nodes": {
                    "a": {"modules": ["layers.0", "layers.0.mlp"], "seq_nr": 1},
                    "b": {"modules": ["layers.0", "layers.0.attn", "layers.0.attn.q"], "seq_nr": 2},
                    "c": {"modules": ["layers.1", "layers.1.mlp"], "seq_nr": 3},
                },
                "call": call,
                "provenance": {
                    "triton_poi_fused_add_0:1": ["a"],
                    "extern_kernels.mm:2": ["b"],
                    "triton_poi_fused_add_0:3": ["c"],
                },
            }
        ],
    }
    (tmp_path / "cap").mkdir()
    (tmp_path / "cap" / "trace.json").write_text(json.dumps(trace))
    (tmp_path / "cap" / "compiled_kernels.json").write_text(json.dumps(side))
    out = tmp_path / "out"
    for name in ("trace.json", "compiled_kernels.json"):
        normalize_file(tmp_path / "cap" / name, out)
    got = connect(out).sql("SELECT name, layer, path, depth, pass FROM kernel_layers ORDER BY start_ns").fetchall()
    assert got == [
        ("triton_poi_fused_add_0", "layers.0.mlp", "model/layers.0/layers.0.mlp", 2, "forward"),
        ("sm90_gemm", "layers.0.attn.q", "model/layers.0/layers.0.attn/layers.0.attn.q", 3, "forward"),
        ("triton_poi_fused_add_0", "layers.1.mlp", "model/layers.1/layers.1.mlp", 2, "forward"),
        ("other", "model", "model", 0, "forward"),
    ]
