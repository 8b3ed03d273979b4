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
import pyarrow.parquet as pq

from pipeline.errors import BadInputError
from pipeline.normalize.checks import layer_warnings, staged_warnings
from pipeline.normalize.ncu_pages import other_page
from pipeline.normalize.ranks import fill_rank
from pipeline.normalize.source import SQLITE_MAGIC, Sha256Job, check_plain_size, head, sha256_of
from pipeline.schema import SCHEMA_VERSION
from pipeline.store import TraceWriter, check_trace_id, committed_file, trace_id_for

Normalizer = Callable[[Path, TraceWriter], dict[str, object]]

#: format name -> "module:function" (imported lazily so a CPU box never imports torch).
NORMALIZERS: dict[str, str] = {
    "nsys-sqlite": "pipeline.normalize.nsys:normalize_sqlite",
    "nsys-rep": "pipeline.normalize.nsys:normalize_rep",
    "chrome-trace": "pipeline.normalize.chrome:normalize_chrome",
    "ncu-csv": "pipeline.normalize.ncu:normalize_ncu",
    "layer-shapes": "pipeline.normalize.layers:normalize_layers",
    "compiled-kernels": "pipeline.normalize.compiled:normalize_compiled",
}


#: What a file's name promises, checked against what its content is.
_BY_NAME = {".sqlite": "nsys-sqlite", ".json": "chrome-trace", ".csv": "ncu-csv"}
_WHAT = {
    "nsys-sqlite": "an SQLite database",
    "chrome-trace": "a JSON chrome trace",
    "ncu-csv": "an ncu CSV",
    "layer-shapes": "a tracepipe layer_shapes file",
    "compiled-kernels": "a tracepipe compiled_kernels file",
}
#: Content formats that keep a name's promise of another (a capture's layer_shapes.json is JSON too).
_ALSO = {"layer-shapes": "chrome-trace", "compiled-kernels": "chrome-trace"}


def _by_content(first: bytes) -> str | None:
    if first.startswith(SQLITE_MAGIC):
        return "nsys-sqlite"
    text = first.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] == b"{" and b'"tracepipe_layers"' in text[:64]:  # tracepipe capture's side file: its first key
        return "layer-shapes"
    if text[:1] == b"{" and b'"tracepipe_compiled"' in text[:64]:  # its compiled-kernels side file, likewise
        return "compiled-kernels"
    if text[:1] in (b"{", b"["):
        return "chrome-trace"
    if b'"ID","Process ID"' in first or first.startswith(b"==") or b"\n==PROF==" in first or other_page(text):
        return "ncu-csv"  # other_page: ncu's session/source pages, refused by the ncu normalizer with the fix
    return None


def detect_format(path: Path) -> str:
    """The source format of ``path``, from its first bytes; BadInputError if none fits or the name disagrees."""
    if not path.is_file():
        raise BadInputError(path, "no such file")
    if path.stat().st_size == 0:
        raise BadInputError(path, "file is empty")
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".nsys-rep", ".qdrep", ".qdstrm")):
        return "nsys-rep"
    first = head(path)
    if not first:
        raise BadInputError(path, "file is empty (after decompression)")
    found = _by_content(first)
    promised = next((fmt for ext, fmt in _BY_NAME.items() if name.endswith(ext)), None)
    if promised and found != promised and _ALSO.get(found) != promised:
        content = f"its content looks like {_WHAT[found]}" if found else "its content is none of the known formats"
        raise BadInputError(path, f"named like {_WHAT[promised]} but {content}")
    if found is None:
        raise BadInputError(path, "unrecognised format: expected nsys .sqlite/.nsys-rep, chrome trace JSON or ncu CSV")
    return found


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
                    "give this one its own --trace-id, or pass --force to replace it",
                )
            notes.append(f"replaces trace {tid!r} normalized from {previous['source_path']}")
    fmt = detect_format(path)
    check_plain_size(path, fmt)
    # The file's sha256 is hashed in a child process while the normalizer runs (see Sha256Job), except by
    # normalizers that hash it themselves while they read it (SELF_HASHED: meta's "source_sha256").
    digest = None if fmt in SELF_HASHED else Sha256Job(path)
    try:
        return _normalize(path, fmt, tid, out, digest, notes)
    finally:
        if digest is not None:
            digest.cancel()


#: Formats whose normalizer returns the input's sha256 in its meta (chrome: a thread beside its decode).
SELF_HASHED = frozenset({"chrome-trace"})


def _normalize(path: Path, fmt: str, tid: str, out: Path, digest: Sha256Job | None, notes: list[str]) -> Result:
    with TraceWriter(out, tid) as writer:
        try:
            meta = _normalizer(fmt)(path, writer)
        except DATA_ERRORS as e:
            raise BadInputError(path, damaged_reason(e)) from e
        warnings = notes + [str(w) for w in meta.pop("warnings", [])]  # type: ignore[union-attr]
        warnings += staged_warnings(writer)
        warnings += layer_warnings(writer, str(meta.get("source_format", fmt)))
        fill_rank(path, meta, writer, warnings)
        sha256 = str(meta.pop("source_sha256")) if digest is None else digest.result()
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
