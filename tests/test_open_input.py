"""``source.open_input``: the one step that opens an input for its normalizer (format from the content, size
checked, sha256 started), checked against hashlib and the file's own bytes."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from pipeline.errors import BadInputError
from pipeline.normalize.source import open_input
from tests.conftest import SMALLCNN


def test_an_nsys_export_is_hashed_beside_its_normalizer() -> None:
    path = SMALLCNN / "nsys.sqlite.gz"
    opened = open_input(path)
    try:
        assert opened.format == "nsys-sqlite" and opened.digest is not None
        assert opened.sha256({}) == hashlib.sha256(path.read_bytes()).hexdigest()  # of the file as given, gzip
    finally:
        opened.close()


def test_a_chrome_trace_takes_its_sha256_from_its_normalizer() -> None:
    opened = open_input(SMALLCNN / "torch_trace.json.gz")
    assert opened.format == "chrome-trace" and opened.digest is None
    meta: dict[str, object] = {"source_sha256": "ab" * 32, "host": "h"}
    assert opened.sha256(meta) == "ab" * 32
    assert meta == {"host": "h"}  # taken out: trace_meta has its own column for it


def test_a_plain_trace_over_the_limit_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.decompress((SMALLCNN / "torch_trace.json.gz").read_bytes()))
    monkeypatch.setenv("TRACEPIPE_MAX_INPUT_BYTES", str(plain.stat().st_size - 1))
    with pytest.raises(BadInputError, match="TRACEPIPE_MAX_INPUT_BYTES"):
        open_input(plain)
    monkeypatch.setenv("TRACEPIPE_MAX_INPUT_BYTES", str(plain.stat().st_size))
    assert open_input(plain).format == "chrome-trace"  # exactly at the limit: accepted


def test_a_file_named_like_one_format_holding_another_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "run.sqlite"
    fake.write_bytes(gzip.decompress((SMALLCNN / "torch_trace.json.gz").read_bytes()))
    with pytest.raises(BadInputError, match="named like an SQLite database but its content looks like a JSON"):
        open_input(fake)


def test_an_export_or_a_trace_named_like_an_nsys_report_is_named_for_what_it_is(tmp_path: Path) -> None:
    # A .nsys-rep was never read for its content: an SQLite export or a chrome trace renamed so said that the nsys
    # CLI was needed, though no nsys would read it. The real reports of the samples stay nsys-rep.
    for content, what in (("nsys.sqlite.gz", "an SQLite database"), ("torch_trace.json.gz", "a JSON chrome trace")):
        fake = tmp_path / "run.nsys-rep"
        fake.write_bytes(gzip.decompress((SMALLCNN / content).read_bytes()))
        with pytest.raises(BadInputError, match=f"named like an nsys report but its content looks like {what}"):
            open_input(fake)
    from pipeline.normalize.source import detect_format

    reports = sorted((SMALLCNN.parent).glob("*/*.nsys-rep"))
    assert len(reports) >= 3 and {detect_format(p) for p in reports} == {"nsys-rep"}


def test_a_pipe_given_as_input_is_named_as_one(tmp_path: Path) -> None:
    # A FIFO said "no such file" (it exists); its content would be read twice, once for its format.
    import os

    pipe = tmp_path / "trace.json"
    os.mkfifo(pipe)
    with pytest.raises(BadInputError, match="not a regular file"):
        open_input(pipe)
    with pytest.raises(BadInputError, match="no such file"):
        open_input(tmp_path / "absent.json")


def test_a_damaged_gzip_says_which_damage_and_the_fix(tmp_path: Path) -> None:
    # Bytes appended after the gzip stream said "cannot decompress: Not a gzipped file (b'ga')" of a file that is
    # gzip; a flipped CRC byte said only "CRC check failed 0x.. != 0x..".
    from pipeline.normalize import normalize_file

    data = (SMALLCNN / "torch_trace.json.gz").read_bytes()
    appended, flipped = tmp_path / "appended.json.gz", tmp_path / "flipped.json.gz"
    appended.write_bytes(data + b"garbage")
    flipped.write_bytes(data[:-6] + bytes([data[-6] ^ 0xFF]) + data[-5:])  # the trailer's CRC-32
    with pytest.raises(BadInputError, match="bytes that are not gzip follow its gzip stream"):
        normalize_file(appended, tmp_path / "out")
    with pytest.raises(BadInputError, match=r"corrupt \(CRC check failed\): copy the file again"):
        normalize_file(flipped, tmp_path / "out")
    cut = tmp_path / "cut.json.gz"  # within the first bytes read for the format: Python's EOFError text before
    cut.write_bytes(data[: len(data) // 10])
    with pytest.raises(BadInputError, match=r"gzip stream ends early \(file truncated\?\)"):
        normalize_file(cut, tmp_path / "out")
