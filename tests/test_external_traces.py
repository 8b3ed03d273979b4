"""Real traces written by other projects (``sample_traces/external/``, provenance in its README): each file
normalizes and analyzes, and its numbers equal what plain code computes from the raw file here.

The expected side never calls the pipeline: chrome traces are read with ``json`` (numbers as ``Decimal``,
so every ns is exact) and nsys exports with ``sqlite3``.  Per-annotation counts follow the attribution rule
written out in plain Python: a kernel belongs to the innermost range open on its launching CPU thread at
the moment of the launching call (the first call with the kernel's correlation id, in the same process).
Exact duplicate events (the same JSON object twice) count once.  Module frames (`python_function`
events `nn.Module: <Class>_<n>` of traces recorded with stacks) are ranges named `<Class>_<n>`.
Kernels launched inside an autograd backward op (an op with a sequence number that is a backward node:
`Fwd thread id` > 0, `...Backward0`, or an `autograd::engine::evaluate_function:` wrapping one; or gradient
accumulation, `torch::autograd::AccumulateGrad`, which has no sequence number) take their forward op's layer
(tests/test_training.py checks that link): here they are counted apart, as `backward`.  emit_nvtx op ranges
of nsys exports (`name, seq = N`, `name, op_id = M`, `aten::...`) are ops, not layers.

Suite time: the 54 MB HTA trace is tested in full too (about 10 s on 2 cores); each file is normalized and
read once per module.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import sqlite3
from collections import Counter, defaultdict
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES, gunzip_to, q
from tests.test_cli import tp

EXTERNAL = SAMPLES / "external"
#: Real traces without a single kernel event, tested for what they do have (the tests at the end).
KERNEL_LESS = {
    "hta_cupti_range_profiler.json.gz",
    "hta_mtia_inference_trimmed.json.gz",
    "gpupuzzlers_p2p_copy.json.gz",
    "gpupuzzlers_p2p_single_tensor.json.gz",
    "lighttransport_gemm_no_kernels.sqlite.gz",
}
#: Other tools' JSON files, which a user may take for chrome traces: refused, naming what they are (kept out of
#: sample_traces/, which `make demo` normalizes whole; provenance in that folder's README).
OTHER_TOOLS_DIR = Path(__file__).resolve().parent / "bad_inputs" / "real"
OTHER_TOOLS = {
    "hta_execution_trace_et.json.gz": "it is a PyTorch execution trace (ExecutionTraceObserver, Chakra)",
    "luxmea_legacy_autograd_profiler.json.gz": "written by the legacy autograd profiler's export",
    "tracelens_rocprofv3_908_trimmed.json.gz": "it is rocprofv3's JSON output (rocprofiler-sdk)",
    "tritonbench_proton_hatchet.json.gz": "it is a Triton proton profile (.hatchet: a tree of frames with metrics)",
    "speedscope_chrome116_devtools.json.gz": "written by Chrome's DevTools (a web page's performance trace",
}
NVPROF = "profilinglm_nvprof_pytorch_lm.sqlite.gz"  # an nvprof database, refused naming nvprof
CHROME = sorted(p.name for p in EXTERNAL.glob("*.json.gz") if p.name not in KERNEL_LESS)
NSYS = sorted(p.name for p in EXTERNAL.glob("*.sqlite.gz") if p.name not in KERNEL_LESS)

#: What each category name means, old and new Kineto, written out independently of the pipeline's table.
KINDS = {
    "kernel": {"kernel", "Kernel"},
    "memcpy": {"gpu_memcpy", "Memcpy"},
    "memset": {"gpu_memset", "Memset"},
    "cpu_op": {"cpu_op", "Operator"},
    "call": {"cuda_runtime", "cuda_driver", "Runtime"},
    "annotation": {"user_annotation"},
}


def ns(us: Decimal | int) -> int:
    return int((Decimal(us) * 1000).to_integral_value(ROUND_HALF_EVEN))


def thread(value: object) -> object:
    """A pid/tid as written: numeric text is the number."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


def innermost(ranges: list[tuple[int, int, str]], starts: list[int], t: int) -> str | None:
    """The innermost of properly nested ranges (sorted by start, then end descending) open at ``t``:
    walking back from the last one started at or before ``t``, the first still open."""
    i = bisect.bisect_right(starts, t) - 1
    while i >= 0:
        _, end, text = ranges[i]
        if end >= t:
            return text
        i -= 1
    return None


#: Ranges PyTorch itself opens (record_function), which PyTorch 1.8-1.10 wrote as `Operator` events: ranges,
#: as today's `user_annotation` ones are, not ops.
TORCH_RANGES = ("ProfilerStep#", "Optimizer.step#", "Optimizer.zero_grad#", "enumerate(DataLoader)#")
BACKWARD_NODE = re.compile(r"Backward[0-9]*$")
#: Gradient accumulation into .grad: a backward node of the autograd engine without a sequence number.
ACCUMULATE_GRAD = (
    "torch::autograd::AccumulateGrad",
    "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
)
#: A module call's Python frame in a trace recorded with stacks, and Inductor's marker around a compiled graph's call.
MODULE_FRAME = "nn.Module: "
COMPILED_GRAPH_CALL = re.compile(r"## Call CompiledFxGraph \S+ ##")
OP_RANGE = re.compile(r", (seq|op_id) = \d+|^(aten|autograd|prim|c10d|profiler)::")


def in_spans(spans: dict[object, list[tuple[int, int]]], thread: object, t: int) -> bool:
    return any(s <= t <= e for s, e in spans.get(thread, ()))


def per_range(
    kernels: list[tuple], launches: dict, ranges: dict[object, list], backward: dict | None = None
) -> Counter:
    """kernels: (launch key, ...); launches: key -> (thread, t); ranges: thread -> [(start, end, text)];
    backward: thread -> [(start, end)] of backward ops (kernels launched inside count as `backward`, and so do
    kernels launched anywhere on a thread that runs backward nodes: autograd's engine thread)."""
    by_thread = {k: sorted(v, key=lambda r: (r[0], -r[1])) for k, v in ranges.items()}
    starts = {k: [r[0] for r in v] for k, v in by_thread.items()}
    engine = set((backward or {}).get("engine threads", ()))
    out: Counter = Counter()
    for key in kernels:
        launch = launches.get(key)
        text = None
        if launch is not None and (in_spans(backward or {}, launch[0], launch[1]) or launch[0] in engine):
            out["## pass backward ##"] += 1
            continue
        if launch is not None and launch[0] in by_thread:
            text = innermost(by_thread[launch[0]], starts[launch[0]], launch[1])
        out[text] += 1
    return out


def chrome_expected(path: Path) -> dict:
    events = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)["traceEvents"]
    seen, by_kind = set(), defaultdict(list)
    for e in events:
        if e.get("ph") != "X":
            continue
        kind = next((k for k, cats in KINDS.items() if e.get("cat") in cats), None)
        if kind == "cpu_op" and e["name"].startswith(TORCH_RANGES):
            kind = "annotation"
        if kind is None and e.get("cat") == "python_function" and e["name"].startswith(MODULE_FRAME):
            kind = "annotation"  # a module call's frame (with_stack=True) is a layer range, named without prefix
            e = {**e, "name": e["name"].removeprefix(MODULE_FRAME)}
        if kind == "annotation" and COMPILED_GRAPH_CALL.fullmatch(e["name"]):
            kind = "cpu_op"  # Inductor's marker around a compiled graph's call is no layer
        if kind is None:
            continue
        text = json.dumps(e, sort_keys=True, default=str)
        if text not in seen:  # an exact duplicate counts once
            seen.add(text)
            by_kind[kind].append(e)

    def corr(e: dict) -> object:
        return e.get("args", {}).get("correlation")

    launches: dict = {}
    for c in sorted(by_kind["call"], key=lambda e: ns(e["ts"])):
        if corr(c) is not None and corr(c) not in launches:
            launches[corr(c)] = ((thread(c["pid"]), thread(c["tid"])), ns(c["ts"]))
    ranges = defaultdict(list)
    for a in by_kind["annotation"]:
        ranges[(thread(a["pid"]), thread(a["tid"]))].append((ns(a["ts"]), ns(a["ts"]) + ns(a["dur"]), a["name"]))
    backward, seq_ops = defaultdict(list), defaultdict(list)
    for o in by_kind["cpu_op"]:
        a = o.get("args", {})
        if o["name"] in ACCUMULATE_GRAD or (
            a.get("Sequence number") is not None
            and (
                (a.get("Fwd thread id") or 0) > 0
                or o["name"].startswith("autograd::engine::evaluate_function:")
                or BACKWARD_NODE.search(o["name"])
            )
        ):
            backward[(thread(o["pid"]), thread(o["tid"]))].append((ns(o["ts"]), ns(o["ts"]) + ns(o["dur"])))
        if a.get("Sequence number") is not None:  # a thread running only backward nodes is autograd's engine
            seq_ops[(thread(o["pid"]), thread(o["tid"]))].append((a.get("Fwd thread id") or 0) > 0)
    backward["engine threads"] = [t for t, nodes in seq_ops.items() if all(nodes)]
    kernels = by_kind["kernel"]
    return {
        "kernels": len(kernels),
        "kernel_ns": sum(ns(k["dur"]) for k in kernels),
        "memcpy": len(by_kind["memcpy"]),
        "memset": len(by_kind["memset"]),
        "ops": len(by_kind["cpu_op"]),
        "per_layer": per_range([corr(k) for k in kernels], launches, ranges, backward),
    }


def nsys_expected(path: Path, tmp: Path) -> dict:
    plain = tmp / path.name.removesuffix(".gz")
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    db = sqlite3.connect(plain)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def count(table: str) -> int:
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] if table in tables else 0

    kcols = {r[1] for r in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
    pid_of = "globalPid >> 24 & 16777215" if "globalPid" in kcols else "NULL"
    kernels = db.execute(f'SELECT correlationId, {pid_of}, "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchall()
    launches: dict = {}
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
        if table in tables:
            for corr, gtid, start in db.execute(f"SELECT correlationId, globalTid, start FROM {table}"):
                for key in ((corr, gtid >> 24 & 16777215), (corr, None)):  # by process, and by id alone
                    if key not in launches or start < launches[key][1]:
                        launches[key] = (gtid, start)
    ranges, op_ranges = defaultdict(list), []
    if "NVTX_EVENTS" in tables:
        strings = dict(db.execute("SELECT id, value FROM StringIds"))
        ncols = {r[1] for r in db.execute("PRAGMA table_info(NVTX_EVENTS)")}
        text_id = "textId" if "textId" in ncols else "NULL"
        rows = db.execute(
            f'SELECT globalTid, start, "end", text, {text_id} FROM NVTX_EVENTS '
            'WHERE eventType IN (59, 70) AND "end" IS NOT NULL'
        )
        for gtid, start, end, text, tid in rows:
            text = text if text is not None else strings.get(tid)
            if text is not None and OP_RANGE.search(text):
                op_ranges.append((gtid, start, end, text))
            else:
                ranges[gtid].append((start, end, text))
    copies = count("CUPTI_ACTIVITY_KIND_MEMCPY"), count("CUPTI_ACTIVITY_KIND_MEMSET")
    db.close()
    nodes = [(g, s, e) for g, s, e, t in op_ranges if ", seq = " in t and BACKWARD_NODE.search(t.split(", ")[0])]
    backward = defaultdict(list)
    for g, s, e, t in op_ranges:
        name = t.split(", ")[0]
        wraps = name.startswith("autograd::engine::evaluate_function:") and any(
            ng == g and s <= ns_ <= e for ng, ns_, _ in nodes
        )
        if wraps or (", seq = " in t and BACKWARD_NODE.search(name)):
            backward[g].append((s, e))
    return {
        "kernels": len(kernels),
        "kernel_ns": sum(d for _, _, d in kernels),
        "memcpy": copies[0],
        "memset": copies[1],
        "ops": len(op_ranges),
        "per_layer": per_range([(c, p) for c, p, _ in kernels], launches, ranges, backward),
    }


def normalized(path: Path, tmp: Path) -> dict:
    out = tmp / "out"
    normalize_file(path, out)
    con = connect(out)
    return {
        "kernels": q(out, "SELECT count(*) FROM kernels")[0][0],
        "kernel_ns": q(out, "SELECT coalesce(sum(duration_ns), 0) FROM kernels")[0][0],
        "memcpy": q(out, "SELECT count(*) FROM memcpy")[0][0] if (out / "memcpy").exists() else 0,
        "memset": q(out, "SELECT count(*) FROM memset")[0][0] if (out / "memset").exists() else 0,
        "ops": q(out, "SELECT count(*) FROM ops")[0][0] if (out / "ops").exists() else 0,
        "per_layer": Counter(
            dict(
                con.sql(
                    "SELECT CASE WHEN pass = 'backward' THEN '## pass backward ##' ELSE layer END AS l, count(*) "
                    "FROM kernel_layers GROUP BY l"
                ).fetchall()
            )
        ),
    }


@pytest.mark.parametrize("name", CHROME)
def test_chrome_trace_numbers(name: str, tmp_path: Path) -> None:
    want = chrome_expected(EXTERNAL / name)
    assert want["kernels"] > 0
    assert normalized(EXTERNAL / name, tmp_path) == want


@pytest.mark.parametrize("name", NSYS)
def test_nsys_export_numbers(name: str, tmp_path: Path) -> None:
    want = nsys_expected(EXTERNAL / name, tmp_path)
    assert want["kernels"] > 0
    assert normalized(EXTERNAL / name, tmp_path) == want


def test_pytorch_1_9_profiler_steps_are_steps(tmp_path: Path) -> None:
    # PyTorch 1.9 wrote `ProfilerStep#N` as an `Operator` event: each is a step of step_gpu_idle, and a step's
    # kernels are those whose launching call (first Runtime call of the correlation id) starts inside it, on
    # any thread of its process.
    path = EXTERNAL / "kineto_pt19_resnet50_worker0.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)["traceEvents"]
    steps = sorted(
        (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), thread(e["pid"]), e["name"])
        for e in events
        if e.get("cat") == "Operator" and re.fullmatch(r"ProfilerStep#\d+", e["name"])
    )
    launches: dict = {}
    for c in sorted((e for e in events if e.get("cat") == "Runtime"), key=lambda e: ns(e["ts"])):
        launches.setdefault(c["args"].get("correlation"), (thread(c["pid"]), ns(c["ts"])))
    kernels = [launches.get(e["args"]["correlation"]) for e in events if e.get("cat") == "Kernel"]
    want = [
        (i, name, sum(1 for k in kernels if k is not None and k[0] == pid and start <= k[1] <= end))
        for i, (start, end, pid, name) in enumerate(steps, 1)
    ]
    assert len(want) == 6 and sum(n for *_, n in want) == len(kernels)
    out = tmp_path / "out"
    normalize_file(path, out)
    got = connect(out).sql("SELECT step, step_name, kernels FROM step_gpu_idle ORDER BY step").fetchall()
    assert got == want


def test_an_nsys_export_without_kernels_is_a_trace(tmp_path: Path) -> None:
    # lighttransport/gemm's export (nsys 2025.1, an RTX 5060 Ti): its run compiled kernels with NVRTC and stopped
    # before launching one, so nsys wrote no kernel table. Its calls and its GPU are still normalized.
    path = EXTERNAL / "lighttransport_gemm_no_kernels.sqlite.gz"
    db = sqlite3.connect(gunzip_to(path, tmp_path / "plain.sqlite"))
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    calls = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    gpu = db.execute("SELECT name, computeMajor, computeMinor, smCount FROM TARGET_INFO_GPU").fetchall()
    db.close()
    assert "CUPTI_ACTIVITY_KIND_KERNEL" not in tables and calls == 3
    out = tmp_path / "out"
    result = normalize_file(path, out)
    said = f"no CUPTI_ACTIVITY_KIND_KERNEL table: the capture traced {calls} CUDA API calls and no kernel launch"
    assert any(w.startswith(said) for w in result.warnings), result.warnings
    assert result.rows.get("kernels", 0) == 0 and not (out / "kernels").exists()
    assert q(out, "SELECT count(*) FROM api_calls")[0][0] == calls
    assert q(out, "SELECT name, compute_major, compute_minor, sm_count FROM devices") == gpu


@pytest.mark.parametrize("case", ["launched", "untraced", "no_calls", "unsaid"])
def test_an_nsys_export_without_kernels_says_which_of_the_causes(tmp_path: Path, case: str) -> None:
    # Real exports (nsys 2023.3, 2024.6) traced up to 5,756 cudaLaunchKernel calls and wrote no kernel table; others
    # traced no CUDA at all; two (nsys 2025.3, 2025.6) traced CUDA in a process that made no CUDA call. All were told
    # to "record with nsys profile -t cuda", which the first and the last had done. The lighttransport export (its
    # META_DATA_CAPTURE asks for CUDA) made into each: one of its calls renamed a launch; its CUDA tables dropped
    # and the capture's CUDA row too (untraced), or not (no_calls), or its META_DATA_CAPTURE with them (unsaid: an
    # export before 2023.3 does not say what was traced).
    plain = gunzip_to(EXTERNAL / "lighttransport_gemm_no_kernels.sqlite.gz", tmp_path / "t.sqlite")
    db = sqlite3.connect(plain)
    if case == "launched":
        db.execute("INSERT INTO StringIds (id, value) SELECT max(id) + 1, 'cudaLaunchKernel_v7000' FROM StringIds")
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = (SELECT max(id) FROM StringIds) "
                   "WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_RUNTIME)")  # fmt: skip
        want = "the capture traced 1 kernel launch call but none of the kernels on the GPU"
    else:
        for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
            db.execute(f"DROP TABLE IF EXISTS {t}")
        if case == "untraced":
            asked = "DELETE FROM META_DATA_CAPTURE WHERE name = 'CAPTURE_EVENT_TYPE' AND value = 'Cuda'"
            assert db.execute(asked).rowcount == 1
        if case == "unsaid":
            db.execute("DROP TABLE META_DATA_CAPTURE")
        want = {
            "untraced": "the capture did not trace CUDA (record with `nsys profile -t cuda`)",
            "no_calls": "the capture traced CUDA but recorded no CUDA API call: the profiled process made none",
            "unsaid": "the capture recorded no CUDA API call: CUDA was not traced (record with `nsys profile -t cuda`) "
            "or the profiled process made none",
        }[case]
    db.commit()
    db.close()
    result = normalize_file(plain, tmp_path / "out")
    assert f"no CUPTI_ACTIVITY_KIND_KERNEL table: {want}" in " ".join(result.warnings), result.warnings


def test_a_job_with_a_rank_without_kernels_is_analyzed(tmp_path: Path) -> None:
    # One rank's export without kernels (an idle rank, a capture without -t cuda) beside a trace with them: the
    # run warns and analyzes both, as it does for a chrome trace without kernels.
    job = tmp_path / "job"
    job.mkdir()
    for name in ("lighttransport_gemm_no_kernels.sqlite.gz", "hta_mi250_rocm62_minitoy.json.gz"):
        (job / name).write_bytes((EXTERNAL / name).read_bytes())
    r = tp("run", job, "--out", tmp_path / "out", "-q")
    assert r.returncode == 0, r.stderr
    assert "no CUPTI_ACTIVITY_KIND_KERNEL table" in r.stderr
    assert len(q(tmp_path / "out" / "normalized", "SELECT trace_id FROM trace_meta")) == 2
    written = pq.read_metadata(tmp_path / "out" / "analysis" / "kernel_layers.parquet").num_rows
    assert written == chrome_expected(EXTERNAL / "hta_mi250_rocm62_minitoy.json.gz")["kernels"]


def _categories(path: Path) -> Counter:
    return Counter(e.get("cat") for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])


def test_a_cupti_range_profiler_trace_says_its_calls_have_no_gpu_activity(tmp_path: Path) -> None:
    # HTA's CUPTI range-profiler sample: the CUDA runtime calls are recorded, the kernels' activity is not.
    path = EXTERNAL / "hta_cupti_range_profiler.json.gz"
    calls = _categories(path)["cuda_runtime"]
    result = normalize_file(path, tmp_path / "out")
    said = "".join(result.warnings)
    assert f"no GPU kernel events in the trace (it has {calls} CUDA/HIP API calls but no GPU activity: " in said
    # The calls come with ProfilerActivity.CPU alone, so that advice stays; but real traces of scripts that had
    # asked for CUDA activity have no GPU work either, which the warning now allows for.
    assert "record with ProfilerActivity.CUDA (with ProfilerActivity.CPU alone" in said
    assert "where it was on, its GPU records were lost or never made" in said
    assert q(tmp_path / "out", "SELECT count(*) FROM api_calls")[0][0] == calls


@pytest.mark.parametrize("name", ["gpupuzzlers_p2p_copy.json.gz", "gpupuzzlers_p2p_single_tensor.json.gz"])
def test_a_trace_of_copies_only_says_its_gpu_work_is_copies(tmp_path: Path, name: str) -> None:
    # GPUPuzzlers' peer-to-peer copy traces: GPU activity recorded, all of it copies. They were told "its device
    # events are of the categories not modelled" (their flow arrows, category async_cpu_to_gpu) or "record with
    # ProfilerActivity.CUDA", which they had.
    events = json.loads(gzip.decompress((EXTERNAL / name).read_bytes()))["traceEvents"]
    copies = [e for e in events if e.get("cat") == "gpu_memcpy" and e.get("ph") == "X"]
    result = normalize_file(EXTERNAL / name, tmp_path / "out")
    said = " ".join(result.warnings)
    assert f"no GPU kernel events in the trace (its GPU work is {len(copies)} memcpy only" in said, said
    assert "not modelled" not in said and "ProfilerActivity.CUDA" not in said
    us = sum(Decimal(str(e["dur"])) for e in copies)
    assert q(tmp_path / "out", "SELECT count(*), sum(duration_ns) FROM memcpy")[0] == (len(copies), int(us * 1000))


def test_an_mtia_trace_says_its_device_events_are_not_modelled(tmp_path: Path) -> None:
    # HTA's MTIA inference sample (the first 150 events of each category): the device writes categories of its
    # own, which are counted in a warning, and its lack of kernels is put down to them, not to a CPU-only profile.
    path = EXTERNAL / "hta_mtia_inference_trimmed.json.gz"
    cats = _categories(path)
    result = normalize_file(path, tmp_path / "out")
    said = f"mtia_ccp_events {cats['mtia_ccp_events']}, mtia_runtime {cats['mtia_runtime']}"
    assert f"events of categories not modelled, ignored: {said}" in result.warnings
    assert "no GPU kernel events in the trace (its device events are of the categories not modelled" in "".join(
        result.warnings
    )


def test_an_unnamed_rocm6_mi250_is_gfx90a_by_its_compute_units(tmp_path: Path) -> None:
    # ROCm 6.2 names every device "AMD Radeon Graphics" with HIP's 9.0, which gfx908 (MI100) and gfx90a (MI200)
    # both report; AMD's specifications give the MI100 120 compute units, an MI210 or one MI250 GCD 104 and one
    # MI250X GCD 110. This trace's devices have 104.
    path = EXTERNAL / "hta_mi250_rocm62_minitoy.json.gz"
    props = json.loads(gzip.decompress(path.read_bytes()))["deviceProperties"]
    assert {(p["name"], p["computeMajor"], p["computeMinor"], p["numSms"]) for p in props} == {
        ("AMD Radeon Graphics", 9, 0, 104)
    }
    normalize_file(path, tmp_path / "out")
    got = connect(tmp_path / "out").sql("SELECT device_id, gfx_arch, sm_count, issue FROM device_limits").fetchall()
    assert sorted(got) == [(p["id"], "gfx90a", 104, None) for p in sorted(props, key=lambda p: p["id"])]


def test_an_nvprof_database_is_refused_naming_it(tmp_path: Path) -> None:
    # nvprof of a PyTorch LM (emit_nvtx + apex pyprof markers, V100, 2020): its 160 kernels are in CONCURRENT_KERNEL
    # with names in StringTable. Read as an nsys export it gave 0 kernels and exit 0 (7 of 10 real nvprof
    # databases; another came out with numbers for kernel names).
    path = OTHER_TOOLS_DIR / NVPROF
    db = sqlite3.connect(gunzip_to(path, tmp_path / "plain.sqlite"))
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    kernels = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL").fetchone()[0]
    db.close()
    assert {"StringTable", "Version"} <= tables and "StringIds" not in tables and kernels == 160
    r = tp("normalize", path, "--out", tmp_path / "out")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: {path}: an nvprof database (`nvprof -o`") and "nsys profile" in lines[0]
    assert not (tmp_path / "out" / "kernels").exists()


@pytest.mark.parametrize("name", sorted(OTHER_TOOLS))
def test_another_tool_s_json_is_refused_naming_it(name: str, tmp_path: Path) -> None:
    path = OTHER_TOOLS_DIR / name
    content = json.loads(gzip.decompress(path.read_bytes()))
    r = tp("normalize", path, "--out", tmp_path / "out")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and OTHER_TOOLS[name] in lines[0]
    if name.startswith("luxmea"):  # the legacy profiler's bare list: its rows counted as one group, not by name
        assert f"({len(content)} events, none a kernel, cpu_op or CUDA API call; categories: (no category) " in lines[0]
        assert len(lines[0]) < 600
    elif name.startswith("speedscope"):  # a chrome trace indeed, of a browser: told by its categories
        assert "traceEvents" in content and lines[0].startswith(f"error: {path}: no profiler activity in traceEvents")
    else:  # an object without traceEvents, or an array of another tool's items
        assert "traceEvents" not in content or isinstance(content, list)
        assert lines[0].startswith(f"error: {path}: JSON is not a chrome trace: ")
    assert not (tmp_path / "out" / "kernels").exists()


def test_every_file_is_tested() -> None:
    assert len(CHROME) == 8 and len(NSYS) == 2 and len(KERNEL_LESS) == 5 and len(OTHER_TOOLS) == 5
    assert {p.name for p in EXTERNAL.glob("*.gz")} == set(CHROME) | set(NSYS) | KERNEL_LESS
    assert {p.name for p in OTHER_TOOLS_DIR.glob("*.gz")} == OTHER_TOOLS.keys() | {NVPROF}


def test_fp32_gemms_beside_a_tf32_convolution_are_told_to_allow_tf32_matmuls(tmp_path: Path) -> None:
    # A real RTX A4000 trace (GPU activity only): FP32 `ampere_sgemm_*` GEMMs, and one TF32 convolution of cuDNN's
    # CUTLASS (`cutlass_tensorop_s1688fprop_optimized_tf32_...`), TF32 being on by default for convolutions only.
    # Taken for a GEMM, that kernel had the findings tell the sgemms "TF32 is on and the library still chose FP32".
    path = EXTERNAL / "sevit_a4000_cuda_only.json.gz"
    kernels = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("cat") == "Kernel"]
    sgemms = Counter(e["name"] for e in kernels if e["name"].startswith("ampere_sgemm_"))
    assert any("tensorop_s1688fprop" in e["name"] and "tf32" in e["name"] for e in kernels)
    normalize_file(path, tmp_path / "out")
    con = connect(tmp_path / "out", views=["findings"], materialize=True)
    got = con.sql("SELECT kernel, launches, fix FROM findings WHERE rule = 'fp32_no_tensor_cores'").fetchall()
    assert {k: n for k, n, _ in got} == {k: n for k, n in sgemms.items() if k in {g[0] for g in got}} and got
    assert all(fix.startswith("Allow TF32 matmuls") for _, _, fix in got), got
