"""A user's own training script under `tracepipe capture nsys|torch -- python train.py`
(``sample_traces/h100_user_train_script``: a Hugging Face Llama, its own loop, AdamW, bf16).

Both captures ran the same script; what each source records was made independently (nsys: NVTX ranges of the global
module hooks and emit_nvtx's op ranges; the PyTorch profiler: record_function ranges and its own sequence
numbers), so equal per-(path, pass) kernel lists check each against the other.  The counts by hand come from the
model: 2 decoder layers, each with 7 Linear layers.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES, gunzip_to

CAPTURE = SAMPLES / "h100_user_train_script"
SOURCES = {"nsys": "nsys.sqlite.gz", "torch": "torch_trace.json.gz"}


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple]]:
    out = {}
    for source, name in SOURCES.items():
        dest = tmp_path_factory.mktemp(source)
        normalize_file(CAPTURE / name, dest)
        out[source] = (
            connect(dest)
            .sql("SELECT path, pass, short_name, duration_ns, layer FROM kernel_layers ORDER BY start_ns")
            .fetchall()
        )
    return out


def by_path_and_pass(rows: list[tuple]) -> dict[tuple, list[str]]:
    out: dict[tuple, list[str]] = {}
    for path, ps, name, *_ in rows:
        out.setdefault((path, ps), []).append(name)
    return out


def test_both_sources_give_the_same_kernels_per_path_and_pass(rows: dict) -> None:
    nsys, torch = by_path_and_pass(rows["nsys"]), by_path_and_pass(rows["torch"])
    assert nsys == torch
    assert len(nsys) > 40  # every module of both decoder layers, the loss, the optimizer


def test_backward_and_optimizer_are_placed(rows: dict) -> None:
    for source, got in rows.items():
        backward = [r for r in got if r[1] == "backward"]
        on_modules = sum(r[3] for r in backward if r[0] is not None and r[0].startswith("model"))
        assert on_modules >= 0.95 * sum(r[3] for r in backward), source
        # every Linear's weight-gradient GEMM of both layers is on its own module
        q_proj = Counter(r[0] for r in backward if r[4] == "model.layers.0.self_attn.q_proj")
        assert q_proj and all(p.endswith("/model.layers.0/model.layers.0.self_attn/model.layers.0.self_attn.q_proj")
                              for p in q_proj), source  # fmt: skip
        # the optimizer hooks' range, which the hooks open inside PyTorch's own Optimizer.step# range (a range in
        # both sources: under emit_nvtx its op suffix comes off)
        assert {r[0] for r in got if r[1] == "optimizer"} == {"Optimizer.step#AdamW.step/optimizer"}, source


def test_every_optimizer_kernel_of_the_nsys_run_is_in_its_step(rows: dict, tmp_path: Path) -> None:
    # Independent count: kernels whose launching call (sqlite3) falls inside an NVTX range named `optimizer`.
    db = sqlite3.connect(gunzip_to(CAPTURE / "nsys.sqlite.gz", tmp_path / "raw.sqlite"))
    n = db.execute(
        """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
           JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
           JOIN NVTX_EVENTS e ON e.globalTid = r.globalTid AND e.eventType = 59 AND r.start BETWEEN e.start AND e."end"
           WHERE coalesce(e.text, (SELECT value FROM StringIds WHERE id = e.textId)) = 'optimizer'"""
    ).fetchone()[0]
    assert n == sum(1 for r in rows["nsys"] if r[1] == "optimizer") > 0
