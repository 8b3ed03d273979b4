"""torch.compile'd models: capture works (the CPU repro of the crash runs in CI), the capture's side file says
which module each compiled launch computes, and the attribution puts each compiled kernel on that module.

References: the small model of ``sample_traces/cpu_compiled_train/compiled_script.py`` read by hand (which module
each op of its forward is in), Inductor's own provenance in the side file read with plain Python, and a
hand-built trace whose answer is written out.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.analyze import connect, connect_folder
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
    # PyTorch's warning about global module hooks under torch.compile is about the capture's own hooks: not shown
    assert "global hooks" not in proc.stderr
    doc = json.loads((out / "compiled_kernels.json").read_text())
    assert [g["aot_graph"] for g in doc["graphs"]] == ["0_forward", "0_backward"]
    assert all("def call(" in g["call"] for g in doc["graphs"])
    assert all(g["key"] for g in doc["graphs"]) and doc["problems"] == []
    trace = json.loads((out / "torch_trace.json").read_text())
    assert trace["tracepipe_capture"] == "1"
    names = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"}
    assert {"model", "optimizer"} <= names  # the compiled model's root range, and the optimizer hooks' range
    assert {f"## Call CompiledFxGraph {g['key']} ##" for g in doc["graphs"]} <= names


def test_capture_of_a_compiled_model_in_model_mode(tmp_path: Path) -> None:
    # `-m model.py:make --compile default --train`: the shape pass runs the eager model (the compiled region hides
    # its modules from hooks), the warm-up compiles it, and the measured steps run inside the root range around
    # the torch.compile wrapper; the compiled forward and backward are recorded.
    out = tmp_path / "cap"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "capture", "torch", "--device", "cpu", "-m", f"{CPU / 'model.py'}:make",
         "-i", "16,32", "--train", "--compile", "default", "--warmup", "1", "--iters", "2", "-o", str(out)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    layers = json.loads((out / "layer_shapes.json").read_text())["layers"]
    assert [c["layer"] for c in layers][:3] == ["model", "blocks.0", "blocks.0.fc1"]  # the eager shape pass
    doc = json.loads((out / "compiled_kernels.json").read_text())
    assert [g["aot_graph"] for g in doc["graphs"]] == ["0_forward", "0_backward"]
    trace = json.loads(gzip.decompress((out / "torch_trace.json.gz").read_bytes()))
    names = [e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]
    assert names.count("model") == 2 and names.count("step") == 2  # one root range per measured step
    assert not any(n.startswith(("blocks.", "_orig_mod")) for n in names)  # no hook ran inside the region


# The forward of compiled_script.py's Net, by hand: per Block, fc1 (a GEMM), act (GELU), fc2 (a GEMM), then the
# residual add (Block.forward itself) and norm (LayerNorm), which Inductor fuses into one kernel whose output is
# the norm's: blocks.N.norm; the head's GEMM last.
FORWARD_BY_HAND = [
    ("aten::addmm", "blocks.0.fc1"),
    ("cpp_fused_gelu_0", "blocks.0.act"),
    ("aten::addmm", "blocks.0.fc2"),
    ("cpp_fused_add_native_layer_norm_1", "blocks.0.norm"),
    ("aten::addmm", "blocks.1.fc1"),
    ("cpp_fused_gelu_0", "blocks.1.act"),
    ("aten::addmm", "blocks.1.fc2"),
    ("cpp_fused_add_native_layer_norm_native_layer_norm_backward_2", "blocks.1.norm"),
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


# --- the H100 captures: a Hugging Face Llama training script, eager and under torch.compile ---------------------

COMPILED = SAMPLES / "h100_compiled_train"
EAGER = SAMPLES / "h100_user_train_script"
STACK = SAMPLES / "h100_llama_stack"
DECODER = "model/model/model.layers."  # a decoder layer's path: root range, LlamaModel, layers.N


@pytest.fixture(scope="module")
def gpu_compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gpu_compiled")
    for name in ("compiled_kernels.json", "nsys.sqlite.gz", "torch_trace.json.gz"):
        normalize_file(COMPILED / name, out)
    return out


#: Kernels of the compiled regions' statements (not Inductor's autotuning, which a first call runs inside the
#: region), per trace: those the capture's side file places (they list the modules they compute).
PLACED = "SELECT * FROM kernel_layers WHERE fused_modules IS NOT NULL AND trace_id = ?"


@pytest.mark.parametrize("source", ["nsys", "torch_trace"])
def test_compiled_kernels_sit_on_decoder_layers(gpu_compiled: Path, source: str) -> None:
    con = connect(gpu_compiled)
    trace = f"h100_compiled_train.{source}"
    rows = con.sql(
        f"SELECT pass, sum(duration_ns), sum(duration_ns) FILTER (WHERE path LIKE '{DECODER}%') "
        f"FROM ({PLACED}) GROUP BY pass",
        params=[trace],
    ).fetchall()
    shares = {p: on / total for p, total, on in rows}
    assert set(shares) == {"forward", "backward"}
    assert shares["forward"] >= 0.9 and shares["backward"] >= 0.9, shares
    # identical decoder layers: the same kernels, as many in each
    per_layer = con.sql(
        f"""SELECT pass, split_part(substr(path, {len(DECODER) + 1}), '/', 1) AS n, count(*)
            FROM ({PLACED}) WHERE path LIKE '{DECODER}%' GROUP BY ALL""",
        params=[trace],
    ).fetchall()
    # (layer 0 borders the embedding: Inductor fuses the embedding lookup into its first norm's kernel, which goes
    # to layer 0, the module of its output; layers 1-3 see the same code and get the same kernels)
    for ps in ("forward", "backward"):
        counts = {n: c for p, n, c in per_layer if p == ps}
        assert sorted(counts) == ["0", "1", "2", "3"] and counts["1"] == counts["2"] == counts["3"], (ps, counts)


@pytest.mark.parametrize("source", ["nsys.sqlite.gz", "torch_trace.json.gz"])
def test_a_trace_given_alone_reads_its_captures_side_file(tmp_path: Path, source: str) -> None:
    # `tracepipe run cap/torch_trace.json.gz` dropped compiled_kernels.json beside it without a word: every compiled
    # kernel stayed on the root range (3 layers instead of 55). The trace alone now reads its capture's side files.
    from click.testing import CliRunner

    from pipeline.analyze.engine import connect_analysis
    from pipeline.cli import main

    result = CliRunner().invoke(main, ["run", str(COMPILED / source), "--out", str(tmp_path / "o"), "--quiet"])
    assert result.exit_code == 0, result.output
    doc = json.loads((COMPILED / "compiled_kernels.json").read_text())
    modules = {m for g in doc["graphs"] for n in g["nodes"].values() for m in n["modules"]}  # plain json
    layers = connect_analysis(tmp_path / "o" / "analysis").sql(
        "SELECT DISTINCT layer FROM kernel_layers WHERE fused_modules IS NOT NULL"
    )
    placed = {layer for (layer,) in layers.fetchall()}
    assert placed <= modules
    for i in range(4):  # every decoder layer, or a module inside it, holds placed kernels
        assert any(m == f"model.layers.{i}" or m.startswith(f"model.layers.{i}.") for m in placed), (i, placed)


@pytest.mark.parametrize("sample", [COMPILED, CPU])  # torch 2.11 on the H100, torch 2.13 on a CPU
def test_compile_phase_events_are_ops_not_layers(sample: Path, tmp_path: Path) -> None:
    # torch.compile writes ~110 record_function events per compile (`GraphLowering.run_data: compile_id=1/0`):
    # they were layer ranges, listed in nvtx_paths and layer_timeline among the model's modules. They are ops now,
    # as the nsys export's emit_nvtx ranges of them already were.
    raw = json.loads(gzip.decompress((sample / "torch_trace.json.gz").read_bytes()))["traceEvents"]
    compile_events = [
        e["name"]
        for e in raw
        if e.get("cat") == "user_annotation" and "_data: " in e["name"] and "compile_id=" in e["name"]
    ]
    assert len(compile_events) >= 100
    normalize_file(sample / "torch_trace.json.gz", tmp_path)
    con = connect(tmp_path)
    ranges = con.sql("SELECT text FROM nvtx_ranges").fetchall()
    assert not [t for (t,) in ranges if "compile_id=" in t]
    ops = con.sql("SELECT name FROM ops WHERE name LIKE '%compile_id=%'").fetchall()
    assert sorted(n for (n,) in ops) == sorted(compile_events)


def test_no_finding_is_about_inductors_autotuning(gpu_compiled: Path) -> None:
    # The compiled sample's first step autotunes: 97.7% of its GPU time is launched inside CachingAutotuner ops, and
    # the top findings were its benchmarks' launch-bound stretches (129 ms busy) and its cache flush's fill kernel
    # (a tail wave, 125 ms). Each rule's GPU time now fits in the trace's GPU time outside autotuning, counted here
    # from the raw trace with plain json: a launch is autotuning's when a CachingAutotuner op on its thread holds it.
    events = json.loads(gzip.decompress((COMPILED / "torch_trace.json.gz").read_bytes()))["traceEvents"]
    tuning: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in events:
        if e.get("cat") == "cpu_op" and e["name"].startswith("CachingAutotuner."):
            tuning.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    tuned = {
        e["args"]["correlation"]: any(a <= e["ts"] <= b for a, b in tuning.get((e["pid"], e["tid"]), []))
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X"]
    outside_ns = sum(e["dur"] for e in gpu if not tuned.get(e["args"]["correlation"])) * 1e3
    inside_ns = sum(e["dur"] for e in gpu if tuned.get(e["args"]["correlation"])) * 1e3
    assert inside_ns > 30 * outside_ns  # the sample: ~139 ms of autotuning, ~3.2 ms of steps
    # (the lazy connection tracepipe sql opens: the whole tree of views nested in one statement overruns memory)
    rows = (
        connect_folder(gpu_compiled)
        .sql(
            "SELECT rule, sum(gpu_time_ns) FROM findings WHERE trace_id = 'h100_compiled_train.torch_trace' GROUP BY 1"
        )
        .fetchall()
    )
    assert rows and all(ns <= outside_ns for _, ns in rows), (rows, outside_ns)


def test_compiled_nsys_and_pytorch_trace_agree(gpu_compiled: Path) -> None:
    con = connect(gpu_compiled)

    def lists(trace: str) -> dict:
        out: dict = {}
        for path, ps, name in con.sql(
            f"SELECT path, pass, short_name FROM ({PLACED}) ORDER BY start_ns", params=[trace]
        ).fetchall():
            out.setdefault((path, ps), []).append(name)
        return out

    nsys, torch = lists("h100_compiled_train.nsys"), lists("h100_compiled_train.torch_trace")
    assert nsys == torch and len(nsys) > 10


def test_gpu_launches_list_the_modules_of_inductors_provenance(gpu_compiled: Path) -> None:
    doc = json.loads((COMPILED / "compiled_kernels.json").read_text())
    want = provenance_modules(doc)
    got = {
        (k, h): set(json.loads(m))
        for k, h, m in q(gpu_compiled, "SELECT graph_key, handle, modules FROM compiled_kernels")
    }
    assert len(got) == len(want) > 50 and got == want


def test_fused_ops_read_from_names_are_inductors_own(gpu_compiled: Path) -> None:
    # Inductor names a Triton kernel by the aten ops it fuses (leaving out views: `view`, `_unsafe_view`,
    # `transpose`...), and lists every op in the comment above its launch (`Original ATen: [aten.add, ...]`, kept in
    # compiled_kernels): each op read back from a name is one of those, the name's read to its end.
    con = connect(gpu_compiled)
    fused = dict(con.sql("SELECT DISTINCT name, fused_ops FROM kernel_fused_ops").fetchall())
    aten = {n: a for n, a in q(gpu_compiled, "SELECT launch_name, original_aten FROM compiled_kernels "
                                             "WHERE launch_kind = 'triton'")}  # fmt: skip
    checked = 0
    for name, listed in aten.items():
        if name in fused:
            listed_ops = {a.split(".", 1)[-1] for a in json.loads(listed)}
            assert fused[name] and set(fused[name]) <= listed_ops, (name, fused[name], listed_ops)
            checked += 1
    assert checked > 20


def test_eager_and_compiled_diff_per_decoder_layer(tmp_path: Path) -> None:
    # What compiling bought, per decoder layer: `tracepipe diff eager compiled --depth 3` puts each decoder layer
    # of both runs on one row, forward and backward; its figures are the sums of each run's kernels under it.
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "diff", f"{EAGER}:nsys", f"{COMPILED}:nsys", "--depth", "3",
         "-o", str(tmp_path / "d"), "--format", "json", "--quiet"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "d" / "layer_diff.json").read_text().splitlines()]
    layers = {(r["path"], r["pass"]): r for r in rows if (r["path"] or "").startswith(DECODER)}
    for n in range(4):
        for ps in ("forward", "backward"):
            r = layers[(f"{DECODER}{n}", ps)]
            assert r["status"] == "both" and r["kernels_a"] > r["kernels_b"] > 0
    sides = {}
    for side, folder in (("a", EAGER), ("b", COMPILED)):
        out = tmp_path / side
        normalize_file(folder / "nsys.sqlite.gz", out)
        if side == "b":
            normalize_file(folder / "compiled_kernels.json", out)
        sides[side] = dict(
            connect(out)
            .sql(
                f"""SELECT pass, sum(duration_ns) FROM kernel_layers
                    WHERE trace_id LIKE '%.nsys' AND (path LIKE '{DECODER}0/%' OR path = '{DECODER}0') GROUP BY pass"""
            )
            .fetchall()
        )
    for ps in ("forward", "backward"):
        r = layers[(f"{DECODER}0", ps)]
        assert (r["gpu_time_a_ns"], r["gpu_time_b_ns"]) == (sides["a"][ps], sides["b"][ps])


@pytest.mark.parametrize("name", ["compiled_trace.json.gz", "reduce_overhead_trace.json.gz"])
def test_compiled_regions_of_other_traces_are_named_by_their_module(name: str, tmp_path: Path) -> None:
    # A trace nobody annotated (torch.profiler with stacks around a compiled step): the compiled region's kernels,
    # forward and backward, sit on the compiled model's module frames, never on Inductor's cache-hash marker.
    normalize_file(STACK / name, tmp_path / "out")
    rows = connect(tmp_path / "out").sql("SELECT path, pass, duration_ns FROM kernel_layers").fetchall()
    assert not any("CompiledFxGraph" in (p or "") for p, _, _ in rows)
    model = [d for p, ps, d in rows if ps != "optimizer" and "LlamaForCausalLM_0" in (p or "")]
    assert sum(model) >= 0.9 * sum(d for _, ps, d in rows if ps != "optimizer")
    assert {ps for p, ps, _ in rows if "LlamaForCausalLM_0" in (p or "")} == {"forward", "backward"}


def test_reduce_overhead_capture(tmp_path: Path) -> None:
    # mode="reduce-overhead": nothing on a cache-hash path, the non-optimizer GPU time on the compiled model's range;
    # in nsys, replayed CUDA-graph kernels go down to their modules (each node counts as launched where it was
    # recorded), >= 90% of their time, forward and backward, on decoder layers.
    folder = SAMPLES / "h100_compiled_reduce_overhead"
    for name in ("compiled_kernels.json", "nsys.sqlite.gz", "torch_trace.json.gz"):
        normalize_file(folder / name, tmp_path)
    con = connect(tmp_path)
    for trace in ("h100_compiled_reduce_overhead.nsys", "h100_compiled_reduce_overhead.torch_trace"):
        rows = con.sql("SELECT path, pass, duration_ns FROM kernel_layers WHERE trace_id = ?", params=[trace])
        rows = rows.fetchall()
        assert not any("CompiledFxGraph" in (p or "") for p, _, _ in rows)
        work = [(p, d) for p, ps, d in rows if ps != "optimizer"]
        assert sum(d for p, d in work if (p or "").startswith("model")) >= 0.9 * sum(d for _, d in work)
    replayed = con.sql(
        f"""SELECT pass, sum(duration_ns) FILTER (WHERE path LIKE '{DECODER}%') / sum(duration_ns),
                   count(*) FROM kernel_layers
            WHERE trace_id = 'h100_compiled_reduce_overhead.nsys' AND graph_node_id IS NOT NULL GROUP BY pass"""
    ).fetchall()
    assert {p: share >= 0.9 and n > 100 for p, share, n in replayed} == {"forward": True, "backward": True}


def test_inductors_autotuning_is_said_with_its_share(gpu_compiled: Path, tmp_path: Path) -> None:
    # The compiled sample's first step benchmarks every Triton kernel's configs inside CachingAutotuner ops: the
    # report's top kernel was the cache flush's FillFunctor and a diff against the eager run said x29, unwarned.
    # By hand from the raw export: the GPU work whose launching runtime call starts inside a CachingAutotuner range
    # of its thread.
    import sqlite3

    raw = tmp_path / "raw.sqlite"
    raw.write_bytes(gzip.decompress((COMPILED / "nsys.sqlite.gz").read_bytes()))
    db = sqlite3.connect(raw)
    tuning = db.execute(
        """SELECT t.globalTid, t.start, t."end" FROM NVTX_EVENTS t LEFT JOIN StringIds s ON s.id = t.textId
           WHERE coalesce(t.text, s.value) LIKE 'CachingAutotuner.%'"""
    ).fetchall()
    calls = db.execute("SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchall()
    launched = {c: (tid, at) for c, tid, at in calls}  # one process: correlation ids are unique
    tuned = total = count = 0
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        for corr, ns in db.execute(f'SELECT correlationId, "end" - start FROM {table}').fetchall():
            total += ns
            tid, at = launched.get(corr, (None, None))
            if any(tid == t and lo <= at <= hi for t, lo, hi in tuning):
                tuned, count = tuned + ns, count + 1
    db.close()
    [(message, n)] = (
        connect(gpu_compiled)
        .sql("SELECT message, count FROM analysis_warnings WHERE view = 'gpu_op_layers' AND trace_id LIKE '%.nsys'")
        .fetchall()
    )
    assert n == count > 0
    said = f"{round(100 * tuned / total, 1)}% of GPU time ({round(tuned / 1e6, 3)} ms, {count} kernels, copies"
    assert message.startswith(said), message
    assert "Inductor's autotuning" in message and "capture from a step after the first compiled call" in message
    both = connect(gpu_compiled).sql("SELECT count(*) FROM analysis_warnings WHERE view = 'gpu_op_layers'")
    assert both.fetchall() == [(2,)]  # the nsys and the PyTorch trace of the capture, nothing else
