"""The ``tracepipe diff`` command (registered in pipeline/cli.py); the work is in ``pipeline.report.diff``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from pipeline.cli_options import output_options

DEFAULT_DIFF = Path("build/diff")
FORMATS = ("parquet", "csv", "json")


@click.command()
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@output_options(
    "Folder for layer_diff.<format>, layer_diff.png and (with --html) diff.html.",
    DEFAULT_DIFF,
    formats=FORMATS,
    formats_help="Formats of the per-path table (repeat for several). json: one object per row.",
    json_help="Print the totals and every row as JSON instead of the table.",
)
@click.option("--html", "with_html", is_flag=True, help="Also write diff.html (self-contained, like the report).")
@click.option(
    "--depth",
    type=click.IntRange(min=1),
    default=None,
    help="Roll every path up to its first N levels before comparing: runs that place work at different depths "
    "(eager modules vs the fused kernels of torch.compile) then compare module by module.",
)
def diff(
    a: str,
    b: str,
    out: Path,
    formats: tuple[str, ...],
    with_html: bool,
    as_json: bool,
    quiet: bool,
    depth: int | None,
) -> None:
    """Compare two runs per layer path (and per pass for training traces): B against A.

    A and B are each a normalized folder (`tracepipe normalize --out`), an analysis folder
    (`tracepipe analyze --out`) or trace files / a capture folder (normalized first into a temporary
    store). A folder holding several traces needs one named: FOLDER:TRACE_ID, or FOLDER:SUFFIX for the
    one trace whose id ends in .SUFFIX (`capture:nsys`). Per path: kernels, GPU time, B − A, B / A,
    share, analytic MAC/s; the layers that moved most by |B − A| and by B / A; paths only in A or B.
    The rows are sql/compare/layer_diff.sql over each side's layer_summary.

    \b
    Examples:
      tracepipe diff before/normalized after/normalized
      tracepipe diff build/normalized:h200_resnet18.nsys build/normalized:h200_resnet18.torch_trace
      tracepipe diff sample_traces/h200_resnet18:nsys sample_traces/h200_resnet18:torch_trace --html
      tracepipe diff rtx3090/analysis h200/analysis --format csv --format json -o cmp/
      tracepipe diff eager/capture:nsys compiled/capture:nsys --depth 3      # per decoder layer: what compiling bought
      tracepipe report build/analysis --diff before/normalized after/normalized   # as a report section
    """
    from pipeline.analyze.shell import write_result
    from pipeline.outputs import output_folder, refuse_inside_normalized
    from pipeline.report.build import write_atomic
    from pipeline.report.diff import bar_chart, compare, open_sides, print_summary, section_html, totals
    from pipeline.report.html import Page

    refuse_inside_normalized(out)  # before the comparison's work: a layer_diff.parquet there reads as a table
    with open_sides(a, b) as (side_a, side_b):
        d = compare(side_a, side_b, depth)
    output_folder(out)
    written = []
    table = d.to_arrow()
    for fmt in dict.fromkeys(formats):
        path = out / f"layer_diff.{fmt}"
        write_result(table, path, fmt)
        written.append(path)
    png = bar_chart(side_a, side_b, d)
    written.append(write_atomic(out / "layer_diff.png", png))
    if with_html:
        page = Page("tracepipe diff", f"B against A, per layer path. A: {side_a.label}; B: {side_b.label}.")
        page.sections.append(("diff", "Diff: B against A", section_html(side_a, side_b, d, png)))
        written.append(write_atomic(out / "diff.html", page.render().encode()))
    if as_json:
        t = totals(d)
        click.echo(
            json.dumps(
                {
                    "a": {"spec": a, "trace_id": side_a.trace_id, "kind": side_a.kind},
                    "b": {"spec": b, "trace_id": side_b.trace_id, "kind": side_b.kind},
                    "totals": {**t.__dict__, "ratio": t.ratio},
                    "files": [str(p) for p in written],
                    "rows": d.to_dicts(),
                },
                default=str,
            )
        )
    elif not quiet:
        print_summary(side_a, side_b, d)
        click.echo(f"wrote {', '.join(str(p) for p in written)}")
