"""``tracepipe views`` draws the graph the ``-- Inputs:`` headers define, and docs/views.md is its current output.

The edges are checked against DuckDB's own parse tree of each view's body (``tables_read`` of
test_sql_headers.py), not against the header parser that drew them."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from click.testing import CliRunner

from pipeline.analyze.graph import REGENERATE, as_markdown, read_graph
from pipeline.analyze.views import view_body, view_files
from pipeline.cli import main
from tests.conftest import ROOT
from tests.test_sql_headers import tables_read

DOC = ROOT / "docs" / "views.md"


def parse_tree_edges(sql_dir: Path | None = None) -> set[tuple[str, str]]:
    """(input, view) for every name each view's body reads, per DuckDB's parser."""
    files = view_files(sql_dir) if sql_dir else view_files()
    return {(name, view) for view, path in files.items() for name in tables_read(view_body(path))}


def views_output(*args: str) -> str:
    result = CliRunner().invoke(main, ["views", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_docs_views_md_is_the_current_drawing() -> None:
    assert DOC.read_text() == as_markdown(read_graph()), f"docs/views.md is stale: run `{REGENERATE}`"


def test_mermaid_and_dot_edges_are_what_each_view_reads() -> None:
    want = parse_tree_edges()
    mermaid = set(re.findall(r"^  (\w+) --> (\w+)$", views_output("--format", "mermaid"), flags=re.M))
    dot = set(re.findall(r'^  "(\w+)" -> "(\w+)";$', views_output("--format", "dot"), flags=re.M))
    assert mermaid == want
    assert dot == want
    assert ("kernel_layers", "layer_summary") in want and ("nvtx_ranges", "nvtx_paths") in want  # by hand


def test_text_puts_each_view_above_what_it_reads_and_tables_last() -> None:
    lines = views_output().rstrip("\n").split("\n")
    tables = lines[-1].removeprefix("tables: ").split(", ")
    rows = {line.split()[0]: line.split("<-")[1].strip().split(", ") for line in lines[:-2]}
    edges = parse_tree_edges()
    assert set(rows) == set(view_files())
    assert set(tables) == {i for i, _ in edges} - set(rows)
    assert {(i, v) for v, inputs in rows.items() for i in inputs} == edges
    order = list(rows)
    for i, v in edges:
        if i in rows:
            assert order.index(v) < order.index(i), (v, "is drawn below", i)
    assert "kernels" in tables and "kernel_layers" not in tables


def test_a_new_view_makes_the_doc_stale(tmp_path: Path) -> None:
    """So the staleness test can fail: one more view file changes the drawing and its line list."""
    sql = tmp_path / "sql"
    shutil.copytree(ROOT / "sql", sql)
    (sql / "kernel_count.sql").write_text(
        "-- kernel_count: how many kernels each trace has.\n-- Inputs:  kernels\n"
        "SELECT trace_id, count(*) AS kernels FROM kernels GROUP BY 1\n"
    )
    doc = as_markdown(read_graph(sql), sql)
    assert doc != DOC.read_text()
    assert "  kernels --> kernel_count" in doc
    assert "- **`kernel_count`** ← `kernels`: how many kernels each trace has." in doc
