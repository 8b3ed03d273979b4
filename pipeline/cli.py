"""``tracepipe``: capture -> normalize -> analyze -> report, one subcommand per stage.

Exit codes: 0 success, 1 a failure of the tool itself, 2 bad input (the message
names the file and what was wrong with it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from pipeline import __version__, console
from pipeline.analyze.devices import DEVICE_PRESETS
from pipeline.cli_options import DEVICE_HELP, csv_option, device_option, jobs_option, output_options, view_option
from pipeline.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_WORKER_DIED,
    BadInputError,
    SettingError,
    os_error_reason,
)

DEFAULT_NORMALIZED = Path("build/normalized")
#: Files a folder scan picks up; anything else in a capture folder (scripts, manifests) is not a trace.
TRACE_SUFFIXES = (".sqlite", ".sqlite.gz", ".nsys-rep", ".qdrep", ".json", ".json.gz", ".csv", ".csv.gz")
NOT_TRACES = ("manifest.json", "layers.json")

EPILOG = """\b
Exit codes: 0 ok, 1 tool failure (a bug), 2 bad input, setting, space or permission (file and fix
are printed), 3 a --jobs worker was killed (its input failed, the others were done).
Docs: README.md (quick start), docs/schema.md (every column and its unit)."""


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracepipe")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Which GPU kernels each layer of a PyTorch model launches, and how they land on the SMs.

    \b
    Typical session:
      tracepipe normalize sample_traces/ --out build/normalized
      tracepipe analyze build/normalized --out build/analysis
      tracepipe sql build/normalized "SELECT layer, kernels, gpu_time_ns FROM layer_summary"
      tracepipe report build/analysis --out report/
    """
    from pipeline import lean

    global _BATCH_PROCESS
    if _OWN_PROCESS and ctx.invoked_subcommand in lean.BATCH_COMMANDS:
        lean.batch_gc()
        _BATCH_PROCESS = True


#: True in a process ``run`` started (the ``tracepipe`` script, ``python -m pipeline``), False where a caller
#: (a test, a notebook) invokes ``main`` inside its own process, whose settings stay its own.
_OWN_PROCESS = False
#: True once ``main`` runs a batch command (:data:`pipeline.lean.BATCH_COMMANDS`) in a process ``run`` started:
#: that process ends without the interpreter's teardown (:func:`pipeline.lean.exit_without_teardown`).
_BATCH_PROCESS = False


class CatalogCommand(click.Command):
    """A command whose --help ends with the tables and views it offers, each described by the line that
    defines it (sql/ headers, schema.py): generated when --help runs, so it cannot drift from the code."""

    def __init__(self, *args: Any, listing: str = "all", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.listing = listing

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from pipeline.catalog import table_descriptions, view_descriptions

        super().format_help_text(ctx, formatter)
        if self.listing == "all":
            with formatter.section("Tables (docs/schema.md)"):
                formatter.write_dl(sorted(table_descriptions().items()))
        with formatter.section("Views (sql/<view>.sql: header comment lists columns and units)"):
            formatter.write_dl(sorted(view_descriptions().items()))


def expand_inputs(inputs: tuple[Path, ...], skipped: list[tuple[Path, str]] | None = None) -> list[Path]:
    """Files as given, folders scanned for traces; a ``.nsys-rep`` beside its ``.sqlite`` is skipped
    (and listed in ``skipped`` with the reason, when given)."""
    files: list[Path] = []
    for p in inputs:
        if not p.is_dir():
            files.append(p)
            continue
        found = sorted(
            f
            for f in p.rglob("*")
            if f.is_file()
            and f.name.lower().endswith(TRACE_SUFFIXES)
            and f.name not in NOT_TRACES
            and not any(part.startswith(".") for part in f.relative_to(p).parts)
        )
        for f in found:
            if f.suffix in (".nsys-rep", ".qdrep") and _has_sqlite_beside(f):
                if skipped is not None:
                    skipped.append((f, "its .sqlite export beside it is read instead"))
                continue
            files.append(f)
    return files


def _has_sqlite_beside(rep: Path) -> bool:
    """The export of a report sits next to it; normalizing both would give one trace twice."""
    return any(rep.with_name(rep.stem + ext).is_file() for ext in (".sqlite", ".sqlite.gz"))


@main.command()
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

    from pipeline.normalize.batch import normalize_many
    from pipeline.normalize.source import max_input_bytes
    from pipeline.store import check_trace_id

    missing = [p for p in inputs if not p.exists()]
    if missing:
        more = f" (and {len(missing) - 1} more)" if missing[1:] else ""
        console.fail(f"{missing[0]}: no such file or folder{more}")
        sys.exit(EXIT_BAD_INPUT)
    skipped: list[tuple[Path, str]] = []
    files = expand_inputs(inputs, skipped)
    if not files:
        console.fail(
            f"no trace files in {', '.join(map(str, inputs))} (looked for {', '.join(TRACE_SUFFIXES)}): "
            "give a file or a folder holding nsys, PyTorch or ncu traces"
        )
        sys.exit(EXIT_BAD_INPUT)
    if trace_id and len(files) != 1:
        raise click.UsageError("--trace-id needs exactly one input file")
    if scheduler and jobs != 1:
        raise click.UsageError("--jobs and --scheduler exclude each other: the cluster's workers set the parallelism")
    if trace_id is not None:
        check_trace_id(trace_id)  # before anything is written: exit 2 with the rule
    max_input_bytes()  # a bad TRACEPIPE_MAX_INPUT_BYTES fails once, not once per input
    out.mkdir(parents=True, exist_ok=True)
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
    # trace ids are what queries filter on: never shortened with '…', folded onto more lines when too wide
    table.columns[0].overflow = "fold"
    longest = max((len(r.trace_id) for r in results), default=8)
    table.columns[0].min_width = min(longest, console.out.width // 3)
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


DEFAULT_ANALYSIS = Path("build/analysis")


@main.command(cls=CatalogCommand, listing="views")
@click.argument("normalized", type=click.Path(path_type=Path), default=DEFAULT_NORMALIZED)
@output_options(
    "Folder for one <view>.parquet (and <view>.csv with --csv) per view of sql/.",
    DEFAULT_ANALYSIS,
    formats=("parquet", "csv"),
    formats_help="Output formats (repeat for several).",
    json_help="Print {view: rows} as JSON.",
)
@csv_option
@view_option
@device_option(DEVICE_HELP)
@click.option(
    "--incremental",
    is_flag=True,
    help="Recompute only the captures whose traces were (re-)normalized since the last --incremental run into "
    "OUT; the views that mix captures (rank spread, stragglers, ncu matching) are recomputed whole.",
)
def analyze(
    normalized: Path,
    out: Path,
    formats: tuple[str, ...],
    with_csv: bool,
    only: tuple[str, ...],
    as_json: bool,
    quiet: bool,
    device: str | None,
    incremental: bool,
) -> None:
    """Run every view in sql/ over NORMALIZED and write each as Parquet (CSV on request).

    Each file is renamed into place only when complete; a failed run leaves earlier outputs intact.

    \b
    Examples:
      tracepipe analyze build/normalized --out build/analysis
      tracepipe analyze build/normalized --view layer_summary --csv    # also layer_summary.csv
      tracepipe analyze build/normalized --view kernel_sm_load        # a view written only on request
      duckdb -c "SELECT * FROM 'build/analysis/layer_summary.parquet'"
    """
    from pipeline import catalog
    from pipeline.analyze import analysis_warnings, connect, create_views, default_views, view_files, write_views

    sql_dir = catalog.SQL_DIR
    if not view_files(sql_dir):
        console.fail(f"no views in {sql_dir}: this tracepipe installation lacks its sql/ files (reinstall it)")
        sys.exit(EXIT_FAILED)
    formats = tuple(dict.fromkeys([*formats, *(["csv"] if with_csv else [])]))
    views = list(only) or default_views(sql_dir)
    unknown = set(views) - set(view_files(sql_dir))
    if unknown:
        raise click.BadParameter(f"no such view(s): {', '.join(sorted(unknown))}", param_hint="--view")
    from pipeline.analyze import incremental as inc

    if device is not None and not as_json:
        part = DEVICE_PRESETS[device]
        console.out.print(
            f"PROJECTION: every traced device replaced by {part[0]} (sm_{part[1][0]}{part[1][1]}, {part[2]} SMs); "
            "occupancy, waves and SM views are what these launches would give there, not a measurement"
        )
    ticks = console.progress(iter(views), len(views), "analyze", quiet)
    next(ticks, None)  # the bar shows 0 of N until the first view is written
    tick = lambda _view: next(ticks, None)  # noqa: E731
    if incremental:
        con, outcome = inc.analyze_incremental(normalized, out, views, formats, device, sql_dir, done=tick)
        written = outcome.rows
    else:
        inc.forget(out)  # an incremental run's state no longer describes these outputs
        con = connect(normalized, sql_dir, views=[], device=device)  # write_views creates each view as it goes
        written = write_views(con, out, views, formats, done=tick, sql_dir=sql_dir)
    rows = {view: written[view] for view in views}
    if not quiet:
        create_views(con, sql_dir, only=["analysis_warnings"], keep_existing=True)
        for line in analysis_warnings(con):
            console.warn(line)
    if incremental and not as_json and not quiet:
        how = f"full run: {outcome.reason}" if outcome.full else "the other captures' rows kept"
        console.out.print(f"incremental: recomputed {len(outcome.recomputed)} of {outcome.traces} traces ({how})")
    if incremental and as_json:
        rows = {**rows, "recomputed_traces": outcome.recomputed, "traces": outcome.traces}
    if as_json:
        click.echo(json.dumps({"projected_device": device, **rows} if device else rows))
    elif not quiet:
        console.out.print(f"wrote {len(views)} views to {out}: " + ", ".join(f"{v} ({n})" for v, n in rows.items()))


SQL_FORMATS = ("table", "csv", "json", "markdown", "line", "parquet")


@main.command(cls=CatalogCommand)
@click.argument("normalized", type=click.Path(path_type=Path))
@click.argument("query", required=False)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(SQL_FORMATS),
    default=None,
    help="How to print the result (default: table). With -o, the file's extension picks csv, json or parquet "
    "unless --format says otherwise. json: one object per row (JSON Lines), numbers as numbers. "
    "csv: LIST/STRUCT columns as JSON text.",
)
@click.option(
    "--output", "-o", type=click.Path(path_type=Path), help="Write the result to this file (.csv, .json, .parquet)."
)
@click.option("--max-rows", default=40, show_default=True, help="Rows shown by the table format.")
@device_option("Views as a projection onto this GPU's limits (see tracepipe analyze --device).")
def sql(
    normalized: Path, query: str | None, fmt: str | None, output: Path | None, max_rows: int, device: str | None
) -> None:
    """Run DuckDB SQL over NORMALIZED with every table and view registered (read-only).

    No QUERY opens an interactive shell like DuckDB's (.help, .tables, .schema NAME, .mode, .maxrows,
    .output FILE; Ctrl-C cancels the line or the query; history in ~/.tracepipe_history). With piped input
    it runs the statements and prints only their results. Queries cannot write files or change the data.

    \b
    Examples:
      tracepipe sql build/normalized "SELECT path, kernels, gpu_time_ns FROM layer_summary"
      tracepipe sql build/normalized "SELECT * FROM kernel_layers" -o kl.parquet     # format from the extension
      tracepipe sql build/normalized "SELECT * FROM layer_summary" --format json | jq .share_pct
      tracepipe sql build/normalized                     # interactive
      echo "SELECT count(*) FROM kernels;" | tracepipe sql build/normalized
    """
    from pipeline.analyze import connect
    from pipeline.analyze.shell import (
        OutputError,
        check_new_file,
        fetch,
        first_line,
        format_for,
        render,
        repl,
        run_interruptible,
        write_result,
    )

    file_format = None
    try:
        if query is None and (output is not None or fmt == "parquet"):
            raise OutputError("-o and --format parquet need a QUERY; in the shell, .output FILE writes results")
        if output is not None:
            file_format = format_for(output, fmt)
            output = check_new_file(output, protected=normalized)
        elif fmt == "parquet":
            raise OutputError("--format parquet writes a file: give -o FILE.parquet")
    except OutputError as e:
        console.fail(str(e))
        sys.exit(EXIT_BAD_INPUT)
    con = connect(normalized, read_only=True, device=device)
    if device is not None:  # stderr: the result on stdout stays clean CSV/JSON
        part = DEVICE_PRESETS[device][0]
        click.echo(f"PROJECTION onto {part}: device_limits and the SM views are not the trace's", err=True)
    if query is None:
        repl(con, normalized, fmt or "table", max_rows)
        return
    try:
        table = run_interruptible(con, lambda: fetch(con, query))
    except duckdb_error() as e:  # duckdb's errors are the user's SQL errors: one line, exit 2
        console.fail(f"query failed: {first_line(e)}")
        sys.exit(EXIT_BAD_INPUT)
    if table is None:
        return
    if output is not None and file_format is not None:
        write_result(table, output, file_format)
    else:
        sys.stdout.write(render(table, fmt or "table", max_rows))


def duckdb_error() -> type[Exception]:
    import duckdb

    return duckdb.Error


def run() -> None:
    """Entry point (the ``tracepipe`` script, ``python -m pipeline``): bad input and tool failures end in one line
    and an exit code, not a traceback. The process is the command's own: a batch command ends it without the
    interpreter's teardown (:func:`pipeline.lean.exit_without_teardown`). Callers inside a process of theirs
    (a notebook, a test) call ``main`` instead."""
    from pipeline.lean import exit_without_teardown, pyarrow_without_pandas

    global _OWN_PROCESS
    _OWN_PROCESS = True
    pyarrow_without_pandas()  # a process of its own: pandas is never used (tests' in-process runs keep it)
    try:
        _run_main()
    except SystemExit as e:
        if _BATCH_PROCESS:
            exit_without_teardown(e.code)
        raise


def _run_main() -> None:
    """``main``, its failures turned into one line and an exit code (SystemExit)."""
    from pipeline.store import TraceIdError

    try:
        main(standalone_mode=True)
    except (BadInputError, SettingError, TraceIdError) as e:
        console.fail(str(e))
        sys.exit(EXIT_BAD_INPUT)
    except OSError as e:
        reason = os_error_reason(e)
        if reason is None:
            _internal(e)
        console.fail(reason)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        console.fail("interrupted")
        sys.exit(130)
    except Exception as e:  # a bug of ours: still no traceback unless asked for
        if type(e).__name__ == "OutOfMemoryException":  # duckdb's: past TRACEPIPE_MEMORY_LIMIT and the spill cap
            console.fail(
                f"out of memory: {str(e).strip().splitlines()[0]}: raise TRACEPIPE_MEMORY_LIMIT or "
                "TRACEPIPE_TEMP_LIMIT (spill space under TMPDIR), or query fewer traces"
            )
            sys.exit(EXIT_BAD_INPUT)
        _internal(e)


def _internal(e: BaseException) -> None:
    console.fail(f"{type(e).__name__}: {e} (set TRACEPIPE_DEBUG=1 for the traceback)")
    if __import__("os").environ.get("TRACEPIPE_DEBUG"):
        raise e
    sys.exit(EXIT_FAILED)


# Stages defined in their own packages, registered here (imports stay lazy inside each command).
from pipeline.capture.cli import capture  # noqa: E402
from pipeline.export.cli import export  # noqa: E402
from pipeline.oneshot import run_command  # noqa: E402
from pipeline.report.cli import report  # noqa: E402
from pipeline.report.diff_cli import diff  # noqa: E402
from pipeline.report.findings_cli import findings  # noqa: E402

main.add_command(capture)
main.add_command(report)
main.add_command(diff)
main.add_command(export)
main.add_command(run_command)
main.add_command(findings)

if __name__ == "__main__":
    run()
