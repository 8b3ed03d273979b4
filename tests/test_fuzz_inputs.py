"""Mutation fuzzing of the real samples: bytes flipped, files cut short, values retyped. Whatever the damage,
normalizing ends as a result (exit 0) or as bad input naming the file (exit 2), never as an internal error
(exit 1). Deterministic (derandomized) and bounded: TRACEPIPE_FUZZ_EXAMPLES examples per format (default 25)."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.normalize.batch import normalize_one
from tests.conftest import SAMPLES, SMALLCNN

EXAMPLES = int(os.environ.get("TRACEPIPE_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)

CHROME = gzip.decompress((SMALLCNN / "torch_trace.json.gz").read_bytes())
NCU = (SMALLCNN / "ncu_raw.csv").read_bytes()
LAYERS = (SAMPLES / "h200_smallcnn_annotated" / "layer_shapes.json").read_bytes()
NSYS = gzip.decompress((SMALLCNN / "nsys.sqlite.gz").read_bytes())

#: (position as a fraction of the file, xor mask) pairs.
flips = st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=8)


def _flip(data: bytes, changes: list[tuple[float, int]]) -> bytes:
    out = bytearray(data)
    for where, mask in changes:
        out[int(where * len(out))] ^= mask
    return bytes(out)


def _check(path: Path, out: Path) -> None:
    outcome = normalize_one(0, path, out, trace_id="fuzz", force=True)
    assert not outcome.internal, f"{path.name}: {outcome.error}"
    if outcome.error is not None:
        assert outcome.error.strip() and "\n" not in outcome.error


def _write(tmp: Path, name: str, data: bytes, gz: bool) -> Path:
    path = tmp / (name + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data, 1) if gz else data)
    return path


_TEXT = [("trace.json", CHROME), ("ncu_raw.csv", NCU), ("layer_shapes.json", LAYERS)]


@FUZZ
@given(st.sampled_from(_TEXT), flips, st.floats(0, 1), st.booleans(), st.booleans())
def test_flipped_and_truncated_text_samples(tmp_path_factory, sample, changes, cut, truncate, gz) -> None:
    name, data = sample
    data = _flip(data, changes)
    if truncate:
        data = data[: int(cut * len(data))]
    tmp = tmp_path_factory.mktemp("fuzz")
    path = _write(tmp, name, data, gz)
    if truncate and gz:  # a gzip stream cut mid-way as well
        raw = path.read_bytes()
        path.write_bytes(raw[: max(1, int(cut * len(raw)))])
    _check(path, tmp / "out")


#: Values that are legal JSON but the wrong type, or out of every range, for wherever they land.
odd_json = st.sampled_from([None, "", "x", -1, 0, 1e300, -1e300, 2**64, 2**63, [], {}, True, "1e309", [1, [2]]])


def _paths(doc: object, prefix: tuple = ()) -> list[tuple]:
    """Every key path into a JSON document (first 3 events of each list only: the shapes repeat)."""
    found = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:40]):
            found += _paths(v, (*prefix, i))
    return found


CHROME_DOC = json.loads(CHROME)
CHROME_PATHS = _paths(CHROME_DOC)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(CHROME_PATHS), odd_json), min_size=1, max_size=4))
def test_retyped_chrome_values(tmp_path_factory, changes) -> None:
    doc = json.loads(CHROME)
    for key_path, value in changes:
        node = doc
        try:
            for k in key_path[:-1]:
                node = node[k]
            node[key_path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change replaced a parent
    tmp = tmp_path_factory.mktemp("fuzz")
    path = tmp / "trace.json"
    path.write_text(json.dumps(doc))
    _check(path, tmp / "out")


def _nsys_columns() -> list[tuple[str, str]]:
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"tracepipe-fuzz-{os.getpid()}.sqlite"
    tmp.write_bytes(NSYS)
    con = sqlite3.connect(tmp)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    cols = [(t, c[1]) for t in tables for c in con.execute(f"PRAGMA table_info('{t}')")]
    con.close()
    tmp.unlink()
    return sorted(c for c in cols if c[0].startswith(("CUPTI", "NVTX", "StringIds", "TARGET_INFO", "META")))


NSYS_COLUMNS = _nsys_columns()
odd_sql = st.sampled_from(["'text'", "x'00ff'", "1e300", "-1", "NULL", "9223372036854775807", "0", "''"])


@FUZZ
@given(
    st.lists(st.tuples(st.sampled_from(NSYS_COLUMNS), odd_sql, st.integers(1, 5)), min_size=1, max_size=4),
    st.sampled_from([None, "flip", "truncate"]),
    flips,
    st.floats(0.01, 1),
)
def test_retyped_flipped_and_truncated_nsys(tmp_path_factory, changes, damage, changes_bytes, cut) -> None:
    tmp = tmp_path_factory.mktemp("fuzz")
    path = tmp / "nsys.sqlite"
    path.write_bytes(NSYS)
    con = sqlite3.connect(path)
    for (table, column), value, row in changes:
        try:
            con.execute(f'UPDATE "{table}" SET "{column}" = {value} WHERE rowid = ?', (row,))
        except sqlite3.IntegrityError:  # NOT NULL or unique: sqlite itself refuses this change
            continue
    con.commit()
    con.close()
    if damage == "flip":
        path.write_bytes(_flip(path.read_bytes(), changes_bytes))
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[: max(1, int(cut * len(NSYS)))])
    _check(path, tmp / "out")
