"""The ``tracepipe report`` command (registered in pipeline/cli.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pipeline import console
from pipeline.cli_options import output_options
from pipeline.report import EMBEDDED_FIGURES

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
@click.option(
    "--figures",
    default=str(EMBEDDED_FIGURES),
    show_default=True,
    metavar="N|all",
    help="Embed the figures of the N traces with the most GPU time (all: every trace's); the others' figures are "
    "PNG files beside report.html, linked from their sections.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Draw the figures in this many processes (1: this one). Default: one per 6 figures, at most 4 and the "
    "allowed cores.",
)
def report(
    analyzed: Path,
    out: Path,
    as_json: bool,
    quiet: bool,
    diff: tuple[str, str] | None,
    figures: str,
    jobs: int | None,
) -> None:
    """Turn the Parquet of `tracepipe analyze` into report.html, PNG figures and a terminal summary.

    The page and the summary open with the findings (what to fix in which layer, most GPU time at stake first:
    tracepipe findings --help) and the GPU time by pass; long tables show their top rows and fold the rest.
    One section per trace: GPU time per layer, the kernels each layer runs (launch shape, threads,
    occupancy, limiter), MACs, the estimated load per SM (heatmap) and a GPU timeline of one iteration
    (the last top-level NVTX range holding other ranges, e.g. `step`). Sections whose view is not in
    ANALYZED say "not available (view X missing)". The HTML embeds its images and fetches nothing.
    Each job of several ranks (rank_jobs) gets a ranks section: spread and straggler per layer.
    --diff A B adds a comparison of two runs (see tracepipe diff --help for what A and B may be).

    \b
    Examples:
      tracepipe report build/analysis --out report/
      tracepipe report build/analysis --json | jq '.traces[].top_layers'
      tracepipe report build/analysis --diff before/normalized after/normalized
    """
    from pipeline.report.build import build_report

    if figures != "all" and not (figures.isdigit() and int(figures) >= 0):
        raise click.BadParameter(f"{figures!r}: give a number of traces or all", param_hint="--figures")
    rep = build_report(
        analyzed,
        out,
        quiet=quiet or as_json,
        diff=diff,
        figures=None if figures == "all" else int(figures),
        jobs=jobs,
    )
    if as_json:
        click.echo(json.dumps(rep.to_json()))
    elif not quiet:
        _print_summary(rep)


#: the terminal summary never exceeds this many lines, whatever the number of traces (details: report.html)
MAX_SUMMARY_LINES = 40
#: of which the top findings take at most
FINDINGS_LINES = 16


def _print_summary(rep: Report, con: Console | None = None) -> None:
    """The top findings, then one row per trace (its top layer and top kernel), all in MAX_SUMMARY_LINES: cells wrap
    at the console's width (a terminal's, or whole when piped: pipeline.console), never cut; the rest is in the HTML."""
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table

    from pipeline.report.findings import terminal_text

    con = con or console.out
    budget = MAX_SUMMARY_LINES
    if rep.findings is not None and rep.findings.height:
        title = f"Top findings of {rep.findings.height} (every one: tracepipe findings {rep.analysis})"
        text = terminal_text(rep.findings, con.width, FINDINGS_LINES, title)
        con.print(text, end="", highlight=False, markup=False, soft_wrap=True)
        budget -= text.count("\n")

    def table(n: int) -> Table:
        tbl = Table(
            title=f"{len(rep.traces)} trace(s): top layer and top kernel each",
            title_justify="left",
            box=box.SIMPLE_HEAD,
        )
        for col in ("trace", "kernels", "GPU ms", "top layer (share of GPU time)", "top kernel (share)"):
            numeric = col in ("kernels", "GPU ms")
            tbl.add_column(
                col, justify="right" if numeric else "left", overflow="fold", min_width=len(col) if numeric else None
            )
        for t in rep.traces[:n]:
            layer = next((r for r in t.top_layers if r["path"] != "(outside ranges)"), None)
            kern = t.top_kernels[0] if t.top_kernels else None
            tbl.add_row(
                t.trace_id,
                f"{t.kernels:,}",
                f"{t.gpu_time_ns / 1e6:,.2f}",
                f"{layer['share_pct']:4.1f}% {layer['path']}" if layer else "—",
                f"{kern['share_pct']:4.1f}% {kern['short_name']}" if kern else "—",
            )
        if n < len(rep.traces):
            tbl.caption, tbl.caption_justify = f"… {len(rep.traces) - n} more trace(s) in report.html", "left"
        return tbl

    def lines(tbl: Table) -> int:
        buf = io.StringIO()
        Console(file=buf, width=con.width, color_system=None, markup=False).print(tbl)
        return buf.getvalue().count("\n")

    n = min(len(rep.traces), budget)  # a row takes a line at least
    while n > 1 and lines(table(n)) > budget - 2:  # 2: the notes below the table
        n -= 1
    con.print(table(n))
    missing: dict[str, int] = {}
    for t in rep.traces:
        for section, why in t.sections.items():
            if why.startswith("not available"):
                missing[section] = missing.get(section, 0) + 1
    if missing:
        parts = ", ".join(f"{s} in {n}" for s, n in sorted(missing.items()))
        con.print(console.styled(f"sections not available (reasons in report.html): {parts}", "dim"), highlight=False)
    con.print(f"wrote {rep.html} and {len(rep.pngs)} PNG(s)", highlight=False, soft_wrap=True)
