"""Shared fixtures: the committed real samples, normalized once per test session."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import duckdb
import pytest

from pipeline.normalize import normalize_file
from pipeline.schema import TABLES
from pipeline.store import committed_files

# pytest-xdist's workers start with COLUMNS=80 and LINES=24 in their environment, which every command run from a
# test would take for the terminal's size: a test of the piped (whole-width) output must not see them.  Tests of
# a narrow terminal set COLUMNS themselves.
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
SMALLCNN = SAMPLES / "h200_smallcnn"


def q(out: Path, sql: str) -> list[tuple]:
    """Plain DuckDB over the normalized Parquet files of the committed traces: no views, no pipeline code
    between test and data but the list of committed files."""
    con = duckdb.connect()
    for t in TABLES:
        if files := [str(f) for f in committed_files(out, t)]:
            con.read_parquet(files).create_view(t)
    return con.execute(sql).fetchall()


def gunzip_to(src: Path, dest: Path) -> Path:
    with gzip.open(src, "rb") as f, open(dest, "wb") as g:
        shutil.copyfileobj(f, g)
    return dest


@pytest.fixture(scope="session")
def nsys_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small-CNN nsys export as a plain .sqlite (for independent checks with sqlite3)."""
    return gunzip_to(SMALLCNN / "nsys.sqlite.gz", tmp_path_factory.mktemp("raw") / "nsys.sqlite")


@pytest.fixture(scope="session")
def nsys_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("normalized")
    normalize_file(SMALLCNN / "nsys.sqlite.gz", out)
    return out
