"""docs/findings.md states every threshold of pipeline/analyze/finding_rules.py with its value, and describes every
findings view of sql/: the doc cannot drift from the one place the numbers live."""

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


def test_every_findings_view_is_in_the_doc() -> None:
    views = {v for v in view_files() if v.startswith("findings")}
    assert len(views) == 9 and all(f"`{v}`" in DOC for v in views)
