"""What a trace lacks for per-layer answers, said by normalize and by analyze (`layer_coverage`,
`analysis_warnings`), with the capture that would give it: figures against plain readings of the raw files."""

from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES

NSYS = SAMPLES / "h100_llama_nsys"
LLAMA = SAMPLES / "h100_llama_stack" / "torch_trace.json.gz"


def coverage(out: Path) -> dict:
    con = connect(out)
    row = con.sql("SELECT * FROM layer_coverage").fetchall()
    assert len(row) == 1
    return dict(zip([c[0] for c in con.sql("SELECT * FROM layer_coverage").description], row[0], strict=True))


def gpu_ns_of_export(path: Path, tmp: Path) -> int:
    plain = tmp / "raw.sqlite"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    db = sqlite3.connect(plain)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    total = sum(
        db.execute(f'SELECT coalesce(sum("end" - start), 0) FROM {t}').fetchone()[0]
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
        if t in tables
    )
    db.close()
    return total


def test_plain_nsys_trace_lacks_every_layer_and_says_the_fix(tmp_path: Path) -> None:
    path = NSYS / "plain.sqlite.gz"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "normalize", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0
    # normalize says it at once, naming the file and the capture that would give layers
    [line] = [s for s in proc.stderr.splitlines() if "no layer" in s]
    assert str(path) in line and "nsys profile --pytorch=functions-trace,autograd-nvtx" in line
    # nsys traces any CUDA program (real exports of OpenMP offload and Julia had none of PyTorch): ranges first
    assert "fix: open NVTX ranges (nvtxRangePush/Pop) around the code" in line
    got = coverage(tmp_path / "out")
    gpu_ns = gpu_ns_of_export(path, tmp_path)
    assert (got["gpu_ns"], got["layered_ns"], got["no_layer_ns"], got["no_layer_pct"]) == (gpu_ns, 0, gpu_ns, 100.0)
    assert got["lack"] == "no_layers" and "tracepipe capture nsys" in got["fix"]
    warnings = connect(tmp_path / "out").sql("SELECT message FROM analysis_warnings WHERE view = 'layer_coverage'")
    [(message,)] = warnings.fetchall()
    assert message.startswith("100.0% of GPU time") and "--pytorch=functions-trace" in message


def test_functions_trace_lacks_the_models_own_module_classes(tmp_path: Path) -> None:
    # Layers there are torch's own classes only (Linear, Embedding; tests/test_nsys_pytorch.py checks them), plus
    # the optimizer pass: everything else -- RMSNorm, attention, the loss -- has none, and only a capture that
    # ranges every module call gives it one.
    normalize_file(NSYS / "functions_trace.sqlite.gz", tmp_path / "out")
    got = coverage(tmp_path / "out")
    layered = connect(tmp_path / "out").sql(
        "SELECT sum(duration_ns) FROM gpu_op_layers WHERE layer IN ('Linear', 'Embedding') OR pass = 'optimizer'"
    )
    assert got["layered_ns"] == layered.fetchall()[0][0]
    assert got["gpu_ns"] == gpu_ns_of_export(NSYS / "functions_trace.sqlite.gz", tmp_path)
    assert got["no_layer_pct"] > 50 and got["lack"] == "partial" and "tracepipe capture nsys" in got["fix"]
    assert got["backward_unlinked_ns"] == 0  # autograd-nvtx linked every backward op


def test_chrome_trace_without_stacks_says_with_stack(tmp_path: Path) -> None:
    # The Llama step's trace with its Python frames taken out (as if recorded without with_stack): no layer at
    # all; with them (the real file) under 10% of its GPU time has none and nothing is said.
    trace = json.loads(gzip.decompress(LLAMA.read_bytes()))
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") != "python_function"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(trace))
    normalize_file(bare, tmp_path / "bare")
    got = coverage(tmp_path / "bare")
    assert got["lack"] == "no_layers" and "with_stack=True" in got["fix"]
    # (the optimizer step has its place: PyTorch's Optimizer.step# range)
    opt = connect(tmp_path / "bare").sql("SELECT sum(duration_ns) FROM gpu_op_layers WHERE pass = 'optimizer'")
    assert got["layered_ns"] == opt.fetchall()[0][0] > 0

    normalize_file(LLAMA, tmp_path / "full")
    full = coverage(tmp_path / "full")
    assert full["lack"] is None and full["no_layer_pct"] < 10


@pytest.mark.parametrize("name", ["autograd_nvtx.sqlite.gz"])
def test_op_ranges_alone_are_no_layer(name: str, tmp_path: Path) -> None:
    # --pytorch=autograd-nvtx alone: ops link backward to forward, but no op is in a module range
    normalize_file(NSYS / name, tmp_path / "out")
    got = coverage(tmp_path / "out")
    assert got["lack"] == "no_layers" and got["backward_unlinked_ns"] == 0


def backward_gpu_ns(trace: dict) -> int:
    """Plain count: the GPU operations (kernels, copies, memsets) whose launching call (same correlation id) lies
    inside an autograd backward op (``autograd::engine::evaluate_function: ...``) on the call's thread, their
    durations summed in ns."""
    events = trace["traceEvents"]
    bwd: dict = {}
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("name", "").startswith("autograd::engine::evaluate_function:"):
            bwd.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    total = 0
    for op in (e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")):
        call = calls.get(op["args"].get("correlation"))
        if call and any(lo <= call["ts"] <= hi for lo, hi in bwd.get(call["tid"], [])):
            total += round(op["dur"] * 1000)
    return total


def test_backward_without_its_forward_ops_says_why(tmp_path: Path) -> None:
    # A real training trace recorded from mid-step (deepseek-ai/profile-data's train.json: 128 backward ops, all
    # numbered, none of their forward ops in the file) was told to record with PyTorch >= 1.9 for the sequence
    # numbers it had. The Llama step's trace made into it: the forward ops its backward ops are numbered for
    # taken out.
    trace = json.loads(gzip.decompress(LLAMA.read_bytes()))
    want_ns = backward_gpu_ns(trace)
    numbers = {
        e["args"]["Sequence number"]
        for e in trace["traceEvents"]
        if e.get("name", "").startswith("autograd::engine::evaluate_function:") and "Sequence number" in e["args"]
    }
    forward = [
        e for e in trace["traceEvents"]
        if e.get("cat") == "cpu_op" and e["args"].get("Sequence number") in numbers
        and not (e["args"].get("Fwd thread id") or "Backward" in e["name"] or "evaluate_function" in e["name"])
    ]  # fmt: skip
    assert forward and want_ns > 0
    dropped = {id(f) for f in forward}
    trace["traceEvents"] = [e for e in trace["traceEvents"] if id(e) not in dropped]
    src = tmp_path / "midstep.json"
    src.write_text(json.dumps(trace))
    normalize_file(src, tmp_path / "out")
    got = coverage(tmp_path / "out")
    assert got["forward_unrecorded_ns"] == got["backward_unlinked_ns"] == got["backward_ns"] == want_ns
    assert got["lack"] == "forward_unrecorded" and "start the profiler before a step's forward pass" in got["fix"]


def test_unnumbered_backward_work_is_no_unrecorded_forward(tmp_path: Path) -> None:
    # PyTorch 1.9's resnet50 sample: its backward work linked to no forward op is gradient accumulation
    # (AccumulateGrad, which autograd never numbers: none of its 966 ops has a sequence number), not backward ops
    # whose forward ops went unrecorded.
    path = SAMPLES / "external" / "kineto_pt19_resnet50_worker0.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    accumulate = [e for e in events if e.get("cat") == "Operator" and "AccumulateGrad" in e.get("name", "")]
    assert len(accumulate) == 966 and not any("Sequence number" in e.get("args", {}) for e in accumulate)
    normalize_file(path, tmp_path / "out")
    got = coverage(tmp_path / "out")
    assert got["backward_unlinked_ns"] > 0 and got["forward_unrecorded_ns"] == 0


def test_work_in_another_domains_ranges_names_the_domain(tmp_path: Path) -> None:
    # A real cuDF export (nsys 2020) held 2 ranges of the default domain and 580 of `libcudf` / `cudf_python`: the
    # default domain's are the layers, and the 20.6% of GPU time launched inside the others' ranges only was said
    # to be "outside every module range", with advice for PyTorch. The H200 small-CNN sample made into one: its
    # conv1 and conv2 ranges moved into a domain `mylib` (their kernels keep only the `step` range around them).
    raw = tmp_path / "raw.sqlite"
    raw.write_bytes(gzip.decompress((SAMPLES / "h200_smallcnn" / "nsys.sqlite.gz").read_bytes()))
    db = sqlite3.connect(raw)
    tid, first = db.execute("SELECT globalTid, min(start) FROM NVTX_EVENTS WHERE eventType = 59").fetchone()
    db.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (?, 75, 'mylib', ?, 7)",
               (first - 10, tid))  # fmt: skip
    assert db.execute("UPDATE NVTX_EVENTS SET domainId = 7 WHERE text IN ('conv1', 'conv2')").rowcount == 8
    db.commit()
    # By hand: the GPU time of the kernels, copies and memsets whose launching runtime call started inside a conv
    # range on its thread (the sample's two memsets are launched in conv1)
    conv_ns = sum(
        db.execute(
            f"""SELECT coalesce(sum(k."end" - k.start), 0) FROM {table} k
                JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
                WHERE EXISTS (SELECT 1 FROM NVTX_EVENTS n WHERE n.domainId = 7 AND n.eventType = 59
                              AND n.globalTid = r.globalTid AND r.start BETWEEN n.start AND n."end")"""
        ).fetchone()[0]
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
    )
    db.close()
    normalize_file(raw, tmp_path / "out")
    got = coverage(tmp_path / "out")
    assert got["other_domain_ns"] == conv_ns > 0 and got["other_domains"] == "mylib"
    assert got["no_layer_ns"] >= conv_ns and got["lack"] == "other_domain"
    assert got["meaning"].startswith("work launched inside NVTX ranges of other domains only") and "(mylib)" in got[
        "meaning"
    ] and "default NVTX domain's ranges" in got["fix"]  # fmt: skip
    # The sample itself: one domain, nothing launched in another's ranges
    normalize_file(SAMPLES / "h200_smallcnn" / "nsys.sqlite.gz", tmp_path / "plain")
    plain = coverage(tmp_path / "plain")
    assert (plain["other_domain_ns"], plain["other_domains"], plain["lack"]) == (0, None, None)


@pytest.mark.parametrize(
    ("name", "lack", "fix"),
    [
        ("sevit_a4000_cuda_only.json.gz", "no_cpu_ops", "record with activities=[ProfilerActivity.CPU"),
        ("gpupuzzlers_vector_flops1.json.gz", "no_modules", "wrap the work in nn.Module calls"),
    ],
)
def test_a_chrome_trace_without_layers_gets_the_fix_for_what_it_holds(
    tmp_path: Path, name: str, lack: str, fix: str
) -> None:
    # Both were told "record with with_stack=True": one holds GPU activity alone (no CPU op for a stack to sit on;
    # 4 real traces), the other Python stacks without a module call (8 real traces of scripts calling none).
    path = SAMPLES / "external" / name
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    cats = Counter(e.get("cat") for e in events)
    modules = [e for e in events if e.get("cat") == "python_function" and e["name"].startswith("nn.Module:")]
    if lack == "no_cpu_ops":
        assert cats["cpu_op"] == cats["python_function"] == 0
    else:
        assert cats["cpu_op"] > 0 and cats["python_function"] > 0 and modules == []
    assert cats["kernel"] + cats["Kernel"] > 0
    result = normalize_file(path, tmp_path / "out")
    [said] = [w for w in result.warnings if w.startswith("no layer:")]
    assert f"; fix: {fix}" in said and "with_stack=True)" not in said.split("; fix: ")[1][:60]
    got = coverage(tmp_path / "out")
    assert (got["lack"], got["no_layer_pct"]) == (lack, 100.0) and got["fix"].startswith(fix)
