"""The documented sessions, run as written: README's Python API session, the shell session of docs/sql.md and
the wheel install of docs/install.md."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from pipeline.normalize import normalize_file
from tests.conftest import ROOT, SMALLCNN

README = ROOT / "README.md"


def block(heading: str, fence: str, doc: Path = README) -> str:
    """The first fenced block of ``fence`` kind under ``## heading`` of ``doc``."""
    section = doc.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"```{fence}\n(.*?)```", section, flags=re.S).group(1)


@pytest.fixture
def build_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding build/normalized as the README's commands leave it (the small-CNN sample)."""
    normalize_file(SMALLCNN / "nsys.sqlite.gz", tmp_path / "build" / "normalized")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_python_api_session(build_dir: Path, nsys_sqlite: Path) -> None:
    scope: dict[str, object] = {}
    exec(block("Python API (notebooks)", "python"), scope)
    raw = sqlite3.connect(nsys_sqlite)
    durations = [d for (d,) in raw.execute('SELECT "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL')]
    long_kernels = scope["long_kernels"]
    assert isinstance(long_kernels, pl.DataFrame)
    assert sorted(long_kernels["duration_ns"].to_list(), reverse=True) == sorted(
        (d for d in durations if d > 5000), reverse=True
    )
    top = scope["top"]
    assert isinstance(top, pl.DataFrame) and top.height == 5 and top["gpu_time_ns"].is_sorted(descending=True)
    assert top["gpu_time_ns"][0] <= sum(durations)
    assert scope["occupancy"].height == len(durations)
    assert "layer_summary" in scope["names"]["name"].to_list()


def test_shell_session(build_dir: Path) -> None:
    session = block("The SQL shell", "", ROOT / "docs" / "sql.md")
    lines = [line[2:] for line in session.splitlines() if line.startswith(("D ", "· "))]
    r = subprocess.run(
        [sys.executable, "-m", "tracepipe", "sql", "build/normalized"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TRACEPIPE_HISTORY": str(build_dir / "h")},
        check=False,
    )
    assert r.returncode == 0 and "Error" not in r.stderr, r.stderr
    assert "layer_summary" in r.stdout and "| path" in r.stdout  # .tables listed it; markdown mode printed


def test_wheel_install_is_what_the_packaging_test_runs() -> None:
    """tests/test_packaging.py builds with `python -m build` and installs the wheel it made; docs/install.md says so."""
    commands = block("Install from a wheel", "sh", ROOT / "docs" / "install.md")
    assert "python -m build" in commands
    from pipeline import __version__

    assert f"pip install dist/tracepipe-{__version__}-py3-none-any.whl" in commands
    packaging_test = (ROOT / "tests" / "test_packaging.py").read_text()
    assert '"-m", "build"' in packaging_test and '"install"' in packaging_test
