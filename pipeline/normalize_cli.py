"""``tracepipe normalize``: trace files to the Parquet tables of ``pipeline.schema`` (registered in pipeline/cli.py;
the work is ``pipeline.normalize.batch``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from pipeline import console
from pipeline.cli_options import DEFAULT_NORMALIZED, jobs_option, output_options
from pipeline.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_WORKER_DIED, BadInputError


@click.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@output_options(
    "Folder of hive-partitioned Parquet: OUT/<table>/trace_id=<id>/part-0.parquet.",
    DEFAULT_NORMALIZED,
    json_help="Print one JSON object per input instead of a summary.",
)
@click.option(
    "--trace-id",
    help="Id for the trace (one input only): letters, digits, . _ - (and ~XX escapes). "
    "Default: <folder>.<file stem>, other characters written as ~XX (UTF-8 bytes).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Re-normalize inputs already normalized from the same content; replace a trace made from another file.",
)
@jobs_option
@click.option(
    "--scheduler",
    metavar="tcp://HOST:PORT",
    help="Run on this Dask distributed scheduler instead (needs tracepipe[dask]; workers must see the same paths).",
)
def normalize(
    inputs: tuple[Path, ...],
    out: Path,
    trace_id: str | None,
    force: bool,
    as_json: bool,
    quiet: bool,
    jobs: int,
    scheduler: str | None,
) -> None:
    """Convert trace files (nsys .sqlite/.nsys-rep, PyTorch chrome trace JSON, ncu CSV) to Parquet.

    INPUTS are files or folders (scanned recursively). The format is read from
    each file's content; .gz is undone on the fly. Every input is committed
    atomically: a bad file is reported, leaves its earlier output untouched,
    and the run goes on with the next one; a killed run leaves each trace old
    or new, never a mix (docs/reliability.md). An input whose trace was made
    from the same content is skipped unless --force; another file under an
    existing trace id is refused unless --force (or give it --trace-id).

    \b
    Examples:
      tracepipe normalize run/nsys.sqlite --out build/normalized
      tracepipe normalize sample_traces/          # every trace under the folder
      tracepipe normalize trace.json.gz --trace-id rank3 --json
      tracepipe normalize job/ --jobs 8          # one rank per file, 8 at a time
      tracepipe normalize job/ --scheduler tcp://10.0.0.5:8786   # on a Dask cluster
    """
    import os

    from pipeline.normalize.batch import TRACE_SUFFIXES, expand_inputs, normalize_many, with_capture_side_files
    from pipeline.normalize.source import max_input_bytes
    from pipeline.outputs import made_folder
    from pipeline.store import check_trace_id

    missing = [p for p in inputs if not p.exists()]
    if missing:
        more = f" (and {len(missing) - 1} more)" if missing[1:] else ""
        console.fail(f"{missing[0]}: no such file or folder{more}")
        sys.exit(EXIT_BAD_INPUT)
    skipped: list[tuple[Path, str]] = []
    files = expand_inputs(inputs, skipped)
    if not files:
        fix = (  # a folder of archives only: say so, with the first one's fix
            f"{skipped[0][0]} is {skipped[0][1]}" + (f" (and {len(skipped) - 1} more)" if skipped[1:] else "")
            if skipped
            else "give a file or a folder holding nsys, PyTorch or ncu traces"
        )
        console.fail(f"no trace files in {', '.join(map(str, inputs))} (looked for {', '.join(TRACE_SUFFIXES)}): {fix}")
        sys.exit(EXIT_BAD_INPUT)
    if trace_id and len(files) != 1:
        raise click.UsageError("--trace-id needs exactly one input file")
    if trace_id is None:  # (a side file finds its traces by the folder name, which --trace-id replaces)
        files = with_capture_side_files(files)
    if scheduler and jobs != 1:
        raise click.UsageError("--jobs and --scheduler exclude each other: the cluster's workers set the parallelism")
    if trace_id is not None:
        check_trace_id(trace_id)  # before anything is written: exit 2 with the rule
    max_input_bytes()  # a bad TRACEPIPE_MAX_INPUT_BYTES fails once, not once per input
    made_folder(out)
    bad: list[BadInputError] = []
    broken: list[Path] = []
    died: list[Path] = []
    results = []
    outcomes = normalize_many(
        files, out, trace_id=trace_id, force=force, jobs=jobs or os.cpu_count() or 1, scheduler=scheduler
    )
    for outcome in console.progress(outcomes, len(files), "normalize", quiet):
        path = outcome.path
        e = outcome.bad_input()
        if e is not None:
            if outcome.internal:  # a bug of ours on this file: reported, and the batch goes on
                broken.append(path)
            elif outcome.died:
                died.append(path)
            else:
                bad.append(e)
            console.fail(str(e))
            if as_json:
                click.echo(json.dumps({"path": str(path), "error": e.reason}))
            continue
        r = outcome.result
        assert r is not None  # an outcome is either an error or a result
        results.append((outcome.index, r))
        for w in r.warnings:
            console.warn(f"{path}: {w}")
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "path": str(r.path),
                        "trace_id": r.trace_id,
                        "format": r.source_format,
                        "skipped": r.skipped,
                        "rows": r.rows,
                        "warnings": r.warnings,
                    }
                )
            )
    if not quiet and not as_json and (results or skipped):  # nothing normalized: the error lines say it all
        # parallel runs finish in any order; the summary shows input order
        _print_normalize_summary([r for _, r in sorted(results, key=lambda ir: ir[0])], out, skipped)
    failed = [e.path for e in bad] + died + broken
    if failed:
        if len(files) > 1:  # one input: its own error line says it all
            console.fail(f"{len(failed)} of {len(files)} inputs failed: " + ", ".join(map(str, failed)))
        sys.exit(EXIT_FAILED if broken else EXIT_WORKER_DIED if died else EXIT_BAD_INPUT)


def _print_normalize_summary(results: list, out: Path, skipped: list[tuple[Path, str]]) -> None:
    from rich.table import Table

    table = Table(title=f"normalized into {out}", title_justify="left")
    for col in ("trace_id", "format", "kernels", "nvtx_ranges", "api_calls", "status"):
        table.add_column(col, justify="right" if col in ("kernels", "nvtx_ranges", "api_calls") else "left")
    # nothing is shortened with '…' (trace ids are what queries filter on) nor cut at the right edge: on a narrow
    # terminal (COLUMNS) every cell folds onto more lines instead
    # (no min_width: rich's layout then cuts the last columns instead of folding)
    for column in table.columns:
        column.overflow = "fold"
    for r in results:
        rows = r.rows
        table.add_row(
            r.trace_id,
            r.source_format,
            str(rows.get("kernels", rows.get("ncu_kernels", ""))),
            str(rows.get("nvtx_ranges", "")),
            str(rows.get("api_calls", "")),
            "up to date" if r.skipped else "written",
        )
    console.out.print(table)
    for path, why in skipped:
        console.out.print(f"skipped {path}: {why}", highlight=False, soft_wrap=True)
