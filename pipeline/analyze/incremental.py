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

from pipeline.analyze.engine import connect, create_views
from pipeline.analyze.scratch import copy_view, read_back
from pipeline.analyze.views import macro_files, view_files, view_inputs
from pipeline.analyze.write import write_views
from pipeline.catalog import SQL_DIR
from pipeline.outputs import output_folder, writing
from pipeline.schema import SCHEMA_VERSION
from pipeline.store import committed

STATE_FILE = ".analyze-state.json"

#: Views whose rows mix captures, with why: recomputed in full on every run (from the per-capture views'
#: outputs where they read those).
ACROSS_CAPTURES: dict[str, str] = {
    "ncu_kernel_match": "pairs every ncu trace with every kernels trace of the folder",
    "rank_jobs": "groups the traces of the folder into jobs by their source paths",
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
    for path in [*sorted(view_files(sql_dir).values()), *macro_files(sql_dir).values(), *code]:
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
    n = con.execute(f"SELECT count(*) FROM layer_shapes WHERE capture_id IS DISTINCT FROM {CAPTURE_SQL}").fetchall()[0]
    return bool(n and n[0])


def _capture_column(columns: list[str]) -> str | None:
    if "trace_id" in columns:
        return CAPTURE_SQL
    if "capture_id" in columns:
        return "capture_id"
    return None


def _combine(con: duckdb.DuckDBPyConnection, old: Path, part: Path | None, changed: set[str], dest: Path) -> int | None:
    """``dest``: the rows of ``old`` outside the ``changed`` captures plus ``part``'s rows (renamed into place
    when complete); how many. None (nothing written) when the view has no trace_id/capture_id column to tell
    them by."""
    prev = con.read_parquet(str(old))
    capture = _capture_column(prev.columns)
    if capture is None:
        return None
    con.register("_changed_captures", pa.table({"capture": pa.array(sorted(changed), pa.string())}))
    kept = prev.filter(f"{capture} IS NULL OR {capture} NOT IN (SELECT capture FROM _changed_captures)")
    rel = kept.union(con.read_parquet(str(part))) if part is not None else kept
    tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with writing(dest):
            rel.write_parquet(str(tmp), compression="zstd")
            os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return int(con.read_parquet(str(dest)).count("*").fetchall()[0][0])


def analyze_incremental(
    normalized: Path,
    out: Path,
    views: list[str],
    formats: tuple[str, ...],
    device: str | None = None,
    sql_dir: Path = SQL_DIR,
    done: Callable[[str], None] | None = None,
    also: tuple[str, ...] = (),
    inspect: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    stamp: str | None = None,
) -> tuple[duckdb.DuckDBPyConnection, Outcome]:
    """Write ``views`` into ``out`` like :func:`pipeline.analyze.write_views`, recomputing only the captures
    whose traces changed since the last incremental run into ``out`` (everything on the first run, or when
    anything else changed); returns the connection. ``also``, ``inspect`` and ``stamp``: as write_views' (a
    combined view's file carries no stamp)."""
    normalized, out = Path(normalized).resolve(), output_folder(Path(out))
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
        rows = write_views(
            con, out, views, formats, done=done, sql_dir=sql_dir, also=also, inspect=inspect, stamp=stamp
        )
        _write_state(state_path, key, generations)
        return con, Outcome(rows, len(generations), sorted(generations), True, reason)

    changed = _changed_captures(generations, before["generations"])
    recompute = {t for t in generations if capture_of(t) in changed}
    sub = connect(normalized, sql_dir, views=[], device=device, traces=recompute) if recompute else None
    parts: list[Path] = []

    def combine(view: str, dest: Path) -> int | None:
        """A per-capture view: its previous rows of the unchanged captures plus the changed captures' rows,
        computed on ``sub`` (which has only their traces); None for the other views (computed in full)."""
        if view not in cached:
            return None
        part = None
        if sub is not None:
            create_views(sub, sql_dir, only=[view], keep_existing=True)  # never an across-captures view
            part = out / f".{view}.part-{uuid.uuid4().hex[:8]}.parquet"
            parts.append(part)
            copy_view(sub, view, part, "parquet")
            read_back(sub, view, part)  # the views of the changed captures read it, not its SQL
        return _combine(con, dest, part, changed, dest)  # None: no capture column, so computed in full

    try:
        rows = write_views(
            con,
            out,
            views,
            formats,
            done=done,
            sql_dir=sql_dir,
            produce=combine,
            also=also,
            inspect=inspect,
            stamp=stamp,
        )
    finally:
        for path in parts:
            path.unlink(missing_ok=True)
    _write_state(state_path, key, generations)
    return con, Outcome(rows, len(generations), sorted(recompute), False)
