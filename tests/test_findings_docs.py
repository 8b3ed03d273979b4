"""docs/findings.md states every threshold of pipeline/analyze/finding_rules.py with its value, and describes every
rule of sql/findings.sql: the doc cannot drift from the one place the numbers live."""

from __future__ import annotations

import re

from pipeline.analyze import view_files
from pipeline.analyze.finding_rules import THRESHOLDS
from tests.conftest import ROOT

DOC = (ROOT / "docs" / "findings.md").read_text()


def test_every_threshold_is_in_the_doc_with_its_value() -> None:
    section = DOC.split("## Thresholds", 1)[1].split("\n## ", 1)[0]
    rows = {
        m.group(2): (m.group(1), m.group(3)) for m in re.finditer(r"^\| (\w+) \| `(\w+)` \| ([^|]+) \|", section, re.M)
    }
    assert set(rows) == {name for _, name, *_ in THRESHOLDS}
    for rule, name, value, _, _ in THRESHOLDS:
        doc_rule, doc_value = rows[name]
        number = float(re.match(r"[\d,.]+", doc_value.strip()).group(0).replace(",", ""))
        assert (doc_rule, number) == (rule, value), name


def test_every_rule_of_the_view_is_in_the_doc() -> None:
    body = view_files()["findings"].read_text()
    rules = set(re.findall(r"'(\w+)' AS rule", body))
    assert len(rules) == 8 and all(f"| `{r}` |" in DOC for r in rules)
