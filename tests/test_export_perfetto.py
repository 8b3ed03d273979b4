"""`tracepipe export perfetto`: a Trace Event Format file that reads back through our chrome normalizer.

Two real samples: ResNet-18's forward traced by nsys (exported through the command line, gzip) and the decoder's
training step traced by the PyTorch profiler (through the function, plain JSON).  Each export is normalized
again and its tables compared with the input's Parquet by plain DuckDB (no views); the JSON itself is checked
with json/Decimal code: required keys per phase, exact times against the profiler's own file, flow arrows,
counter values against a sweep over the exported GPU operations.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pipeline.export.perfetto import export_perfetto
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES, q

RESNET = ("h200_resnet18", "nsys.sqlite.gz", "h200_resnet18.nsys")
TRAIN = ("h200_train_decoder", "torch_trace.json.gz", "h200_train_decoder.torch_trace")


def tp(*args: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *map(str, args)], capture_output=True, text=True, env=env, check=False
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both samples normalized, exported, and the exports normalized again (trace ids ``rt.<id>``)."""
    root = tmp_path_factory.mktemp("perfetto")
    norm, rt = root / "norm", root / "rt"
    for folder, name, _ in (RESNET, TRAIN):
        normalize_file(SAMPLES / folder / name, norm)
    files = {RESNET[2]: root / "rt" / f"{RESNET[2]}.json.gz", TRAIN[2]: root / "rt" / f"{TRAIN[2]}.json"}
    files[RESNET[2]].parent.mkdir()
    cli = tp("export", "perfetto", norm, "--trace-id", RESNET[2], "-o", files[RESNET[2]], "--json")
    assert cli.returncode == 0, cli.stderr
    results = {RESNET[2]: json.loads(cli.stdout), TRAIN[2]: export_perfetto(norm, files[TRAIN[2]], TRAIN[2]).to_json()}
    rt_ids = {}
    for trace, path in files.items():
        rt_ids[trace] = f"rt.{trace}"
        normalize_file(path, rt / "out", trace_id=rt_ids[trace])
    return {"norm": norm, "rt": rt / "out", "files": files, "results": results, "rt_ids": rt_ids}


def load(path: Path) -> dict[str, Any]:
    """The file as JSON with every non-integer number a Decimal (exactly as written)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f, parse_float=Decimal)


KERNEL_COLUMNS = (
    "name, start_ns, end_ns, duration_ns, stream_id, device_id, context_id, correlation_id, external_id, "
    "grid_x, grid_y, grid_z, block_x, block_y, block_z, registers_per_thread, pid, tid"
)


@pytest.mark.parametrize("trace", [RESNET[2], TRAIN[2]])
def test_kernels_come_back_equal(exported: dict[str, Any], trace: str) -> None:
    sql = "SELECT {cols} FROM kernels WHERE trace_id = '{t}' ORDER BY start_ns, correlation_id, name"
    before = q(exported["norm"], sql.format(cols=KERNEL_COLUMNS, t=trace))
    after = q(exported["rt"], sql.format(cols=KERNEL_COLUMNS, t=exported["rt_ids"][trace]))
    assert len(before) == {RESNET[2]: 357, TRAIN[2]: 206}[trace]
    assert after == before


@pytest.mark.parametrize(
    ("table", "cols"),
    [
        ("memset", "start_ns, end_ns, stream_id, correlation_id, bytes, mem_kind"),
        ("api_calls", "kind, name, start_ns, end_ns, pid, tid, correlation_id, external_id"),
        ("ops", "name, start_ns, end_ns, pid, tid, external_id, sequence_number, fwd_thread_id, input_dims"),
        ("nvtx_ranges", "kind, source, text, start_ns, end_ns, pid, tid, depth"),
    ],
)
def test_other_tables_come_back_equal(exported: dict[str, Any], table: str, cols: str) -> None:
    sql = f"SELECT {cols} FROM {table} WHERE trace_id = '{{t}}' ORDER BY ALL"
    before = q(exported["norm"], sql.format(t=TRAIN[2]))
    assert before, f"the sample has {table} rows"
    assert q(exported["rt"], sql.format(t=exported["rt_ids"][TRAIN[2]])) == before


def test_reimport_has_no_warnings(exported: dict[str, Any]) -> None:
    """Counters and flows are categories the chrome normalizer knows to skip: nothing is counted as odd."""
    rows = q(exported["rt"], "SELECT trace_id, warnings FROM trace_meta ORDER BY 1")
    assert [w for _, w in rows] == [None, None]


def test_layer_paths_and_passes_survive(exported: dict[str, Any]) -> None:
    """The attribution run on the re-imported file puts every GPU op on the same path and pass."""
    import tracepipe

    sql = "SELECT op_kind, op_row_id, path, pass FROM gpu_op_layers WHERE trace_id = ? ORDER BY ALL"
    with_path = 0
    for trace in (RESNET[2], TRAIN[2]):
        before = tracepipe.open(exported["norm"]).sql(sql, [trace]).rows()
        after = tracepipe.open(exported["rt"]).sql(sql, [exported["rt_ids"][trace]]).rows()
        assert after == before
        with_path += sum(r[2] is not None for r in before)
    assert with_path > 500


REQUIRED = {
    "X": {"name", "cat", "ph", "ts", "dur", "pid", "tid"},
    "M": {"name", "ph", "pid", "args"},
    "C": {"name", "ph", "ts", "pid", "args"},
    "s": {"name", "cat", "ph", "ts", "pid", "tid", "id"},
    "f": {"name", "cat", "ph", "ts", "pid", "tid", "id", "bp"},
    "i": {"name", "ph", "ts", "pid", "tid", "s"},
}


@pytest.mark.parametrize("trace", [RESNET[2], TRAIN[2]])
def test_valid_trace_event_format(exported: dict[str, Any], trace: str) -> None:
    doc = load(exported["files"][trace])
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    phases = Counter(e["ph"] for e in events)
    assert set(phases) <= set(REQUIRED)
    for e in events:
        assert REQUIRED[e["ph"]] <= e.keys(), e
        for key in ("ts", "dur"):
            if key in e:
                assert isinstance(e[key], (int, Decimal)) and not isinstance(e[key], bool), e
        assert isinstance(e["pid"], int) and isinstance(e.get("tid", 0), int), e
        if "dur" in e:
            assert e["dur"] >= 0
        if e["ph"] == "M":
            assert e["name"] in {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}
        if e["ph"] == "C":
            assert all(isinstance(v, int) for v in e["args"].values())
    assert phases["X"] and phases["M"] and phases["C"] and phases["s"] == phases["f"] > 0
    # Every event count the command reported is what the file holds.
    assert sum(exported["results"][trace]["events"].values()) == len(events)
    gpu_names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert "GPU 0: NVIDIA H200" in gpu_names
    assert [d["numSms"] for d in doc["deviceProperties"]] == [132]


def test_gpu_annotations_look_like_kinetos(exported: dict[str, Any]) -> None:
    """Kineto writes GPU annotations with no stream/device args, and readers rely on it (HTA takes an event
    with a `stream` arg for a kernel): the export's have the same arg keys as the profiler's own."""
    with gzip.open(SAMPLES / TRAIN[0] / TRAIN[1], "rt") as f:
        source = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "gpu_user_annotation"]
    mine = [e for e in load(exported["files"][TRAIN[2]])["traceEvents"] if e.get("cat") == "gpu_user_annotation"]
    assert len(mine) == len(source) == 52
    kineto_keys = {k for e in source for k in e["args"]}
    assert not any({"stream", "device"} & e["args"].keys() for e in mine)
    assert {(e["name"], e["pid"], e["tid"], Decimal(e["ts"])) for e in mine} == {
        (e["name"], e["pid"], e["tid"], Decimal(str(e["ts"]))) for e in source
    }
    assert "stream" not in kineto_keys


def test_gzip_by_name(exported: dict[str, Any]) -> None:
    assert exported["files"][RESNET[2]].read_bytes()[:2] == b"\x1f\x8b"
    assert exported["files"][TRAIN[2]].read_bytes()[:1] == b"{"


def test_times_equal_the_profiler_file(exported: dict[str, Any]) -> None:
    """Kernels as the PyTorch profiler wrote them (its own JSON, read with json) against the export: the same
    name, stream and exact decimal ts/dur; and every exported ts is ``start ns`` / 1000 exactly."""
    with gzip.open(SAMPLES / TRAIN[0] / TRAIN[1], "rt") as f:
        source = json.load(f, parse_float=Decimal)["traceEvents"]
    mine = [e for e in load(exported["files"][TRAIN[2]])["traceEvents"] if e.get("cat") == "kernel"]

    def key(e: dict) -> tuple:
        return (e["name"], e["args"]["stream"], Decimal(e["ts"]), Decimal(e["dur"]))

    assert Counter(key(e) for e in mine) == Counter(key(e) for e in source if e.get("cat") == "kernel")
    assert all(Decimal(e["ts"]) * 1000 == e["args"]["start ns"] for e in mine)
    assert all(Decimal(e["dur"]) * 1000 == e["args"]["duration ns"] for e in mine)


def test_kernel_args_carry_layer_pass_and_occupancy(exported: dict[str, Any]) -> None:
    kernels = [e for e in load(exported["files"][TRAIN[2]])["traceEvents"] if e.get("cat") == "kernel"]
    passes = Counter(e["args"].get("pass") for e in kernels)
    assert set(passes) == {"forward", "backward", "optimizer"}
    assert all(e["args"]["layer path"].startswith("step/") for e in kernels if e["args"]["pass"] == "backward")
    assert all("theoretical occupancy % (model)" in e["args"] for e in kernels)
    # Hand-computed (cudaOccupancy rules, H200: 64K registers in 4 sub-partitions, 64 warps): 54 registers ->
    # ceil(54*32/256)*256 = 1792 per warp; 16384 // 1792 = 9 warps per sub-partition = 36 warps = 9 blocks of 4
    # warps (128 threads); warps alone allow 16, shared memory (2064 B + 1 KB reserve) 72: 36/64 = 56.25 %.
    reduce = [e for e in kernels if e["args"].get("registers per thread") == 54 and e["args"]["block"] == [32, 4, 1]]
    assert reduce
    for e in reduce:
        assert e["args"]["theoretical occupancy % (model)"] == Decimal("56.25")
        assert e["args"]["occupancy limiter (model)"] == "registers"
        assert e["args"]["resident blocks per SM (model)"] == 9


def test_flows_link_each_launch_to_its_gpu_op(exported: dict[str, Any]) -> None:
    events = load(exported["files"][RESNET[2]])["traceEvents"]
    calls = {(e["pid"], e["tid"], e["ts"]): e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    gpu = {(e["pid"], e["tid"], e["ts"]): e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and len(ends) == len(gpu) == 357
    for fid, end in ends.items():
        op = gpu[(end["pid"], end["tid"], end["ts"])]
        call = calls[(starts[fid]["pid"], starts[fid]["tid"], starts[fid]["ts"])]
        assert call["args"]["correlation"] == op["args"]["correlation"]


@pytest.mark.parametrize("trace", [RESNET[2], TRAIN[2]])
def test_counters_equal_a_sweep_of_the_gpu_ops(exported: dict[str, Any], trace: str) -> None:
    """Each counter sample = the exported GPU ops of its layer (path cut at the reported depth) or pass that
    run at that instant (start <= ts < end), counted here one by one; every counter ends at 0."""
    depth = exported["results"][trace]["counter_depth"]
    events = load(exported["files"][trace])["traceEvents"]
    ops: dict[str, list[tuple[Decimal, Decimal]]] = defaultdict(list)
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            path = e["args"].get("layer path")
            group = "/".join(path.split("/")[:depth]) if path else "(no layer)"
            ops[f"layer {group}"].append((e["ts"], e["ts"] + e["dur"]))
            ops[f"pass {e['args'].get('pass', '(none)')}"].append((e["ts"], e["ts"] + e["dur"]))
    samples = [e for e in events if e["ph"] == "C"]
    names = {e["name"] for e in samples}
    assert {n for n in ops if n.startswith("layer ")} == {n for n in names if n.startswith("layer ")}
    assert len([n for n in names if n.startswith("layer ")]) <= 16
    assert any(n.startswith("pass ") for n in names) == (trace == TRAIN[2])  # passes only when there are several
    last: dict[str, tuple[Decimal, int]] = {}
    for e in samples:
        value = e["args"]["GPU ops running"]
        assert value == sum(start <= e["ts"] < end for start, end in ops[e["name"]]), e
        if e["name"] not in last or e["ts"] > last[e["name"]][0]:
            last[e["name"]] = (e["ts"], value)
    assert {v for _, v in last.values()} == {0}


def test_bad_input_exits_2_with_one_line(exported: dict[str, Any], tmp_path: Path) -> None:
    cases = [
        (("export", "perfetto", tmp_path / "missing"), "missing"),
        (("export", "perfetto", exported["norm"]), "--trace-id"),  # two traces, none chosen
        (("export", "perfetto", exported["norm"], "--trace-id", "nope"), "nope"),
        (("export", "perfetto", exported["norm"], "--trace-id", RESNET[2], "-o", tmp_path), "folder"),
        (("export", "perfetto", exported["norm"], "--trace-id", RESNET[2], "-o", tmp_path / "no" / "t.json"), "folder"),
    ]
    shapes = tmp_path.parent / f"{tmp_path.name}-shapes"
    normalize_file(SAMPLES / RESNET[0] / "layer_shapes.json", shapes)  # per-module MACs: no timeline
    cases.append((("export", "perfetto", shapes), "no timeline"))
    for args, says in cases:
        r = tp(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_the_views_two_of_the_exports_views_read_are_computed_once(
    exported: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export reads its views through a lazy connection: what two or more of them read (the attribution's stages,
    nvtx_paths) is a temp table, not nested views planned again in each (231k kernels: 1,005 -> 814 MiB;
    benchmarks/results/lazy_diff_export_44.txt). Its GPU table's statement (CREATE TEMP TABLE ... AS, with
    parameters) names the views it reads to the connection like any query."""
    from pipeline.analyze.views import shared_views
    from pipeline.export import perfetto

    seen: list[set[str]] = []
    depth = perfetto.auto_counter_depth

    def counter_depth(con: Any) -> int:  # called once the GPU table is made; con: the lazy ReadOnlyConnection
        seen.append(
            {t for (t,) in con._con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}
        )
        return depth(con)

    monkeypatch.setattr(perfetto, "auto_counter_depth", counter_depth)
    export_perfetto(exported["norm"], tmp_path / "x.json", RESNET[2])
    (temp,) = seen
    assert {"nvtx_paths", "gpu_op_launches", "launch_point_layers"} <= temp
    assert set(shared_views(["gpu_op_layers", "kernel_occupancy", "kernel_waves"])) <= temp
