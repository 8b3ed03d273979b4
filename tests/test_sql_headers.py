"""Each view's header is its contract, checked against DuckDB itself:

* ``-- Inputs:`` orders view creation, so it must list exactly what the view reads: the body's FROM/JOIN names
  (CTE names excepted) and the tables read through the macros it calls, taken from DuckDB's own parse tree;
* ``-- Macros:`` names exactly the macros of ``sql/macros/`` the body calls.

The macros' own ``-- Inputs:`` (the tables a macro reads by name) are checked the same way."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest

from pipeline.analyze import _body, macro_files, view_files, view_inputs, view_macros, view_order


@dataclass
class Reads:
    """What a statement reads: base tables by name, CTE names, and the table functions (macros) it calls with
    their arguments that are bare names (a table or CTE handed to a macro)."""

    tables: set[str] = field(default_factory=set)
    ctes: set[str] = field(default_factory=set)
    calls: dict[str, set[str]] = field(default_factory=dict)


def _walk(node: object, reads: Reads) -> None:
    if isinstance(node, dict):
        if node.get("type") == "BASE_TABLE" and "table_name" in node:
            reads.tables.add(node["table_name"])
        if node.get("type") == "TABLE_FUNCTION" and isinstance(node.get("function"), dict):
            fn = node["function"]
            names = reads.calls.setdefault(fn["function_name"], set())
            for arg in fn.get("arguments") or fn.get("children") or []:
                expr = arg.get("expression", arg) if isinstance(arg, dict) else None
                if isinstance(expr, dict) and expr.get("class") == "COLUMN_REF" and len(expr["column_names"]) == 1:
                    names.add(expr["column_names"][0])
        for entry in node.get("cte_map", {}).get("map", []) if isinstance(node.get("cte_map"), dict) else []:
            reads.ctes.add(entry["key"])
        for value in node.values():
            _walk(value, reads)
    elif isinstance(node, list):
        for value in node:
            _walk(value, reads)


def parsed(sql: str) -> Reads:
    """json_serialize_sql's parse of a SELECT statement, walked (no regex)."""
    tree = json.loads(duckdb.connect().execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])
    assert not tree["error"], tree
    reads = Reads()
    _walk(tree["statements"], reads)
    return reads


def tables_read(sql: str) -> set[str]:
    """Names the statement reads in FROM/JOIN, CTEs excluded, and through the macros of sql/macros/ it calls:
    the tables a macro reads by name (its ``-- Inputs:``) and the tables handed to it by name."""
    reads = parsed(sql)
    macros = macro_files()
    tables = set(reads.tables)
    for name, args in reads.calls.items():
        if name in macros:
            tables |= set(view_inputs(macros[name])) | args
    return tables - reads.ctes


def macros_called(sql: str) -> set[str]:
    return set(parsed(sql).calls) & set(macro_files())


def macro_select(path: Path) -> str:
    """The SELECT of a ``CREATE OR REPLACE MACRO name(...) AS TABLE <select>`` file."""
    return re.split(r"\bAS\s+TABLE\b", _body(path), maxsplit=1, flags=re.IGNORECASE)[1]


@pytest.mark.parametrize("name", sorted(view_files()))
def test_header_lists_exactly_what_the_view_reads(name: str) -> None:
    path = view_files()[name]
    assert set(view_inputs(path)) == tables_read(_body(path))


@pytest.mark.parametrize("name", sorted(view_files()))
def test_header_lists_exactly_the_macros_the_view_calls(name: str) -> None:
    path = view_files()[name]
    assert set(view_macros(path)) == macros_called(_body(path))


@pytest.mark.parametrize("name", sorted(macro_files()))
def test_macro_header_lists_exactly_the_tables_it_reads_by_name(name: str) -> None:
    path = macro_files()[name]
    assert re.search(rf"^CREATE OR REPLACE MACRO {name}\(", _body(path), flags=re.MULTILINE)
    assert set(view_inputs(path)) == parsed(macro_select(path)).tables - parsed(macro_select(path)).ctes


def test_tables_read_sees_joins_subqueries_and_skips_ctes() -> None:
    sql = "WITH c AS (SELECT * FROM a) SELECT * FROM c JOIN b USING (x) WHERE x IN (SELECT x FROM d)"
    assert tables_read(sql) == {"a", "b", "d"}


def test_tables_read_sees_through_macros() -> None:
    # gpu_ops reads kernels, memcpy and memset by name; a table handed to a macro by name is read, a CTE is not
    sql = (
        "WITH c AS (SELECT * FROM e) SELECT * FROM gpu_ops(kinds := ['kernel']) "
        "JOIN outermost_intervals(ops, false) USING (x) JOIN outermost_intervals(c, true) USING (x)"
    )
    assert tables_read(sql) == {"kernels", "memcpy", "memset", "ops", "e"}
    assert macros_called(sql) == {"gpu_ops", "outermost_intervals"}


def test_view_order_puts_inputs_first_and_reports_cycles(tmp_path: Path) -> None:
    headers = {"z_base": "kernels", "a_top": "m_mid, kernels", "m_mid": "z_base (remark, with comma)"}
    for name, inputs in headers.items():
        (tmp_path / f"{name}.sql").write_text(f"-- {name}\n-- Inputs:  {inputs}\nSELECT 1\n")
    assert view_order(tmp_path) == ["z_base", "m_mid", "a_top"]
    (tmp_path / "z_base.sql").write_text("-- Inputs:  a_top\nSELECT 1\n")
    with pytest.raises(RuntimeError, match="cycle"):
        view_order(tmp_path)


def test_every_view_comes_after_its_inputs() -> None:
    order = view_order()
    files = view_files()
    for name in order:
        for dep in view_inputs(files[name]):
            if dep in files:
                assert order.index(dep) < order.index(name), (dep, name)
