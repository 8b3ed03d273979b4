"""The chrome-trace (Kineto JSON) normalizer on the real H200 small-CNN profile.

Expected values come from the raw file read with plain ``json`` (numbers as ``Decimal``, so exact), from the
nsys capture of the same model, or are literal numbers read off the file by hand; never from the code under test.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import sqlite3
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.errors import BadInputError
from pipeline.normalize import chrome_decode, chrome_events, normalize_file
from pipeline.normalize.chrome import short_name
from pipeline.schema import TABLES
from tests.conftest import SMALLCNN, q

SAMPLE = SMALLCNN / "torch_trace.json.gz"
TID = "h200_smallcnn.torch_trace"


def raw_trace(parse_float: type = Decimal) -> dict:
    return json.loads(gzip.decompress(SAMPLE.read_bytes()), parse_float=parse_float)


def ns(us: Decimal) -> int:
    return int(us * 1000)


def write_trace(trace: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(trace, indent=2))
    return path


@pytest.fixture(scope="module")
def chrome_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("chrome")
    result = normalize_file(SAMPLE, out)
    assert result.warnings == []
    return out


def test_counts_match_the_raw_file(chrome_out: Path) -> None:
    cats = Counter(e.get("cat") for e in raw_trace()["traceEvents"] if e.get("ph") == "X")
    got = q(
        chrome_out,
        "SELECT (SELECT count(*) FROM kernels), (SELECT count(*) FROM ops), "
        "(SELECT count(*) FROM api_calls WHERE kind = 'runtime'), (SELECT count(*) FROM api_calls)",
    )[0]
    assert got == (cats["kernel"], cats["cpu_op"], cats["cuda_runtime"], cats["cuda_runtime"] + cats["cuda_driver"])
    assert got == (8, 27, 13, 13)


def test_conv_kernel_row(chrome_out: Path) -> None:
    row = q(
        chrome_out,
        "SELECT short_name, grid_x, grid_y, grid_z, block_x, block_y, block_z, registers_per_thread, "
        "static_smem_bytes, dynamic_smem_bytes, profiler_blocks_per_sm, profiler_warps_per_sm, "
        "profiler_est_achieved_occupancy_pct, device_id, context_id, stream_id, correlation_id, external_id, "
        "start_ns, duration_ns, end_ns, pid, tid FROM kernels WHERE name LIKE 'void implicit_convolve_sgemm%'",
    )
    # Read off the file: ts 5357790672405.161 us, dur 7.136 us, correlation 12, launched by cudaLaunchKernel
    # on pid/tid 801.
    launch = (0, 1, 7, 12, 4, 5357790672405161, 7136, 5357790672412297, 801, 801)
    assert row == [("implicit_convolve_sgemm", 1024, 1, 1, 8, 8, 1, 64, 2304, None, 7.757576, 15.515152, 24.0, *launch)]


def test_every_timestamp_is_exact(chrome_out: Path) -> None:
    events = raw_trace()["traceEvents"]
    for cat, table in (("kernel", "kernels"), ("cpu_op", "ops"), ("cuda_runtime", "api_calls")):
        want = sorted((ns(e["ts"]), ns(e["dur"]), ns(e["ts"] + e["dur"])) for e in events if e.get("cat") == cat)
        assert q(chrome_out, f"SELECT start_ns, duration_ns, end_ns FROM {table} ORDER BY 1, 2") == want


def test_us_to_ns_bound_and_decimal_fallback(tmp_path: Path) -> None:
    import numpy as np

    # Values where round(ts * 1000) in float64 is off by one ns (found by search); the split is not.
    vals = [Decimal("4452023376189.811"), Decimal("4425857895685.305"), Decimal("4461773442257.107")]
    assert [round(float(v) * 1000) for v in vals] == [4452023376189810, 4425857895685304, 4461773442257108]
    # Up to just below 2**43 us the split is exact for every 3-decimal value...
    vals += [Decimal("8796093022207.999"), Decimal("5357790672405.161"), Decimal("0.001"), Decimal("-3.5")]
    assert chrome_events._us_to_ns(np.array([float(v) for v in vals])).tolist() == [ns(v) for v in vals]
    # ...above it a trace is decoded again with Decimal fields: shift the sample past 2**43 us.
    trace = raw_trace(float)
    shift = Decimal("4000000000000.000")
    for e in trace["traceEvents"]:
        if isinstance(e.get("ts"), float):
            e["ts"] = float(Decimal(repr(e["ts"])) + shift)  # repr of a 17-digit value: still the exact decimal
    path = tmp_path / "big" / "trace.json"
    text = json.dumps(trace)
    path.parent.mkdir()
    path.write_text(text)
    raw = json.loads(text, parse_float=Decimal)
    want = sorted(ns(e["ts"]) for e in raw["traceEvents"] if e.get("cat") == "kernel")
    assert want[0] > 2**43 * 1000
    out = tmp_path / "out"
    normalize_file(path, out)
    assert [r[0] for r in q(out, "SELECT start_ns FROM kernels ORDER BY 1")] == want


def test_every_kernel_links_to_its_launch_and_op(chrome_out: Path) -> None:
    events = raw_trace()["traceEvents"]
    launch = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    want = sorted(
        (k["args"]["correlation"], launch[k["args"]["correlation"]]["name"], k["args"]["External id"])
        for k in events
        if k.get("cat") == "kernel"
    )
    got = q(
        chrome_out,
        "SELECT k.correlation_id, a.name, o.external_id FROM kernels k "
        "JOIN api_calls a ON a.correlation_id = k.correlation_id AND a.pid = k.pid AND a.tid = k.tid "
        "AND a.external_id = k.external_id "
        "JOIN ops o ON o.external_id = k.external_id ORDER BY 1",
    )
    assert got == want and len(got) == 8


def test_short_names_match_nsys(chrome_out: Path, nsys_sqlite: Path) -> None:
    db = sqlite3.connect(nsys_sqlite)
    pairs = db.execute(
        "SELECT DISTINCT d.value, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds d ON d.id = k.demangledName JOIN StringIds s ON s.id = k.shortName"
    ).fetchall()
    # nsys's demangler spells names differently ((int)128, [lambda(int) (instance 1)], <unnamed>)...
    assert {short_name(long): short for long, short in pairs} == {short: short for _, short in pairs}
    # ...and on the profiler's spelling of the same kernels we get nsys's short names too.
    # (nsys also saw the randn kernel of the input, made before the profiler window opened.)
    ours = {r[0] for r in q(chrome_out, "SELECT DISTINCT short_name FROM kernels")}
    assert ours == {short for _, short in pairs} - {"distribution_elementwise_grid_stride_kernel"}
    assert len(ours) == 6
    assert short_name(
        "void at::native::elementwise_kernel<128, 4, at::native::f<int>(int)::{lambda(int)#1}>(int, T)"
    ) == ("elementwise_kernel")


def test_device_row(chrome_out: Path) -> None:
    assert q(
        chrome_out,
        "SELECT name, sm_count, compute_major, compute_minor, max_threads_per_sm, warp_size, max_warps_per_sm, "
        "max_blocks_per_sm, max_registers_per_sm, max_shared_mem_per_block_optin_bytes, total_memory_bytes "
        "FROM devices",
    ) == [("NVIDIA H200", 132, 9, 0, 2048, 32, 64, None, 65536, 232448, 150109880320)]


def test_meta(chrome_out: Path) -> None:
    (fmt, version, epoch) = q(chrome_out, "SELECT source_format, source_version, epoch_offset_ns FROM trace_meta")[0]
    assert fmt == "chrome-trace"
    assert version == "chrome trace schema 1; cupti 130001; cuda runtime 13000; cuda driver 13000"
    assert epoch == raw_trace()["baseTimeNanoseconds"] == 1790857026000000000
    # The input's identity, as `sha256sum` prints it (the gzip file's bytes, as given).
    assert q(chrome_out, "SELECT source_sha256 FROM trace_meta") == [(hashlib.sha256(SAMPLE.read_bytes()).hexdigest(),)]


def test_op_columns_and_call_stacks(chrome_out: Path) -> None:
    events = raw_trace()["traceEvents"]
    py = [e for e in events if e.get("cat") == "python_function"]
    want = []
    for op in sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: e["ts"]):
        # Independent of the parent ids: every python frame whose interval contains the op, outermost first.
        frames = sorted(
            (p for p in py if p["tid"] == op["tid"] and p["ts"] <= op["ts"] and op["ts"] < p["ts"] + p["dur"]),
            key=lambda p: (p["ts"], -p["dur"]),
        )
        want.append((op["name"], op["args"]["External id"], ";".join(p["name"] for p in frames) or None))
    got = q(chrome_out, "SELECT name, external_id, call_stack FROM ops ORDER BY op_id")
    assert got == want
    assert got[0][2].split(";")[-1].startswith("<built-in method conv2d")
    dims = q(chrome_out, "SELECT input_dims, input_types FROM ops WHERE external_id = 1")[0]
    assert json.loads(dims[0]) == [[8, 3, 64, 64], [16, 3, 3, 3], [16], [], [], [], []]
    assert json.loads(dims[1])[:3] == ["float", "float", "float"]


def test_every_table_matches_the_schema(chrome_out: Path) -> None:
    for table in ("kernels", "api_calls", "ops", "devices", "trace_meta"):
        files = list(chrome_out.glob(f"{table}/trace_id={TID}/*.parquet"))
        assert len(files) == 1, table
        assert pq.read_schema(files[0]).remove_metadata() == TABLES[table], table


def with_annotations() -> dict:
    """The real trace plus record_function ranges, as a profile with ``record_function`` blocks would have.

    This capture has no user_annotation events (a later capture will), so we add the ones PyTorch writes
    for ``with record_function("step"): ... record_function("conv1") ...``: CPU ranges on the op's thread
    around real ops, and the GPU-side copy of conv1 on the kernel's device/stream.
    """
    trace = raw_trace(float)
    ev = trace["traceEvents"]
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    conv = next(e for e in ops if e["args"]["External id"] == 1)
    relu = next(e for e in ops if e["args"]["External id"] == 8)
    kernel = next(e for e in ev if e.get("cat") == "kernel")
    first, last = min(e["ts"] for e in ops), max(e["ts"] + e["dur"] for e in ops)

    def ann(name: str, cat: str, ts: float, dur: float, pid: int, tid: int) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}

    ev += [
        ann("step", "user_annotation", first - 2.0, last - first + 4.0, 801, 801),
        ann("conv1", "user_annotation", conv["ts"] - 1.0, conv["dur"] + 2.0, 801, 801),
        ann("relu", "user_annotation", relu["ts"] - 1.0, relu["dur"] + 2.0, 801, 801),
        ann("conv1", "gpu_user_annotation", kernel["ts"], kernel["dur"], 0, 7),
    ]
    return trace


def test_user_annotations_nest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    normalize_file(write_trace(with_annotations(), tmp_path / "ann" / "trace.json"), out)
    rows = q(
        out,
        "SELECT r.text, r.kind, r.source, r.depth, p.text, r.pid, r.tid FROM nvtx_ranges r "
        "LEFT JOIN nvtx_ranges p ON p.range_id = r.parent_id WHERE r.source <> 'nn.Module' ORDER BY r.start_ns, r.kind",
    )
    # (the trace's module frames nest with these: test_module_frames_are_layers)
    assert [r[:3] for r in rows] == [
        ("step", "push_pop", "user_annotation"),
        ("conv1", "push_pop", "user_annotation"),
        ("conv1", "gpu", "gpu_user_annotation"),
        ("relu", "push_pop", "user_annotation"),
    ]
    assert [r[3:] for r in rows if r[2] == "gpu_user_annotation"] == [(0, None, 0, 7)]
    files = list(out.glob("nvtx_ranges/*/*.parquet"))
    assert pq.read_schema(files[0]).remove_metadata() == TABLES["nvtx_ranges"]


def test_memcpy_and_memset(tmp_path: Path) -> None:
    # Kineto's names and args for copies (libkineto CuptiActivity.cpp: "Memcpy {kind} ({src} -> {dst})").
    trace = raw_trace(float)
    k = next(e for e in trace["traceEvents"] if e.get("cat") == "kernel")
    gpu = {"device": 0, "context": 1, "stream": 7, "External id": 4}
    trace["traceEvents"] += [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 801, "tid": 801, "ts": k["ts"] - 50,
         "dur": 5.0, "args": {"cbid": 41, "correlation": 9001, "External id": 4}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
         "ts": k["ts"] - 40, "dur": 1.5, "args": {**gpu, "correlation": 9001, "bytes": 4096}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": k["ts"] - 20,
         "dur": 1.0, "args": {**gpu, "correlation": 9002, "bytes": 512}},
    ]  # fmt: skip
    out = tmp_path / "out"
    normalize_file(write_trace(trace, tmp_path / "mem" / "trace.json"), out)
    assert q(out, "SELECT kind, src_kind, dst_kind, bytes, pid, stream_id, duration_ns FROM memcpy") == [
        ("Host-to-Device", "Pageable", "Device", 4096, 801, 7, 1500)
    ]
    assert q(out, "SELECT mem_kind, bytes, pid, duration_ns FROM memset") == [("Device", 512, None, 1000)]
    for table in ("memcpy", "memset"):
        f = next(out.glob(f"{table}/*/*.parquet"))
        assert pq.read_schema(f).remove_metadata() == TABLES[table]


def test_layouts_and_chunking_give_the_same_tables(chrome_out: Path, tmp_path: Path, monkeypatch) -> None:
    cols = "SELECT kernel_id, name, start_ns, end_ns, correlation_id, pid, tid FROM kernels ORDER BY 1"
    ocols = "SELECT op_id, name, start_ns, call_stack FROM ops ORDER BY 1"
    want = (q(chrome_out, cols), q(chrome_out, ocols))
    trace = raw_trace(float)
    variants = {
        "kineto": gzip.decompress(SAMPLE.read_bytes()).decode(),  # the real layout, cut into ~30 pieces
        "compact": json.dumps(trace, separators=(",", ":")),  # one line: no event boundary to split at
        "array": json.dumps(trace["traceEvents"]),  # the chrome "JSON array format"
        "nested": json.dumps(
            {
                **trace,
                "traceEvents": [{**e, "args": {**e.get("args", {}), "x": [{}, {}]}} for e in trace["traceEvents"]],
            },
            indent=1,
        ),  # "},\n" inside events: the fast splitter's pieces fail, the slow path reads it
    }
    slow = []
    real_slow = chrome_decode._read_slow
    monkeypatch.setattr(chrome_decode, "_read_slow", lambda *a: slow.append(a) or real_slow(*a))
    monkeypatch.setattr(chrome_decode, "CHUNK_BYTES", 3000)  # many chunks, boundaries everywhere
    for name, text in variants.items():
        slow.clear()
        path = tmp_path / name / "trace.json"
        path.parent.mkdir()
        path.write_text(text)
        out = tmp_path / f"out-{name}"
        normalize_file(path, out)
        assert (q(out, cols), q(out, ocols)) == want, name
        assert bool(slow) == (name in ("array", "nested")), name
        # The sha256 hashed beside the decode (forked workers or not, fast or slow path) is the file's.
        assert q(out, "SELECT source_sha256 FROM trace_meta") == [(hashlib.sha256(path.read_bytes()).hexdigest(),)]


def _pieces_both_ways(events: list[dict]) -> tuple[chrome_events.Piece, chrome_events.Piece]:
    chunk = json.dumps(events).encode()
    return chrome_events.decode_piece(chunk), chrome_events.Piece(chrome_events._GENERAL.decode(chunk))


def test_one_pass_decode_equals_the_general_decode() -> None:
    # The real events without the metadata at the file's end (no "cat"): every event has a known category,
    # so the one-pass (tagged) decode takes them, and each table equals the two-pass decode's.
    events = [e for e in raw_trace(float)["traceEvents"] if "cat" in e]
    assert len(events) == 389 - 60
    chrome_events._TAGGED.decode(json.dumps(events).encode())  # validates: the fast path is the one under test
    fast, general = _pieces_both_ways(events)
    assert sorted(fast.tables) == ["cpu_op", "cuda_runtime", "kernel", "python_function"]
    assert {c: t.num_rows for c, t in fast.tables.items()} == {
        "cpu_op": 27,
        "cuda_runtime": 13,
        "kernel": 8,
        "python_function": 258,
    }
    for cat, table in general.tables.items():
        assert fast.tables[cat].equals(table), cat


@pytest.mark.parametrize(
    "change",
    [
        {"cat": "some_future_category"},  # unknown category
        {"ph": "i"},  # a used category's event that is not a complete ("X") event: not taken
        {"args": None},
    ],
)
def test_events_the_one_pass_decode_rejects_go_the_general_way(change: dict) -> None:
    events = [e for e in raw_trace(float)["traceEvents"] if "cat" in e]
    i = next(i for i, e in enumerate(events) if e["cat"] == "cpu_op")
    events[i] = {**events[i], **change}
    with pytest.raises(chrome_events.msgspec.ValidationError):
        chrome_events._TAGGED.decode(json.dumps(events).encode())
    fast, general = _pieces_both_ways(events)
    assert fast.tables.keys() == general.tables.keys()
    for cat, table in general.tables.items():
        assert fast.tables[cat].equals(table), cat
    assert fast.tables["cpu_op"].num_rows == (27 if "args" in change else 26)


# --- bad input -------------------------------------------------------------------------------------


def gunzipped(tmp_path: Path) -> bytes:
    return gzip.decompress(SAMPLE.read_bytes())


def test_truncated_json(tmp_path: Path) -> None:
    data = gunzipped(tmp_path)
    path = tmp_path / "cut" / "trace.json"
    path.parent.mkdir()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadInputError, match="truncated"):
        normalize_file(path, tmp_path / "out")
    assert not (tmp_path / "out" / "kernels").exists()


def test_gzip_cut_mid_stream(tmp_path: Path) -> None:
    data = SAMPLE.read_bytes()
    path = tmp_path / "cut" / "trace.json.gz"
    path.parent.mkdir()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadInputError, match="gzip stream ends early"):
        normalize_file(path, tmp_path / "out")


def test_json_that_is_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "x" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"model": "smallcnn", "layers": [1, 2, 3]}))
    with pytest.raises(BadInputError, match="no traceEvents"):
        normalize_file(path, tmp_path / "out")
    path.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(BadInputError, match="traceEvents is empty"):
        normalize_file(path, tmp_path / "out")
    path.write_text(json.dumps({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1}]}))
    with pytest.raises(BadInputError, match="no profiler activity"):
        normalize_file(path, tmp_path / "out")


def test_wrongly_typed_field(tmp_path: Path) -> None:
    trace = raw_trace(float)
    i = next(i for i, e in enumerate(trace["traceEvents"]) if e.get("cat") == "kernel")
    trace["traceEvents"][i]["ts"] = "soon"
    with pytest.raises(BadInputError, match=rf"got `str` - at `\$\.traceEvents\[{i}\]\.ts`"):
        normalize_file(write_trace(trace, tmp_path / "bad" / "trace.json"), tmp_path / "out")


def test_events_missing_ts_are_counted(tmp_path: Path) -> None:
    trace = raw_trace(float)
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels[:3]:
        del e["ts"]
    out = tmp_path / "out"
    result = normalize_file(write_trace(trace, tmp_path / "gap" / "trace.json"), out)
    assert result.warnings == ["skipped 3 kernel events without ts or dur"]
    assert q(out, "SELECT count(*) FROM kernels") == [(5,)]
    assert json.loads(q(out, "SELECT warnings FROM trace_meta")[0][0]) == result.warnings
    # Every kernel unusable: the ops still are, and the missing kernels are said out loud.
    for e in kernels[3:]:
        del e["ts"]
    result = normalize_file(write_trace(trace, tmp_path / "none" / "trace.json"), tmp_path / "out2")
    assert result.warnings == [
        "skipped 8 kernel events without ts or dur",
        "no GPU kernel events in the trace (its 8 kernel events lack ts or dur, said above)",
    ]
    assert "kernels" not in result.rows and result.rows["ops"] == 27


def test_copy_of_sample_is_untouched() -> None:
    # with_annotations() and friends mutate what raw_trace() returns: that must be a fresh decode each time
    # (a cached dict would carry one test's edits into the next), and the committed file keeps its bytes.
    before = hashlib.sha256(SAMPLE.read_bytes()).digest()
    edited = with_annotations()
    fresh = raw_trace(float)
    assert len(edited["traceEvents"]) == len(fresh["traceEvents"]) + 4
    assert not any(e.get("cat") == "user_annotation" for e in fresh["traceEvents"])
    assert hashlib.sha256(SAMPLE.read_bytes()).digest() == before


def test_wrongly_typed_arg_names_the_event(tmp_path: Path) -> None:
    # args are decoded per category, after the event itself: the error still names the event in the file.
    trace = raw_trace(float)
    i = [i for i, e in enumerate(trace["traceEvents"]) if e.get("cat") == "kernel"][2]
    trace["traceEvents"][i]["args"]["correlation"] = "twelve"
    with pytest.raises(BadInputError, match=rf"got `str` - at `\$\.traceEvents\[{i}\]\.args\.correlation`"):
        normalize_file(write_trace(trace, tmp_path / "bad" / "trace.json"), tmp_path / "out")
    assert not (tmp_path / "out" / "kernels").exists()


def test_integer_epoch_us_past_the_float_bound_are_exact_without_decimal(tmp_path: Path, monkeypatch) -> None:
    # Older profilers write epoch microseconds as JSON integers (~1.67e15, far past 2**43 us): they stay
    # ints and convert exactly (x 1000) on the fast route; the Decimal decode must not be needed.
    trace = raw_trace(float)
    epoch = 1_669_783_687_000_000
    for e in trace["traceEvents"]:
        if isinstance(e.get("ts"), float):
            e["ts"] = epoch + int(e["ts"]) % 10_000_000 + len(e.get("name", ""))  # whole us, distinct shifts
    text = json.dumps(trace, indent=1)
    raw = json.loads(text, parse_float=Decimal)
    want = sorted((ns(e["ts"]), ns(e["dur"])) for e in raw["traceEvents"] if e.get("cat") == "kernel")
    assert isinstance(raw["traceEvents"][-1]["ts"], int) and want[0][0] > 2**43 * 1000
    monkeypatch.setattr(chrome_events, "_EXACT", None)  # the Decimal route would now fail
    out = tmp_path / "out"
    normalize_file(write_trace(trace, tmp_path / "big" / "trace.json"), out)
    assert q(out, "SELECT start_ns, duration_ns FROM kernels ORDER BY 1, 2") == want


def test_workers_fall_back_to_exact_timestamps(tmp_path: Path, monkeypatch) -> None:
    # Many small pieces (so forked workers decode them); one kernel beyond 2**43 us makes a worker ask for
    # the Decimal decode, and every timestamp still comes out exact.
    monkeypatch.setattr(chrome_decode, "CHUNK_BYTES", 3000)
    trace = raw_trace(float)
    k = next(e for e in reversed(trace["traceEvents"]) if e.get("cat") == "kernel")
    k["ts"] = 9000000000000.123
    text = json.dumps(trace, indent=1)
    raw = json.loads(text, parse_float=Decimal)
    want = sorted(ns(e["ts"]) for e in raw["traceEvents"] if e.get("cat") == "kernel")
    assert want[-1] == 9000000000000123 and len(text) > 10 * 3000
    out = tmp_path / "out"
    normalize_file(write_trace(trace, tmp_path / "big" / "trace.json"), out)
    assert [r[0] for r in q(out, "SELECT start_ns FROM kernels ORDER BY 1")] == want


_WORKER_PROBE = """
import gzip, json, sys
from pipeline.normalize import chrome_decode, chrome_events, forked
events = [e for e in json.loads(gzip.decompress(open(sys.argv[1], "rb").read()))["traceEvents"] if "cat" in e]
chunks = [json.dumps(events[i : i + 40]).encode() for i in range(0, len(events), 40)]

def probe(i):
    rows = sum(t.num_rows for t in chrome_events.decode_piece(chunks[i]).tables.values())
    return rows, "pandas" in sys.modules

got = list(forked.imap(probe, len(chunks), 2, init=chrome_decode._without_pandas))
print(json.dumps({"rows": sum(r for r, _ in got), "worker_pandas": any(p for _, p in got),
                  "parent_before": "pandas" in sys.modules}))
chrome_decode._warm_pyarrow().join()
print("pandas" in sys.modules)
"""


def test_decode_workers_never_import_pandas() -> None:
    # pyarrow imports pandas on its first list/numpy conversion (~0.35 s per process); the workers make it
    # look absent and still build every table, while the parent imports it in the background for later.
    assert importlib.util.find_spec("pandas") is not None  # installed here, so the test can fail
    proc = subprocess.run(
        [sys.executable, "-c", _WORKER_PROBE, str(SAMPLE)], capture_output=True, text=True, check=True
    )
    first, warmed = proc.stdout.splitlines()
    assert json.loads(first) == {"rows": 306, "worker_pandas": False, "parent_before": False}
    assert warmed == "True"


def test_raw_json_column_keeps_texts_and_nulls() -> None:
    # As written in the file (escapes untouched), null only where the key was missing.
    texts = b'[[[8,3,64,64],[]], "caf\\u00e9", null, [], ""]'
    msgspec = chrome_events.msgspec
    vals = [*msgspec.json.decode(texts, type=list[msgspec.Raw]), msgspec.Raw()]
    assert chrome_events._raw_json(vals).to_pylist() == ["[[8,3,64,64],[]]", '"caf\\u00e9"', "null", "[]", '""', None]


def test_arrow_pool_is_jemalloc_while_normalizing_and_restored_after(tmp_path: Path, monkeypatch) -> None:
    # jemalloc (where this pyarrow has it) for the trace's Arrow buffers, the caller's pool back afterwards.
    import pyarrow as pa

    from pipeline.store import TraceWriter

    seen = []
    real_write = TraceWriter.write

    def write(self: TraceWriter, *args: object) -> int:
        seen.append(pa.default_memory_pool().backend_name)
        return real_write(self, *args)

    monkeypatch.setattr(TraceWriter, "write", write)
    before = pa.default_memory_pool().backend_name
    normalize_file(SAMPLE, tmp_path / "out")
    assert pa.default_memory_pool().backend_name == before
    want = "jemalloc" if "jemalloc" in pa.supported_memory_backends() else before
    assert seen[0] == want and seen[-1] == before  # the tables by the normalizer; trace_meta after it


def test_output_checks_are_counted_in_memory(tmp_path: Path, monkeypatch) -> None:
    # normalize's output checks (kernels without a launch, ends before starts) are counted over chrome's
    # tables in memory: no second database reads the staged files back (tests/bad_inputs: the counts).
    from pipeline.normalize import checks

    def no_database(*_: object) -> None:
        raise AssertionError("staged_warnings opened a database")

    monkeypatch.setattr(checks, "duckdb_connect", no_database)
    assert normalize_file(SAMPLE, tmp_path / "out").rows["kernels"] > 0
