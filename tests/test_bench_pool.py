"""``bench_chrome_trees.py --pool``: rounds of earlier outputs pooled by tree name, one results file holding runs
of different tree sets (as bench_chrome_trees_h200_s30.txt does) read run by run."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench_chrome_trees import pool, run_sections

RUN_AB = """trace: /tmp/t.json (100 MB); trees: a=/x/a, b=/x/b
run 1 a        cpu  2.000 s  wall  1.000 s  load 0.1
run 1 b        cpu  3.000 s  wall  1.500 s  load 0.1
run 2 b        cpu  3.300 s  wall  1.650 s  load 0.1
run 2 a        cpu  2.200 s  wall  1.100 s  load 0.1
"""
RUN_CB = """trace: /tmp/t.json (100 MB); trees: c=/x/c, b=/x/b
run 1 c        cpu  9.000 s  wall  9.000 s  load 0.1
run 1 b        cpu  9.000 s  wall  9.000 s  load 0.1
"""


def test_runs_are_read_with_the_trees_of_their_own_run() -> None:
    sections = run_sections("# header\n" + RUN_AB + "summary lines\n" + RUN_CB)
    assert [names for names, _ in sections] == [["a", "b"], ["c", "b"]]
    assert [name for name, _ in sections[0][1]] == ["a", "b", "b", "a"]
    assert sections[1][1][0] == ("c", {"cpu": 9.0, "secs": 9.0})


def test_pool_keeps_the_first_runs_trees_and_names_the_rest(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    one.write_text(RUN_AB + RUN_CB)  # one file, two runs of different trees
    two.write_text(RUN_AB.replace("3.300", "3.900"))
    pool([str(one), str(two)])
    out = capsys.readouterr().out
    assert f"left out: a run of {one} with trees c, b" in out
    # b / a per round: 1.5, 1.5 (file one), 1.5, 1.773 (file two): median ratio +50.0%;
    # median b cpu of 3.0, 3.0, 3.3, 3.9 = 3.15, median a 2.1
    assert "median b        cpu 3.150 s (+50.0% vs a)" in out
    assert "paired b        cpu  median of 4 ratios +50.0% vs a" in out
