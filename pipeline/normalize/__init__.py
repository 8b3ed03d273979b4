"""Normalize any supported trace file into the schema of ``pipeline.schema``.

Each source format has one module here; this one detects the format from the
file's content (not only its name) and runs the matching normalizer inside a
``TraceWriter``, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from pipeline.errors import BadInputError
from pipeline.normalize.ranks import fill_rank
from pipeline.normalize.source import SQLITE_MAGIC, head, sha256_of
from pipeline.schema import SCHEMA_VERSION
from pipeline.store import TraceWriter, is_up_to_date, trace_id_for

Normalizer = Callable[[Path, TraceWriter], dict[str, object]]

#: format name -> "module:function" (imported lazily so a CPU box never imports torch).
NORMALIZERS: dict[str, str] = {
    "nsys-sqlite": "pipeline.normalize.nsys:normalize_sqlite",
    "nsys-rep": "pipeline.normalize.nsys:normalize_rep",
    "chrome-trace": "pipeline.normalize.chrome:normalize_chrome",
    "ncu-csv": "pipeline.normalize.ncu:normalize_ncu",
}


def detect_format(path: Path) -> str:
    """The source format of ``path``, from its first bytes; BadInputError if none fits."""
    if not path.is_file():
        raise BadInputError(path, "no such file")
    if path.stat().st_size == 0:
        raise BadInputError(path, "file is empty")
    name = path.name.lower()
    if name.endswith((".nsys-rep", ".qdrep", ".qdstrm")):
        return "nsys-rep"
    first = head(path)
    if first.startswith(SQLITE_MAGIC):
        return "nsys-sqlite"
    text = first.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] in (b"{", b"["):
        return "chrome-trace"
    if b'"ID","Process ID"' in first or first.startswith(b"==PROF==") or b"\n==PROF==" in first:
        return "ncu-csv"
    if name.endswith((".sqlite", ".sqlite.gz")):
        raise BadInputError(path, "not an SQLite database (bad header)")
    if name.endswith((".json", ".json.gz")):
        raise BadInputError(path, "not JSON: a chrome trace starts with '{'")
    if name.endswith((".csv", ".csv.gz")):
        raise BadInputError(path, "not an Nsight Compute CSV (no ncu header row or ==PROF== line)")
    raise BadInputError(
        path, "unrecognised format: expected an nsys .sqlite/.nsys-rep, a chrome trace JSON, or ncu CSV"
    )


def _normalizer(fmt: str) -> Normalizer:
    module, func = NORMALIZERS[fmt].split(":")
    return getattr(importlib.import_module(module), func)


@dataclass
class Result:
    path: Path
    trace_id: str
    source_format: str = ""
    rows: dict[str, int] = field(default_factory=dict)
    skipped: bool = False
    warnings: list[str] = field(default_factory=list)


def normalize_file(path: Path, out: Path, trace_id: str | None = None, force: bool = True) -> Result:
    """Normalize one file into ``out``; on any error nothing of it is committed."""
    path = Path(path)
    tid = trace_id or trace_id_for(path)
    if not force and path.exists() and is_up_to_date(out, tid, path):
        return Result(path, tid, skipped=True)
    fmt = detect_format(path)
    with TraceWriter(out, tid) as writer:
        meta = _normalizer(fmt)(path, writer)
        warnings = [str(w) for w in meta.pop("warnings", [])]  # type: ignore[union-attr]
        fill_rank(path, meta, writer, warnings)
        writer.write("trace_meta", trace_meta(path, meta, warnings))
        writer.commit()
        return Result(path, tid, str(meta.get("source_format", fmt)), dict(writer.rows), warnings=warnings)


def trace_meta(path: Path, meta: dict[str, object], warnings: list[str]) -> pa.Table:
    row = {
        "source_path": str(path),
        "source_sha256": sha256_of(path),
        "source_bytes": path.stat().st_size,
        "schema_version": SCHEMA_VERSION,
        "normalized_at_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "warnings": json.dumps(warnings) if warnings else None,
        **meta,
    }
    return pa.Table.from_pylist([row])
