"""What `pip install tracepipe` gets: the sdist and the wheel built from it carry the views and docs, and an
installed copy runs the whole pipeline from another folder, with no checkout on the path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from tests.conftest import ROOT, SMALLCNN

#: What the sdist is built from (a copy, so the build writes nothing into the checkout).
SOURCES = ("pyproject.toml", "MANIFEST.in", "README.md", "Makefile", "pipeline", "tracepipe", "sql", "docs")


def test_pyproject_lists_every_package_folder() -> None:
    """pyproject.toml lists packages by hand (sql/ and docs/ are mapped into pipeline): none may be missing."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {
        ".".join(d.relative_to(ROOT).parts)
        for top in ("pipeline", "tracepipe")
        for d in [ROOT / top, *(ROOT / top).rglob("*")]
        if d.is_dir() and d.name != "__pycache__" and any(f.suffix in (".py", ".sql") for f in d.iterdir())
    }
    assert on_disk - listed == set()
    assert config["package-dir"] == {"pipeline.views": "sql", "pipeline.docs": "docs"}


def _venv_with_shared_deps(venv: Path) -> Path:
    """A fresh venv without pip whose only extra path is this interpreter's site-packages (the dependencies):
    no checkout, no editable install of tracepipe (a .pth line adds a folder, not the .pth files in it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "_shared_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    return python


def test_wheel_from_sdist_installs_and_runs_the_pipeline_elsewhere(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, src / name)
    # no arguments: the sdist first, then the wheel built from the unpacked sdist (so both must carry sql/)
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(src)],
        capture_output=True,
        check=True,
    )
    wheel = next((tmp_path / "dist").glob("tracepipe-*.whl"))
    sdist = next((tmp_path / "dist").glob("tracepipe-*.tar.gz"))
    import tarfile
    import zipfile

    views = sorted(p.name for p in (ROOT / "sql").glob("*.sql"))
    docs = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    in_wheel = zipfile.ZipFile(wheel).namelist()
    top = [n for n in in_wheel if n.startswith("pipeline/views/") and n.count("/") == 2]
    assert sorted(n.split("/")[-1] for n in top) == views
    compare = sorted(p.name for p in (ROOT / "sql" / "compare").glob("*.sql"))  # tracepipe diff's views
    assert sorted(n.split("/")[-1] for n in in_wheel if n.startswith("pipeline/views/compare/")) == compare
    macros = sorted(p.name for p in (ROOT / "sql" / "macros").glob("*.sql"))  # created before the views
    assert sorted(n.split("/")[-1] for n in in_wheel if n.startswith("pipeline/views/macros/")) == macros
    assert sorted(n.split("/")[-1] for n in in_wheel if n.startswith("pipeline/docs/") and n.endswith(".md")) == docs
    with tarfile.open(sdist) as tar:
        in_sdist = tar.getnames()
    for folder, names in (("sql", views), ("docs", docs)):
        assert {n.split("/")[-1] for n in in_sdist if n.split("/")[1:2] == [folder]} >= set(names), folder

    python = _venv_with_shared_deps(tmp_path / "venv")
    # Away from the checkout and its PYTHONPATH: an editable install's tracepipe.egg-info there (`make install`)
    # would make pip take the wheel's project for installed already and skip it.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        cwd=tmp_path,
        env=env,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(SMALLCNN / "nsys.sqlite.gz", elsewhere / "nsys.sqlite.gz")
    tracepipe = tmp_path / "venv" / "bin" / "tracepipe"

    def run(*argv: object) -> subprocess.CompletedProcess:
        r = subprocess.run(list(map(str, argv)), cwd=elsewhere, env=env, capture_output=True, text=True, check=False)
        assert r.returncode == 0, (argv, r.stderr)
        return r

    where = run(python, "-c", "import pipeline, tracepipe; print(pipeline.__file__); print(tracepipe.__file__)")
    assert all(line.startswith(str(tmp_path / "venv")) for line in where.stdout.splitlines()), where.stdout
    run(tracepipe, "normalize", "nsys.sqlite.gz", "--out", "norm", "--trace-id", "cnn")
    analyzed = run(tracepipe, "analyze", "norm", "--out", "analysis", "--json")
    import json

    from pipeline.analyze import default_views

    default = set(default_views())  # all but the views whose header says "analyze: on request"
    assert default < {v.removesuffix(".sql") for v in views}
    assert set(json.loads(analyzed.stdout)) == default
    assert {p.stem for p in (elsewhere / "analysis").glob("*.parquet")} == default
    # every view is defined in the installed copy: the sql command sees them all
    names = run(tracepipe, "sql", "norm", "SELECT table_name FROM information_schema.tables", "--format", "csv")
    assert {v.removesuffix(".sql") for v in views} <= set(names.stdout.split())
    kernels = run(tracepipe, "sql", "norm", "SELECT count(*) AS n FROM kernel_layers", "--format", "csv")
    assert kernels.stdout.split() == ["n", "33"]  # the sample's 33 kernels (tests/test_cli.py counts them raw)
    run(tracepipe, "report", "analysis", "--out", "report", "--quiet")
    same = json.loads(run(tracepipe, "diff", "norm", "analysis", "--out", "diff", "--json").stdout)["totals"]
    assert same["ratio"] == 1.0 and same["kernels_a"] == same["kernels_b"] == 33
    assert (elsewhere / "report" / "report.html").stat().st_size > 10_000
    run(python, "-m", "tracepipe", "--version")
