"""Normalized data of another schema version: older minors are read (nulls where columns are new) and
redone by incremental runs; a newer major is refused with a clear error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.analyze import connect
from pipeline.errors import BadInputError
from pipeline.normalize import normalize_file
from pipeline.schema import SCHEMA_VERSION
from pipeline.store import committed_files
from tests.conftest import SMALLCNN


def rewrite_meta(out: Path, version: str, drop: tuple[str, ...] = ()) -> Path:
    part = committed_files(out, "trace_meta")[0]  # the committed generation's file (public copy is a link)
    t = pq.read_table(part).drop_columns(list(drop))
    t = t.set_column(t.schema.get_field_index("schema_version"), "schema_version", pa.array([version]))
    pq.write_table(t, part)
    return part


def test_an_older_minor_is_read_with_nulls_and_redone_incrementally(tmp_path: Path) -> None:
    src = tmp_path / "run" / "nsys.sqlite.gz"
    src.parent.mkdir()
    shutil.copy(SMALLCNN / "nsys.sqlite.gz", src)
    out = tmp_path / "out"
    normalize_file(src, out)
    rewrite_meta(out, "1.0", drop=("local_rank", "device_id"))  # what schema 1.0 wrote
    con = connect(out)
    assert con.execute("SELECT schema_version, local_rank, device_id FROM trace_meta").fetchall() == [
        ("1.0", None, None)
    ]
    assert con.execute("SELECT count(*) FROM kernel_layers").fetchone() == (33,)
    assert not normalize_file(src, out, force=False).skipped  # newer than the source, but an older schema
    assert normalize_file(src, out, force=False).skipped
    assert connect(out).execute("SELECT schema_version, device_id FROM trace_meta").fetchall() == [(SCHEMA_VERSION, 0)]


def test_a_newer_major_is_refused(tmp_path: Path) -> None:
    normalize_file(SMALLCNN / "nsys.sqlite.gz", tmp_path)
    rewrite_meta(tmp_path, "2.0")
    with pytest.raises(BadInputError, match=r"normalized with schema 2\.0"):
        connect(tmp_path)
