"""A '/' inside a range's text: `path` joins the levels with '/', and every reader of a path splits it there
(`tracepipe diff --depth`, the Perfetto export's counters, the report's step window, findings' common paths, a
user's `string_split(path, '/')`). Real traces have such texts (Dynamo's `dynamo_data: compile_id=0/0` ranges in
the compiled samples); the H200 small-CNN sample is given two here: its `step` range renamed `train/step` and its
`conv1` ranges `conv/1`."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from pipeline.report.diff import open_side, rolled_up
from tests.conftest import SAMPLES, SMALLCNN, gunzip_to

COMPILED = SAMPLES / "h100_compiled_train"

RENAMED = {"step": "train/step", "conv1": "conv/1"}


@pytest.fixture(scope="module")
def slashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample's export with RENAMED's ranges renamed, normalized."""
    tmp = tmp_path_factory.mktemp("slash")
    db = sqlite3.connect(gunzip_to(SMALLCNN / "nsys.sqlite.gz", tmp / "slash.sqlite"))
    for old, new in RENAMED.items():
        assert db.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = ?", (new, old)).rowcount > 0
    db.commit()
    db.close()
    normalize_file(tmp / "slash.sqlite", tmp / "n")
    return tmp / "n"


def test_a_path_has_one_level_per_range(slashed: Path) -> None:
    con = connect(slashed)
    for view in ("nvtx_paths", "kernel_layers", "layer_summary", "layer_timeline"):
        wrong = con.sql(
            f"SELECT path, depth FROM {view} WHERE path IS NOT NULL AND len(string_split(path, '/')) <> depth + 1"
        ).fetchall()
        assert wrong == [], view
    # The text is kept where it is one level's own: layer and text; the path reads it with '∕' (U+2215)
    rows = con.sql("SELECT DISTINCT layer, path, depth FROM kernel_layers WHERE layer LIKE 'conv%'").fetchall()
    # (the sample's first steps ran without its `step` range: their layers are outermost)
    assert sorted(rows) == [
        ("conv/1", "conv∕1", 0), ("conv/1", "train∕step/conv∕1", 1),
        ("conv2", "conv2", 0), ("conv2", "train∕step/conv2", 1),
    ]  # fmt: skip
    [(n,)] = con.sql("SELECT count(*) FROM kernel_layers WHERE layer = 'conv/1'").fetchall()
    plain = slashed.parent / "plain"
    normalize_file(gunzip_to(SMALLCNN / "nsys.sqlite.gz", slashed.parent / "plain.sqlite"), plain)
    [(before,)] = connect(plain).sql("SELECT count(*) FROM kernel_layers WHERE layer = 'conv1'").fetchall()
    assert n == before > 0


def test_diff_rolls_up_to_the_range_not_half_its_name(slashed: Path, tmp_path: Path) -> None:
    side = open_side(str(slashed), tmp_path)
    tops = {p for p in rolled_up(side.rows, 1).column("path").to_pylist() if p is not None}
    assert tops == {"train∕step", "conv∕1", "conv2", "relu", "pool", "fc"}
    second = {p for p in rolled_up(side.rows, 2).column("path").to_pylist() if p is not None}
    assert "train∕step/conv∕1" in second and all(p.count("/") <= 1 for p in second)


def test_a_compiled_regions_module_chain_keeps_its_levels(tmp_path: Path) -> None:
    """The compiled sample with its root range renamed `my/model` and the capture's root name left as it was: the
    region then sits below a range that is not the capture's root, so its chain's names are that range's text and
    the qualified names (`my/model.model.layers.0`), each one level."""
    folder = tmp_path / COMPILED.name
    folder.mkdir()
    db = sqlite3.connect(gunzip_to(COMPILED / "nsys.sqlite.gz", folder / "nsys.sqlite"))
    assert db.execute("UPDATE StringIds SET value = 'my/model' WHERE value = 'model'").rowcount == 1  # by textId
    db.commit()
    db.close()
    shutil.copy(COMPILED / "compiled_kernels.json", folder)
    for name in ("compiled_kernels.json", "nsys.sqlite"):
        normalize_file(folder / name, tmp_path / "n")
    con = connect(tmp_path / "n")
    levels = "len(string_split(path, '/')) <> depth + 1"
    for view in ("kernel_layers", "gpu_op_attribution"):  # each writes the chain's path
        placed = (
            f"FROM {view} WHERE len(module_chain) > 0"
            if view == "gpu_op_attribution"
            else (f"FROM {view} WHERE fused_modules IS NOT NULL")
        )
        [(n, wrong)] = con.sql(f"SELECT count(*), count(*) FILTER ({levels}) {placed}").fetchall()
        assert n > 0 and wrong == 0, view
        paths = {p for (p,) in con.sql(f"SELECT DISTINCT path {placed}").fetchall()}
        assert "my∕model/my∕model.model/my∕model.model.layers.0/my∕model.model.layers.0.self_attn" in paths, view
