"""The ``tracepipe report`` command (registered in pipeline/cli.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pipeline import console

if TYPE_CHECKING:  # the package imports matplotlib: only load it when the command runs
    from pipeline.report.build import Report

DEFAULT_REPORT = Path("report")


@click.command()
@click.argument("analyzed", type=click.Path(path_type=Path), default=Path("build/analysis"))
@click.option(
    "--out",
    "-o",
    type=click.Path(path_type=Path),
    default=DEFAULT_REPORT,
    show_default=True,
    help="Folder for report.html (self-contained) and one PNG per figure and trace.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary (files written, top layers per trace).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, no summary; errors still go to stderr.")
def report(analyzed: Path, out: Path, as_json: bool, quiet: bool) -> None:
    """Turn the Parquet of `tracepipe analyze` into report.html, PNG figures and a terminal summary.

    One section per trace: GPU time per layer, the kernels each layer runs (launch shape, threads,
    occupancy, limiter), MACs, the estimated load per SM (heatmap) and a GPU timeline of one iteration
    (the last top-level NVTX range holding other ranges, e.g. `step`). Sections whose view is not in
    ANALYZED say "not available (view X missing)". The HTML embeds its images and fetches nothing.

    \b
    Examples:
      tracepipe report build/analysis --out report/
      tracepipe report build/analysis --json | jq '.traces[].top_layers'
    """
    from pipeline.report.build import build_report

    rep = build_report(analyzed, out, quiet=quiet or as_json)
    if as_json:
        click.echo(json.dumps(rep.to_json()))
    elif not quiet:
        _print_summary(rep)


def _print_summary(rep: Report) -> None:
    from rich.table import Table

    for t in rep.traces:
        console.out.print(
            f"\n[bold]{t.trace_id}[/]: {t.kernels:,} kernels, {t.gpu_time_ns / 1e3:,.1f} µs GPU time", highlight=False
        )
        layers = Table(title="top layers (innermost range path)", title_justify="left")
        for col, right in (("path", False), ("kernels", True), ("GPU µs", True), ("share %", True)):
            layers.add_column(col, justify="right" if right else "left")
        for r in t.top_layers:
            layers.add_row(r["path"], f"{r['kernels']:,}", f"{r['gpu_time_ns'] / 1e3:,.1f}", f"{r['share_pct']:.1f}")
        kernels = Table(title="top kernels", title_justify="left")
        for col, right in (("kernel", False), ("launches", True), ("GPU µs", True), ("share %", True)):
            kernels.add_column(col, justify="right" if right else "left")
        for r in t.top_kernels:
            kernels.add_row(
                r["short_name"], f"{r['launches']:,}", f"{r['gpu_time_ns'] / 1e3:,.1f}", f"{r['share_pct']:.1f}"
            )
        console.out.print(layers)
        console.out.print(kernels)
        missing = {k: v for k, v in t.sections.items() if v.startswith("not available")}
        for section, why in missing.items():
            console.out.print(f"[dim]{section}: {why}[/]", highlight=False)
    console.out.print(f"\nwrote {rep.html} and {len(rep.pngs)} PNG(s)", highlight=False)
