"""``tracepipe run``: normalize and analyze in one process.

The two stages as separate commands each pay an interpreter start and the imports of DuckDB, pyarrow and
numpy (~0.3 CPU-s each): on a small trace that is most of the time.  This runs ``normalize`` and then
``analyze`` in one process, into ``OUT/normalized`` and ``OUT/analysis``, with their own options' defaults except
those it passes on (``--force``, ``--jobs`` to normalize; ``--view``, ``--csv``, ``--device`` to analyze).
"""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.cli_options import DEVICE_HELP, csv_option, device_option, jobs_option, output_options, view_option


@click.command("run")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@output_options(
    "Folder for OUT/normalized (the Parquet tables) and OUT/analysis (one <view>.parquet per view).", Path("build")
)
@click.option("--force", is_flag=True, help="Re-normalize inputs already normalized from the same content.")
@jobs_option
@view_option
@csv_option
@device_option(DEVICE_HELP)
@click.pass_context
def run_command(
    ctx: click.Context,
    inputs: tuple[Path, ...],
    out: Path,
    force: bool,
    quiet: bool,
    jobs: int,
    only: tuple[str, ...],
    with_csv: bool,
    device: str | None,
) -> None:
    """Normalize INPUTS and analyze them, in one process (what `normalize` then `analyze` do).

    A failed input stops the run with normalize's exit code, before anything is analyzed.

    \b
    Examples:
      tracepipe run trace.json.gz --out build      # build/normalized, build/analysis
      tracepipe run sample_traces/ -q
      tracepipe run trace.json.gz --view kernel_name_summary --view step_gpu_idle   # HTA's two breakdowns only
      tracepipe run job/ -j 8 --device rtx3090 --csv    # 8 ranks at once, projected onto an RTX 3090
    """
    from pipeline.analyze.views import unknown_views
    from pipeline.analyze_cli import analyze
    from pipeline.catalog import SQL_DIR
    from pipeline.lean import release_arrow_memory
    from pipeline.normalize_cli import normalize
    from pipeline.outputs import made_folder, refuse_inside_normalized

    # what analyze would refuse after normalizing, refused before: a misspelt view, an --out it cannot write
    if said := unknown_views(only, SQL_DIR):
        raise click.BadParameter(said, param_hint="--view")
    refuse_inside_normalized(out / "analysis")
    made_folder(out)
    ctx.invoke(normalize, inputs=inputs, out=out / "normalized", force=force, quiet=quiet, jobs=jobs)
    release_arrow_memory()  # what normalize's Arrow work left in the pools would stay in RSS through analyze
    ctx.invoke(
        analyze,
        normalized=out / "normalized",
        out=out / "analysis",
        quiet=quiet,
        only=only,
        with_csv=with_csv,
        device=device,
    )
    if not quiet:  # what to fix first, from the findings view just written
        from pipeline.report.findings import print_top

        print_top(out / "analysis")
