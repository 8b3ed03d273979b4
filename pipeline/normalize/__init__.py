"""Normalize any supported trace file into the schema of ``pipeline.schema``.

Each source format has one module here; this one opens the input (``source.open_input``: its format from
the file's content, not only its name, its size checked, its sha256 started) and runs the matching
normalizer inside a ``TraceWriter``, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import BadInputError
from pipeline.normalize.checks import layer_warnings, staged_warnings
from pipeline.normalize.ranks import fill_rank
from pipeline.normalize.source import Input, open_input, sha256_of
from pipeline.schema import SCHEMA_VERSION
from pipeline.store import TraceWriter, check_trace_id, committed_file, trace_id_for

Normalizer = Callable[[Path, TraceWriter], dict[str, object]]

#: format name -> "module:function" (imported lazily so a CPU box never imports torch).
NORMALIZERS: dict[str, str] = {
    "nsys-sqlite": "pipeline.normalize.nsys:normalize_sqlite",
    "nsys-rep": "pipeline.normalize.nsys_rep:normalize_rep",
    "chrome-trace": "pipeline.normalize.chrome:normalize_chrome",
    "ncu-csv": "pipeline.normalize.ncu:normalize_ncu",
    "layer-shapes": "pipeline.normalize.layers:normalize_layers",
    "compiled-kernels": "pipeline.normalize.compiled:normalize_compiled",
}


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
    """Normalize one file into ``out``; on any error nothing of it is committed.

    Without ``force`` an input whose trace is already committed from the same source (same path, size and
    mtime, or same sha256) is skipped; a different file under that trace id is refused (BadInputError
    naming ``--trace-id`` and ``--force``); with ``force`` it replaces the trace, with a warning saying so.
    """
    path = Path(path)
    tid = check_trace_id(trace_id) if trace_id else trace_id_for(path)
    previous = previous_source(out, tid)
    notes: list[str] = []
    if previous is not None and path.is_file():
        same = same_source(previous, path)
        if not force and same and previous.get("schema_version") == SCHEMA_VERSION:
            return Result(path, tid, str(previous.get("source_format") or ""), skipped=True)
        if not same and previous.get("source_path") not in (None, str(path.resolve())):
            if not force:
                raise BadInputError(
                    path,
                    f"trace id {tid!r} in {out} already holds another file ({previous['source_path']}): "
                    "give this one its own id (`tracepipe normalize FILE --trace-id ID`), or pass --force to "
                    "replace it",
                )
            notes.append(f"replaces trace {tid!r} normalized from {previous['source_path']}")
    opened = open_input(path)
    try:
        return _normalize(opened, tid, out, notes)
    finally:
        opened.close()


def _normalize(opened: Input, tid: str, out: Path, notes: list[str]) -> Result:
    path, fmt = opened.path, opened.format
    with TraceWriter(out, tid) as writer:
        try:
            meta = _normalizer(fmt)(path, writer)
        except DATA_ERRORS as e:
            raise BadInputError(path, damaged_reason(e)) from e
        warnings = notes + [str(w) for w in meta.pop("warnings", [])]  # type: ignore[union-attr]
        warnings += staged_warnings(writer)
        warnings += layer_warnings(writer, str(meta.get("source_format", fmt)))
        fill_rank(path, meta, writer, warnings)
        sha256 = opened.sha256(meta)  # before the row is built: a self-hashing normalizer's meta holds it
        writer.write("trace_meta", trace_meta(path, meta, warnings, sha256=sha256))
        writer.commit()
        return Result(path, tid, str(meta.get("source_format", fmt)), dict(writer.rows), warnings=warnings)


def previous_source(out: Path, trace_id: str) -> dict[str, object] | None:
    """The committed ``trace_meta`` row of ``trace_id`` in ``out``, or None."""
    meta = committed_file(out, trace_id, "trace_meta")
    if meta is None:
        return None
    rows = pq.read_table(meta).to_pylist()
    return rows[0] if rows else None


def same_source(previous: dict[str, object], path: Path) -> bool:
    """The trace was normalized from this very content: same path, size and mtime (make's quick check),
    or else the same sha256 (a copy, a move, a touch)."""
    st = path.stat()
    if previous.get("source_bytes") != st.st_size:
        return False
    if previous.get("source_path") == str(path.resolve()) and previous.get("source_mtime_ns") == st.st_mtime_ns:
        return True
    return previous.get("source_sha256") == sha256_of(path)


#: Exceptions a normalizer raises on values it cannot represent or parse: damaged or hostile input, not a
#: bug of ours (exit 2). Anything else stays an internal error (exit 1).
DATA_ERRORS: tuple[type[BaseException], ...] = (
    OverflowError,
    RecursionError,
    UnicodeDecodeError,
    pa.ArrowInvalid,
    pa.ArrowNotImplementedError,
    pa.ArrowTypeError,
)


def damaged_reason(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0][:200]
    kind = "nested too deeply" if isinstance(e, RecursionError) else f"a value tracepipe cannot read ({first})"
    return f"{kind}: the file is damaged or not from a supported tool version; re-export or re-capture it"


def trace_meta(path: Path, meta: dict[str, object], warnings: list[str], sha256: str) -> pa.Table:
    row = {
        "source_path": str(path.resolve()),
        "source_sha256": sha256,
        "source_bytes": path.stat().st_size,
        "source_mtime_ns": path.stat().st_mtime_ns,
        "schema_version": SCHEMA_VERSION,
        "normalized_at_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "warnings": json.dumps(warnings) if warnings else None,
        **meta,
    }
    return pa.Table.from_pylist([row])
