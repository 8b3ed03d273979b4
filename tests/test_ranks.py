"""Many traces, many ranks: rank/host/device in trace_meta, views over several traces, parallel and Dask
normalize identical to the serial run, and the cross-rank views on 16 copies of the real capture."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.analyze import connect, view_files
from pipeline.errors import BadInputError
from pipeline.normalize import normalize_file
from pipeline.normalize.batch import normalize_many
from pipeline.normalize.ranks import rank_from_path
from pipeline.schema import TABLES
from pipeline.store import trace_ids
from tests.conftest import SMALLCNN
from tests.reference import nsys_path_stats
from tests.test_cli import tp

RANKS = 16
SLOW_RANK = 5  # its kernels take twice as long


def meta(out: Path, trace_id: str) -> dict:
    return pq.read_table(out / "trace_meta" / f"trace_id={trace_id}" / "part-0.parquet").to_pylist()[0]


# --- rank, host, device in trace_meta ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "rank"),
    [
        ("job/rank3/nsys.sqlite", 3),
        ("job/rank_3/trace.json", 3),
        ("job/trace_rank3.sqlite", 3),
        ("job/rank-07.json.gz", 7),
        ("RANK12/x.sqlite", 12),
        ("job/rank2/worker_rank_5.json", 5),  # the part nearest the file wins
        ("frank1/nsys.sqlite", None),
        ("ranks/nsys.sqlite", None),
        ("h200_smallcnn/nsys.sqlite.gz", None),
    ],
)
def test_rank_from_path(path: str, rank: int | None) -> None:
    assert rank_from_path(path) == rank


def test_real_capture_host_and_device_and_no_rank(nsys_out: Path, nsys_sqlite: Path) -> None:
    raw = sqlite3.connect(nsys_sqlite)
    # Independent: the capture records no rank variable, one host and kernels on one device.
    envs = [v for (v,) in raw.execute("SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE'")]
    assert len(envs) > 50 and not [e for e in envs if e.split("=")[0] in ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK")]
    (host,) = raw.execute("SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_HOST'").fetchone()
    devices = raw.execute("SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    m = meta(nsys_out, "h200_smallcnn.nsys")
    assert (m["rank"], m["local_rank"], m["host"], [(m["device_id"],)]) == (None, None, host, devices)
    assert host == "vm" and devices == [(0,)]


def _with_capture_rows(src: Path, dest: Path, rows: list[tuple[str, str]]) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dest)
    with sqlite3.connect(dest) as db:
        db.executemany("INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?, ?)", rows)
    return dest


def test_rank_from_the_captured_environment_beats_the_path(nsys_sqlite: Path, tmp_path: Path) -> None:
    env = "PROCESS_0:ENVIRONMENT_VARIABLE"
    f = _with_capture_rows(
        nsys_sqlite, tmp_path / "rank_9" / "nsys.sqlite", [(env, 'RANK="3"'), (env, 'LOCAL_RANK="1"')]
    )
    r = normalize_file(f, tmp_path / "out")
    m = meta(tmp_path / "out", r.trace_id)
    assert (m["rank"], m["local_rank"]) == (3, 1)
    assert r.warnings == ["path says rank 9 but the capture says rank 3: kept the capture's"]
    assert json.loads(m["warnings"]) == r.warnings


def test_rank_from_mpi_env_and_from_command_line(nsys_sqlite: Path, tmp_path: Path) -> None:
    env = "PROCESS_0:ENVIRONMENT_VARIABLE"
    mpi = _with_capture_rows(
        nsys_sqlite, tmp_path / "a" / "nsys.sqlite", [(env, 'OMPI_COMM_WORLD_RANK="12"'), (env, 'SLURM_PROCID="1"')]
    )
    args = _with_capture_rows(
        nsys_sqlite,
        tmp_path / "b" / "nsys.sqlite",
        [("PROCESS_0:ARGUMENT_1", "--rank"), ("PROCESS_0:ARGUMENT_2", "6"), ("PROCESS_0:ARGUMENT_3", "--local_rank=2")],
    )
    out = tmp_path / "out"
    assert [(meta(out, normalize_file(f, out).trace_id)["rank"]) for f in (mpi, args)] == [12, 6]
    assert meta(out, "b.nsys")["local_rank"] == 2


# --- views over several traces ------------------------------------------------------------------------------


def test_views_over_two_traces_equal_each_single_trace_run(tmp_path: Path) -> None:
    """The real capture normalized twice into one folder: every per-trace view, per trace, equals a one-trace run."""
    both, single = tmp_path / "both", tmp_path / "single"
    for tid in ("run_a", "run_b"):
        normalize_file(SMALLCNN / "nsys.sqlite.gz", both, tid)
    normalize_file(SMALLCNN / "nsys.sqlite.gz", single, "run_a")
    # each view computed once into a table, as analyze computes them (as nested views findings alone plans for ~9 s)
    con_both, con_single = connect(both, materialize=True), connect(single, materialize=True)
    checked = []
    for view in view_files():
        cols = [c for c, *_ in con_single.sql(f"DESCRIBE {view}").fetchall()]
        if "trace_id" not in cols:
            continue  # the cross-rank views, tested below
        rest = ", ".join(c for c in cols if c != "trace_id")
        expected = sorted(con_single.sql(f"SELECT {rest} FROM {view}").fetchall(), key=repr)
        if not expected:
            continue  # views over tables this trace has none of (ncu_*, layer_macs)
        for tid in ("run_a", "run_b"):
            got = con_both.sql(f"SELECT {rest} FROM {view} WHERE trace_id = '{tid}'").fetchall()
            assert sorted(got, key=repr) == expected, (view, tid)
        checked.append(view)
    assert {"kernel_layers", "layer_summary", "layer_timeline"} <= set(checked)


# --- 16 ranks: parallel and Dask normalize, cross-rank views ------------------------------------------------


@pytest.fixture(scope="module")
def ranks_dir(tmp_path_factory: pytest.TempPathFactory, nsys_sqlite: Path) -> Path:
    """rank0..rank15/nsys.sqlite: copies of the real capture; rank 5's kernels made to take twice as long."""
    root = tmp_path_factory.mktemp("ranks")
    for r in range(RANKS):
        (root / f"rank{r}").mkdir()
        shutil.copy(nsys_sqlite, root / f"rank{r}" / "nsys.sqlite")
    with sqlite3.connect(root / f"rank{SLOW_RANK}" / "nsys.sqlite") as db:
        db.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start + 2 * ("end" - start)')
    return root


def rank_files(root: Path) -> list[Path]:
    return sorted(root.glob("rank*/nsys.sqlite"), key=lambda p: int(p.parent.name[4:]))


@pytest.fixture(scope="module")
def serial_out(ranks_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("serial")
    outcomes = list(normalize_many(rank_files(ranks_dir), out))
    assert [o.error for o in outcomes] == [None] * RANKS
    return out


def contents(out: Path) -> dict[str, pa.Table]:
    """Every table of every trace, rows sorted, normalized_at_utc dropped (the one column that must differ)."""
    tables = {}
    for name in TABLES:
        files = sorted((out / name).glob("trace_id=*/part-0.parquet"))
        if files:
            t = pa.concat_tables(pq.read_table(f) for f in files)
            t = t.drop_columns([c for c in ("normalized_at_utc",) if c in t.column_names])
            tables[name] = t.sort_by([(c, "ascending") for c in t.column_names])
    return tables


def test_pool_and_dask_match_the_serial_run(ranks_dir: Path, serial_out: Path, tmp_path: Path) -> None:
    from dask.distributed import LocalCluster

    bad = tmp_path / "rank16" / "nsys.sqlite"  # a cut-short capture among the good ones
    bad.parent.mkdir()
    bad.write_bytes((ranks_dir / "rank0" / "nsys.sqlite").read_bytes()[:50_000])
    files = [*rank_files(ranks_dir), bad]
    expected = contents(serial_out)
    assert expected["kernels"].num_rows == 33 * RANKS and len(expected) == 9  # (threads: nsys's ThreadNames)

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        runs = {
            "pool": dict(jobs=2),
            "dask": dict(scheduler=cluster.scheduler_address),
        }
        for label, how in runs.items():
            out = tmp_path / label
            outcomes = sorted(normalize_many(files, out, **how), key=lambda o: o.index)  # type: ignore[arg-type]
            assert [o.path.name for o in outcomes] == ["nsys.sqlite"] * (RANKS + 1)
            assert [o.error is None for o in outcomes] == [True] * RANKS + [False], label
            err = outcomes[-1].bad_input()
            assert isinstance(err, BadInputError) and "truncated" in err.reason and err.path.samefile(bad)
            pids = {o.worker_pid for o in outcomes}
            assert os.getpid() not in pids and len(pids) >= 2, (label, pids)  # the work ran in the workers
            if label == "pool":
                assert len(pids) == RANKS + 1  # a fresh process per input: memory cannot pile up
            got = contents(out)
            assert got.keys() == expected.keys(), label
            for name, table in expected.items():
                assert got[name].equals(table), (label, name)
            assert not list(out.glob("*/trace_id=rank16.nsys"))

        # The command line on the same cluster: same JSON lines as a serial CLI run, exit 2 for the bad input.
        ser = tp("normalize", *files, "--out", tmp_path / "cli_serial", "--json")
        das = tp(
            "normalize", *files, "--out", tmp_path / "cli_dask", "--json", "--scheduler", cluster.scheduler_address
        )
    assert ser.returncode == das.returncode == 2, das.stderr
    by_trace = lambda r: sorted(json.dumps({**json.loads(x), "path": None}) for x in r.stdout.splitlines())  # noqa: E731
    assert by_trace(das) == by_trace(ser) and len(ser.stdout.splitlines()) == RANKS + 1
    assert "rank16/nsys.sqlite: SQLite file truncated" in das.stderr


def test_jobs_cli_matches_serial_and_gives_clashing_trace_ids_their_own(
    ranks_dir: Path, serial_out: Path, tmp_path: Path
) -> None:
    r = tp("normalize", ranks_dir, "--out", tmp_path / "out", "--jobs", "2", "--quiet")
    assert r.returncode == 0, r.stderr
    got, expected = contents(tmp_path / "out"), contents(serial_out)
    assert all(got[n].equals(expected[n]) for n in expected) and got.keys() == expected.keys()
    # Two files that share the trace id 'rank0.nsys': the second gets 'rank0.nsys-2', with a warning.
    twin = tmp_path / "other" / "rank0" / "nsys.sqlite"
    twin.parent.mkdir(parents=True)
    shutil.copy(ranks_dir / "rank0" / "nsys.sqlite", twin)
    r = tp("normalize", ranks_dir / "rank0" / "nsys.sqlite", twin, "--out", tmp_path / "twin", "-j", "2")
    assert r.returncode == 0 and "same trace id 'rank0.nsys'" in r.stderr and "'rank0.nsys-2'" in r.stderr
    assert trace_ids(tmp_path / "twin") == ["rank0.nsys", "rank0.nsys-2"]


def reference_path_times(sqlite: Path) -> dict[str | None, int]:
    """Independent: GPU time per innermost NVTX path from the raw capture via the nested-loop reference."""
    return {path: ns for path, (_, ns) in nsys_path_stats(sqlite).items()}


def test_stragglers_and_spread_known_by_hand(ranks_dir: Path, serial_out: Path, nsys_sqlite: Path) -> None:
    t = reference_path_times(nsys_sqlite)  # each normal rank; rank 5 takes 2 * t on every path
    assert len(t) == 11 and None in t
    con = connect(serial_out)
    per_rank = con.sql("SELECT rank, sum(gpu_time_ns) FROM rank_layer_time GROUP BY rank ORDER BY rank").fetchall()
    total = sum(t.values())
    assert per_rank == [(r, 2 * total if r == SLOW_RANK else total) for r in range(RANKS)]

    stragglers = con.sql(
        "SELECT path, ranks, slowest_rank, slowest_trace_id, slowest_gpu_time_ns, median_gpu_time_ns, excess_ns, "
        "slowdown FROM layer_stragglers"
    ).fetchall()
    assert sorted(stragglers, key=repr) == sorted(
        ((p, RANKS, SLOW_RANK, f"rank{SLOW_RANK}.nsys", 2 * v, v, v, 2.0) for p, v in t.items()), key=repr
    )
    assert [row[0] for row in stragglers] == sorted(
        t, key=lambda p: (-t[p], p is None, p or "")
    )  # biggest excess first

    spread = con.sql(
        "SELECT path, ranks, min_gpu_time_ns, median_gpu_time_ns, max_gpu_time_ns, max_over_median, "
        "max_minus_min_ns, slowest_rank FROM layer_rank_spread"
    ).fetchall()
    assert sorted(spread, key=repr) == sorted(
        ((p, RANKS, v, v, 2 * v, 2.0, v, SLOW_RANK) for p, v in t.items()), key=repr
    )
    # mean = (15 t + 2 t) / 16; population stddev of fifteen t and one 2t = t * sqrt(15) / 16
    mean, sd = con.execute(
        "SELECT mean_gpu_time_ns, stddev_gpu_time_ns FROM layer_rank_spread WHERE path = 'step/conv1'"
    ).fetchone()
    v = t["step/conv1"]
    assert mean == pytest.approx(17 * v / 16) and sd == pytest.approx(v * 15**0.5 / 16)
