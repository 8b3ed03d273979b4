"""The views of ``sql/``: one file a view, named like the view, whose header comment says what it reads.

Each file opens with ``-- <view>: <what it answers>`` and an ``-- Inputs:`` line naming every table and view its
body reads (tests/test_sql_headers.py checks each against DuckDB's parse tree). That line is the view graph:
:func:`view_order` creates views after their inputs, :func:`needed_views` finds what a view needs, and
``tracepipe views`` (``pipeline.analyze.graph``) draws it. Reading the files needs no DuckDB.
"""

from __future__ import annotations

import graphlib
import re
from pathlib import Path

from pipeline.catalog import SQL_DIR


def view_files(sql_dir: Path = SQL_DIR) -> dict[str, Path]:
    return {p.stem: p for p in sorted(sql_dir.glob("*.sql"))}


#: Header lines that change how `analyze` treats a view: written only when asked for by name; computed into its
#: own result even when only one view reads it (see ``write._views_to_write``).
ON_REQUEST = "-- analyze: on request"
STAGED = "-- analyze: staged"


def default_views(sql_dir: Path = SQL_DIR) -> list[str]:
    """Views `tracepipe analyze` writes unless told otherwise: all but those whose header says
    ``-- analyze: on request`` (views that expand to one row per kernel and SM, say)."""
    return [name for name, path in view_files(sql_dir).items() if ON_REQUEST not in path.read_text()]


def _body(path: Path) -> str:
    """The SELECT of a view file (its header comment and any trailing ';' removed)."""
    return path.read_text().strip().rstrip(";")


#: The header line naming a view's inputs, and the lines that continue it (indented past "-- ").
_INPUTS_LINE = re.compile(r"^--\s*Inputs?:(.*)$")
_CONTINUATION = re.compile(r"^--\s{2,}(\S.*)$")


def view_inputs(path: Path) -> list[str]:
    """The tables and views a view file's ``-- Inputs:`` header names, in order: comma-separated names,
    each optionally followed by a remark in parentheses (``kernels (GPU clock), devices``)."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if m := _INPUTS_LINE.match(line):
            text = [m.group(1)]
            for more in lines[i + 1 :]:
                cont = _CONTINUATION.match(more)
                if not cont:
                    break
                text.append(cont.group(1))
            joined = " ".join(text)
            while "(" in joined:  # innermost remark first, so nested parentheses go too
                joined = re.sub(r"\([^()]*\)", "", joined)
            names = [n.strip().rstrip(".") for n in joined.split(",")]
            bad = [n for n in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)]
            if bad:
                raise ValueError(f"{path}: '-- Inputs:' must list names separated by commas, not {bad}")
            return names
    raise ValueError(f"{path}: no '-- Inputs:' header")


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


def needed_views(views: list[str], sql_dir: Path = SQL_DIR) -> list[str]:
    """``views`` and every view they read, directly or not, in dependency order."""
    files = view_files(sql_dir)
    need, todo = set(), list(views)
    while todo:
        name = todo.pop()
        if name in files and name not in need:
            need.add(name)
            todo += view_inputs(files[name])
    return [v for v in view_order(sql_dir) if v in need]
