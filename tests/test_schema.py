"""The schema module and docs/schema.md must describe the same columns."""

from __future__ import annotations

import re

from pipeline.schema import TABLES
from tests.conftest import ROOT


def documented() -> dict[str, set[str]]:
    doc = (ROOT / "docs" / "schema.md").read_text()
    tables: dict[str, set[str]] = {}
    for section in re.split(r"^## ", doc, flags=re.M)[1:]:
        name = section.split()[0]
        if name not in TABLES:  # prose sections (source mappings) document no table
            continue
        cols: set[str] = set()
        for line in section.splitlines():
            if line.startswith("| ") and not line.startswith("| column"):
                cols |= {c.strip() for c in line.split("|")[1].split(",")}
        tables[name] = cols
    return tables


def test_every_table_and_column_is_documented() -> None:
    docs = documented()
    for name, schema in TABLES.items():
        assert name in docs, f"docs/schema.md has no section for {name}"
        assert set(schema.names) == docs[name], name


def test_docs_name_the_schema_version() -> None:
    from pipeline.schema import SCHEMA_VERSION

    assert f"(version {SCHEMA_VERSION})" in (ROOT / "docs" / "schema.md").read_text().splitlines()[0]


def test_table_descriptions_are_the_docs_headings() -> None:
    """`--help`, `.tables` and the API describe each table with the words that head its docs section."""
    from pipeline.schema import DESCRIPTIONS

    doc = (ROOT / "docs" / "schema.md").read_text()
    headings = dict(re.findall(r"^## (\w+) — (.+)$", doc, flags=re.M))
    assert set(DESCRIPTIONS) == set(TABLES)
    assert {name: headings.get(name) for name in TABLES} == DESCRIPTIONS
