"""The view graph, drawn from the ``-- Inputs:`` header of each ``sql/*.sql`` (``tracepipe views``, docs/views.md).

The headers are what orders view creation and what tests/test_sql_headers.py checks against DuckDB's parse tree,
so this drawing is the graph ``analyze`` runs, not a picture of it. Tables (normalized, or registered from
Python) are what no view defines: the bottom of the graph. Reading it needs no DuckDB.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.analyze.views import (
    INLINE,
    ON_REQUEST,
    STAGED,
    macro_files,
    view_files,
    view_inputs,
    view_macros,
    view_order,
)
from pipeline.catalog import SQL_DIR, is_public, table_descriptions, view_description

FORMATS = ("text", "dot", "mermaid", "markdown")

#: docs/views.md is this command's markdown output; tests/test_views_doc.py fails when it is stale.
REGENERATE = "tracepipe views --format markdown > docs/views.md"


@dataclass(frozen=True)
class ViewGraph:
    """``views``: each view with the tables and views it reads (header order), the views in creation order
    (each after its inputs); ``tables``: the inputs no view defines, by name; ``notes``: view -> what it is
    (private) and how ``analyze`` treats it when its header says so (on request, staged, inline); ``macros``:
    each table macro of ``sql/macros/`` with the views that call it."""

    views: dict[str, list[str]]
    tables: list[str]
    notes: dict[str, str]
    macros: dict[str, list[str]]


def read_graph(sql_dir: Path = SQL_DIR) -> ViewGraph:
    """The graph of the views in ``sql_dir``, from their headers."""
    files = view_files(sql_dir)
    views = {name: view_inputs(files[name]) for name in view_order(sql_dir)}
    tables = sorted({i for inputs in views.values() for i in inputs if i not in views})
    notes = {}
    for name, path in files.items():
        text = path.read_text()
        flags = [] if is_public(name) else ["private"]
        flags += [
            label
            for line, label in ((ON_REQUEST, "on request"), (STAGED, "staged"), (INLINE, "inline"))
            if line in text
        ]
        if flags:
            notes[name] = ", ".join(flags)
    macros = {m: [v for v in views if m in view_macros(files[v])] for m in macro_files(sql_dir)}
    return ViewGraph(views, tables, notes, macros)


def top_first(graph: ViewGraph) -> list[str]:
    """The views from the top of the graph down: each before every view it reads."""
    return list(reversed(graph.views))


def as_text(graph: ViewGraph) -> str:
    """One line per view, top first, with what it reads; the tables at the bottom."""
    width = max(map(len, graph.views))
    lines = [f"{name:<{width}}  <- {', '.join(graph.views[name])}" for name in top_first(graph)]
    return "\n".join([*lines, "", "tables: " + ", ".join(graph.tables)]) + "\n"


def as_dot(graph: ViewGraph) -> str:
    """Graphviz: an edge from each input to the view reading it, drawn bottom to top, tables on one rank."""
    lines = ["digraph views {", "  rankdir=BT;", '  node [shape=box, fontname="Helvetica"];']
    lines.append("  { rank=same; " + " ".join(f'"{t}" [shape=cylinder];' for t in graph.tables) + " }")
    lines += [f'  "{v}" [style=dashed];' for v in graph.views if "on request" in graph.notes.get(v, "")]
    lines += [f'  "{v}" [color=grey50];' for v in graph.views if "private" in graph.notes.get(v, "")]
    lines += [f'  "{i}" -> "{v}";' for v, inputs in graph.views.items() for i in inputs]
    return "\n".join([*lines, "}"]) + "\n"


def as_mermaid(graph: ViewGraph) -> str:
    """A Mermaid flowchart (GitHub renders it): tables as cylinders at the bottom, arrows from input to reader,
    views written only on request dashed, private ones (stages of another view) grey."""
    lines = ["flowchart BT"]
    lines += [f"  {t}[({t})]" for t in graph.tables]
    lines += [f"  {v}[{v}]" for v in graph.views]
    lines += [f"  {i} --> {v}" for v, inputs in graph.views.items() for i in inputs]
    lines.append("  classDef table fill:#eef3fb,stroke:#5b7bb4")
    lines.append("  classDef onRequest stroke-dasharray: 4 3")
    lines.append(f"  class {','.join(graph.tables)} table")
    lines.append("  classDef private fill:#eeeeee,stroke:#999999")
    on_request = [v for v in graph.views if "on request" in graph.notes.get(v, "")]
    if on_request:
        lines.append(f"  class {','.join(on_request)} onRequest")
    private = [v for v in graph.views if "private" in graph.notes.get(v, "")]
    if private:
        lines.append(f"  class {','.join(private)} private")
    return "\n".join(lines) + "\n"


def as_markdown(graph: ViewGraph, sql_dir: Path = SQL_DIR) -> str:
    """docs/views.md: the Mermaid drawing, then one line per view (the first sentence of its header) and per
    table (its description: docs/schema.md, or the docstring of the Python that makes it)."""
    files = view_files(sql_dir)
    described = table_descriptions()
    readers = {t: sorted(v for v, inputs in graph.views.items() if t in inputs) for t in graph.tables}
    out = [
        "# The views and what they read",
        "",
        f"Generated by `{REGENERATE}` from the `-- Inputs:` header of each `sql/*.sql`",
        "(the line that orders view creation, checked against DuckDB's parse tree by `tests/test_sql_headers.py`);",
        "`tests/test_views_doc.py` fails when this file is stale. Arrows run from what a view reads to the view;",
        "tables are at the bottom, views written only on request (`tracepipe analyze --view NAME`) dashed, private",
        "views (`_name`: a stage of another view, with a golden test of its own; no user's entry point) grey.",
        "`tracepipe views` prints the same graph as text, `--format dot` for Graphviz. What each view answers, in",
        "words, and the rules behind the attribution: `docs/analyze.md`.",
        "",
        "```mermaid",
        as_mermaid(graph).rstrip(),
        "```",
        "",
        "## Views",
        "",
        "Top of the graph first; each with the tables and views it reads and the first sentence of its header.",
        "",
    ]
    for name in top_first(graph):
        note = f" *({graph.notes[name]})*" if name in graph.notes else ""
        reads = ", ".join(f"`{i}`" for i in graph.views[name])
        out.append(f"- **`{name}`**{note} ← {reads}: {view_description(files[name])}.")
    out += [
        "",
        "## Macros",
        "",
        "The macros of `sql/macros/`, created before the views: each idiom the views share (the interval joins, the",
        "GPU operations of every kind, a path folded over steps) written once, with its rule in its header and a",
        "golden table of its own (`tests/test_macros_golden.py`).",
        "",
    ]
    for macro, path in macro_files(sql_dir).items():
        users = ", ".join(f"`{v}`" for v in graph.macros.get(macro, []))
        out.append(f"- **`{macro}`** (called by {users}): {view_description(path)}.")
    out += ["", "## Tables", "", "What the views read and no view defines; the columns are in `docs/schema.md`.", ""]
    for table in graph.tables:
        what = described.get(table, "")
        out.append(f"- **`{table}`**{': ' + what if what else ''} (read by {', '.join(readers[table])})")
    return "\n".join(out) + "\n"


def draw(graph: ViewGraph, fmt: str) -> str:
    """The graph in one of :data:`FORMATS`."""
    if fmt == "dot":
        return as_dot(graph)
    if fmt == "mermaid":
        return as_mermaid(graph)
    if fmt == "markdown":
        return as_markdown(graph)
    return as_text(graph)
