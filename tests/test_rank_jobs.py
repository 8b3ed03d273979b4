"""Ranks are compared only within one job (rank_jobs): hand-made folders whose answer a wrong grouping changes,
and the real samples -- the two unrelated HTA traces that carry ranks 0 and 1 (the demo's "22 ranks compared"),
and the two ranks of sample_traces/h100_ddp_2rank."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES
from tests.hand_trace import HandTrace

DDP = SAMPLES / "h100_ddp_2rank"


def ranked(trace_id: str, path: str, rank: int, ns: int = 1_000, gpu: str = "NVIDIA H100 80GB HBM3") -> HandTrace:
    """One trace of one rank: a range `layer` with one kernel of ``ns``; ``path`` is the source file it names."""
    t = HandTrace(trace_id, gpu=gpu, meta={"source_path": path, "rank": rank})
    t.range("layer", 0, 10_000)
    t.kernel("k", 20_000, ns, launch_at=100)
    return t


def jobs(out: Path) -> list[tuple]:
    return connect(out).sql("SELECT trace_id, job, rank, ranks FROM rank_jobs ORDER BY trace_id").fetchall()


def test_files_named_alike_but_for_the_rank_are_one_job(tmp_path: Path) -> None:
    for r in range(3):
        ranked(f"rank{r}.nsys", f"/runs/job/rank{r}/nsys.sqlite", r).write(tmp_path)
    assert jobs(tmp_path) == [(f"rank{r}.nsys", "/runs/job/rank#/nsys.sqlite", r, 3) for r in range(3)]


def test_unrelated_traces_with_rank_numbers_are_no_job(tmp_path: Path) -> None:
    # One folder, ranks 0 and 1, same GPU and format: one file names its rank, the other got it from the trace's
    # metadata (Kineto's distributedInfo) -- the HTA pair of the demo.  Keys: `.../a_rank#.json.gz` and `/ext`.
    ranked("ext.a_rank0", "/ext/a_rank0.json.gz", 0).write(tmp_path)
    ranked("ext.b", "/ext/b.json.gz", 1).write(tmp_path)
    # alike names, but the same rank twice: ambiguous, no job
    ranked("twice.rank1", "/twice/rank1.sqlite", 1).write(tmp_path)
    ranked("twice.rank_1", "/twice/rank_1.sqlite", 1).write(tmp_path)
    # alike names and ranks 0/1, but another GPU model: another run
    ranked("gpus.rank0", "/gpus/rank0.sqlite", 0).write(tmp_path)
    ranked("gpus.rank1", "/gpus/rank1.sqlite", 1, gpu="NVIDIA A100-SXM4-80GB").write(tmp_path)
    assert jobs(tmp_path) == []
    con = connect(tmp_path)
    assert con.sql("SELECT count(*) FROM layer_stragglers").fetchall() == [(0,)]
    assert con.sql("SELECT count(*) FROM layer_rank_spread").fetchall() == [(0,)]


def test_two_jobs_in_one_folder_are_compared_apart(tmp_path: Path) -> None:
    # Job a: ranks 0, 1 at 1000 and 3000 ns; job b: ranks 0, 1 at 10000 and 10000 ns.  Per job the straggler of
    # `layer` is a's rank 1 (median 2000, excess 1000) and b's rank 0 (tie: the lower rank; excess 0).  Pooled,
    # the four would give one row: b's rank 0 at 10000 against a median of 6500.
    ranked("a.rank0", "/a/rank0/t.sqlite", 0, 1_000).write(tmp_path)
    ranked("a.rank1", "/a/rank1/t.sqlite", 1, 3_000).write(tmp_path)
    ranked("b.rank0", "/b/rank0/t.sqlite", 0, 10_000).write(tmp_path)
    ranked("b.rank1", "/b/rank1/t.sqlite", 1, 10_000).write(tmp_path)
    got = (
        connect(tmp_path)
        .sql(
            "SELECT job, ranks, slowest_trace_id, median_gpu_time_ns, excess_ns FROM layer_stragglers "
            "WHERE path = 'layer' ORDER BY job"
        )
        .fetchall()
    )
    assert got == [
        ("/a/rank#/t.sqlite", 2, "a.rank1", 2000.0, 1000.0),
        ("/b/rank#/t.sqlite", 2, "b.rank0", 10000.0, 0.0),
    ]
    spread = connect(tmp_path).sql(
        "SELECT job, max_minus_min_ns FROM layer_rank_spread WHERE path = 'layer' ORDER BY job"
    )
    assert spread.fetchall() == [("/a/rank#/t.sqlite", 2000), ("/b/rank#/t.sqlite", 0)]


def test_real_unrelated_ranks_are_not_compared(tmp_path: Path) -> None:
    # Independent: their distributedInfo says rank 0 of a 1-rank world and rank 1 of a 2-rank world.
    infos = []
    for name in ("hta_ns_resolution_rank0.json.gz", "hta_v100_nccl_df_index_resolver.json.gz"):
        with gzip.open(SAMPLES / "external" / name) as f:
            infos.append(json.load(f)["distributedInfo"])
        normalize_file(SAMPLES / "external" / name, tmp_path)
    assert [(i["rank"], i["world_size"]) for i in infos] == [(0, 1), (1, 2)]
    assert jobs(tmp_path) == []


def test_real_two_rank_job_is_one_job(tmp_path: Path) -> None:
    infos = []
    for r in (0, 1):
        with gzip.open(DDP / f"rank{r}.json.gz") as f:
            infos.append(json.load(f)["distributedInfo"])
        normalize_file(DDP / f"rank{r}.json.gz", tmp_path)
    assert [(i["rank"], i["world_size"]) for i in infos] == [(0, 2), (1, 2)]
    got = jobs(tmp_path)
    assert [(t, r, n) for t, _, r, n in got] == [("h100_ddp_2rank.rank0", 0, 2), ("h100_ddp_2rank.rank1", 1, 2)]
    assert got[0][1] == got[1][1] and got[0][1].endswith("/h100_ddp_2rank/rank#.json.gz")
