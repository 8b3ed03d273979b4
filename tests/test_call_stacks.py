"""ops.call_stack of chrome traces (the innermost-open rule of attribution over Kineto's caller links, written
as SQL in sql/call_stacks.sql and computed by normalize with numpy, ``nesting.call_stacks``): on every
committed trace with Python frames it equals a plain sweep over the raw JSON read with ``json`` (kept here as
the reference), each tie rule is checked on a hand-made trace whose answer is written by hand, and the numpy
engine equals the SQL rule on random frame tables built to hit every tie.
"""

from __future__ import annotations

import gzip
import json
import random
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline.normalize import normalize_file
from pipeline.normalize.nesting import call_stacks, call_stacks_sql
from tests.conftest import SAMPLES, SMALLCNN, q

WITH_FRAMES = [
    SMALLCNN / "torch_trace.json.gz",
    SAMPLES / "external" / "tracelens_vllm_hip_graph_execution.json.gz",
    SAMPLES / "external" / "tracelens_mi300_resnet_act_checkpoint.json.gz",
]
OPS = "SELECT pid, tid, start_ns, call_stack FROM ops ORDER BY op_id"


def ns(us: Decimal | int) -> int:
    return int((Decimal(us) * 1000).to_integral_value(ROUND_HALF_EVEN))


def numpy_sweep(frames: list[dict], points: list[tuple[int, int, int]]) -> list[str | None]:
    """The rule as normalize computed it before (chrome._call_stacks, removed): per thread the frame that
    started last at or before the op (binary search over starts; of equal starts the later in the file);
    while that one had already ended, its ``Python parent id`` (first frame with that id in the process);
    the stack is the frame and its parents, outermost first."""
    pid = np.array([f["pid"] for f in frames], dtype=np.int64)
    tid = np.array([f["tid"] for f in frames], dtype=np.int64)
    start = np.array([ns(f["ts"]) for f in frames], dtype=np.int64)
    end = start + np.array([ns(f["dur"]) for f in frames], dtype=np.int64)
    first: dict[tuple[int, int], int] = {}
    for row, f in enumerate(frames):
        if f["args"].get("Python id") is not None and f["args"]["Python id"] >= 0:
            first.setdefault((f["pid"], f["args"]["Python id"]), row)
    parent = np.array([first.get((f["pid"], f["args"].get("Python parent id")), -1) for f in frames], dtype=np.int64)
    key = (pid << 32) ^ (tid & 0xFFFFFFFF)
    order = np.lexsort((start, key))
    out: list[str | None] = []
    for p, t, at in points:
        k = (p << 32) ^ (t & 0xFFFFFFFF)
        lo, hi = np.searchsorted(key[order], [k, k + 1])
        pos = np.searchsorted(start[order][lo:hi], at, side="right") - 1
        leaf = int(order[lo + pos]) if pos >= 0 else -1
        for _ in range(len(frames)):
            if leaf < 0 or end[leaf] > at:
                break
            leaf = int(parent[leaf])
        names = []
        while leaf >= 0 and len(names) <= len(frames):
            names.append(frames[leaf]["name"])
            leaf = int(parent[leaf])
        out.append(";".join(reversed(names)) or None)
    return out


@pytest.mark.parametrize("path", WITH_FRAMES, ids=lambda p: p.name.split(".")[0])
def test_call_stacks_equal_the_numpy_sweep_on_real_traces(path: Path, tmp_path: Path) -> None:
    events = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)["traceEvents"]
    frames = [e for e in events if e.get("cat") == "python_function" and e.get("ph") == "X"]
    normalize_file(path, tmp_path / "out")
    got = q(tmp_path / "out", OPS)
    assert len(got) == sum(e.get("cat") == "cpu_op" for e in events) > 0
    want = numpy_sweep(frames, [(p, t, s) for p, t, s, _ in got])
    assert [stack for *_, stack in got] == want
    assert sum(s is not None for s in want) > len(want) // 2


def test_kineto_links_are_not_interval_nesting() -> None:
    """Why the stack follows the trace's links: on the activation-checkpointing trace, backward ops on the
    autograd thread have the main thread's frames (run_backward's caller chain) in their stack, and hooks
    called from C++ link to the Python frame that called into C++, not to the builtin enclosing them."""
    path = WITH_FRAMES[2]
    frames = [
        e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("cat") == "python_function"
    ]
    by_id = {(f["pid"], f["args"]["Python id"]): f for f in frames}
    cross = sum(
        1
        for f in frames
        if (p := by_id.get((f["pid"], f["args"].get("Python parent id")))) is not None and p["tid"] != f["tid"]
    )
    assert cross == 504
    hooks = [f for f in frames if f["name"].startswith("torch/utils/checkpoint.py(1101): pack_hook")]

    def innermost_enclosing(f: dict) -> dict:
        around = [g for g in frames if g is not f and g["tid"] == f["tid"] and g["ts"] <= f["ts"]
                  and f["ts"] + f["dur"] <= g["ts"] + g["dur"]]  # fmt: skip
        return max(around, key=lambda g: (g["ts"], -g["dur"]))

    linked_elsewhere = [
        h for h in hooks if innermost_enclosing(h) is not by_id[(h["pid"], h["args"]["Python parent id"])]
    ]
    assert len(hooks) > 0 and len(linked_elsewhere) > 0
    assert all(innermost_enclosing(h)["name"].startswith("<built-in") for h in linked_elsewhere)


# --- the tie rules, by hand --------------------------------------------------------------------------------


def frame(name: str, ts: float, dur: float, pyid: int, parent: int | None, tid: int = 1) -> dict:
    return {"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {"Python id": pyid, "Python parent id": parent}}  # fmt: skip


def op(name: str, ts: float, ext: int, tid: int = 1) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": 0.5,
            "args": {"External id": ext}}  # fmt: skip


def stacks(tmp_path: Path, events: list[dict]) -> dict[str, str | None]:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    normalize_file(path, tmp_path / "out")
    return dict(q(tmp_path / "out", "SELECT name, call_stack FROM ops"))


def test_of_frames_starting_together_the_inner_one_holds_the_op(tmp_path: Path) -> None:
    # main [0, 100) calls f [10, 40), which calls g [10, 20) at the same instant; g is written before f (the
    # file order must not decide which is inner).  h [50, 60) and k [50, 60): same start and end, k called by h.
    events = [
        frame("main", 0, 100, 1, None),
        frame("g", 10, 10, 3, 2),
        frame("f", 10, 30, 2, 1),
        frame("h", 50, 10, 4, 1),
        frame("k", 50, 10, 5, 4),
        op("in_g", 15, 1),
        op("in_f_after_g", 25, 2),
        op("in_k", 55, 3),
    ]
    assert stacks(tmp_path, events) == {"in_g": "main;f;g", "in_f_after_g": "main;f", "in_k": "main;h;k"}


def test_a_frame_has_returned_at_its_end_and_its_open_caller_holds_the_op(tmp_path: Path) -> None:
    # f [10, 20) ends as the op starts: the op is f's caller's; after main ended, nothing holds the op.
    events = [
        frame("main", 0, 30, 1, None),
        frame("f", 10, 10, 2, 1),
        frame("f_inner", 12, 3, 3, 2),
        op("at_f_end", 20, 1),
        op("after_inner", 16, 2),
        op("after_main", 30, 3),
    ]
    assert stacks(tmp_path, events) == {"at_f_end": "main", "after_inner": "main;f", "after_main": None}


def test_the_innermost_open_caller_holds_the_op_not_an_outer_one(tmp_path: Path) -> None:
    # a > b > c, c and then leaf returned: the op between is b's (the first open caller), not a's.
    events = [
        frame("a", 0, 100, 1, None),
        frame("b", 10, 80, 2, 1),
        frame("c", 20, 20, 3, 2),
        frame("leaf", 25, 5, 4, 3),
        op("in_b", 50, 1),
    ]
    assert stacks(tmp_path, events) == {"in_b": "a;b"}


def test_links_cross_threads_and_a_repeated_id_means_its_first_frame(tmp_path: Path) -> None:
    # run_backward on thread 1 causes hook on thread 2 (Kineto links them); id 2 is written twice, the first wins.
    events = [
        frame("step", 0, 100, 1, None),
        frame("run_backward", 10, 80, 2, 1),
        frame("stray", 95, 2, 2, None),
        frame("hook", 20, 10, 3, 2, tid=2),
        op("in_hook", 25, 1, tid=2),
        op("after_hook", 40, 2, tid=2),
    ]
    assert stacks(tmp_path, events) == {"in_hook": "step;run_backward;hook", "after_hook": "step;run_backward"}


def test_chrome_normalize_opens_one_duckdb_database_per_trace(tmp_path: Path, monkeypatch) -> None:
    # A DuckDB database costs ~20 ms of CPU to open and close (benchmarks/results/bench_chrome_i16.txt): chrome
    # normalize opens one per trace (duplicate and output checks); call stacks and NVTX nesting open none.
    from pipeline.normalize import chrome, nesting

    opened: list[str] = []
    for module in (chrome, nesting):
        real = module.duckdb_connect
        monkeypatch.setattr(
            module,
            "duckdb_connect",
            lambda config=None, real=real, name=module.__name__: opened.append(name) or real(config),
        )
    trace = SAMPLES / "external" / "tracelens_mi300_resnet_act_checkpoint.json.gz"
    rows = normalize_file(trace, tmp_path / "out").rows
    stacks = q(tmp_path / "out", "SELECT count(call_stack) FROM ops")[0][0]
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    frames = sum(e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ") for e in events)
    assert frames == 450 and rows["nvtx_ranges"] == 45 + frames and stacks > 0  # both steps that used to open
    # their own ran: the 45 record_function ranges and the module frames, nested by the same engine
    assert opened == ["pipeline.normalize.chrome"]


def _random_frames_and_ops(seed: int) -> tuple[pa.Table, pa.Table]:
    """Frames and ops as normalize hands them to call_stacks, made to hit the rule's corners: many equal
    starts and ends (times on a 0-12 grid), zero and negative lengths, ops at frame ends, ids repeated in a
    process and reused across processes, parents that no frame has or that sit on another thread, NULL pids
    and parents, the large tids text ids become, cycles of links (a frame its own caller)."""
    rng = random.Random(seed)
    tids = [1, 2, 2**62 + 3] if seed % 3 == 0 else [1, 2]
    # every 4th table spans more time (and ids) than packs beside a thread key: the ranks route
    far = [0, 0, 2**61] if seed % 4 == 1 else [0]
    frames = []
    for row in range(rng.randint(1, 40)):
        start = rng.randint(0, 12) + rng.choice(far)
        frames.append({
            "name": rng.choice("abcdefgh"), "pid": rng.choice([7, 7, 7, 8, None]), "tid": rng.choice(tids),
            "start_ns": start, "end_ns": start + rng.choice([0, 1, 2, 3, 5, 8, 12, -1]),
            "python_id": rng.choice([rng.randint(0, row + 1) + rng.choice(far), -1, None]),
            "python_parent_id": rng.choice([rng.randint(-1, row + 2), rng.randint(-1, row + 2), None]),
        })  # fmt: skip
    ops = [
        {"pid": rng.choice([7, 8, None]), "tid": rng.choice(tids), "start_ns": rng.randint(-1, 14) + rng.choice(far)}
        for _ in range(rng.randint(0, 30))
    ]
    ints = ["pid", "tid", "start_ns", "end_ns", "python_id", "python_parent_id"]
    frame_schema = pa.schema([("name", pa.string())] + [(c, pa.int64()) for c in ints])
    op_schema = pa.schema([(c, pa.int64()) for c in ints[:3]])
    return pa.Table.from_pylist(frames, frame_schema), pa.Table.from_pylist(ops, op_schema)


def test_numpy_call_stacks_equal_the_sql_rule_on_random_frames() -> None:
    held = 0
    for seed in range(200):
        frames, ops = _random_frames_and_ops(seed)
        got = call_stacks(ops, frames).to_pylist()
        assert got == call_stacks_sql(ops, frames).to_pylist(), seed
        held += sum(s is not None for s in got)
    assert held > 500  # the tables do give ops stacks, not only nulls


def test_a_cycle_of_links_ends_and_equals_the_sql_rule() -> None:
    # f is its own caller (id 1, parent 1) and g's; the op after g returned climbs to f; every chain stops.
    frames = pa.table({
        "name": ["f", "g"], "pid": [1, 1], "tid": [1, 1], "start_ns": [0, 5], "end_ns": [50, 10],
        "python_id": [1, 2], "python_parent_id": [1, 1],
    })  # fmt: skip
    ops = pa.table({"pid": [1, 1], "tid": [1, 1], "start_ns": [7, 20]})
    got = call_stacks(ops, frames).to_pylist()
    assert got == call_stacks_sql(ops, frames).to_pylist() == ["f;f;g", "f;f"]
