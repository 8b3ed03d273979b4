"""Batches that lose a worker, sources that change under one trace id, bombs and limits, and the exit code
of every input problem: 2 with one line naming the file and the fix, never 1 (docs/reliability.md)."""

from __future__ import annotations

import errno
import gc
import gzip
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from pipeline.analyze import connect, default_memory_limit
from pipeline.errors import BadInputError, parse_size
from pipeline.normalize.source import SQLITE_MAGIC, local_file
from pipeline.store import committed_files, trace_ids
from tests.conftest import SMALLCNN, gunzip_to, q

TP = [sys.executable, "-m", "pipeline.cli"]
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}


def tp(*args: object, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*TP, *map(str, args)], capture_output=True, text=True, env={**ENV, **(env or {})}, cwd=cwd, check=False
    )


def kernels_of(out: Path, trace_id: str) -> int:
    return sum(pq.read_table(f).num_rows for f in committed_files(out, "kernels") if f"/{trace_id}/" in str(f))


def _capture(folder: Path, name: str = "nsys.sqlite", drop_kernels: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    db = gunzip_to(SMALLCNN / "nsys.sqlite.gz", folder / name)
    if drop_kernels:
        con = sqlite3.connect(db)
        con.execute(
            "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid IN "
            f"(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT {drop_kernels})"
        )
        con.commit()
        con.close()
    return db


# ------------------------------------------------------------------------------------------- workers


def test_a_killed_worker_fails_only_its_input_and_the_batch_goes_on(tmp_path: Path) -> None:
    inputs = [_capture(tmp_path / f"r{i}", f"{name}.sqlite") for i, name in enumerate("abcd")]
    out = tmp_path / "out"
    r = tp("normalize", *inputs, "--out", out, "--jobs", "2", "--quiet", env={"TRACEPIPE_KILL_WORKER": "b.sqlite"})
    assert r.returncode == 3, r.stderr
    assert "r1/b.sqlite: its worker process" in r.stderr and "was killed by SIGKILL" in r.stderr
    assert trace_ids(out) == ["r0.a", "r2.c", "r3.d"]  # every other input committed, after the kill too
    assert all(kernels_of(out, t) == 33 for t in ("r0.a", "r2.c", "r3.d"))
    assert tp("normalize", *inputs, "--out", out, "--jobs", "2", "--quiet").returncode == 0  # re-run: the rest
    assert trace_ids(out) == ["r0.a", "r1.b", "r2.c", "r3.d"]


# ------------------------------------------------------------------------------------------- same source


def test_up_to_date_means_the_same_source(tmp_path: Path) -> None:
    a = _capture(tmp_path / "a" / "run")
    b = _capture(tmp_path / "b" / "run", drop_kernels=10)
    out = tmp_path / "out"
    assert tp("normalize", a, "--out", out, "--quiet").returncode == 0
    meta = pq.read_table(committed_files(out, "trace_meta")[0]).to_pylist()[0]
    st = a.stat()
    assert meta["source_path"] == str(a.resolve()) and meta["source_bytes"] == st.st_size
    assert meta["source_mtime_ns"] == st.st_mtime_ns
    assert meta["source_sha256"] == hashlib.sha256(a.read_bytes()).hexdigest()
    # b/run/nsys.sqlite maps to the same id 'run.nsys' but is another file: refused, a's data kept.
    r = tp("normalize", b, "--out", out, "--quiet")
    assert r.returncode == 2 and "already holds another file" in r.stderr and "--trace-id" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert kernels_of(out, "run.nsys") == 33
    r = tp("normalize", b, "--out", out, "--force", "--json")
    assert r.returncode == 0 and f"replaces trace 'run.nsys' normalized from {a.resolve()}" in r.stderr
    assert kernels_of(out, "run.nsys") == 23
    assert '"skipped": true' in tp("normalize", b, "--out", out, "--json").stdout
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched, same content: still up to date
    assert '"skipped": true' in tp("normalize", b, "--out", out, "--json").stdout
    _capture(tmp_path / "b" / "run", drop_kernels=5)  # same path, new content: redone
    assert '"skipped": false' in tp("normalize", b, "--out", out, "--json").stdout
    assert kernels_of(out, "run.nsys") == 28


def test_names_that_used_to_fold_together_get_their_own_ids(tmp_path: Path) -> None:
    a, b = _capture(tmp_path / "训练"), _capture(tmp_path / "推理", drop_kernels=3)
    out = tmp_path / "out"
    r = tp("normalize", tmp_path / "训练", tmp_path / "推理", "--out", out, "--quiet")
    assert r.returncode == 0, r.stderr
    assert trace_ids(out) == ["~E6~8E~A8~E7~90~86.nsys", "~E8~AE~AD~E7~BB~83.nsys"]  # 推理, 训练
    assert kernels_of(out, "~E8~AE~AD~E7~BB~83.nsys") == 33 and kernels_of(out, "~E6~8E~A8~E7~90~86.nsys") == 30
    assert a.exists() and b.exists()


# ------------------------------------------------------------------------------------------- bounded resources


def _sqlite_header(page_size: int, pages: int) -> bytes:
    """The first 100 bytes of an SQLite file stating ``page_size * pages`` bytes (sqlite.org/fileformat.html)."""
    h = bytearray(100)
    h[:16] = SQLITE_MAGIC
    h[16:18] = (1 if page_size == 65536 else page_size).to_bytes(2, "big")
    h[24:28] = (7).to_bytes(4, "big")  # change counter
    h[28:32] = pages.to_bytes(4, "big")
    h[92:96] = (7).to_bytes(4, "big")  # version-valid-for = change counter: the stated size is valid
    return bytes(h)


def test_a_gzip_sqlite_bomb_stops_at_its_stated_size(tmp_path: Path) -> None:
    bomb = tmp_path / "nsys.sqlite.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as f:
        f.write(_sqlite_header(4096, 2))  # says 8 KiB
        for _ in range(64):
            f.write(bytes(1 << 20))  # is 64 MiB
    assert bomb.stat().st_size < 1 << 20
    stated = "decompresses past the 8192 bytes its SQLite header states"
    with pytest.raises(BadInputError, match=stated), local_file(bomb, ".sqlite"):
        pass


def test_a_gzip_sqlite_larger_than_the_free_space_is_refused_before_decompressing(tmp_path: Path) -> None:
    huge = tmp_path / "nsys.sqlite.gz"
    with gzip.open(huge, "wb") as f:
        f.write(_sqlite_header(65536, 2**31 - 1))  # says 140 TB
    r = tp("normalize", huge, "--out", tmp_path / "out", "--quiet", env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 2 and "too little free space" in r.stderr and "TMPDIR" in r.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("tracepipe-")] == []  # nothing left behind


@pytest.mark.parametrize("gz", [True, False])
def test_in_memory_inputs_past_the_limit_are_refused_naming_the_setting(tmp_path: Path, gz: bool) -> None:
    data = gzip.decompress((SMALLCNN / "torch_trace.json.gz").read_bytes())
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    limit = len(data) - 1
    r = tp("normalize", path, "--out", tmp_path / "o", "--quiet", env={"TRACEPIPE_MAX_INPUT_BYTES": str(limit)})
    assert r.returncode == 2 and "TRACEPIPE_MAX_INPUT_BYTES" in r.stderr and str(path) in r.stderr
    r = tp("normalize", path, "--out", tmp_path / "o", "--quiet", env={"TRACEPIPE_MAX_INPUT_BYTES": str(len(data))})
    assert r.returncode == 0, r.stderr


def _peak_rss_of(*args: object, env: dict[str, str], log: Path) -> tuple[int, int]:
    """Exit code and peak resident memory (bytes) of one real ``tracepipe`` process (os.wait4's rusage is the
    child's own, not the sum over every child this test process ever ran)."""
    with open(log, "w") as err:
        proc = subprocess.Popen([*TP, *map(str, args)], stdout=subprocess.DEVNULL, stderr=err, env={**ENV, **env})
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return proc.returncode, usage.ru_maxrss * 1024  # Linux reports kilobytes


def _gzip_of_spaces(path: Path, mib: int) -> Path:
    """A chrome trace's opening, ``mib`` MiB of JSON whitespace, its end: a valid trace, gzip ~1/1000 its size."""
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b'{"traceEvents": [')
        for _ in range(mib):
            f.write(b" " * (1 << 20))
        f.write(b"]}")
    return path


def test_a_gzip_bomb_is_refused_without_being_held_whole(tmp_path: Path) -> None:
    """Past TRACEPIPE_MAX_INPUT_BYTES a gzip input is refused as soon as its stream passes the limit: a
    128 MiB bomb costs the process no more memory than a 2 MiB one (reading it whole first would add at
    least its 128 MiB, and gives the same message)."""
    env = {"TRACEPIPE_MAX_INPUT_BYTES": "1MB"}
    runs = {}
    for mib in (2, 128):
        bomb = _gzip_of_spaces(tmp_path / f"bomb{mib}.json.gz", mib)
        log = tmp_path / f"bomb{mib}.log"
        runs[mib] = _peak_rss_of("normalize", bomb, "--out", tmp_path / "o", "--quiet", env=env, log=log)
        err = log.read_text()
        assert runs[mib][0] == 2 and "TRACEPIPE_MAX_INPUT_BYTES" in err and str(bomb) in err, err
    assert (tmp_path / "bomb128.json.gz").stat().st_size < 1 << 20  # a bomb: under 1 MiB on disk
    assert runs[128][1] - runs[2][1] < 32 << 20, runs


@pytest.mark.parametrize("value", ["0", "0GB"])
def test_a_zero_input_limit_is_a_bad_setting(value: str, tmp_path: Path) -> None:
    """A limit of 0 bytes would refuse every chrome trace and ncu CSV, and say it of each file: it is refused
    once as a setting, exit 2, before anything is written (an nsys export, read in place, would otherwise
    normalize)."""
    out = tmp_path / "o"
    r = tp("normalize", SMALLCNN / "nsys.sqlite.gz", "--out", out, env={"TRACEPIPE_MAX_INPUT_BYTES": value})
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: TRACEPIPE_MAX_INPUT_BYTES={value!r}: expected a positive size such as 1500000000 or 8GB"
    ]
    assert not out.exists()


@pytest.mark.parametrize("env", ["TRACEPIPE_MAX_INPUT_BYTES", "TRACEPIPE_MEMORY_LIMIT", "TRACEPIPE_TEMP_LIMIT"])
def test_settings_are_validated_not_pasted(env: str, nsys_out: Path, tmp_path: Path) -> None:
    pwned = tmp_path / "pwned.csv"
    value = f"1GB'; COPY (SELECT 1) TO '{pwned}'; SELECT '"
    cmd = ("normalize", SMALLCNN / "nsys.sqlite.gz", "--out", tmp_path / "o") if "INPUT" in env else ("sql", nsys_out)
    r = tp(*cmd, *(["SELECT 1"] if cmd[0] == "sql" else []), env={env: value})
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and env in r.stderr
    assert not pwned.exists()


def test_duckdb_spills_to_a_capped_private_folder_removed_on_exit(nsys_out: Path, tmp_path: Path) -> None:
    tmp, cwd = tmp_path / "tmp", tmp_path / "cwd"
    tmp.mkdir()
    cwd.mkdir()
    env = {"TMPDIR": str(tmp), "TRACEPIPE_MEMORY_LIMIT": "64MB", "TRACEPIPE_TEMP_LIMIT": "2GB"}
    sort = "SELECT count(*) FROM (SELECT i, random() AS r FROM range(3000000) t(i) ORDER BY r)"
    where = "SELECT current_setting('temp_directory'), current_setting('max_temp_directory_size')"
    r = tp("sql", nsys_out, f"{where}, ({sort}) AS n", "--format", "csv", env=env, cwd=cwd)
    assert r.returncode == 0, r.stderr
    folder, cap, n = (v.strip('"') for v in r.stdout.splitlines()[1].split(","))
    assert Path(folder).parent == tmp and Path(folder).name.startswith("tracepipe-duckdb-") and n == "3000000"
    assert cap.startswith("1.8 GiB") or cap.startswith("1.9 GiB") or cap == "2000000000 bytes", cap
    assert list(cwd.iterdir()) == [] and list(tmp.iterdir()) == []  # no ./.tmp, and the spill folder is gone
    env["TRACEPIPE_TEMP_LIMIT"] = "1MB"
    r = tp("sql", nsys_out, sort, "--format", "csv", env=env, cwd=cwd)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert list(tmp.iterdir()) == []


#: The console script's entry point with an object whose finalizer reports the interpreter's teardown.
_TEARDOWN_WITNESS = """
import sys
import pipeline.cli as cli
class Witness:
    def __del__(self):
        sys.stderr.write("torn down\\n")
cli._witness = Witness()
sys.argv = ["tracepipe", *sys.argv[1:]]
cli.run()
"""


def _tp_witnessed(*args: object, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _TEARDOWN_WITNESS, *map(str, args)], capture_output=True, text=True, env={**ENV, **env}
    )


def test_a_batch_command_ends_without_teardown_but_with_its_exit_work_done(nsys_out: Path, tmp_path: Path) -> None:
    """analyze skips the interpreter's teardown, yet its atexit work (the spill folder's removal) runs, piped
    stdout is flushed whole, and the exit status is the command's; a non-batch command exits normally."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)}
    r = _tp_witnessed("analyze", nsys_out, "--out", tmp_path / "a", "--json", "-q", env=env)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)  # the whole JSON: a block-buffered pipe flushed before the process ended
    assert rows["layer_summary"] == pq.read_metadata(tmp_path / "a" / "layer_summary.parquet").num_rows > 0
    assert "torn down" not in r.stderr
    assert list(tmp.iterdir()) == []  # connect's spill folder, removed by its atexit finalizer
    bad = _tp_witnessed("analyze", tmp_path / "missing", "--out", tmp_path / "b", env=env)
    assert bad.returncode == 2 and "missing" in bad.stderr and "torn down" not in bad.stderr
    shell = _tp_witnessed("sql", nsys_out, "SELECT 1 AS one", "--format", "csv", env=env)
    assert shell.returncode == 0 and shell.stdout.split() == ["one", "1"] and "torn down" in shell.stderr


def _ended_by_fast_exit(body: str) -> subprocess.CompletedProcess:
    code = "import atexit, sys, threading, time\nfrom pipeline.lean import exit_without_teardown\n" + body
    buffered = {k: v for k, v in ENV.items() if k != "PYTHONUNBUFFERED"}  # piped stdout holds text until flushed
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=buffered)


def test_the_fast_exit_runs_atexit_flushes_and_keeps_the_status(tmp_path: Path) -> None:
    """What Python's exit does before its teardown still happens: atexit functions, stdio flushed (a pipe
    holds written text in its buffer until then), the status given."""
    mark = tmp_path / "atexit"
    r = _ended_by_fast_exit(
        f"atexit.register(lambda: open({str(mark)!r}, 'w').write('ran'))\n"
        "sys.stdout.write('buffered out')\nsys.stderr.write('buffered err')\n"
        "exit_without_teardown(2)\nsys.exit(9)\n"
    )
    assert (r.returncode, r.stdout, r.stderr) == (2, "buffered out", "buffered err")
    assert mark.read_text() == "ran"


def test_no_fast_exit_while_another_thread_runs(tmp_path: Path) -> None:
    """A thread still working keeps the process up until it is done, as Python's own exit does."""
    done = tmp_path / "done"
    r = _ended_by_fast_exit(
        f"t = threading.Thread(target=lambda: (time.sleep(0.3), open({str(done)!r}, 'w').write('x')))\n"
        "t.start()\nexit_without_teardown(0)\nsys.exit(3)\n"
    )
    assert r.returncode == 3, r.stderr
    assert done.read_text() == "x"


def test_default_memory_limit_follows_the_gpu_operations() -> None:
    """1.6 GB, or 160 bytes per GPU operation past 10M of them, never above DuckDB's own default."""
    assert default_memory_limit(0, 20 * 10**9) == 1_600_000_000
    assert default_memory_limit(10_000_000, 20 * 10**9) == 1_600_000_000
    assert default_memory_limit(20_000_000, 20 * 10**9) == 3_200_000_000
    assert default_memory_limit(20_000_000, 2 * 10**9) == 2 * 10**9
    assert default_memory_limit(1000, 10**9) == 10**9


def _duckdb_shows(limit: str) -> str:
    """DuckDB's own rendering of a memory limit (current_setting rounds it to a unit)."""
    con = duckdb.connect()
    con.execute(f"SET memory_limit = '{limit}'")
    return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]


@pytest.mark.parametrize("env", [{}, {"TRACEPIPE_MEMORY_LIMIT": "64MB"}])
def test_connections_get_the_sized_limit_unless_the_setting_gives_one(
    env: dict[str, str], nsys_out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRACEPIPE_MEMORY_LIMIT", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    ops = q(
        nsys_out,
        "SELECT (SELECT count(*) FROM kernels) + (SELECT count(*) FROM memcpy) + (SELECT count(*) FROM memset)",
    )[0][0]
    assert 0 < ops < 10_000_000  # a small trace: the floor applies, unless this machine's DuckDB default is lower
    machine = parse_size(duckdb.connect().execute("SELECT current_setting('memory_limit')").fetchone()[0])
    expected = _duckdb_shows(env.get("TRACEPIPE_MEMORY_LIMIT", f"{min(1_600_000_000, machine)}B"))
    for read_only in (False, True):  # analyze's connection and the sql shell's
        con = connect(nsys_out, views=[], read_only=read_only)
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == expected


# ------------------------------------------------------------------------------------------- exit codes


def _deep_json(tmp_path: Path) -> Path:
    p = tmp_path / "deep.json"
    p.write_text('{"traceEvents": ' + "[" * 10**6 + "]" * 10**6 + "}")
    return p


def _huge_ts(tmp_path: Path) -> Path:
    import json

    trace = json.loads(gzip.decompress((SMALLCNN / "torch_trace.json.gz").read_bytes()))
    next(e for e in trace["traceEvents"] if e.get("cat") == "kernel")["ts"] = 1e300
    p = tmp_path / "huge_ts.json"
    p.write_text(json.dumps(trace))
    return p


def _text_columns(tmp_path: Path) -> Path:
    db = _capture(tmp_path / "run")
    con = sqlite3.connect(db)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon', gridX = 'wide' WHERE rowid = 2")
    con.commit()
    con.close()
    return db


@pytest.mark.parametrize("make", [_deep_json, _huge_ts, _text_columns], ids=["nested_1e6", "ts_1e300", "text_kernels"])
def test_hostile_values_are_bad_input_not_bugs(make, tmp_path: Path) -> None:
    path = make(tmp_path)
    r = tp("normalize", path, "--out", tmp_path / "out", "--quiet")
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and str(path) in r.stderr and "re-export" in r.stderr
    assert trace_ids(tmp_path / "out") == []


@pytest.mark.parametrize(
    ("code", "fix"), [(errno.ENOSPC, "no space left"), (errno.EACCES, "permission denied"), (errno.EROFS, "read-only")]
)
def test_disk_and_permission_errors_are_exit_2_naming_the_file(
    code: int, fix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The OS error is raised where a full or read-only disk raises it: writing a table of the trace."""
    from pipeline import cli
    from pipeline.store import TraceWriter

    def fail(self: TraceWriter, table: str, batches: object) -> int:
        raise OSError(code, os.strerror(code), str(self.staged_file(table)))

    monkeypatch.setattr(TraceWriter, "write_batches", fail)
    monkeypatch.setattr(sys, "argv", ["tracepipe", "normalize", str(SMALLCNN / "nsys.sqlite.gz"), "-o", str(tmp_path)])
    # cli.run marks the process as its own (and a batch command then stops the collector and ends the process
    # without teardown): all undone or stubbed here, or this pytest process would end with the command, and
    # every later in-process CLI call in it would behave as a separate `tracepipe` process
    monkeypatch.setattr(cli, "_OWN_PROCESS", False)
    monkeypatch.setattr(cli, "_BATCH_PROCESS", False)
    fast_exits: list[object] = []
    monkeypatch.setattr("pipeline.lean.exit_without_teardown", fast_exits.append)
    try:
        with pytest.raises(SystemExit) as exit_:
            cli.run()
    finally:
        gc.enable()
    assert exit_.value.code == 2 and fast_exits == [2]
    err = capsys.readouterr().err
    assert fix in err and "kernels.parquet" in err and len(err.strip().splitlines()) == 1
