"""Training steps (issue 17): backward and optimizer kernels on the forward layer, CUDA graphs, memory ops, domains.

The samples are real H200 captures of one tiny decoder's training step (sample_traces/h200_train_decoder: nsys
with emit_nvtx, the PyTorch profiler, ncu) and of a CUDA-graph replay of its forward (h200_graph_replay per
node, h200_graph_whole as whole graphs).  Expected values come from the raw files through plain sqlite3/json
and the nested-loop reference below, never from the views under test.
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from pipeline.normalize.nesting import with_nesting
from pipeline.store import TraceWriter
from tests.conftest import SAMPLES, gunzip_to
from tests.reference import Call, Kernel, Range, innermost, path_of

TRAIN = SAMPLES / "h200_train_decoder"
GRAPH = SAMPLES / "h200_graph_replay"
WHOLE = SAMPLES / "h200_graph_whole"
OP_TEXT = re.compile(r", (seq|op_id) = \d+|^(aten|autograd|prim|c10d|profiler)::")
SEQ = re.compile(r", seq = (\d+)")


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("training")
    for f in (
        TRAIN / "nsys.sqlite.gz",
        TRAIN / "torch_trace.json.gz",
        GRAPH / "nsys.sqlite.gz",
        WHOLE / "nsys.sqlite.gz",
    ):
        normalize_file(f, out, trace_id=f"{f.parent.name}.{f.name.split('.')[0]}")
    return out


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> dict[str, sqlite3.Connection]:
    tmp = tmp_path_factory.mktemp("raw")
    return {
        d.name: sqlite3.connect(gunzip_to(d / "nsys.sqlite.gz", tmp / f"{d.name}.sqlite"))
        for d in (TRAIN, GRAPH, WHOLE)
    }


# ---------------------------------------------------------------- the reference, from the raw files


def _reference(
    calls: list[Call],
    ranges: list[Range],
    ops: list[tuple[int, int, int, str, int | None, bool]],
    gpu_ops: list[Kernel],
) -> dict[int, tuple[str | None, str | None]]:
    """(path, pass) per GPU op by the issue's rules, in loops: backward ops (outermost, with a sequence number)
    take the path of the latest earlier forward op with that number; optimizer ranges give `optimizer`."""
    own = innermost(gpu_ops, calls, ranges)
    launch = {}
    for c in sorted(calls, key=lambda c: c.start, reverse=True):
        launch[(c.pid, c.correlation_id)] = c
    bwd = [o for o in ops if o[5] and o[4] is not None]
    bwd = [b for b in bwd if not any(o is not b and o[0] == b[0] and o[1] <= b[1] and b[2] <= o[2] for o in bwd)]
    fwd = [o for o in ops if not o[5] and o[4] is not None]
    fwd = [f for f in fwd if not any(b[0] == f[0] and b[1] <= f[1] <= b[2] for b in bwd)]
    out = {}
    for k in gpu_ops:
        c = launch.get((k.pid, k.correlation_id))
        path = path_of(own[k.kernel_id], ranges) if own[k.kernel_id] is not None else None
        kind = "forward" if path is not None else None
        if c is not None:
            opt = [r for r in ranges if r.tid == c.tid and r.start <= c.start <= r.end]
            opt = [r for r in opt if r.text == "optimizer" or r.text.startswith("Optimizer.step#")]
            inside = [b for b in bwd if b[0] == c.tid and b[1] <= c.start <= b[2]]
            if opt:
                path, kind = path_of(min(opt, key=lambda r: r.start).range_id, ranges), "optimizer"
            elif inside:
                kind = "backward"
                cands = [f for f in fwd if f[4] == inside[0][4] and f[1] <= inside[0][1]]
                if cands:
                    f = max(cands, key=lambda f: f[1])
                    fr = innermost([Kernel(-1, -1, c.pid)], [Call(-1, c.pid, f[0], f[1])], ranges)[-1]
                    if fr is not None:
                        path = path_of(fr, ranges)
        out[k.kernel_id] = (path, kind)
    return out


def _nsys_reference(db: sqlite3.Connection) -> tuple[dict[int, tuple[str | None, str | None]], dict[int, str]]:
    """(path, pass) per kernel/memset correlation id of an nsys export (keys: correlation ids), and the kinds."""
    pid = lambda g: (g >> 24) & 0xFFFFFF  # noqa: E731
    calls = [
        Call(c, pid(t), t & 0xFFFFFF, s)
        for c, t, s in db.execute("SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    ]
    events = db.execute(
        'SELECT n.globalTid, n.start, n."end", coalesce(n.text, s.value) FROM NVTX_EVENTS n '
        "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59 ORDER BY n.start"
    ).fetchall()
    ranges, ops = [], []
    for t, s, e, text in events:
        if OP_TEXT.search(text):
            name = text.split(", ")[0]
            m = SEQ.search(text)
            ops.append((t & 0xFFFFFF, s, e, name, int(m.group(1)) if m else None, "Backward" in name))
        else:
            ranges.append(Range(len(ranges), "push_pop", pid(t), t & 0xFFFFFF, s, e, text))
    # evaluate_function wrappers take the number of the backward node inside them
    for i, (t, s, e, name, seq, _) in enumerate(ops):
        if seq is None and name.startswith("autograd::engine::evaluate_function:"):
            inner = [o for o in ops if o[0] == t and s <= o[1] <= e and o[4] is not None and o[5]]
            if inner:
                ops[i] = (t, s, e, name, min(inner, key=lambda o: o[1])[4], True)
    gpu = [
        Kernel(c, c, pid(p))
        for c, p in db.execute(
            "SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
            "SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET"
        )
    ]
    return _reference(calls, ranges, ops, gpu), {}


def _chrome_reference(path: Path) -> dict[int, tuple[str | None, str | None]]:
    """(path, pass) per kernel/memset correlation id of a PyTorch profiler trace, from its JSON."""
    events = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    ns = lambda x: round(x * 1000)  # noqa: E731  (ts in µs with 3 decimals)
    calls = [
        Call(e["args"]["correlation"], e["pid"], e["tid"], ns(e["ts"]))
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    ]
    by_corr = {c.correlation_id: c for c in calls}
    ranges = [
        Range(i, "push_pop", e["pid"], e["tid"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"])
        for i, e in enumerate(e for e in events if e.get("cat") == "user_annotation")
    ]
    ops = [
        (
            e["tid"],
            ns(e["ts"]),
            ns(e["ts"]) + ns(e["dur"]),
            e["name"],
            e["args"].get("Sequence number"),
            (e["args"].get("Fwd thread id") or 0) > 0,
        )
        for e in events
        if e.get("cat") == "cpu_op"
    ]
    gpu = [
        Kernel(e["args"]["correlation"], e["args"]["correlation"], by_corr[e["args"]["correlation"]].pid)
        for e in events
        if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy") and e["args"].get("correlation") in by_corr
    ]
    return _reference(calls, ranges, ops, gpu)


# ---------------------------------------------------------------- backward, optimizer, both sources


def test_backward_gpu_time_sits_on_module_paths(out: Path, raw: dict[str, sqlite3.Connection]) -> None:
    """The backward set is every kernel launched from a thread other than the one running the steps (the
    autograd engine's): counted on the raw sqlite, then >= 95% of its GPU time must be on a module path
    (`step/model/...`, or `step/loss`: the loss function, which the capture wraps in its own range)."""
    db = raw["h200_train_decoder"]
    main_tid = db.execute(
        "SELECT globalTid & 16777215 FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId WHERE s.value = 'step'"
    ).fetchone()[0]
    ref = dict(
        db.execute(
            'SELECT k.correlationId, k."end" - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k '
            "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
            f"WHERE r.globalTid & 16777215 <> {main_tid}"
        ).fetchall()
    )
    assert len(ref) == 126
    con = connect(out)
    for trace in ("h200_train_decoder.nsys", "h200_train_decoder.torch_trace"):
        rows = con.execute(
            "SELECT correlation_id, duration_ns, path FROM kernel_layers WHERE trace_id = ? AND pass = 'backward'",
            [trace],
        ).fetchall()
        assert len(rows) == 126
        on_module = sum(d for _, d, p in rows if p is not None and p.startswith(("step/model/", "step/loss")))
        on_any = sum(d for _, d, p in rows if p is not None)
        assert on_any == sum(d for _, d, _ in rows)  # every backward kernel on a path
        assert on_module / sum(d for _, d, _ in rows) >= 0.95
    nsys_bwd = {
        c
        for (c,) in con.execute(
            "SELECT correlation_id FROM kernel_layers WHERE trace_id = 'h200_train_decoder.nsys' AND pass = 'backward'"
        ).fetchall()
    }
    assert nsys_bwd == set(ref)


def test_nsys_and_pytorch_give_equal_path_pass_lists(out: Path) -> None:
    rows = (
        connect(out)
        .execute(
            """SELECT trace_id, path, pass, list(short_name ORDER BY short_name)
           FROM kernel_layers WHERE trace_id LIKE 'h200_train_decoder.%' GROUP BY ALL"""
        )
        .fetchall()
    )
    by = {t: {(p, s): k for tt, p, s, k in rows if tt == t} for t in {r[0] for r in rows}}
    nsys, torch = by["h200_train_decoder.nsys"], by["h200_train_decoder.torch_trace"]
    assert nsys == torch
    passes = Counter(s for (_, s), k in nsys.items() for _ in k)
    assert passes == {"forward": 64, "backward": 126, "optimizer": 16}  # 2 steps
    assert ("step/optimizer", "optimizer") in nsys
    assert ("step/model/blocks.1/blocks.1.attn/blocks.1.attn.qkv", "backward") in nsys


def test_per_layer_counts_equal_the_raw_file_reference(out: Path, raw: dict[str, sqlite3.Connection]) -> None:
    con = connect(out)
    for trace, ref in (
        ("h200_train_decoder.nsys", _nsys_reference(raw["h200_train_decoder"])[0]),
        ("h200_train_decoder.torch_trace", _chrome_reference(TRAIN / "torch_trace.json.gz")),
    ):
        got = dict(
            (
                (c, (p, s))
                for c, p, s in con.execute(
                    "SELECT correlation_id, path, pass FROM gpu_op_layers WHERE trace_id = ?", [trace]
                ).fetchall()
            )
        )
        assert got == ref, trace
        expected = Counter(p for p, _ in ref.values())
        per_path = dict(con.execute("SELECT path, gpu_ops FROM layer_summary WHERE trace_id = ?", [trace]).fetchall())
        assert per_path == dict(expected)
        split = con.execute(
            "SELECT sum(forward_kernels), sum(backward_kernels), sum(optimizer_kernels), sum(memset_count) "
            "FROM layer_summary WHERE trace_id = ?",
            [trace],
        ).fetchone()
        assert split[:3] == (64, 126, 16)
        folded = con.execute(
            "SELECT sum(forward_kernels), sum(backward_kernels), sum(optimizer_kernels), sum(memset_count), "
            "sum(gpu_ops) FROM layer_name_summary WHERE trace_id = ?",
            [trace],
        ).fetchone()
        assert folded == (*split, len(ref))


def test_pytorch_own_optimizer_range_is_recognised(out: Path, tmp_path: Path) -> None:
    """A trace not annotated by us: our `optimizer` range renamed away, PyTorch's `Optimizer.step#AdamW.step`
    alone makes the optimizer pass."""
    doc = json.loads(gzip.decompress((TRAIN / "torch_trace.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("name") == "optimizer":
            e["name"] = "user_wrapper"
    f = tmp_path / "renamed.json"
    f.write_text(json.dumps(doc))
    norm = tmp_path / "norm"
    normalize_file(f, norm)
    rows = connect(norm).execute("SELECT path, pass, count(*) FROM kernel_layers WHERE pass = 'optimizer' GROUP BY ALL")
    assert rows.fetchall() == [("step/user_wrapper/Optimizer.step#AdamW.step", "optimizer", 16)]


# ---------------------------------------------------------------- CUDA graphs


def test_graph_replay_kernels_get_the_module_that_made_their_node(
    out: Path, raw: dict[str, sqlite3.Connection]
) -> None:
    db = raw["h200_graph_replay"]
    ranges = [
        Range(i, "push_pop", (t >> 24) & 0xFFFFFF, t & 0xFFFFFF, s, e, x)
        for i, (t, s, e, x) in enumerate(
            db.execute(
                'SELECT n.globalTid, n.start, n."end", s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId'
            )
        )
    ]
    made = {}
    for node, orig, t, g in db.execute(
        "SELECT graphNodeId, originalGraphNodeId, start, globalTid FROM CUDA_GRAPH_NODE_EVENTS ORDER BY start"
    ):
        made.setdefault(node, (orig, t, g))
        if orig is not None:
            made[node] = (orig, t, g)
    expected = []
    for node, dur in db.execute(
        'SELECT graphNodeId, "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL'
    ):
        orig = made[node][0]
        _, t, g = made[orig]
        r = innermost([Kernel(0, 0, (g >> 24) & 0xFFFFFF)], [Call(0, (g >> 24) & 0xFFFFFF, g & 0xFFFFFF, t)], ranges)[0]
        expected.append((node, path_of(r, ranges), dur))
    assert len(expected) == 52
    con = connect(out)
    got = con.execute(
        "SELECT graph_node_id, path, duration_ns, graph_id FROM kernel_layers "
        "WHERE trace_id = 'h200_graph_replay.nsys' AND graph_node_id IS NOT NULL"
    ).fetchall()
    assert sorted(g[:3] for g in got) == sorted(expected)
    assert all(p.startswith("model/") or p == "model" for _, p, _ in expected)
    assert {g[3] for g in got} == {2}  # the exec graph, as CUDA_GRAPH_EVENTS numbers it
    # module calls made while the graph was captured ran no kernels: not calls; the replays' steps are
    calls = dict(
        con.execute("SELECT path, calls FROM layer_summary WHERE trace_id = 'h200_graph_replay.nsys'").fetchall()
    )
    assert calls["model/blocks.0/blocks.0.attn/blocks.0.attn.qkv"] == 0
    raw_steps = db.execute(
        "SELECT count(*) FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId WHERE s.value = 'step'"
    )
    assert calls.get("step", raw_steps.fetchone()[0]) == 2


def test_whole_graph_records_become_data_and_a_warning(out: Path, raw: dict[str, sqlite3.Connection]) -> None:
    ref = (
        raw["h200_graph_whole"]
        .execute('SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE')
        .fetchone()
    )
    con = connect(out)
    assert (
        con.execute(
            "SELECT count(*), sum(duration_ns) FROM graph_launches WHERE trace_id = 'h200_graph_whole.nsys'"
        ).fetchone()
        == ref
    )
    warnings = json.loads(
        con.execute("SELECT warnings FROM trace_meta WHERE trace_id = 'h200_graph_whole.nsys'").fetchone()[0]
    )
    assert any(f"{ref[0]} CUDA graph launches ({ref[1]} ns" in w and "--cuda-graph-trace=node" in w for w in warnings)


# ---------------------------------------------------------------- NVTX domains, in code


def test_other_domains_never_break_the_model_path(tmp_path: Path) -> None:
    """A CCCL range inside a module range (and a same-named range in a user domain) on one thread."""
    ranges = pa.table(
        {
            "range_id": [0, 1, 2, 3],
            "kind": ["push_pop"] * 4,
            "domain": [None, None, "CCCL", "mylib"],
            "text": ["model", "conv", "cub::DeviceScan", "conv"],
            "pid": [1] * 4,
            "tid": [7] * 4,
            "start_ns": [0, 10, 20, 25],
            "end_ns": [100, 90, 40, 30],
        }
    )
    nested = with_nesting(ranges)
    depth = dict(zip(nested["range_id"].to_pylist(), nested["depth"].to_pylist(), strict=True))
    assert depth == {0: 0, 1: 1, 2: 0, 3: 0}
    w = TraceWriter(tmp_path, "t")
    w.write("nvtx_ranges", nested)
    w.write(
        "api_calls",
        pa.table(
            {
                "call_id": [0, 1],
                "correlation_id": [5, 6],
                "pid": [1, 1],
                "tid": [7, 7],
                "start_ns": [27, 50],
                "end_ns": [28, 51],
                "name": ["cudaLaunchKernel"] * 2,
            }
        ),
    )
    w.write(
        "kernels",
        pa.table(
            {
                "kernel_id": [0, 1],
                "correlation_id": [5, 6],
                "pid": [1, 1],
                "start_ns": [200, 300],
                "end_ns": [210, 310],
                "duration_ns": [10, 10],
                "name": ["k0", "k1"],
            }
        ),
    )
    w.write("trace_meta", pa.table({"source_path": ["x"], "schema_version": ["1.2"]}))
    w.commit()
    rows = connect(tmp_path).execute("SELECT kernel_id, path, domain FROM kernel_layers ORDER BY 1").fetchall()
    assert rows == [(0, "model/conv", None), (1, "model/conv", None)]
    paths = connect(tmp_path).execute("SELECT text, domain, path FROM nvtx_paths ORDER BY range_id").fetchall()
    assert paths[2:] == [("cub::DeviceScan", "CCCL", "cub::DeviceScan"), ("conv", "mylib", "conv")]
