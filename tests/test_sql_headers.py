"""Each view's header is its contract, checked against DuckDB itself:

* ``-- Inputs:`` orders view creation, so it must list exactly what the view reads: the body's FROM/JOIN names
  (CTE names excepted) and the tables read through the macros it calls, taken from DuckDB's own parse tree;
* ``-- Macros:`` names exactly the macros of ``sql/macros/`` the body calls;
* ``-- Output`` declares every column the view returns, in order, with its type (DESCRIBE of the view).

The macros' own ``-- Inputs:`` (the tables a macro reads by name) are checked the same way."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest

from pipeline.analyze import (
    connect,
    macro_files,
    view_body,
    view_columns,
    view_files,
    view_inputs,
    view_macros,
    view_order,
)
from pipeline.catalog import SQL_DIR
from tests.golden import write

COMPARE = {p.stem: p for p in sorted((SQL_DIR / "compare").glob("*.sql"))}


@dataclass
class Reads:
    """What a statement reads: base tables by name, CTE names, and the functions (macros) it calls, a table
    function with its arguments that are bare names (a table or CTE handed to a macro)."""

    tables: set[str] = field(default_factory=set)
    ctes: set[str] = field(default_factory=set)
    calls: dict[str, set[str]] = field(default_factory=dict)


def _walk(node: object, reads: Reads) -> None:
    if isinstance(node, dict):
        if node.get("type") == "BASE_TABLE" and "table_name" in node:
            reads.tables.add(node["table_name"])
        if node.get("class") == "FUNCTION" and "function_name" in node:  # a scalar call: a scalar macro's
            reads.calls.setdefault(node["function_name"], set())
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
    """The SELECT of a ``CREATE OR REPLACE MACRO name(...) AS TABLE <select>`` file; of a scalar macro's
    (``... AS <expression>``), ``SELECT <expression>``."""
    body = view_body(path)
    if len(parts := re.split(r"\bAS\s+TABLE\b", body, maxsplit=1, flags=re.IGNORECASE)) == 2:
        return parts[1]
    return "SELECT " + re.split(r"\)\s+AS\s+", body, maxsplit=1, flags=re.IGNORECASE)[1]


@pytest.mark.parametrize("name", sorted(view_files()))
def test_header_lists_exactly_what_the_view_reads(name: str) -> None:
    path = view_files()[name]
    assert set(view_inputs(path)) == tables_read(view_body(path))


@pytest.mark.parametrize("name", sorted(view_files()))
def test_header_lists_exactly_the_macros_the_view_calls(name: str) -> None:
    path = view_files()[name]
    assert set(view_macros(path)) == macros_called(view_body(path))


@pytest.mark.parametrize("name", sorted(macro_files()))
def test_macro_header_lists_exactly_the_tables_it_reads_by_name(name: str) -> None:
    path = macro_files()[name]
    assert re.search(rf"^CREATE OR REPLACE MACRO {name}\(", view_body(path), flags=re.MULTILINE)
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


# ------------------------------------------------------------------------------ output columns against DESCRIBE


@pytest.fixture(scope="module")
def described(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, str]]]:
    """(column, type) of every view and compare view, as DESCRIBE gives them over a trace of no rows."""
    folder = write(tmp_path_factory.mktemp("empty"), "empty.nsys")
    con = connect(folder)
    out = {name: con.execute(f"DESCRIBE {name}").fetchall() for name in view_files()}
    con.execute(f"CREATE TEMP TABLE diff_side AS {view_body(COMPARE['layer_diff_side'])}")
    con.execute("CREATE TEMP TABLE diff_a AS SELECT * FROM diff_side")
    con.execute("CREATE TEMP TABLE diff_b AS SELECT * FROM diff_side")
    for name, path in COMPARE.items():
        out[f"compare/{name}"] = con.execute(f"DESCRIBE {view_body(path).replace('?', '2')}").fetchall()
    return {name: [(c[0], c[1]) for c in cols] for name, cols in out.items()}


def _declared(path: Path) -> list[tuple[str, str]]:
    return [(c.name, c.type) for c in view_columns(path)]


def _differences(declared: list[tuple[str, str]], actual: list[tuple[str, str]]) -> list[str]:
    """What is wrong with a declaration, in words: missing, extra, mistyped columns, or another order."""
    have, want = dict(declared), dict(actual)
    out = [f"missing: {c} {t}" for c, t in actual if c not in have]
    out += [f"extra (the view has no such column): {c}" for c in have if c not in want]
    out += [f"{c} declared {have[c]}, the view gives {t}" for c, t in actual if c in have and have[c] != t]
    if not out and declared != actual:
        out.append(f"order: the view gives {[c for c, _ in actual]}")
    return out


@pytest.mark.parametrize("name", sorted(view_files()))
def test_output_declares_every_column_with_its_type(name: str, described: dict) -> None:
    assert _differences(_declared(view_files()[name]), described[name]) == []


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_compare_output_declares_every_column_with_its_type(name: str, described: dict) -> None:
    assert _differences(_declared(COMPARE[name]), described[f"compare/{name}"]) == []


def test_no_view_column_changes_type_in_its_parquet_file(described: dict) -> None:
    # Parquet has no 128-bit integer: DuckDB writes HUGEINT as DOUBLE, so the column read from analyze's file had
    # another type than the same view in `tracepipe sql` over the normalized folder (layer_macs.kernels, a sum of
    # counts). Only kernel_geometry's thread and warp products stay HUGEINT, past BIGINT for the largest grids: its
    # header says they are DOUBLE in the file.
    wide = {(v, c) for v, cols in described.items() for c, t in cols if t in ("HUGEINT", "UHUGEINT")}
    assert wide == {("kernel_geometry", "total_threads"), ("kernel_geometry", "total_warps")}


def test_a_wrong_declaration_is_named(tmp_path: Path) -> None:
    view = tmp_path / "v.sql"
    view.write_text(
        "-- v: a view.\n-- Inputs:  t\n-- Output, one row per x:\n"
        "--   a          BIGINT ns: the first\n"
        "--              and more of its meaning\n"
        "--   b          VARCHAR: the second\n"
        "--   c          DOUBLE %: not in the view\n"
        "-- Rule: none.\nSELECT 1\n"
    )
    columns = view_columns(view)
    assert [(c.name, c.type, c.unit) for c in columns] == [
        ("a", "BIGINT", "ns"),
        ("b", "VARCHAR", ""),
        ("c", "DOUBLE", "%"),
    ]
    assert columns[0].meaning == "the first and more of its meaning"
    assert _differences(_declared(view), [("a", "INTEGER"), ("b", "VARCHAR"), ("d", "BIGINT")]) == [
        "missing: d BIGINT",
        "extra (the view has no such column): c",
        "a declared BIGINT, the view gives INTEGER",
    ]
    assert _differences([("b", "VARCHAR"), ("a", "BIGINT")], [("a", "BIGINT"), ("b", "VARCHAR")]) == [
        "order: the view gives ['a', 'b']"
    ]
