"""Each view's ``-- Inputs:`` header is what orders view creation, so it must list exactly what the view
reads: the body's FROM/JOIN names (CTE names excepted), taken from DuckDB's own parse tree."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from pipeline.analyze import _body, view_files, view_inputs, view_order


def _walk(node: object, tables: set[str], ctes: set[str]) -> None:
    if isinstance(node, dict):
        if node.get("type") == "BASE_TABLE" and "table_name" in node:
            tables.add(node["table_name"])
        for entry in node.get("cte_map", {}).get("map", []) if isinstance(node.get("cte_map"), dict) else []:
            ctes.add(entry["key"])
        for value in node.values():
            _walk(value, tables, ctes)
    elif isinstance(node, list):
        for value in node:
            _walk(value, tables, ctes)


def tables_read(sql: str) -> set[str]:
    """Names the statement reads in FROM/JOIN, CTEs excluded (json_serialize_sql's parse, not a regex)."""
    tree = json.loads(duckdb.connect().execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])
    assert not tree["error"], tree
    tables: set[str] = set()
    ctes: set[str] = set()
    _walk(tree["statements"], tables, ctes)
    return tables - ctes


@pytest.mark.parametrize("name", sorted(view_files()))
def test_header_lists_exactly_what_the_view_reads(name: str) -> None:
    path = view_files()[name]
    assert set(view_inputs(path)) == tables_read(_body(path))


def test_tables_read_sees_joins_subqueries_and_skips_ctes() -> None:
    sql = "WITH c AS (SELECT * FROM a) SELECT * FROM c JOIN b USING (x) WHERE x IN (SELECT x FROM d)"
    assert tables_read(sql) == {"a", "b", "d"}


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
