"""Nsight Systems traces made with nsys's own PyTorch support, or none (``sample_traces/h100_llama_nsys``: one
HF Llama training script run three ways): module classes from ``--pytorch=functions-trace``, optimizer steps,
and backward work from autograd's thread when nothing links it.

The expected side reads the raw export with ``sqlite3`` only: a kernel's launching call is the runtime/driver
call with its correlation id (the earliest); NVTX push/pop ranges (eventType 59) of the domain named ``PyTorch``
nest by time on their thread.
"""

from __future__ import annotations

import gzip
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES

NSYS = SAMPLES / "h100_llama_nsys"
FORWARD = re.compile(r"^torch\.nn\.modules\.(\w+)\.forward$")


class Raw:
    """A plain reading of one export."""

    def __init__(self, path: Path, tmp: Path) -> None:
        plain = tmp / path.name.removesuffix(".gz")
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        self.db = sqlite3.connect(plain)
        strings = dict(self.db.execute("SELECT id, value FROM StringIds"))
        self.thread_names = {g: strings[n] for n, g in self.db.execute("SELECT nameId, globalTid FROM ThreadNames")}
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        self.ranges: dict[int, list[tuple[int, int, str, str | None]]] = {}  # thread -> (start, end, text, domain)
        if "NVTX_EVENTS" in tables:  # (the plain run wrote no NVTX, and nsys then exports no such table)
            domains = {
                d: (t if t is not None else strings.get(tid))
                for d, t, tid in self.db.execute("SELECT domainId, text, textId FROM NVTX_EVENTS WHERE eventType = 75")
            }
            rows = self.db.execute(
                'SELECT globalTid, start, "end", text, textId, domainId FROM NVTX_EVENTS WHERE eventType = 59'
            )
            for g, s, e, text, tid, dom in rows:
                text = text if text is not None else strings[tid]
                self.ranges.setdefault(g, []).append((s, e, text, domains.get(dom)))
        self.launch: dict[int, tuple[int, int]] = {}
        for table in tables & {"CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"}:
            for c, g, s in self.db.execute(f"SELECT correlationId, globalTid, start FROM {table}"):
                if c not in self.launch or s < self.launch[c][1]:
                    self.launch[c] = (g, s)
        self.kernels = self.db.execute('SELECT correlationId, "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchall()

    def innermost(self, thread: int, t: int, keep) -> tuple[int, int, str, str | None] | None:
        open_ = [r for r in self.ranges.get(thread, ()) if r[0] <= t <= r[1] and keep(r)]
        return max(open_, key=lambda r: (r[0], -r[1])) if open_ else None


def module_class(r: tuple) -> bool:
    return r[3] == "PyTorch" and FORWARD.match(r[2]) is not None


def seq_of(text: str) -> int | None:
    m = re.search(r", seq = (\d+)", text)
    return int(m.group(1)) if m else None


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Raw, dict]]:
    out = {}
    for name in ("plain", "autograd_nvtx", "functions_trace"):
        tmp = tmp_path_factory.mktemp(name)
        normalize_file(NSYS / f"{name}.sqlite.gz", tmp / "out")
        rows = connect(tmp / "out").sql("SELECT correlation_id, layer, pass, duration_ns FROM kernel_layers").fetchall()
        out[name] = (Raw(NSYS / f"{name}.sqlite.gz", tmp), {c: (lay, ps, d) for c, lay, ps, d in rows})
    return out


def test_functions_trace_gives_forward_kernels_their_module_class(runs: dict) -> None:
    raw, got = runs["functions_trace"]
    want = {}
    for c, _ in raw.kernels:
        thread, t = raw.launch[c]
        if raw.thread_names.get(thread, "").startswith("pt_autograd"):
            continue
        r = raw.innermost(thread, t, module_class)
        if r is not None:
            want[c] = FORWARD.match(r[2]).group(1)
    assert Counter(want.values()) == Counter({"Linear": 45, "Embedding": 3})  # 15 Linear calls a step, 3 steps
    assert {c: got[c][:2] for c in want} == {c: (cls, "forward") for c, cls in want.items()}


def test_functions_trace_backward_takes_the_linked_forward_module(runs: dict) -> None:
    # A backward op range (`XBackward0, seq = N` on autograd's thread, or the engine's wrapper around it,
    # `autograd::engine::evaluate_function: XBackward0`, which has the number of the first node inside it) links to
    # the latest forward op range with `seq = N` started before it; the kernel takes the module class open at that
    # op's start.
    raw, got = runs["functions_trace"]
    forward_ops = [
        (s, g, seq_of(text))
        for g, rs in raw.ranges.items()
        if not raw.thread_names.get(g, "").startswith("pt_autograd")
        for s, _, text, dom in rs
        if dom is None and seq_of(text) is not None
    ]
    want = {}
    for c, _ in raw.kernels:
        thread, t = raw.launch[c]
        if not raw.thread_names.get(thread, "").startswith("pt_autograd"):
            continue
        on_thread = raw.ranges.get(thread, ())
        nodes = [r for r in on_thread if re.match(r"^\w+Backward\d*, seq", r[2])]
        wrappers = [r for r in on_thread if r[2].startswith("autograd::engine::evaluate_function: ")]
        around = [r for r in nodes + wrappers if r[0] <= t <= r[1]]
        if not around:
            continue
        outer = min(around)  # the outermost backward op around the launch
        inner = [n for n in nodes if outer[0] <= n[0] <= outer[1]]
        if not inner:
            continue
        seq = seq_of(min(inner)[2])
        linked = [f for f in forward_ops if f[2] == seq and f[0] <= outer[0]]
        if not linked:
            continue
        start, g, _ = max(linked)
        r = raw.innermost(g, start, module_class)
        want[c] = FORWARD.match(r[2]).group(1) if r else None
    classes = {c: w for c, w in want.items() if w is not None}
    assert len(classes) > 100 and set(classes.values()) == {"Linear", "Embedding"}
    assert {c: got[c][:2] for c in classes} == {c: (cls, "backward") for c, cls in classes.items()}


def test_optimizer_steps_are_the_optimizer_pass(runs: dict) -> None:
    # functions-trace: torch.optim.AdamW.step ranges (domain PyTorch); autograd-nvtx: PyTorch's own
    # `Optimizer.step#AdamW.step` op range. Either way every kernel launched inside is `optimizer`.
    for name, text in (("functions_trace", "torch.optim.AdamW.step"), ("autograd_nvtx", "Optimizer.step#AdamW.step")):
        raw, got = runs[name]
        inside = {
            c
            for c, _ in raw.kernels
            if raw.innermost(*raw.launch[c], lambda r, text=text: r[2].split(",")[0] == text) is not None
        }
        assert len(inside) == 66  # 3 steps of AdamW's foreach kernels
        assert {c for c, v in got.items() if v[1] == "optimizer"} == inside


def test_plain_nsys_backward_is_autograds_thread(runs: dict) -> None:
    # No NVTX at all: the kernels launched from the thread nsys names pt_autograd_0 are the backward pass (63% of
    # this step's kernels), the rest have no pass; none has a layer.
    raw, got = runs["plain"]
    autograd = {c for c, _ in raw.kernels if raw.thread_names.get(raw.launch[c][0], "").startswith("pt_autograd_")}
    assert len(autograd) == 537 and len(raw.kernels) == 933
    assert {c for c, v in got.items() if v[1] == "backward"} == autograd
    assert {v[1] for c, v in got.items() if c not in autograd} == {None}
    assert {v[0] for v in got.values()} == {None}


def test_functions_trace_alone_still_has_its_optimizer_steps(tmp_path: Path) -> None:
    # `--pytorch=functions-trace` without autograd-nvtx: no op ranges, so no `Optimizer.step#` range either; the
    # domain's own `torch.optim.AdamW.step` range makes the pass.  Made from the real export by deleting its
    # default-domain (emit_nvtx) ranges.
    raw = Raw(NSYS / "functions_trace.sqlite.gz", tmp_path)
    raw.db.execute("DELETE FROM NVTX_EVENTS WHERE eventType = 59 AND coalesce(domainId, 0) = 0")
    raw.db.commit()
    path = tmp_path / "functions_only.sqlite"
    raw.db.execute(f"VACUUM INTO '{path}'")
    normalize_file(path, tmp_path / "out")
    got = connect(tmp_path / "out").sql("SELECT correlation_id FROM kernel_layers WHERE pass = 'optimizer'").fetchall()
    inside = {c for c, _ in raw.kernels if raw.innermost(*raw.launch[c], lambda r: r[2] == "torch.optim.AdamW.step")}
    assert len(inside) == 66 and {c for (c,) in got} == inside
