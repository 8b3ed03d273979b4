"""Layers from the module frames of PyTorch traces recorded with stacks (``with_stack=True``): every GPU
operation launched inside an ``nn.Module: <Class>_<n>`` frame gets the open frames as its path, backward work the
forward op's frames through the autograd sequence number.

The reference here reads the raw JSON with ``json`` (numbers as ``Decimal``) and never calls the pipeline: a
kernel's launching call is the first runtime/driver call with its correlation id; the frames open on that call's
thread at its start are its frames, the latest started (of equal starts the shorter) the innermost.  A kernel
launched inside an autograd backward op (a ``Sequence number`` and ``Fwd thread id`` > 0) takes the frames open at
the start of the forward op with that number on its ``Fwd thread id``'s thread, unless a frame opened inside the
backward op encloses the launch (recomputed forward work under activation checkpointing).
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES, q

MODULE = "nn.Module: "
LLAMA = SAMPLES / "h100_llama_stack"
TRACES = {
    "llama_eager": LLAMA / "torch_trace.json.gz",  # our H100 capture: HF Llama training step, with_stack
    "mi300_ddp_checkpoint": SAMPLES / "external" / "tracelens_mi300_resnet_act_checkpoint.json.gz",
}


def ns(us: Decimal | int) -> int:
    return int((Decimal(us) * 1000).to_integral_value(ROUND_HALF_EVEN))


def events_of(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)["traceEvents"]


def open_frames(frames: list[tuple[int, int, str]], t: int) -> list[tuple[int, int, str]]:
    """The frames of one thread open at ``t`` (start <= t <= end), outermost first."""
    return sorted((f for f in frames if f[0] <= t <= f[1]), key=lambda f: (f[0], -f[1]))


def reference(path: Path) -> dict[int, tuple[str, list[str]]]:
    """correlation id -> (how the kernel was placed, the names of the frames it belongs to, outermost first):
    'frame' (open on the launching thread), 'link' (the linked forward op's), 'none'."""
    events = events_of(path)
    frames: dict[tuple, list[tuple[int, int, str]]] = defaultdict(list)
    launches: dict[int, tuple[tuple, int]] = {}
    backward: dict[tuple, list[tuple[int, int, int, object]]] = defaultdict(list)
    forward: dict[tuple[object, int], list[tuple[int, tuple]]] = defaultdict(list)
    for e in events:
        thread = (e.get("pid"), e.get("tid"))
        if e.get("ph") != "X":
            continue
        if e.get("cat") == "python_function" and e["name"].startswith(MODULE):
            frames[thread].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"].removeprefix(MODULE)))
        elif e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            c, t = e["args"]["correlation"], ns(e["ts"])
            if c not in launches or t < launches[c][1]:
                launches[c] = (thread, t)
        elif e.get("cat") == "cpu_op" and e.get("args", {}).get("Sequence number") is not None:
            a = e["args"]
            if (a.get("Fwd thread id") or 0) > 0:
                span = (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
                backward[thread].append((*span, a["Sequence number"], a["Fwd thread id"]))
            else:
                forward[(e.get("pid"), a["Sequence number"])].append((ns(e["ts"]), thread))
    out = {}
    for k in (e for e in events if e.get("cat") == "kernel"):
        c = k["args"].get("correlation")
        if c not in launches:
            out[c] = ("none", [])
            continue
        thread, t = launches[c]
        own = open_frames(frames[thread], t)
        bwd = [b for b in backward[thread] if b[0] <= t <= b[1]]
        if bwd:
            start, _, seq, _ = min(bwd)  # the outermost backward op
            if own and own[-1][0] >= start:  # a frame opened inside the backward op: recomputed forward work
                out[c] = ("frame", [f[2] for f in own])
                continue
            fwd = [f for f in forward[(thread[0], seq)] if f[0] <= start]
            if fwd:
                f_start, f_thread = max(fwd)
                out[c] = ("link", [f[2] for f in open_frames(frames[f_thread], f_start)])
                continue
        out[c] = ("frame", [f[2] for f in own]) if own else ("none", [])
    return out


@pytest.fixture(scope="module")
def normalized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    outs = {}
    for name, path in TRACES.items():
        out = tmp_path_factory.mktemp(name)
        normalize_file(path, out)
        outs[name] = out
    return outs


@pytest.mark.parametrize("name", TRACES)
def test_kernels_in_module_frames_get_their_frames(name: str, normalized: dict[str, Path]) -> None:
    want = reference(TRACES[name])
    got = {
        c: (p, lay, ps)
        for c, p, lay, ps in connect(normalized[name])
        .sql("SELECT correlation_id, path, layer, pass FROM kernel_layers WHERE correlation_id IS NOT NULL")
        .fetchall()
    }
    placed = {c: w for c, w in want.items() if w[0] != "none" and w[1]}
    assert len(placed) > 100
    misses = []
    for c, (how, names) in placed.items():
        path = got[c][0]
        steps = (path or "").split("/")
        # every frame of the reference is on the path, in order, and no other frame is (so the innermost frame on
        # the path is the reference's)
        frames_on_path = [s for s in steps if s in set(names)]
        if frames_on_path != names:
            misses.append((c, how, names, path))
    assert misses == []


def test_backward_kernels_of_the_llama_step_sit_on_modules(normalized: dict[str, Path]) -> None:
    # A training step's backward: every kernel of autograd's thread is `backward`, and (by the link) on the module
    # path of its forward op; the HF model's whole step is inside LlamaForCausalLM_0.
    rows = (
        connect(normalized["llama_eager"])
        .sql(
            "SELECT pass, count(*), count(*) FILTER (WHERE path LIKE 'LlamaForCausalLM_0%'), sum(duration_ns), "
            "sum(duration_ns) FILTER (WHERE path LIKE 'LlamaForCausalLM_0%') FROM kernel_layers GROUP BY pass"
        )
        .fetchall()
    )
    by_pass = {r[0]: r[1:] for r in rows}
    n, on_model, ns_all, ns_model = by_pass["backward"]
    assert n == on_model and ns_all == ns_model
    want = reference(TRACES["llama_eager"])
    assert n == sum(1 for how, _ in want.values() if how == "link")


def test_module_frames_nest_with_record_function_and_steps(tmp_path: Path) -> None:
    # ProfilerStep#N and record_function ranges nest with module frames by time on their thread: a hand-built
    # trace (times in us) with a step, a user range around the model call, the model and a Linear inside it.
    def x(cat: str, name: str, ts: int, dur: int, tid: int = 1, **args: object) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}

    trace = {
        "traceEvents": [
            x("user_annotation", "ProfilerStep#7", 0, 100),
            x("user_annotation", "forward", 5, 80),
            x("python_function", "nn.Module: Net_0", 10, 60),
            x("python_function", "nn.Module: Linear_0", 20, 20),
            x("python_function", "torch/nn/modules/linear.py(125): forward", 21, 18),
            x("cpu_op", "aten::linear", 22, 10, **{"External id": 1}),
            x("cuda_runtime", "cudaLaunchKernel", 25, 2, correlation=11, **{"External id": 1}),
            x("cuda_runtime", "cudaLaunchKernel", 50, 2, correlation=12),  # in Net_0, after Linear_0 returned
            x("cuda_runtime", "cudaLaunchKernel", 90, 2, correlation=13),  # outside the model, in the step
            *[
                x("kernel", f"k{c}", 200 + 10 * i, 5, tid=7, correlation=c, device=0, stream=7)
                for i, c in enumerate((11, 12, 13))
            ],
        ]
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    out = tmp_path / "out"
    normalize_file(path, out)
    got = connect(out).sql("SELECT name, layer, path, pass FROM kernel_layers ORDER BY name").fetchall()
    assert got == [
        ("k11", "Linear_0", "ProfilerStep#7/forward/Net_0/Linear_0", "forward"),
        ("k12", "Net_0", "ProfilerStep#7/forward/Net_0", "forward"),
        ("k13", "ProfilerStep#7", "ProfilerStep#7", "forward"),
    ]
    # the frame that is no module call stays out of the ranges; the module frames keep their source
    assert q(out, "SELECT text, source FROM nvtx_ranges WHERE source = 'nn.Module' ORDER BY start_ns") == [
        ("Net_0", "nn.Module"),
        ("Linear_0", "nn.Module"),
    ]

    # A trace of tracepipe capture (marked in its metadata) names its layers by qualified name: frames are not layers
    trace["tracepipe_capture"] = "1"
    path.write_text(json.dumps(trace))
    marked = tmp_path / "marked"
    normalize_file(path, marked)
    assert q(marked, "SELECT count(*) FROM nvtx_ranges WHERE source = 'nn.Module'") == [(0,)]


def test_compiled_graph_marker_is_an_op_not_a_layer(tmp_path: Path) -> None:
    # Inductor's `## Call CompiledFxGraph <key> ##` range marks the call of a compiled graph: the kernels inside
    # keep the module around it as their layer, and the marker is an op (its key names the graph).
    def x(cat: str, name: str, ts: int, dur: int, **args: object) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}

    trace = {
        "traceEvents": [
            x("python_function", "nn.Module: LlamaForCausalLM_0", 0, 100),
            x("user_annotation", "## Call CompiledFxGraph fabc123 ##", 10, 50),
            x("cuda_driver", "cuLaunchKernel", 20, 2, correlation=5),
            {
                "ph": "X",
                "cat": "kernel",
                "name": "triton_poi_fused_add_0",
                "pid": 0,
                "tid": 7,
                "ts": 200,
                "dur": 3,
                "args": {"correlation": 5, "device": 0, "stream": 7},
            },
        ]
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(trace))
    out = tmp_path / "out"
    normalize_file(path, out)
    assert connect(out).sql("SELECT layer, path FROM kernel_layers").fetchall() == [
        ("LlamaForCausalLM_0", "LlamaForCausalLM_0")
    ]
    assert q(out, "SELECT name, start_ns, end_ns FROM ops") == [("## Call CompiledFxGraph fabc123 ##", 10000, 60000)]
