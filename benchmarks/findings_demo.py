"""The figures docs/findings.md quotes: each rule's top finding on the committed samples, and the demo report's size.

    make demo && python benchmarks/findings_demo.py build/analysis report/report.html

Prints the command, commit and machine, then per rule the finding with the most GPU time at stake among the
committed samples (trace, path, kernel, at stake, evidence), then report.html's bytes, table rows, folded
tables and embedded figures. The result is committed as benchmarks/results/findings_demo.txt.
"""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from pathlib import Path

import polars as pl

from pipeline.report.findings import RULE_TITLES

#: the committed sample each rule's figures are checked on (tests/test_findings_samples.py)
CHECKED_ON = {
    "layout_conversion": "h200_resnet18.nsys",
    "tail_wave": "h200_resnet18.nsys",
    "launch_bound": "h200_resnet18.nsys",
    "fp32_no_tensor_cores": "h200_transformer.nsys",
    "low_occupancy": "h100_ddp_2rank.rank1",
    "pageable_h2d_copy": "h100_ddp_2rank.rank1",
    "slow_backward": "h100_ddp_2rank.rank0",
    "straggler_rank": "h100_ddp_2rank.rank1",
}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    analysis, report = Path(argv[0]), Path(argv[1])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    status = ["git", "status", "--porcelain", "--untracked-files=no"]
    dirty = subprocess.run(status, capture_output=True, text=True).stdout.strip()
    print(f"# command: python benchmarks/findings_demo.py {analysis} {report}   (after make demo)")
    print(f"# commit: {commit}{' (with uncommitted changes)' if dirty else ''}")
    print(f"# machine: {platform.node()}, {platform.machine()}, Python {platform.python_version()}")
    found = pl.read_parquet(analysis / "findings.parquet")
    print(f"\nfindings: {found.height} over {found['trace_id'].n_unique()} traces")
    for rule in RULE_TITLES:
        rows = found.filter(pl.col("rule") == rule).sort("at_stake_ns", descending=True)
        if rows.height == 0:
            print(f"\n{rule}: none")
            continue
        print(f"\n{rule}: {rows.height} finding(s); the most at stake, then the most on {CHECKED_ON[rule]}:")
        mine = rows.filter(pl.col("trace_id") == CHECKED_ON[rule])
        for r in [rows.row(0, named=True), *mine.head(1).iter_rows(named=True)]:
            print(f"  {r['trace_id']} | {r['path']} | {r['kernel']} | at stake {r['at_stake_ns']:,} ns")
            print(f"    {r['evidence']}")
    html = report.read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]*)"', html)
    print(f"\n{report}: {report.stat().st_size:,} bytes, {html.count('<tr')} table rows, ")
    print(f"  {html.count('<details>')} folded tables, {len(images)} figures ({sum(map(len, images)):,} bytes base64)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
