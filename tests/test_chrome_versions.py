"""Chrome traces of other profiler generations and vendors: the small-CNN sample rewritten the way PyTorch
1.8-1.10 Kineto and ROCm builds write it must give the same tables; what is not modelled is counted.

Expected values come from the sample itself (read with plain json), never from the code under test.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.normalize import normalize_file
from pipeline.normalize.chrome_events import text_id
from tests.conftest import SMALLCNN, q

SAMPLE = SMALLCNN / "torch_trace.json.gz"
#: PyTorch 1.8-1.10 Kineto's names for the modern categories (as in kineto's tb_plugin samples).
LEGACY = {"kernel": "Kernel", "cuda_runtime": "Runtime", "cpu_op": "Operator", "gpu_memcpy": "Memcpy"}
KERNELS = "SELECT kernel_id, name, start_ns, end_ns, correlation_id, external_id, pid, tid FROM kernels ORDER BY 1"
OPS = "SELECT op_id, name, start_ns, end_ns, external_id, pid, tid, call_stack FROM ops ORDER BY 1"
CALLS = "SELECT call_id, name, start_ns, correlation_id, external_id, pid, tid FROM api_calls ORDER BY 1"


def events() -> dict:
    return json.loads(gzip.decompress(SAMPLE.read_bytes()))


def normalized(trace: dict, tmp_path: Path, name: str) -> tuple[Path, list[str]]:
    path = tmp_path / name / "trace.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(trace, indent=1))
    out = tmp_path / f"out-{name}"
    return out, normalize_file(path, out).warnings


@pytest.fixture(scope="module")
def modern(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("modern")
    normalize_file(SAMPLE, out)
    return out


def test_legacy_kineto_names_give_the_same_tables(modern: Path, tmp_path: Path) -> None:
    trace = events()
    for e in trace["traceEvents"]:
        e["cat"] = LEGACY.get(e.get("cat"), e.get("cat"))
        args = e.get("args", {})
        if "External id" in args:
            args["external id"] = args.pop("External id")  # lowercase key of 1.8-1.10
        if isinstance(e.get("tid"), int) and e.get("cat") in ("Operator", "Runtime", "python_function"):
            e["tid"] = str(e["tid"])  # 1.8-1.10 wrote CPU thread ids as text
    assert sum(e.get("cat") == "Kernel" for e in trace["traceEvents"]) == 8
    out, warnings = normalized(trace, tmp_path, "legacy")
    assert warnings == []
    for sql in (KERNELS, OPS, CALLS):
        assert q(out, sql) == q(modern, sql)


def test_text_thread_ids_stay_distinct_and_readable(tmp_path: Path) -> None:
    trace = events()
    for e in trace["traceEvents"]:
        if e.get("cat") == "kernel":
            e["tid"] = f"stream {e['args']['stream']}"
    out, warnings = normalized(trace, tmp_path, "textual")
    assert warnings == [f"thread/process ids given as text kept as stable numbers: 'stream 7' = {text_id('stream 7')}"]
    assert q(out, "SELECT count(*) FROM kernels WHERE pid IS NULL OR tid IS NULL") == [(0,)]


def test_unknown_categories_are_counted_by_name(modern: Path, tmp_path: Path) -> None:
    trace = events()
    base = next(e for e in trace["traceEvents"] if e.get("cat") == "kernel")
    extra = [{**base, "cat": "mtia_ccp_events"}, {**base, "cat": "mtia_ccp_events"}, {**base, "cat": "xpu_thing"}]
    trace["traceEvents"] += extra
    out, warnings = normalized(trace, tmp_path, "vendor")
    assert warnings == ["events of categories not modelled, ignored: mtia_ccp_events 2, xpu_thing 1"]
    assert q(out, KERNELS) == q(modern, KERNELS)


def test_exact_duplicate_events_are_counted_once(modern: Path, tmp_path: Path) -> None:
    trace = events()
    twice = [e for e in trace["traceEvents"] if e.get("cat") in ("kernel", "cpu_op")][:5]
    kinds = sorted({e["cat"] for e in twice})
    trace["traceEvents"] += [json.loads(json.dumps(e)) for e in twice]
    out, warnings = normalized(trace, tmp_path, "dup")
    n = {c: sum(e["cat"] == c for e in twice) for c in kinds}
    assert warnings == [
        "exact duplicate events counted once: " + ", ".join(f"{c} {n[c]}" for c in sorted(kinds, key=lambda c: -n[c]))
    ]
    for sql in (KERNELS, OPS):
        assert q(out, sql) == q(modern, sql)


def test_rocm_versions_go_into_trace_meta(tmp_path: Path) -> None:
    trace = events()
    trace.update({"roctracer_version": 4.1, "hip_runtime_version": 60443483, "hip_driver_version": "6.4"})
    out, _ = normalized(trace, tmp_path, "rocm")
    (version,) = q(out, "SELECT source_version FROM trace_meta")[0]
    assert "roctracer 4.1" in version and "hip runtime 60443483" in version and "hip driver 6.4" in version


def test_no_thread_runs_when_decode_workers_fork(tmp_path: Path) -> None:
    # A fork copies locks held by other threads (Python 3.12+ warns it may deadlock): the file's hash runs in a
    # child process, and the normalizer starts its threads only after its workers are forked.  In a fresh
    # interpreter: a pytest-xdist worker runs a thread of its own, and with one running the normalizer rightly
    # does not fork at all.
    path = tmp_path / "t" / "trace.json"
    path.parent.mkdir()
    path.write_bytes(gzip.decompress(SAMPLE.read_bytes()))
    script = f"""
import os, threading
from pathlib import Path
from pipeline.normalize import chrome_decode, normalize_file
chrome_decode.CHUNK_BYTES = 3000  # many pieces: workers are forked
chrome_decode.cores = lambda: 2
threads_at_fork = []
real_fork = os.fork
def fork():
    threads_at_fork.append(threading.active_count())
    return real_fork()
os.fork = fork
normalize_file(Path({str(path)!r}), Path({str(tmp_path / "out")!r}))
print(threads_at_fork)
"""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[1, 1]"


def test_numeric_text_ids_beyond_int64_stay_text(tmp_path: Path) -> None:
    trace = events()
    big = str(2**64)
    for e in trace["traceEvents"]:
        if e.get("cat") == "cpu_op":
            e["tid"] = big
    out, warnings = normalized(trace, tmp_path, "big")
    assert warnings == [f"thread/process ids given as text kept as stable numbers: '{big}' = {text_id(big)}"]
    assert q(out, "SELECT DISTINCT tid FROM ops") == [(text_id(big),)]


#: PyTorch 1.8's Kineto wrote the device list as ``computeProperties`` with CUDA's cudaDeviceProp names (as in
#: pytorch/kineto's tb_plugin/test/gpu_metrics_input.json, 4 V100s); the keys it renamed, modern -> then.
COMPUTE_PROPERTIES = {
    "computeMajor": "major",
    "computeMinor": "minor",
    "numSms": "multiProcessorCount",
    "maxThreadsPerMultiprocessor": "maxThreadsPerMultiProcessor",
}
DEVICES = "SELECT * EXCLUDE (trace_id) FROM devices ORDER BY device_id"


def test_pytorch_1_8_compute_properties_give_the_same_devices(modern: Path, tmp_path: Path) -> None:
    trace = events()
    devices = trace.pop("deviceProperties")
    assert devices and all("numSms" in d for d in devices)
    trace["computeProperties"] = [{COMPUTE_PROPERTIES.get(k, k): v for k, v in d.items()} for d in devices]
    out, warnings = normalized(trace, tmp_path, "pt18")
    assert warnings == []
    assert q(out, DEVICES) == q(modern, DEVICES)
    assert q(out, "SELECT sm_count, compute_major FROM devices") == [(d["numSms"], d["computeMajor"]) for d in devices]


def test_iteration_start_markers_of_any_trace_name_are_not_reported(modern: Path, tmp_path: Path) -> None:
    # Kineto names its marker after the trace ("Iteration Start: PyTorch Profiler" unless the trace is named).
    trace = events()
    base = next(e for e in trace["traceEvents"] if e.get("cat") == "kernel")
    marker = {"ph": "i", "s": "g", "pid": base["pid"], "tid": base["tid"], "ts": base["ts"]}
    trace["traceEvents"] += [{**marker, "name": "Iteration Start: Test trace 1"}, {**marker, "name": "Iteration 2"}]
    out, warnings = normalized(trace, tmp_path, "markers")
    assert warnings == ["events of categories not modelled, ignored: (no category) Iteration 2 1"]
    assert q(out, KERNELS) == q(modern, KERNELS)


def test_utf16_trace_gives_the_same_tables(modern: Path, tmp_path: Path) -> None:
    # A trace re-saved by a Windows tool as UTF-16 (byte-order mark first) reads as its UTF-8 original.
    path = tmp_path / "utf16" / "trace.json"
    path.parent.mkdir()
    # A character outside the BMP (a surrogate pair in UTF-16) cut by the 8192-byte head format detection reads:
    # '{"pad": "' is 9 characters, so after the 2-byte mark the pair takes bytes 8190-8193.
    text = (
        '{"pad": "'
        + "a" * 4085
        + "\U0001f600"
        + '", '
        + gzip.decompress(SAMPLE.read_bytes()).decode("utf-8").lstrip()[1:]
    )
    path.write_bytes(text.encode("utf-16"))
    assert path.read_bytes()[8190:8194].decode("utf-16-le") == "\U0001f600"
    out = tmp_path / "out-utf16"
    assert normalize_file(path, out).warnings == []
    for sql in (KERNELS, OPS, CALLS):
        assert q(out, sql) == q(modern, sql)


@pytest.mark.parametrize("gz", [False, True])
def test_utf8_byte_order_mark_gives_the_same_tables(modern: Path, tmp_path: Path, gz: bool) -> None:
    # The same trace re-saved with a UTF-8 byte-order mark (Notepad, PowerShell's Out-File): before, exit 2 "JSON is
    # malformed: invalid character (byte 0)", where its UTF-16 copy read.
    data = b"\xef\xbb\xbf" + gzip.decompress(SAMPLE.read_bytes())
    path = tmp_path / ("trace.json.gz" if gz else "trace.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    out = tmp_path / "out-bom"
    assert normalize_file(path, out).warnings == []
    for sql in (KERNELS, OPS, CALLS):
        assert q(out, sql) == q(modern, sql)
