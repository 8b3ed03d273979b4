"""The views of ``sql/``: one file a view, named like the view, whose header comment says what it reads and
returns; and the macros of ``sql/macros/`` they share (one file a macro).

Each view file opens with ``-- <view>: <what it answers>``, an ``-- Inputs:`` line naming every table and view its
body reads, a ``-- Macros:`` line naming the macros it calls (when it calls any), and an ``-- Output`` block
declaring each column it returns, one line a column: ``--   name TYPE [unit]: meaning`` (tests/test_sql_headers.py
checks the first two against DuckDB's parse tree, the columns against DESCRIBE). The inputs are the view graph:
:func:`view_order` creates views after their inputs, :func:`needed_views` finds what a view needs, and
``tracepipe views`` (``pipeline.analyze.graph``) draws it. A view whose name starts with ``_`` is private: a stage
of a public view, with a header and a golden test of its own, that users should not build on and ``analyze``
writes only on request. Reading the files needs no DuckDB.
"""

from __future__ import annotations

import collections
import graphlib
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.catalog import SQL_DIR, is_public

#: The folder of ``sql/`` holding the macros, created on every connection before the views.
MACRO_DIR = "macros"


def view_files(sql_dir: Path = SQL_DIR) -> dict[str, Path]:
    return {p.stem: p for p in sorted(sql_dir.glob("*.sql"))}


def macro_files(sql_dir: Path = SQL_DIR) -> dict[str, Path]:
    """The macros: ``sql/macros/<macro>.sql``, each a ``CREATE OR REPLACE MACRO <macro>(...)`` statement (a table
    macro, ``AS TABLE``, or a scalar one)."""
    return {p.stem: p for p in sorted((sql_dir / MACRO_DIR).glob("*.sql"))}


#: Header lines that change how `analyze` treats a view: written only when asked for by name; computed into its
#: own result even when only one view reads it; never computed into a result of its own, even when several views
#: read it (each computes it: a scan and a filter of a big input cost less twice than written once and read back).
#: See ``write._views_to_write``. And on big inputs computed under part of DuckDB's memory limit, as its memory goes
#: to operators that spill to disk in order (sorts, windows, aggregates): ``write.SPILL_SHARE``.
ON_REQUEST = "-- analyze: on request"
STAGED = "-- analyze: staged"
INLINE = "-- analyze: inline"
SPILLS = "-- analyze: spills"


def default_views(sql_dir: Path = SQL_DIR) -> list[str]:
    """Views `tracepipe analyze` writes unless told otherwise: all but those whose header says
    ``-- analyze: on request`` (views that expand to one row per kernel and SM, say) and the private ones
    (``_name``: stages of another view)."""
    return [
        name for name, path in view_files(sql_dir).items() if is_public(name) and ON_REQUEST not in path.read_text()
    ]


def view_body(path: Path) -> str:
    """The SELECT of a view file, its header comment kept (DuckDB reads it as a comment; write_views reads its
    ``-- analyze:`` lines there), any trailing ';' removed."""
    return path.read_text().strip().rstrip(";")


#: The header line naming a view's inputs, and the lines that continue it (indented past "-- ").
_INPUTS_LINE = re.compile(r"^--\s*Inputs?:(.*)$")
_CONTINUATION = re.compile(r"^--\s{2,}(\S.*)$")


_MACROS_LINE = re.compile(r"^--\s*Macros?:(.*)$")


def view_inputs(path: Path) -> list[str]:
    """The tables and views a view file's ``-- Inputs:`` header names, in order: comma-separated names,
    each optionally followed by a remark in parentheses (``kernels (GPU clock), devices``); none when the line
    holds only a remark (a macro that reads no table by name)."""
    names = _header_names(path, _INPUTS_LINE)
    if names is None:
        raise ValueError(f"{path}: no '-- Inputs:' header")
    return names


def view_macros(path: Path) -> list[str]:
    """The macros of ``sql/macros/`` a view file's ``-- Macros:`` header names (none without that line)."""
    return _header_names(path, _MACROS_LINE) or []


def _header_names(path: Path, label: re.Pattern[str]) -> list[str] | None:
    """The names listed on the header line ``label`` matches and its continuation lines; None without one."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if m := label.match(line):
            text = [m.group(1)]
            for more in lines[i + 1 :]:
                cont = _CONTINUATION.match(more)
                if not cont:
                    break
                text.append(cont.group(1))
            joined = " ".join(text)
            while "(" in joined:  # innermost remark first, so nested parentheses go too
                joined = re.sub(r"\([^()]*\)", "", joined)
            if not joined.strip():
                return []
            names = [n.strip().rstrip(".") for n in joined.split(",")]
            bad = [n for n in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)]
            if bad:
                raise ValueError(f"{path}: '{line.split(':')[0]}:' must list names separated by commas, not {bad}")
            return names
    return None


@dataclass(frozen=True)
class Column:
    """One column a view declares in its ``-- Output`` block: ``--   name TYPE [unit]: meaning``."""

    name: str
    type: str  # as DuckDB's DESCRIBE writes it: BIGINT, VARCHAR[], DECIMAL(18,3) ...
    unit: str  # '' when the column has none (ids, names, counts)
    meaning: str


#: ``-- Output`` (``-- Output, one row per ...:``) opens the block; each column line is indented by exactly three
#: spaces, the lines continuing its meaning by more.
_OUTPUT_LINE = re.compile(r"^--\s*Output\b.*:\s*$")
_COLUMN_LINE = re.compile(
    r"^--   (?P<name>[A-Za-z_][A-Za-z0-9_]*)\s+(?P<type>[A-Z][A-Z0-9_]*(?:\([A-Z0-9_, ]+\))?(?:\[\])*)"
    r"(?:\s+(?P<unit>[^:\s][^:]*?))?:\s+(?P<meaning>\S.*)$"
)
_MEANING_LINE = re.compile(r"^--\s{4,}(\S.*)$")


def view_columns(path: Path) -> list[Column]:
    """The columns a view file's ``-- Output`` block declares, in order (tests/test_sql_headers.py checks them
    against DESCRIBE of the view); ValueError when the file has no such block or a line of it does not parse."""
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if _OUTPUT_LINE.match(line)), None)
    if start is None:
        raise ValueError(f"{path}: no '-- Output ...:' block declaring the view's columns")
    columns: list[Column] = []
    for line in lines[start + 1 :]:
        if m := _COLUMN_LINE.match(line):
            columns.append(Column(m["name"], m["type"], m["unit"] or "", m["meaning"]))
        elif columns and (more := _MEANING_LINE.match(line)):
            last = columns[-1]
            columns[-1] = Column(last.name, last.type, last.unit, f"{last.meaning} {more.group(1)}")
        elif line.startswith("--   "):
            raise ValueError(f"{path}: not a column line ('--   name TYPE [unit]: meaning'): {line!r}")
        else:
            break
    if not columns:
        raise ValueError(f"{path}: its '-- Output' block declares no column")
    return columns


def view_order(sql_dir: Path = SQL_DIR) -> list[str]:
    """The views of ``sql_dir`` in an order where each comes after the views its header lists
    (ties by name, so the order is stable); a cycle is an error naming the views in it."""
    files = view_files(sql_dir)
    graph = {name: [i for i in view_inputs(path) if i in files] for name, path in files.items()}
    sorter = graphlib.TopologicalSorter(graph)
    try:
        sorter.prepare()
    except graphlib.CycleError as e:
        raise RuntimeError(f"views whose '-- Inputs:' headers form a cycle: {e.args[1]}") from e
    order: list[str] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready())
        order.extend(ready)
        sorter.done(*ready)
    return order


def needed_views(
    views: list[str], sql_dir: Path = SQL_DIR, existing: set[str] | frozenset[str] = frozenset()
) -> list[str]:
    """``views`` and every view they read, directly or not, in dependency order; the walk stops at the names in
    ``existing`` (a connection's tables and views: what they read is not needed again)."""
    files = view_files(sql_dir)
    need, todo = set(), list(views)
    while todo:
        name = todo.pop()
        if name in files and name not in need and (name in views or name not in existing):
            need.add(name)
            todo += view_inputs(files[name])
    return [v for v in view_order(sql_dir) if v in need]


def shared_views(
    views: list[str], sql_dir: Path = SQL_DIR, existing: set[str] | frozenset[str] = frozenset()
) -> list[str]:
    """Of :func:`needed_views` (``views``, what they read), those that two or more of them read, in dependency order,
    unless the header says ``-- analyze: inline`` (cheaper computed in each reader): what is computed once into a
    table or file rather than inlined into every view that reads it (``nvtx_paths`` under ``kernel_layers``,
    ``layer_summary`` and ``layer_timeline``)."""
    files = view_files(sql_dir)
    need = needed_views(views, sql_dir, existing)
    readers = collections.Counter(i for v in need for i in set(view_inputs(files[v])) if i in files)
    return [v for v in need if readers[v] >= 2 and INLINE not in files[v].read_text()]


def computed_once(
    views: list[str], sql_dir: Path = SQL_DIR, existing: set[str] | frozenset[str] = frozenset(), staged: bool = True
) -> list[str]:
    """Of :func:`needed_views`, in dependency order, those computed once into a table or file rather than inlined
    into the views that read them: :func:`shared_views`, and with ``staged`` each whose header says ``-- analyze:
    staged``, whose joins would otherwise hold DuckDB's memory together with its reader's (``launch_point_layers``
    under ``gpu_op_attribution``: 10M kernels spilled 14.9 GB as one statement, 1 GB as two)."""
    files = view_files(sql_dir)
    shared = set(shared_views(views, sql_dir, existing))
    return [
        v for v in needed_views(views, sql_dir, existing) if v in shared or (staged and STAGED in files[v].read_text())
    ]


def unknown_views(views: list[str] | tuple[str, ...], sql_dir: Path) -> str | None:
    """The message for the names of ``views`` that are no view of ``sql_dir`` (each with the closest view's name,
    as DuckDB's "Did you mean"), or None when all are views."""
    import difflib

    known = sorted(view_files(sql_dir))
    unknown = sorted(set(views) - set(known))
    if not unknown:
        return None
    said = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        said.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return f"no such view(s): {', '.join(said)}; `tracepipe views` lists them"
