"""The write side under attack and accident: hostile trace ids, writers killed mid-commit, concurrent
writers and readers. Every writer here is a real process; kills are real SIGKILLs."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from pipeline.normalize.batch import normalize_many
from pipeline.schema import TABLES
from pipeline.store import (
    PART,
    committed_files,
    decode_trace_id,
    encode_trace_id,
    is_safe_trace_id,
    release_readers,
    trace_id_for,
)
from tests.conftest import SMALLCNN, gunzip_to

TP = [sys.executable, "-m", "pipeline.cli"]
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}


def tp(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*TP, *map(str, args)], capture_output=True, text=True, env={**ENV, **(env or {})})


# ------------------------------------------------------------------------------------------- trace ids


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(min_size=1, max_size=16))  # at most 12 characters of id per character: under the 200 limit
def test_encoded_ids_are_safe_and_reversible(name: str) -> None:
    tid = encode_trace_id(name)
    assert is_safe_trace_id(tid)
    assert decode_trace_id(tid) == name.encode("utf-8", "replace").decode("utf-8", "replace")


def test_overlong_names_stay_safe_and_distinct() -> None:
    a, b = encode_trace_id("训" * 100 + "a"), encode_trace_id("训" * 100 + "b")
    assert is_safe_trace_id(a) and is_safe_trace_id(b) and a != b and len(a) <= 200


def test_distinct_names_keep_distinct_ids(tmp_path: Path) -> None:
    a, b = tmp_path / "训练" / "nsys.sqlite", tmp_path / "推理" / "nsys.sqlite"
    assert trace_id_for(a) == "~E8~AE~AD~E7~BB~83.nsys"  # UTF-8 of 训 is E8 AE AD, of 练 E7 BB 83
    assert trace_id_for(b) == "~E6~8E~A8~E7~90~86.nsys"
    assert trace_id_for(tmp_path / "a b" / "x.json") != trace_id_for(tmp_path / "a_b" / "x.json")
    assert trace_id_for(tmp_path / "h200_smallcnn" / "nsys.sqlite.gz") == "h200_smallcnn.nsys"  # unchanged
    assert decode_trace_id(trace_id_for(a)) == "训练.nsys"


def test_linked_ranks_keep_their_own_folders(tmp_path: Path) -> None:
    # Ranks linked in from one store (git-annex, DVC): the id names the folder the user gave, not the store's.
    store = tmp_path / "store"
    store.mkdir()
    for rank in ("rank0", "rank1"):
        (store / f"{rank}-blob.json.gz").write_bytes(b"")
        (tmp_path / "job" / rank).mkdir(parents=True)
        (tmp_path / "job" / rank / "trace.json.gz").symlink_to(store / f"{rank}-blob.json.gz")
    assert trace_id_for(tmp_path / "job" / "rank0" / "trace.json.gz") == "rank0.trace"
    assert trace_id_for(tmp_path / "job" / "rank1" / "trace.json.gz") == "rank1.trace"
    assert trace_id_for(tmp_path / "job" / "rank1" / ".." / "rank0" / "trace.json.gz") == "rank0.trace"


@pytest.mark.parametrize("bad", ["../../../../victim", "a/b", "it's", ".hidden", "..", "", "x" * 201, "a\nb"])
def test_unsafe_trace_id_is_refused_with_one_line(bad: str, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    src = tmp_path / "in" / "nsys.sqlite.gz"
    src.parent.mkdir()
    shutil.copy(SMALLCNN / "nsys.sqlite.gz", src)
    out = tmp_path / "o" / "p" / "q" / "r"
    r = tp("normalize", src, "--out", out, "--trace-id", bad, "--quiet")
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "not safe" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "victim"]  # refused before --out is made
    assert (victim / "keep.txt").read_text() == "mine"


def test_ids_with_quotes_never_reach_sql_text(tmp_path: Path) -> None:
    """A name with a quote becomes an id with ~27; analyze and sql work on it (no SQL built from it)."""
    src = tmp_path / "it's" / "nsys.sqlite.gz"
    src.parent.mkdir()
    shutil.copy(SMALLCNN / "nsys.sqlite.gz", src)
    out = tmp_path / "o'ut"
    assert tp("normalize", src, "--out", out, "--quiet").returncode == 0
    r = tp("sql", out, "SELECT trace_id, count(*) FROM kernels GROUP BY 1", "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].replace('"', "") == "it~27s.nsys,33"  # quoted or not
    assert tp("analyze", out, "--out", tmp_path / "an'a", "--quiet").returncode == 0
    assert (tmp_path / "an'a" / "layer_summary.parquet").is_file()


# ------------------------------------------------------------------------------------------- commit protocol


def _variant_b(tmp_path: Path) -> Path:
    """The small CNN capture with 10 kernels fewer and no NVTX at all: a new version of the trace that has
    different rows in some tables and lacks one table (nvtx_ranges) the old version has."""
    db = gunzip_to(SMALLCNN / "nsys.sqlite.gz", tmp_path / "b.sqlite")
    con = sqlite3.connect(db)
    con.execute(
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid IN (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 10)"
    )
    con.execute("DROP TABLE NVTX_EVENTS")
    con.commit()
    con.close()
    return db


def _contents(files: dict[str, list[Path]]) -> dict[str, pa.Table]:
    got = {}
    for table, paths in files.items():
        if paths:
            t = pa.concat_tables(pq.read_table(p) for p in paths)
            # What differs between two runs over one input by design: when, from where, and the warning
            # "replaces trace ... normalized from <other file>" that only a run replacing another file gives.
            drop = ("normalized_at_utc", "source_path", "source_mtime_ns", "warnings")
            t = t.drop_columns([c for c in drop if c in t.column_names])
            got[table] = t.sort_by(
                [(c, "ascending") for c in t.column_names if not pa.types.is_nested(t.schema.field(c).type)]
            )
    return got


def committed_contents(out: Path) -> dict[str, pa.Table]:
    """What tracepipe's readers see."""
    return _contents({t: committed_files(out, t) for t in TABLES})


def public_contents(out: Path) -> dict[str, pa.Table]:
    """What a plain glob over the public layout sees (one file per partition, nothing else)."""
    for d in out.glob("*/trace_id=*"):
        assert sorted(p.name for p in d.iterdir()) == [PART], d
    return _contents({t: sorted((out / t).glob("trace_id=*/*.parquet")) for t in TABLES})


def _same(a: dict[str, pa.Table], b: dict[str, pa.Table]) -> bool:
    return a.keys() == b.keys() and all(a[k].equals(b[k]) for k in a)


def _write_killed(src: str, out: str, kill_at: int) -> None:
    os.environ["TRACEPIPE_KILL_AT"] = str(kill_at)
    normalize_file(Path(src), Path(out), trace_id="t", force=True)


def test_a_writer_killed_at_every_step_leaves_old_or_new_and_a_rerun_equals_a_clean_run(tmp_path: Path) -> None:
    a = gunzip_to(SMALLCNN / "nsys.sqlite.gz", tmp_path / "a.sqlite")
    b = _variant_b(tmp_path)
    clean_a, clean_b = tmp_path / "clean_a", tmp_path / "clean_b"
    normalize_file(a, clean_a, trace_id="t")
    normalize_file(a, clean_b, trace_id="t")
    normalize_file(b, clean_b, trace_id="t")  # b replacing a, as in every run below (its warning says so)
    old, new = committed_contents(clean_a), committed_contents(clean_b)
    assert old["kernels"].num_rows == 33 and new["kernels"].num_rows == 23
    assert "nvtx_ranges" in old and "nvtx_ranges" not in new
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["pipeline.normalize", "pipeline.normalize.nsys"])
    seen = []
    for k in range(1, 100):
        out = tmp_path / f"out{k}"
        shutil.copytree(clean_a, out)  # a committed 'a' (faster than normalizing it again)
        writer = ctx.Process(target=_write_killed, args=(str(b), str(out), k))
        writer.start()
        writer.join()
        if writer.exitcode == 0:  # k is past the last step: every step has been killed once
            break
        assert writer.exitcode == -signal.SIGKILL
        now = committed_contents(out)
        state = "old" if _same(now, old) else "new" if _same(now, new) else "mix"
        assert state != "mix", f"killed at step {k}: a reader sees a mix"
        if state not in seen:  # and the analysis runs on it (on the same tables again at later steps of that state)
            con = connect(out)
            assert con.execute("SELECT count(*) FROM kernel_layers").fetchone() == (now["kernels"].num_rows,)
            del con
            release_readers(out)
        seen.append(state)
        normalize_many([b], out, trace_id="t", force=True).__next__()  # the re-run
        assert _same(committed_contents(out), new) and _same(public_contents(out), new)
        state_dir = out / ".tracepipe"
        assert len(list((state_dir / "traces" / "t").iterdir())) == 1  # stale generations removed
        assert not list((state_dir / "writers").iterdir())
        assert not list(state_dir.glob("manifests/.*"))
    assert len(seen) > 10 and seen.count("old") >= 5 and seen.count("new") >= 5, seen


def test_a_killed_writer_s_staging_is_removed_by_the_next_run_but_a_live_writer_s_is_not(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("forkserver")
    src = tmp_path / "r" / "nsys.sqlite.gz"
    src.parent.mkdir()
    shutil.copy(SMALLCNN / "nsys.sqlite.gz", src)
    out = tmp_path / "out"
    writer = ctx.Process(target=_write_killed, args=(str(src), str(out), 2))  # dies after writing one table
    writer.start()
    writer.join()
    assert writer.exitcode == -signal.SIGKILL
    staged = list((out / ".tracepipe" / "traces").glob("*/*/*.parquet"))
    assert staged and not committed_files(out, "kernels")
    # A live writer (a real process holding its generation's lock, stopped) is left alone meanwhile.
    live = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os,signal,sys; from pathlib import Path; from pipeline.store import TraceWriter; "
            "w = TraceWriter(Path(sys.argv[1]), 'live'); print(w.staging, flush=True); "
            "os.kill(os.getpid(), signal.SIGSTOP)",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    live_dir = Path(live.stdout.readline().strip())
    try:
        list(normalize_many([src], out))
        assert live_dir.is_dir()
        assert sorted(p.parent.name for p in (out / ".tracepipe" / "traces").glob("*/*")) == ["live", "r.nsys"]
    finally:
        live.kill()
        live.wait()
    list(normalize_many([src], out))
    assert not live_dir.exists()


# ------------------------------------------------------------------------------------------- concurrency

READER = """
import sys
from pathlib import Path
from pipeline.analyze import connect
out, at_least, done = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
counts, n = set(), 0
while n < at_least or not done.exists():  # reads while the writers write (the test makes `done` once they end)
    con = connect(out)
    counts.add(con.execute("SELECT count(*) FROM kernels").fetchone()[0])
    counts.add(-con.execute("SELECT count(*) FROM nvtx_ranges").fetchone()[0])
    con.close()
    n += 1
print(sorted(counts))
"""


def test_concurrent_writers_take_turns_and_readers_never_fail(tmp_path: Path) -> None:
    a = tmp_path / "a" / "nsys.sqlite"
    a.parent.mkdir()
    gunzip_to(SMALLCNN / "nsys.sqlite.gz", a)
    b = _variant_b(tmp_path)
    out = tmp_path / "out"
    assert tp("normalize", a, "--out", out, "--trace-id", "t", "--quiet").returncode == 0
    ranges = committed_contents(out)["nvtx_ranges"].num_rows
    done = tmp_path / "writers_done"
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", READER, str(out), "3", str(done)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for _ in range(2)
    ]
    writers = [
        subprocess.Popen(
            [*TP, "normalize", src, "--out", str(out), "--trace-id", "t", "--force", "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for src in (a, b, a, b)
    ]
    try:
        ended = [(w.communicate(timeout=300)[1], w.returncode) for w in writers]
    finally:  # the readers stop even when a writer fails or hangs (before: 10 reads each, most after the writers)
        done.touch()
    for err, code in ended:
        assert code == 0, err
    for r in readers:
        got, err = r.communicate(timeout=300)
        assert r.returncode == 0, err
        # Every read saw a whole version: 33 kernels with their ranges (a) or 23 kernels with none (b).
        assert set(eval(got)) <= {33, -ranges, 23, 0} and ranges > 0, got
    assert committed_contents(out)["kernels"].num_rows in (33, 23)


def test_a_writer_waiting_for_the_lock_says_so(tmp_path: Path) -> None:
    src = tmp_path / "r" / "nsys.sqlite.gz"
    src.parent.mkdir()
    shutil.copy(SMALLCNN / "nsys.sqlite.gz", src)
    out = tmp_path / "out"
    (out / ".tracepipe").mkdir(parents=True)
    holder = subprocess.Popen(  # another writer, holding the folder's lock until told to let go
        [
            sys.executable,
            "-c",
            "import sys; from filelock import FileLock; l = FileLock(sys.argv[1]); l.acquire(); "
            "print('held', flush=True); sys.stdin.readline()",
            str(out / ".tracepipe" / "lock"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    run = subprocess.Popen(
        [*TP, "normalize", str(src), "--out", str(out), "--quiet"], stderr=subprocess.PIPE, text=True, env=ENV
    )
    waiting = run.stderr.readline()
    assert f"waiting for another tracepipe writing into {out}" in waiting
    assert run.poll() is None and committed_files(out, "kernels") == []  # it waits: nothing committed yet
    holder.communicate("go\n")
    assert run.wait(timeout=300) == 0, run.stderr.read()
    assert committed_contents(out)["kernels"].num_rows == 33


# ------------------------------------------------------------------------------ damaged folders: exit 2, one line


def _one_line(r: subprocess.CompletedProcess, names: Path) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1 and str(names) in r.stderr
    return r.stderr


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("good") / "o"
    r = tp("run", SMALLCNN / "torch_trace.json.gz", SMALLCNN / "nsys.sqlite.gz", "--out", out, "-q")
    assert r.returncode == 0, r.stderr
    return out


def test_a_damaged_manifest_or_a_lost_trace_folder_is_named_not_a_crash(good_run: Path, tmp_path: Path) -> None:
    # A manifest cut short or edited, or the generation folder it names removed by hand, gave JSONDecodeError /
    # IOException / FileNotFoundError with exit 1 in analyze, sql and normalize.
    ids = sorted(p.stem for p in (good_run / "normalized" / ".tracepipe" / "manifests").glob("*.json"))
    assert len(ids) == 2
    broken = shutil.copytree(good_run, tmp_path / "o")
    norm = broken / "normalized"
    manifest = norm / ".tracepipe" / "manifests" / f"{ids[0]}.json"
    manifest.write_text("{bad")
    for args in (("analyze", norm, "--out", tmp_path / "a", "-q"), ("sql", norm, "SELECT 1")):
        assert "not a manifest tracepipe wrote" in _one_line(tp(*args), manifest)
    # the fix it names: delete the manifest, normalize the trace again
    manifest.unlink()
    source = SMALLCNN / ("nsys.sqlite.gz" if ids[0].endswith("nsys") else "torch_trace.json.gz")
    assert tp("normalize", source, "--out", norm, "--trace-id", ids[0], "-q").returncode == 0
    assert connect(norm).sql("SELECT count(DISTINCT trace_id) FROM kernels").fetchall() == [(2,)]
    shutil.rmtree(norm / ".tracepipe" / "traces" / ids[1])
    said = _one_line(tp("sql", norm, "SELECT count(*) FROM kernels"), norm / ".tracepipe" / "traces" / ids[1])
    assert "missing, though" in said


def test_a_cut_parquet_file_is_named_with_the_command_that_writes_it_again(good_run: Path, tmp_path: Path) -> None:
    # A normalized table or a view's file cut short (a full disk, a copy stopped) gave DuckDB's InvalidInputException
    # or polars' ComputeError with exit 1 in analyze, sql, findings, export and diff.
    broken = shutil.copytree(good_run, tmp_path / "o")
    norm, analysis = broken / "normalized", broken / "analysis"
    [kernels] = [p for p in norm.glob(".tracepipe/traces/*nsys/*/kernels.parquet")]
    kernels.write_bytes(kernels.read_bytes()[: kernels.stat().st_size // 2])
    for args in (
        ("analyze", norm, "--out", tmp_path / "a", "-q"),
        ("sql", norm, "SELECT count(*) FROM kernels"),
        ("findings", norm),
        ("export", "perfetto", norm, "--trace-id", kernels.parts[-3], "-o", tmp_path / "p.json"),
    ):
        assert "normalize that trace again" in _one_line(tp(*args), kernels), args
    for view, args in (
        ("layer_summary", ("diff", f"{analysis}:{kernels.parts[-3]}", f"{analysis}:{kernels.parts[-3]}")),
        ("kernel_layers", ("sql", analysis, "SELECT 1")),
        ("findings", ("findings", analysis)),
    ):
        (analysis / f"{view}.parquet").write_bytes(b"")
        _one_line(tp(*args), analysis / f"{view}.parquet")


def test_a_generation_removed_by_a_writer_switching_is_read_again_not_called_damage(
    good_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A writer switches the manifest, then removes the generation it replaced: a reader that read the manifest just
    # before the switch finds that folder gone. It reads the manifest again and takes the new generation.
    import json

    from pipeline import store

    norm = good_run / "normalized"
    manifest = next((norm / ".tracepipe" / "manifests").glob("*.json"))
    current = manifest.read_text()
    stale = json.dumps({**json.loads(current), "generation": "g-removed-by-the-writer"})
    reads = iter([stale, current])
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda p, *a, **k: next(reads) if p == manifest else real(p, *a, **k))
    got = store._read_manifest(norm, manifest.stem)
    assert got is not None and got.generation == json.loads(current)["generation"]
