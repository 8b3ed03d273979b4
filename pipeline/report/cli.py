"""The ``tracepipe report`` command (registered in pipeline/cli.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pipeline import console
from pipeline.cli_options import output_options

if TYPE_CHECKING:  # the package imports matplotlib: only load it when the command runs
    from rich.console import Console

    from pipeline.report.build import Report

DEFAULT_REPORT = Path("report")


@click.command()
@click.argument("analyzed", type=click.Path(path_type=Path), default=Path("build/analysis"))
@output_options(
    "Folder for report.html (self-contained) and one PNG per figure and trace.",
    DEFAULT_REPORT,
    json_help="Print a JSON summary (files written, top layers per trace).",
)
@click.option(
    "--diff",
    nargs=2,
    metavar="A B",
    default=None,
    help="Add a section comparing run B with run A per layer path (what `tracepipe diff A B --html` shows).",
)
def report(analyzed: Path, out: Path, as_json: bool, quiet: bool, diff: tuple[str, str] | None) -> None:
    """Turn the Parquet of `tracepipe analyze` into report.html, PNG figures and a terminal summary.

    One section per trace: GPU time per layer, the kernels each layer runs (launch shape, threads,
    occupancy, limiter), MACs, the estimated load per SM (heatmap) and a GPU timeline of one iteration
    (the last top-level NVTX range holding other ranges, e.g. `step`). Sections whose view is not in
    ANALYZED say "not available (view X missing)". The HTML embeds its images and fetches nothing.
    A folder of several ranks (trace_meta.rank) gets a ranks section: spread and straggler per layer.
    --diff A B adds a comparison of two runs (see tracepipe diff --help for what A and B may be).

    \b
    Examples:
      tracepipe report build/analysis --out report/
      tracepipe report build/analysis --json | jq '.traces[].top_layers'
      tracepipe report build/analysis --diff before/normalized after/normalized
    """
    from pipeline.report.build import build_report

    rep = build_report(analyzed, out, quiet=quiet or as_json, diff=diff)
    if as_json:
        click.echo(json.dumps(rep.to_json()))
    elif not quiet:
        _print_summary(rep)


#: the terminal summary never exceeds this many lines, whatever the number of traces (details: report.html)
MAX_SUMMARY_LINES = 40
#: lines the summary spends outside the per-trace rows: table title, header, rules, footer notes
_SUMMARY_OVERHEAD = 8


def _print_summary(rep: Report, con: Console | None = None) -> None:
    """One row per trace (its top layer and top kernel), cut to fit MAX_SUMMARY_LINES; the rest is in the HTML."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    # piped output has no width to fit: 120 columns keep one line per trace without cutting names short
    if con is None:
        con = console.out if console.out.is_terminal else Console(width=120)

    rows = MAX_SUMMARY_LINES - _SUMMARY_OVERHEAD
    shown = rep.traces if len(rep.traces) <= rows else rep.traces[: rows - 1]
    tbl = Table(
        title=f"{len(rep.traces)} trace(s): top layer and top kernel each", title_justify="left", box=box.SIMPLE_HEAD
    )
    for col, width in (
        ("trace", 34),
        ("kernels", None),
        ("GPU ms", None),
        ("top layer (share of GPU time)", 30),
        ("top kernel (share)", 36),
    ):
        right = width is None
        tbl.add_column(col, justify="right" if right else "left", no_wrap=True, overflow="ellipsis", max_width=width)
    for t in shown:
        layer = next((r for r in t.top_layers if r["path"] != "(outside ranges)"), None)
        kern = t.top_kernels[0] if t.top_kernels else None
        tbl.add_row(
            t.trace_id,
            f"{t.kernels:,}",
            f"{t.gpu_time_ns / 1e6:,.2f}",
            f"{layer['share_pct']:4.1f}% {layer['path']}" if layer else "—",
            f"{kern['share_pct']:4.1f}% {kern['short_name']}" if kern else "—",
        )
    if len(shown) < len(rep.traces):
        tbl.add_row(f"… {len(rep.traces) - len(shown)} more trace(s) in report.html", "", "", "", "")
    con.print(tbl)
    missing: dict[str, int] = {}
    for t in rep.traces:
        for section, why in t.sections.items():
            if why.startswith("not available"):
                missing[section] = missing.get(section, 0) + 1
    if missing:
        parts = ", ".join(f"{s} in {n}" for s, n in sorted(missing.items()))
        con.print(f"[dim]sections not available (reasons in report.html): {parts}[/]", highlight=False)
    con.print(f"wrote {rep.html} and {len(rep.pngs)} PNG(s)", highlight=False, soft_wrap=True)
