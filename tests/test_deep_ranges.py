"""Ranges pushed and never popped: nsys closes them at the capture's end, so each nests inside all before it.

A real export (an OpenMMLab video model under apex pyprof, nsys 2023) holds 1,956 such pushes of ~270 characters,
1,407 levels deep: its full paths took GBs and `tracepipe run` ran out of memory at the default limit. The H200
small-CNN sample made into one here: 100 pushes opened before its ranges and closed at the capture's end.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from pipeline.normalize.checks import PATH_LEVELS
from tests.conftest import SMALLCNN, gunzip_to

PUSHES = 100


def with_unpopped_pushes(dest: Path) -> Path:
    """The sample's export with PUSHES nested push/pop ranges `push_<i>` on its ranges' thread, each opened 1 ns
    after the one before (all before the first range) and closed 1 us after the last range ends."""
    db = sqlite3.connect(gunzip_to(SMALLCNN / "nsys.sqlite.gz", dest))
    (first, last, tid), *more = db.execute(
        'SELECT min(start), max("end"), globalTid FROM NVTX_EVENTS WHERE eventType = 59 GROUP BY globalTid'
    ).fetchall()
    assert not more  # one thread pushed every range
    db.executemany(
        'INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId) VALUES (?, ?, 59, ?, ?, 0)',
        [(first - PUSHES + i, last + 1000, f"push_{i}", tid) for i in range(PUSHES)],
    )
    db.commit()
    db.close()
    return dest


def test_paths_past_the_level_limit_are_cut_and_said(tmp_path: Path) -> None:
    plain = gunzip_to(SMALLCNN / "nsys.sqlite.gz", tmp_path / "plain.sqlite")
    originals = sqlite3.connect(plain).execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59").fetchone()[0]
    result = normalize_file(with_unpopped_pushes(tmp_path / "deep.sqlite"), tmp_path / "deep")
    # Deeper than PATH_LEVELS: push_65 .. push_99, and every range of the sample (inside all 100).
    deeper = PUSHES - PATH_LEVELS - 1 + originals
    said = [w for w in result.warnings if "NVTX ranges nest deeper than" in w]
    assert said and said[0].startswith(f"{deeper} NVTX ranges nest deeper than {PATH_LEVELS} levels"), said
    con = connect(tmp_path / "deep")
    kept = "/".join(f"push_{i}" for i in range(PATH_LEVELS + 1))  # depths 0 .. PATH_LEVELS in full
    paths = dict(
        con.sql("SELECT text, path FROM nvtx_paths WHERE text IN ('push_64', 'push_65', 'push_99')").fetchall()
    )
    assert paths == {"push_64": kept, "push_65": f"{kept}/…/push_65", "push_99": f"{kept}/…/push_99"}
    # A range of the sample: the kept levels, then itself (its own enclosing ranges of the sample are cut too)
    conv = con.sql("SELECT DISTINCT path FROM nvtx_paths WHERE text = 'conv1'").fetchall()
    assert conv == [(f"{kept}/…/conv1",)]
    # Each kernel keeps the layer it has without the pushes: the innermost range, which the cut does not touch.
    normalize_file(plain, tmp_path / "flat")
    flat = connect(tmp_path / "flat").sql("SELECT kernel_id, layer FROM kernel_layers ORDER BY kernel_id").fetchall()
    deep = con.sql("SELECT kernel_id, layer FROM kernel_layers ORDER BY kernel_id").fetchall()
    assert deep == flat and any(layer for _, layer in flat)
    # The outermost push holds every kernel launched in a range (layer_timeline walks up from those ranges only)
    [(inside,)] = con.sql("SELECT count(*) FROM kernel_layers WHERE range_id IS NOT NULL").fetchall()
    timeline = con.sql("SELECT kernels FROM layer_timeline WHERE layer IN ('push_0', 'push_99') ORDER BY layer")
    assert timeline.fetchall() == [(inside,), (inside,)] and inside > 0
