"""Each findings rule on a committed real trace where it fires, its figures checked against the raw file with plain
code: sqlite3 over the nsys export, json over the PyTorch trace, csv over Nsight Compute's export -- the
attribution of kernels to layers by the nested-loop reference of tests/reference.py, never by the views.

| rule | sample | what is checked |
| --- | --- | --- |
| layout_conversion | h200_resnet18 nsys | conv1's 6 nchwToNhwc launches, 63.8 of the layer's 246.2 µs |
| tail_wave | h200_resnet18 nsys | layer1's 196-block convolutions: 2 waves of 132, ncu's waves 1.48 |
| launch_bound | h200_resnet18 nsys | every stretch of starved kernels, the idle between them, per path |
| fp32_no_tensor_cores | h200_transformer nsys | the FFMA GEMMs per layer; ncu counts 0 tensor instructions in them |
| low_occupancy | h100_ddp_2rank | the Triton kernel: 255 registers, Kineto's own occupancy estimate 13 % |
| pageable_h2d_copy | h100_ddp_2rank | the pageable copies launched inside ProfilerStep#N, bytes and time |
| slow_backward | h100_ddp_2rank | `tok`: the embedding's backward kernels against its forward ones |
| straggler_rank | h100_ddp_2rank | `norm`: rank 1's Triton time against the median of the two ranks |
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import sqlite3
import statistics
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

from pipeline.analyze import connect, write_views
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES, gunzip_to
from tests.reference import Call, Kernel, Range, innermost, path_of

#: every rule (the findings view's `rule`); each fires on one of the committed samples below
RULES = {
    "layout_conversion",
    "tail_wave",
    "launch_bound",
    "fp32_no_tensor_cores",
    "low_occupancy",
    "pageable_h2d_copy",
    "slow_backward",
    "straggler_rank",
}
#: what the findings view keeps (finding_rules.py): at least 1 µs and 0.5 % of the trace's kernel time
MIN_NS, MIN_PCT = 1_000, 0.5


def worth_a_look(at_stake: float, trace_kernel_ns: int) -> bool:
    return at_stake >= MIN_NS and 100 * at_stake >= MIN_PCT * trace_kernel_ns


def analyzed(tmp: Path, *files: Path) -> pl.DataFrame:
    """The findings of ``files``, as `tracepipe analyze` writes them."""
    norm, out = tmp / "n", tmp / "a"
    for f in files:
        normalize_file(f, norm)
    write_views(connect(norm, views=[]), out, ["findings"], ("parquet",))
    return pl.read_parquet(out / "findings.parquet")


def detail(row: dict) -> dict[str, float]:
    """A finding's own numbers (the MAP column: a dict, or key/value pairs as some polars versions read it)."""
    d = row["detail"]
    return dict(d) if isinstance(d, dict) else {e["key"]: e["value"] for e in d}


@pytest.fixture(scope="module")
def resnet(tmp_path_factory: pytest.TempPathFactory) -> tuple[pl.DataFrame, Path]:
    tmp = tmp_path_factory.mktemp("resnet")
    raw = gunzip_to(SAMPLES / "h200_resnet18" / "nsys.sqlite.gz", tmp / "nsys.sqlite")
    return analyzed(tmp, raw), raw


@pytest.fixture(scope="module")
def transformer(tmp_path_factory: pytest.TempPathFactory) -> tuple[pl.DataFrame, Path]:
    tmp = tmp_path_factory.mktemp("transformer")
    raw = gunzip_to(SAMPLES / "h200_transformer" / "nsys.sqlite.gz", tmp / "nsys.sqlite")
    return analyzed(tmp, raw), raw


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    folder = SAMPLES / "h100_ddp_2rank"
    return analyzed(tmp_path_factory.mktemp("ddp"), folder / "rank0.json.gz", folder / "rank1.json.gz")


# --- raw nsys: every kernel with its innermost NVTX path, by the nested-loop reference -------------------------


def nsys_kernels(sqlite: Path) -> list[dict]:
    """Kernels of the raw export in start order: short and demangled name, start, end, grid, launching call's start,
    the innermost push/pop path around that call (None outside every range) and the GPU's SM count."""
    db = sqlite3.connect(sqlite)
    names = dict(db.execute("SELECT id, value FROM StringIds"))
    (sms,) = db.execute("SELECT smCount FROM TARGET_INFO_GPU").fetchone()
    calls = [
        Call(c, (t >> 24) & 0xFFFFFF, t & 0xFFFFFF, s)
        for c, t, s in db.execute("SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    ]
    first_call: dict[tuple[int, int], int] = {}
    for c in sorted(calls, key=lambda c: -c.start):
        first_call[(c.pid, c.correlation_id)] = c.start  # the earliest call of a correlation id launches
    ranges = [
        Range(i, "push_pop", (t >> 24) & 0xFFFFFF, t & 0xFFFFFF, s, e, x)
        for i, (t, s, e, x) in enumerate(
            db.execute(
                'SELECT globalTid, n.start, n."end", coalesce(n.text, s.value) FROM NVTX_EVENTS n '
                "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59"
            )
        )
    ]
    rows = db.execute(
        'SELECT correlationId, globalPid, start, "end", shortName, demangledName, gridX * gridY * gridZ '
        'FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start, "end"'
    ).fetchall()
    pids = [(p >> 24) & 0xFFFFFF for _, p, *_ in rows]
    inner = innermost([Kernel(i, r[0], pids[i]) for i, r in enumerate(rows)], calls, ranges)
    out = []
    for i, (corr, _, start, end, short, full, blocks) in enumerate(rows):
        path = path_of(inner[i], ranges) if inner[i] is not None else None
        out.append(
            {
                "short": names[short],
                "name": names[full],
                "start": start,
                "end": end,
                "ns": end - start,
                "blocks": blocks,
                "launch": first_call.get((pids[i], corr)),
                "path": path,
                "sms": sms,
            }
        )
    return out


def finding(df: pl.DataFrame, **key: object) -> dict:
    rows = df.filter(*[pl.col(k).eq_missing(v) for k, v in key.items()]).to_dicts()
    assert len(rows) == 1, (key, rows)
    return rows[0]


# --- layout_conversion: ResNet-18's conv1 ----------------------------------------------------------------------


def test_layout_conversions_of_resnet18_conv1_from_the_raw_export(resnet: tuple) -> None:
    views, raw = resnet
    ks = nsys_kernels(raw)
    conv1 = [k for k in ks if k["path"] == "step/model/conv1"]
    to_nhwc = [k["ns"] for k in conv1 if "nchwToNhwc" in k["short"]]
    layout = sum(k["ns"] for k in conv1 if "nchwToNhwc" in k["short"] or "nhwcToNchw" in k["short"])
    total = sum(k["ns"] for k in conv1)
    # the issue's figure: six nchwToNhwc transforms, 63.8 of conv1's 246.2 µs
    assert (len(to_nhwc), round(sum(to_nhwc) / 1e3, 1), round(total / 1e3, 1)) == (6, 63.8, 246.2)
    got = finding(views, rule="layout_conversion", path="step/model/conv1", kernel="nchwToNhwcKernel")
    assert (got["launches"], got["at_stake_ns"], got["gpu_time_ns"]) == (6, sum(to_nhwc), sum(to_nhwc))
    assert got["value"] == pytest.approx(100 * layout / total, rel=1e-12)
    assert "63.8 of conv1's 246.2 µs" in got["evidence"] and "channels_last" in got["fix"]


# --- tail_wave: ResNet-18's layer1 convolutions ----------------------------------------------------------------


def ncu_rows(path: Path) -> list[dict[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return rows[1:]  # the units row


def test_tail_waves_of_resnet18_layer1_from_the_raw_export_and_ncu(resnet: tuple) -> None:
    views, raw = resnet
    ks = nsys_kernels(raw)
    # ncu measured the same capture's kernels: the 196-block implicit GEMM runs 1 block per SM (shared memory)
    # and 1.48 waves, so 2 waves of 132 slots, the last 64 / 132 = 48.5 % full
    ncu = [
        r
        for r in ncu_rows(SAMPLES / "h200_resnet18" / "ncu_raw.csv.gz")
        if "tilesize128x64x32" in r["Kernel Name"] and float(r["launch__grid_size"]) == 196
    ]
    assert ncu and {
        (float(r["launch__occupancy_limit_shared_mem"]), float(r["launch__waves_per_multiprocessor"])) for r in ncu
    } == {(1, 1.48)}
    path = "step/model/layer1/layer1.0/layer1.0.conv1"
    gemm = [k for k in ks if k["path"] == path and "tilesize128x64x32" in k["name"]]
    assert {(k["blocks"], k["sms"]) for k in gemm} == {(196, 132)}
    # d * (2 - 196 / 132) / 2 per launch, exactly: the slot-time the half-empty second wave leaves idle
    stake = sum(Fraction(k["ns"] * (2 * 132 - 196), 2 * 132) for k in gemm)
    got = finding(views, rule="tail_wave", path=path, kernel=gemm[0]["short"])
    assert (got["launches"], detail(got)["waves"], detail(got)["slots"]) == (len(gemm), 2, 132)
    assert got["at_stake_ns"] == half_up(stake) and got["value"] == pytest.approx(64 / 132)


# --- launch_bound: ResNet-18's forward, the host slower than the GPU ------------------------------------------


def common_path(paths: list[str | None]) -> str | None:
    parts = [(p or "").split("/") for p in paths]
    n = 0
    while all(len(p) > n and p[n] == parts[0][n] for p in parts):
        n += 1
    return "/".join(parts[0][:n]) or None


def test_launch_bound_stretches_of_resnet18_from_the_raw_export(resnet: tuple) -> None:
    views, raw = resnet
    ks = nsys_kernels(raw)  # one device, kernels only: every GPU operation of this export
    max_gap, min_ops = 1_000_000, 8
    starved = []
    latest_end = None
    for i, k in enumerate(ks):
        gap = None if latest_end is None else k["start"] - latest_end
        issue = (
            None if i == 0 or k["launch"] is None or ks[i - 1]["launch"] is None else k["launch"] - ks[i - 1]["launch"]
        )
        starved.append(issue is not None and k["ns"] < issue and gap is not None and 0 < gap <= max_gap)
        k["gap"] = gap
        latest_end = k["end"] if latest_end is None else max(latest_end, k["end"])
    stretches, run = [], []
    for k, s in zip(ks, starved, strict=True):
        if s:
            run.append(k)
        else:
            stretches.append(run)
            run = []
    stretches.append(run)
    per_path: dict[str | None, list[int]] = defaultdict(lambda: [0, 0])
    for run in (r for r in stretches if len(r) >= min_ops):
        p = common_path([k["path"] for k in run])
        per_path[p][0] += len(run)
        per_path[p][1] += sum(k["gap"] for k in run[1:])
    total = sum(k["ns"] for k in ks)
    expected = {p: v for p, v in per_path.items() if worth_a_look(v[1], total)}
    got = views.filter(pl.col("rule") == "launch_bound")
    assert {r["path"]: [r["launches"], r["at_stake_ns"]] for r in got.to_dicts()} == expected
    top = finding(views, rule="launch_bound", path="step/model")
    assert top["priority"] == 1 and top["at_stake_ns"] == per_path["step/model"][1]


# --- fp32_no_tensor_cores: the transformer sample's FP32 GEMMs ---------------------------------------------------


def test_fp32_gemms_of_the_transformer_from_the_raw_export_and_ncu(transformer: tuple) -> None:
    views, raw = transformer
    # ncu: the FFMA GEMMs executed no tensor-pipe instruction (they run on the CUDA cores)
    ncu = [r for r in ncu_rows(SAMPLES / "h200_transformer" / "ncu_raw.csv.gz") if "_ffma_" in r["Kernel Name"]]
    assert ncu and {float(r["sm__inst_executed_pipe_tensor.sum"]) for r in ncu} == {0.0}
    manifest = json.loads((SAMPLES / "h200_transformer" / "manifest.json").read_text())
    assert manifest["versions"]["allow_tf32_matmul"] is False  # the capture left PyTorch's default
    per_path: dict[str, int] = defaultdict(int)
    ks = nsys_kernels(raw)
    for k in ks:
        if "_ffma_" in k["name"] and "tf32" not in k["name"]:
            per_path[k["path"]] += k["ns"]
    total = sum(k["ns"] for k in ks)
    expected = {p: ns for p, ns in per_path.items() if worth_a_look(ns / 2, total)}
    got = (
        views.filter(pl.col("rule") == "fp32_no_tensor_cores")
        .group_by("path")
        .agg(pl.col("gpu_time_ns").sum(), pl.col("at_stake_ns").sum())
    )
    assert expected and dict(got.select("path", "gpu_time_ns").iter_rows()) == expected
    for path, ns in expected.items():
        assert got.filter(pl.col("path") == path)["at_stake_ns"].item() == pytest.approx(ns / 2, abs=2)


# --- the two-rank PyTorch job ------------------------------------------------------------------------------------


def chrome(rank: int) -> list[dict]:
    with gzip.open(SAMPLES / "h100_ddp_2rank" / f"rank{rank}.json.gz") as f:
        return json.load(f)["traceEvents"]


def ns(us: float) -> int:
    return round(us * 1000)


def half_up(x: float | Fraction) -> int:
    """SQL's round(): halves away from zero (Python's round() takes them to the even neighbour)."""
    return math.floor(x + 0.5)


def launches_in(events: list[dict], spans: list[tuple[float, float, int]], cat: str = "kernel") -> list[dict]:
    """GPU events of ``cat`` whose launching cuda_runtime call starts inside one of ``spans`` (ts, end, tid)."""
    calls = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    out = []
    for e in events:
        if e.get("cat") != cat:
            continue
        c = calls.get(e["args"].get("correlation"))
        if c is not None and any(t == c["tid"] and a <= c["ts"] <= b for a, b, t in spans):
            out.append(e)
    return out


def spans(events: list[dict], cat: str, name: str) -> list[tuple[float, float, int]]:
    return [(e["ts"], e["ts"] + e["dur"], e["tid"]) for e in events if e.get("cat") == cat and e["name"] == name]


def test_low_occupancy_of_the_triton_kernel_from_the_raw_trace(ddp: dict) -> None:
    for rank in (0, 1):
        k = [e for e in chrome(rank) if e.get("cat") == "kernel" and e["name"] == "_rownorm_kernel"]
        # 32 threads, 255 registers: 8192 registers a warp, 2 warps per sub-partition, 8 one-warp blocks an SM of
        # 64 warp slots: 12.5 %; Kineto's own estimate (from CUDA's occupancy calculator) rounds it to 13
        assert {(e["args"]["registers per thread"], tuple(e["args"]["block"])) for e in k} == {(255, (32, 1, 1))}
        assert {e["args"]["est. achieved occupancy %"] for e in k} == {13}
        got = finding(ddp, trace_id=f"h100_ddp_2rank.rank{rank}", rule="low_occupancy")
        total = sum(ns(e["dur"]) for e in k)
        assert (got["kernel"], got["launches"], got["gpu_time_ns"]) == ("_rownorm_kernel", 3, total)
        assert "limited by registers: 255 registers/thread" in got["evidence"]
        assert got["value"] == 12.5 and got["at_stake_ns"] == half_up(total * (1 - 12.5 / 25))


def test_pageable_copies_inside_steps_from_the_raw_trace(ddp: dict) -> None:
    for rank in (0, 1):
        ev = chrome(rank)
        steps = [s for s in spans(ev, "user_annotation", "ProfilerStep#1")]
        steps += spans(ev, "user_annotation", "ProfilerStep#2") + spans(ev, "user_annotation", "ProfilerStep#3")
        copies = [e for e in launches_in(ev, steps, "gpu_memcpy") if e["name"] == "Memcpy HtoD (Pageable -> Device)"]
        got = finding(ddp, trace_id=f"h100_ddp_2rank.rank{rank}", rule="pageable_h2d_copy")
        assert (got["launches"], got["at_stake_ns"]) == (len(copies), sum(ns(e["dur"]) for e in copies))
        assert f"{sum(e['args']['bytes'] for e in copies):,} B" in got["evidence"]


def test_slow_embedding_backward_from_the_raw_trace(ddp: dict) -> None:
    for rank in (0, 1):
        ev = chrome(rank)
        fwd = sum(ns(e["dur"]) for e in launches_in(ev, spans(ev, "user_annotation", "tok")))
        bwd_ops = spans(ev, "cpu_op", "autograd::engine::evaluate_function: EmbeddingBackward0")
        bwd = sum(ns(e["dur"]) for e in launches_in(ev, bwd_ops))
        assert bwd > 3 * fwd
        got = finding(ddp, rule="slow_backward", trace_id=f"h100_ddp_2rank.rank{rank}", path="ProfilerStep#*/model/tok")
        assert (got["at_stake_ns"], got["value"]) == (bwd - 2 * fwd, pytest.approx(bwd / fwd))


def test_straggler_rank_on_the_norm_layer_from_the_raw_traces(ddp: dict) -> None:
    # `norm` runs one Triton kernel per step and nothing else: its GPU time per rank is that kernel's
    per_rank = [
        sum(ns(e["dur"]) for e in chrome(r) if e.get("cat") == "kernel" and e["name"] == "_rownorm_kernel")
        for r in (0, 1)
    ]
    median = statistics.median(per_rank)
    assert per_rank[1] >= 1.2 * median
    got = finding(ddp, rule="straggler_rank", path="ProfilerStep#*/model/norm")
    assert got["trace_id"] == "h100_ddp_2rank.rank1"
    assert (got["gpu_time_ns"], got["at_stake_ns"]) == (per_rank[1], half_up(per_rank[1] - median))
    assert got["value"] == pytest.approx(per_rank[1] / median)


def test_every_rule_fires_on_a_committed_sample(resnet: tuple, ddp: dict, transformer: tuple) -> None:
    rules = set(resnet[0]["rule"]) | set(ddp["rule"]) | set(transformer[0]["rule"])
    assert rules == RULES
