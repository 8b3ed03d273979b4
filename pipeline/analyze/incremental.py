"""Incremental analyze: after some traces of a folder were re-normalized, recompute only what depends on them.

The unit is the *capture*: the traces whose ids share everything before the last ``.`` (``rank3.nsys``,
``rank3.ncu`` and ``rank3.layer_shapes`` are capture ``rank3``; ``pipeline.store.trace_id_for``). It is the
key the views themselves join traces on (``kernel_tiles``, ``layer_work_map`` and ``layer_macs`` match a
capture's shapes and ncu launches to its timeline by it), and every view outside :data:`ACROSS_CAPTURES`
computes the rows of one capture from that capture's traces alone. So such a view's output is the union of
per-capture parts, and a run recomputes it for the changed captures only: their traces are registered on a
connection of their own, the view is computed there, and the new output is the previous output without the
changed (or removed) captures' rows plus the new rows. A view of :data:`ACROSS_CAPTURES` (and every view that
reads one) mixes captures, so it is computed again in full, from the per-capture views' new outputs.

What a trace "changed" means: its committed generation (``OUT/.tracepipe/manifests/<id>.json``) differs from
the one the last run saw, or it is new or gone. The state of the last run, ``<analysis>/.analyze-state.json``,
names each trace's generation and a fingerprint of everything else the outputs depend on (the view SQL, the
Python-made tables' code, the schema version, the views, formats and ``--device`` asked for, the normalized
folder); any difference there means a full run. The state is removed before a run starts and written only
when it ends, so an interrupted run is followed by a full one; a plain (not incremental) analyze removes it too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from pipeline.analyze import (
    _copy,
    _read_back,
    _views_to_write,
    connect,
    defined_views,
    needed_views,
    view_files,
    view_inputs,
    write_views,
)
from pipeline.catalog import SQL_DIR
from pipeline.schema import SCHEMA_VERSION
from pipeline.store import committed

STATE_FILE = ".analyze-state.json"

#: Views whose rows mix captures, with why: recomputed in full on every run (from the per-capture views'
#: outputs where they read those).
ACROSS_CAPTURES: dict[str, str] = {
    "ncu_kernel_match": "pairs every ncu trace with every kernels trace of the folder",
    "layer_rank_spread": "statistics over every rank (trace) of the folder",
    "layer_stragglers": "the slowest rank of each layer against the median of all ranks",
}

#: The capture of a trace id, as the views derive it (``regexp_replace(trace_id, '\\.[^.]*$', '')``).
CAPTURE_SQL = r"regexp_replace(trace_id, '\.[^.]*$', '')"


def capture_of(trace_id: str) -> str:
    return re.sub(r"\.[^.]*$", "", trace_id)


@dataclass
class Outcome:
    rows: dict[str, int]
    traces: int  # committed traces in the folder
    recomputed: list[str] = field(default_factory=list)  # trace ids whose views were computed this run
    full: bool = True
    reason: str = ""  # why the run was full


def across_views(sql_dir: Path = SQL_DIR) -> set[str]:
    """:data:`ACROSS_CAPTURES` and every view that reads one of them, directly or not."""
    files = view_files(sql_dir)
    across = set(ACROSS_CAPTURES) & set(files)
    grew = True
    while grew:
        more = {v for v, p in files.items() if v not in across and across & set(view_inputs(p))}
        across |= more
        grew = bool(more)
    return across


def fingerprint(normalized: Path, views: list[str], formats: tuple[str, ...], device: str | None, sql_dir: Path) -> str:
    """What the outputs depend on besides the traces' generations."""
    h = hashlib.sha256()
    code = sorted(Path(__file__).parent.glob("*.py"))  # the Python-made tables (arch limits, tile patterns)
    for path in [*sorted(view_files(sql_dir).values()), *code]:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(json.dumps([SCHEMA_VERSION, sorted(views), sorted(formats), device, str(normalized)]).encode())
    return h.hexdigest()


def forget(out: Path) -> None:
    """Remove the state of the last incremental run (a plain analyze rewrote the outputs its own way)."""
    (Path(out) / STATE_FILE).unlink(missing_ok=True)


def _read_state(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_state(path: Path, key: str, generations: dict[str, str | None]) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps({"key": key, "generations": generations}))
    os.replace(tmp, path)


def _changed_captures(now: dict[str, str | None], before: dict[str, str | None]) -> set[str]:
    """Captures with a trace that is new, gone, or of another generation (a trace without a generation, from
    a tracepipe before generations, always counts as changed)."""
    return {capture_of(t) for t in set(now) | set(before) if now.get(t) is None or now.get(t) != before.get(t)}


def _shapes_outside_their_capture(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether a layer_shapes row names a capture other than its own trace's (the views would then join it
    to another capture's kernels, and a per-capture recompute would miss that)."""
    n = con.execute(f"SELECT count(*) FROM layer_shapes WHERE capture_id IS DISTINCT FROM {CAPTURE_SQL}").fetchone()
    return bool(n and n[0])


def _capture_column(columns: list[str]) -> str | None:
    if "trace_id" in columns:
        return CAPTURE_SQL
    if "capture_id" in columns:
        return "capture_id"
    return None


def _combine(con: duckdb.DuckDBPyConnection, old: Path, part: Path | None, changed: set[str], dest: Path) -> bool:
    """``dest``: the rows of ``old`` outside the ``changed`` captures plus ``part``'s rows (renamed into place
    when complete); False (nothing written) when the view has no trace_id/capture_id column to tell them by."""
    prev = con.read_parquet(str(old))
    capture = _capture_column(prev.columns)
    if capture is None:
        return False
    con.register("_changed_captures", pa.table({"capture": pa.array(sorted(changed), pa.string())}))
    kept = prev.filter(f"{capture} IS NULL OR {capture} NOT IN (SELECT capture FROM _changed_captures)")
    rel = kept.union(con.read_parquet(str(part))) if part is not None else kept
    tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        rel.write_parquet(str(tmp), compression="zstd")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return True


def analyze_incremental(
    normalized: Path,
    out: Path,
    views: list[str],
    formats: tuple[str, ...],
    device: str | None = None,
    sql_dir: Path = SQL_DIR,
    done: Callable[[str], None] | None = None,
) -> tuple[duckdb.DuckDBPyConnection, Outcome]:
    """Write ``views`` into ``out`` like :func:`pipeline.analyze.write_views`, recomputing only the captures
    whose traces changed since the last incremental run into ``out`` (everything on the first run, or when
    anything else changed); returns the connection (every view readable, e.g. for analysis_warnings)."""
    normalized, out = Path(normalized).resolve(), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / STATE_FILE
    generations = {tid: c.generation for tid, c in committed(normalized).items()}
    key = fingerprint(normalized, views, formats, device, sql_dir)
    before = _read_state(state_path)
    forget(out)  # until this run has finished, the outputs match no state
    con = connect(normalized, sql_dir, views=[], device=device)
    cached = [v for v in views if "parquet" in formats and v not in across_views(sql_dir)]
    reason = ""
    if before is None:
        reason = "no state of an earlier incremental run"
    elif before.get("key") != key:
        reason = "views, code, options or folder changed since the last run"
    elif missing := [v for v in cached if not (out / f"{v}.parquet").is_file()]:
        reason = f"output missing: {missing[0]}.parquet"
    elif _shapes_outside_their_capture(con):
        reason = "layer_shapes rows name another capture than their trace's"
    if reason:
        rows = write_views(con, out, views, formats, done=done, sql_dir=sql_dir)
        _write_state(state_path, key, generations)
        return con, Outcome(rows, len(generations), sorted(generations), True, reason)

    changed = _changed_captures(generations, before["generations"])
    recompute = {t for t in generations if capture_of(t) in changed}
    sub = connect(normalized, sql_dir, views=[], device=device, traces=recompute) if recompute else None
    files = view_files(sql_dir)
    across = across_views(sql_dir)
    to_write = set(_views_to_write(views, sql_dir))
    rows: dict[str, int] = {}
    scratch: list[Path] = []
    scratch_views: list[str] = []  # read back from a scratch file in ``con``: back to their SQL at the end
    try:
        for view in needed_views(views, sql_dir):
            body = f"CREATE OR REPLACE VIEW {view} AS\n{files[view].read_text().strip().rstrip(';')}"
            if sub is not None and view not in across and view not in defined_views(sub):
                sub.execute(body)
            if view not in defined_views(con):
                con.execute(body)
            final = out / f"{view}.parquet"
            if view in cached:
                part = None
                if sub is not None:
                    part = out / f".{view}.part-{uuid.uuid4().hex[:8]}.parquet"
                    scratch.append(part)
                    _copy(sub, view, part, "parquet")
                    _read_back(sub, view, part)  # the views of the changed captures read it, not its SQL
                if not _combine(con, final, part, changed, final):
                    _copy(con, view, final, "parquet")  # no capture column: computed in full
            elif view in to_write:  # an across-captures view, or one written without parquet
                if view not in views or "parquet" not in formats:
                    final = out / f".{view}.scratch-{uuid.uuid4().hex[:8]}.parquet"
                    scratch.append(final)
                    scratch_views.append(view)
                _copy(con, view, final, "parquet")
            else:
                continue
            _read_back(con, view, final)
            if view not in views:
                continue
            for fmt in formats:
                if fmt != "parquet":
                    _copy(con, view, out / f"{view}.{fmt}", fmt)
            rows[view] = con.execute(f"SELECT count(*) FROM {view}").fetchone()[0]
            if done is not None:
                done(view)
    finally:
        for view in scratch_views:
            con.execute(f"CREATE OR REPLACE VIEW {view} AS\n{files[view].read_text().strip().rstrip(';')}")
        for path in scratch:
            path.unlink(missing_ok=True)
    _write_state(state_path, key, generations)
    return con, Outcome(rows, len(generations), sorted(recompute), False)
