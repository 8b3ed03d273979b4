"""The ``tracepipe findings`` command (registered in pipeline/cli.py): what to fix in which layer, ranked."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pipeline import console

FORMATS = ("table", "csv", "json", "markdown")
#: ``-o FILE`` without ``--format``: the format from the extension (Parquet keeps every column's type)
EXTENSIONS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".md": "markdown", ".parquet": "parquet"}


@click.command()
@click.argument("folder", type=click.Path(path_type=Path), default=Path("build/analysis"))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="table (default: the top findings that fit one screen), csv, json (one object per finding, JSON Lines) or "
    "markdown (every finding).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Write every finding to this file (.csv .json .md .parquet).",
)
@click.option("--trace-id", help="Only this trace's findings.")
@click.option(
    "--rule", help="Only this rule's findings (layout_conversion, tail_wave, low_occupancy, launch_bound, ...)."
)
@click.option("--all", "show_all", is_flag=True, help="The table lists every finding, however many screens it takes.")
def findings(
    folder: Path, fmt: str | None, output: Path | None, trace_id: str | None, rule: str | None, show_all: bool
) -> None:
    """What to fix in which layer: the findings of FOLDER, ranked by the GPU time at stake.

    FOLDER is the --out folder of `tracepipe analyze` (its findings.parquet) or of `tracepipe normalize` (the
    findings are computed from it; slower). Each finding is one rule applied to one layer path and kernel:
    layout transforms around convolutions, tail waves, low occupancy with its limiter, launch-bound stretches,
    FP32 GEMMs off the tensor cores, pageable host-to-device copies in a step, a backward much slower than its
    forward, a straggler rank of a job. The table gives the evidence in numbers and a one-line fix; the
    thresholds are in pipeline/analyze/finding_rules.py, the rules in docs/findings.md.

    \b
    Examples:
      tracepipe findings build/analysis                      # the top findings, one screen
      tracepipe findings build/analysis --trace-id h200_resnet18.nsys --all
      tracepipe findings build/analysis --rule launch_bound --format markdown
      tracepipe findings build/analysis -o findings.csv      # every finding, every column
      tracepipe findings build/normalized --format json | jq .fix
    """
    from pipeline.analyze.shell import OutputError, check_new_file, render, write_result
    from pipeline.report.findings import has_gpu_work, load, markdown, screen_lines, terminal_text

    df = load(folder, trace_id, rule)
    if output is not None:
        target = output
        try:
            kind = fmt or EXTENSIONS.get(output.suffix.lower())
            if kind is None or kind == "table":
                raise OutputError(
                    f"cannot tell the format of {output} from its extension: name it .csv, .json, .md or .parquet, "
                    "or give --format csv|json|markdown"
                )
            target = check_new_file(output)
        except OutputError as e:
            console.fail(str(e))
            sys.exit(2)
        if kind == "markdown":
            target.write_text(markdown(df))
        else:
            write_result(df.to_arrow(), target, kind)
        console.err.print(f"wrote {len(df)} finding(s) to {target}", highlight=False, soft_wrap=True)
        return
    if fmt == "markdown":
        sys.stdout.write(markdown(df))
        return
    if fmt in ("csv", "json"):
        sys.stdout.write(render(df.to_arrow(), fmt, max_rows=len(df) + 1))
        return
    title = f"{len(df)} finding(s) in {folder}, most GPU time at stake first"
    lines = None if show_all else screen_lines() - 1
    sys.stdout.write(terminal_text(df, console.out.width, lines, title, has_gpu_work(folder)))
