"""Where results are written, and when the disk refuses them (issue #45.4): every command that writes a result
(analyze, report, diff, export, run, sql -o and the shell's .output) refuses any place inside a normalized folder
and leaves that folder as it was; a full disk met by any writer (Python, pyarrow, DuckDB) is one line naming the
result's file, exit 2; a row count past what DuckDB's renderer counts is refused, not a crash.  Every command
runs as a real process (docs/reliability.md)."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from pipeline.errors import OutputError
from pipeline.normalize import normalize_file
from pipeline.outputs import writing
from tests.conftest import SMALLCNN

TP = [sys.executable, "-m", "pipeline.cli"]
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
TRACE = "h200_smallcnn.nsys"
KERNELS = 33  # kernels of the small-CNN nsys sample (tests/test_sm_load.py counts them against ncu)


def tp(
    *args: object,
    cwd: Path | None = None,
    stdin: str | None = None,
    fsize: int | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """A real ``tracepipe``; ``fsize``: no file it writes may grow past that many bytes (RLIMIT_FSIZE: the
    kernel refuses the write that would, with EFBIG, where a full disk gives ENOSPC)."""

    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))  # Python ignores SIGXFSZ: writes fail

    return subprocess.run(
        [*TP, *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        env={**ENV, **(env or {})},
        cwd=cwd,
        preexec_fn=limit,
    )


def one_line(r: subprocess.CompletedProcess, code: int = 2) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``folder`` with its size and mtime: a file written, replaced or removed (a
    temp file too: its folder's mtime moves) changes it."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in [folder, *folder.rglob("*")]}


@pytest.fixture(scope="module")
def normalized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hostile") / "normalized"
    normalize_file(SMALLCNN / "nsys.sqlite.gz", out)
    return out


# --------------------------------------------------------------------- nothing inside the normalized data

PART = f"kernels/trace_id={TRACE}"


@pytest.mark.parametrize(
    ("args", "target"),
    [
        (("analyze", "{n}", "--out", "{n}/analysis"), "{n}/analysis"),
        (("analyze", "{n}", "--out", "{n}"), "{n}"),
        (("report", "{tmp}", "--out", "{n}/report"), "{n}/report"),
        (("diff", "{n}", "{n}", "--out", f"{{n}}/{PART}"), f"{{n}}/{PART}"),  # layer_diff.parquet read as kernels
        (("export", "perfetto", "{n}", "-o", f"{{n}}/{PART}/part-0.parquet"), f"{{n}}/{PART}/part-0.parquet"),
        (("sql", "{n}", "SELECT 1", "-o", f"{{n}}/{PART}/x.parquet"), f"{{n}}/{PART}/x.parquet"),
        (("run", str(SMALLCNN / "nsys.sqlite.gz"), "--out", "{n}"), "{n}/analysis"),
    ],
    ids=["analyze", "analyze-into-itself", "report", "diff", "export", "sql-o", "run"],
)
def test_no_command_writes_inside_the_normalized_data(
    normalized: Path, tmp_path: Path, args: tuple[str, ...], target: str
) -> None:
    before = snapshot(normalized)
    r = tp(*(a.format(n=normalized, tmp=tmp_path) for a in args))
    err = one_line(r)
    assert target.format(n=normalized) in err and f"normalized data {normalized}" in err, err
    assert snapshot(normalized) == before
    # what plain globs read is the trace's tables, nothing else: the kernels partition holds its one part
    ((count,),) = duckdb.sql(f"SELECT count(*) FROM '{normalized}/kernels/trace_id=*/*.parquet'").fetchall()
    assert count == KERNELS
    assert pq.read_table(normalized / PART / "part-0.parquet").num_rows == KERNELS


def test_export_from_inside_the_data_with_no_output_named_is_refused(normalized: Path) -> None:
    """The default output is ``<trace id>.perfetto.json.gz`` in the working folder: not when that is the data."""
    before = snapshot(normalized)
    err = one_line(tp("export", "perfetto", ".", cwd=normalized))
    assert f"{TRACE}.perfetto.json.gz" in err and "normalized data" in err
    assert snapshot(normalized) == before


def test_the_shell_output_is_never_inside_the_data(normalized: Path) -> None:
    before = snapshot(normalized)
    r = tp("sql", normalized, stdin=f".output {normalized}/{PART}/y.csv\nSELECT 42 AS answer;\n")
    # the shell goes on, on the terminal; piped, the refusal still ends it with exit 2
    assert r.returncode == 2 and "answer" in r.stdout and "42" in r.stdout
    assert f"{PART}/y.csv" in r.stderr and "inside the normalized data" in r.stderr
    assert snapshot(normalized) == before


# --------------------------------------------------------------------- a full disk names the result's file

#: Results of several KB: more than RLIMIT_FSIZE lets a file hold.
BIG = "SELECT range AS i, range * 7 AS j FROM range(100000)"


@pytest.mark.parametrize(
    ("args", "written"),
    [
        (("analyze", "{n}", "--out", "{tmp}/analysis", "--view", "kernel_layers"), "analysis/kernel_layers.parquet"),
        (("analyze", "{n}", "--out", "{tmp}/analysis", "--view", "kernel_layers", "--csv"), "analysis/kernel_layers"),
        (("sql", "{n}", BIG, "-o", "{tmp}/r.csv"), "r.csv"),  # DuckDB's CSV writer
        (("sql", "{n}", BIG, "-o", "{tmp}/r.parquet"), "r.parquet"),  # pyarrow's
        (("sql", "{n}", BIG, "-o", "{tmp}/r.json"), "r.json"),  # Python's
        (("export", "perfetto", "{n}", "-o", "{tmp}/t.json"), "t.json"),
        (("export", "perfetto", "{n}", "-o", "{tmp}/t.json.gz"), "t.json.gz"),
    ],
    ids=["analyze", "analyze-csv", "sql-csv", "sql-parquet", "sql-json", "export", "export-gz"],
)
def test_a_refused_write_is_one_line_naming_the_result(
    normalized: Path, tmp_path: Path, args: tuple[str, ...], written: str
) -> None:
    """Each writer meets a write the kernel refuses mid-file (here the file-size limit, EFBIG; a full disk is
    ENOSPC through the same code): exit 2, the result's own file named (not a temp file, not 'a file'), the
    fix, and no temp file left beside it."""
    r = tp(*(a.format(n=normalized, tmp=tmp_path) for a in args), fsize=4096)
    err = one_line(r)
    assert f"{tmp_path}/{written}" in err and "file-size limit" in err, err
    assert ".tmp" not in err
    assert not [p for p in tmp_path.rglob(".*tmp*")]


def test_a_refused_write_under_the_shells_output_goes_back_to_the_terminal(normalized: Path, tmp_path: Path) -> None:
    result = tmp_path / "big.csv"
    r = tp("sql", normalized, stdin=f".output {result}\n.mode json\n{BIG};\nSELECT 7 AS after;\n", fsize=4096)
    assert r.returncode == 2, r.stderr  # piped: the rest ran, and the exit says a write was refused
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"Error: {result}: file too large") and line.endswith("results go to the terminal again")
    assert r.stdout.splitlines() == ['{"after": 7}']


def test_csv_for_the_terminal_on_a_full_tmpdir_names_its_temp_file(normalized: Path, tmp_path: Path) -> None:
    """CSV goes through a temp file of DuckDB's writer under TMPDIR: that is the file named, and the fix."""
    r = tp("sql", normalized, BIG, "--format", "csv", env={"TMPDIR": str(tmp_path)}, fsize=4096)
    err = one_line(r)
    assert err.startswith(f"error: {tmp_path}/") and "result.csv: file too large" in err, err
    assert list(tmp_path.iterdir()) == []  # the temp folder is gone


# the ENOSPC text as DuckDB 1.x / pyarrow / Python raise it, recorded from a real 16 KiB tmpfs filling up
DUCKDB_FULL = (
    'IO Error: Async write failed for range [offset=27, size=492490]: {"exception_type":"IO",'
    '"exception_message":"Could not write file \\"/mnt/.x.parquet.tmp-1\\": No space left on device","errno":"28"}'
)


@pytest.mark.parametrize(
    "raised",
    [
        duckdb.IOException(DUCKDB_FULL),
        duckdb.IOException('IO Error: Could not write file "/mnt/.x.csv.tmp-1": No space left on device'),
        OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device"),
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
    ],
    ids=["duckdb-async", "duckdb-text", "pyarrow", "python"],
)
def test_a_full_disk_in_any_writer_is_no_space_naming_the_result(raised: Exception, tmp_path: Path) -> None:
    result = tmp_path / "x.parquet"
    with pytest.raises(OutputError) as e, writing(result):
        raise raised
    assert str(e.value) == f"{result}: no space left on the device: free space, or write elsewhere (--out, TMPDIR)"


def test_other_errors_pass_through_unchanged(tmp_path: Path) -> None:
    """Only what a user can fix is bad input; any other failure stays a failure of the tool (exit 1)."""
    with pytest.raises(duckdb.IOException), writing(tmp_path / "x.parquet"):
        raise duckdb.IOException("IO Error: something else")
    with pytest.raises(OSError, match=os.strerror(errno.EIO)), writing(tmp_path / "x.parquet"):
        raise OSError(errno.EIO, os.strerror(errno.EIO))


# --------------------------------------------------------------------- row counts DuckDB's renderer cannot take


def test_maxrows_past_64_bits_is_refused_and_the_shell_goes_on(normalized: Path) -> None:
    limit = 2**63 - 1
    r = tp(
        "sql",
        normalized,
        stdin=f".maxrows 99999999999999999999\n.maxrows ²\n.maxrows\n.maxrows {limit}\n.maxrows\nSELECT 42 AS x;\n",
    )
    assert r.returncode == 2, r.stderr  # piped: the shell went on, and says it met errors
    assert r.stderr.splitlines() == [f"Error: .maxrows takes a whole number from 1 to {limit}"] * 2
    assert r.stdout.splitlines()[:2] == ["current max rows: 40", f"current max rows: {limit}"]
    assert "42" in r.stdout


def test_max_rows_option_past_64_bits_is_a_usage_error(normalized: Path) -> None:
    r = tp("sql", normalized, "SELECT 42 AS x", "--max-rows", "99999999999999999999")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"Invalid value for --max-rows: 99999999999999999999 is not a whole number from 1 to {2**63 - 1}" in r.stderr
    r = tp("sql", normalized, "SELECT 42 AS x", "--max-rows", str(2**63 - 1))
    assert r.returncode == 0 and "42" in r.stdout, r.stderr


def test_a_link_is_written_through_and_a_pipe_is_refused(tmp_path: Path) -> None:
    # Each result file is written beside its name, then renamed over it: a symlink became a plain file (its target
    # unchanged), a FIFO or a device was replaced (as root, `sql -o /dev/full` replaced the device).
    norm = tmp_path / "n"
    normalize_file(SMALLCNN / "nsys.sqlite.gz", norm)
    target, link, pipe = tmp_path / "target.csv", tmp_path / "link.csv", tmp_path / "pipe.json"
    target.write_text("old\n")
    link.symlink_to(target.name)
    os.mkfifo(pipe)
    r = tp("sql", norm, "SELECT count(*) AS n FROM kernels", "-o", link)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and target.read_text().splitlines() == ["n", str(KERNELS)]
    for args in (
        ("sql", norm, "SELECT 1", "-o", pipe),
        ("findings", norm, "-o", pipe),
        ("export", "perfetto", norm, "--trace-id", TRACE, "-o", pipe),
    ):
        r = tp(*args)
        assert r.returncode == 2 and "not a regular file" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
        assert pipe.exists() and not pipe.is_file()  # still the pipe


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc: a folder that takes no new file")
def test_a_place_that_takes_no_new_file_is_one_line_naming_it(normalized: Path, tmp_path: Path) -> None:
    # /proc exists and refuses every new file with ENOENT: every writer gave FileNotFoundError or DuckDB's
    # IOException, exit 1.
    analysis = tmp_path / "a"
    assert tp("analyze", normalized, "--out", analysis, "-q").returncode == 0
    place = Path("/proc") / f"tracepipe-{os.getpid()}"
    for args in (
        ("analyze", normalized, "--out", place, "-q"),
        ("normalize", SMALLCNN / "torch_trace.json.gz", "--out", place, "-q"),
        ("report", analysis, "--out", place, "-q"),
        ("sql", normalized, "SELECT 1", "-o", f"{place}.csv"),
        ("findings", analysis, "-o", f"{place}.csv"),
        ("export", "perfetto", normalized, "--trace-id", TRACE, "-o", f"{place}.json"),
    ):
        r = tp(*args)
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, (args, r.stderr)
        assert str(place) in r.stderr and "no file can be created there" in r.stderr, (args, r.stderr)
