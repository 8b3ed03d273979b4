"""``tracepipe analyze`` (every view of sql/ written to files) and ``tracepipe sql`` (queries over the views, or
a shell), registered in pipeline/cli.py; the work is ``pipeline.analyze``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pipeline import console
from pipeline.analyze.devices import DEVICE_PRESETS
from pipeline.cli_options import (
    DEFAULT_NORMALIZED,
    DEVICE_HELP,
    csv_option,
    device_option,
    output_options,
    view_option,
)
from pipeline.errors import EXIT_BAD_INPUT, EXIT_FAILED

if TYPE_CHECKING:
    import duckdb  # imported where it runs: --help stays quick


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
            with formatter.section("Tables (a normalized folder; docs/schema.md)"):
                formatter.write_dl(sorted(table_descriptions().items()))
        with formatter.section("Views (sql/<view>.sql: header comment lists columns and units)"):
            formatter.write_dl(sorted(view_descriptions().items()))


DEFAULT_ANALYSIS = Path("build/analysis")


@click.command(cls=CatalogCommand, listing="views")
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
    """Run the views of sql/ over NORMALIZED and write each as Parquet (CSV on request): every public view but those
    written on request (see --view).

    Each file is renamed into place only when complete; a failed run leaves earlier outputs intact.

    \b
    Examples:
      tracepipe analyze build/normalized --out build/analysis
      tracepipe analyze build/normalized --view layer_summary --csv    # also layer_summary.csv
      tracepipe analyze build/normalized --view kernel_sm_load        # a view written only on request
      duckdb -c "SELECT * FROM 'build/analysis/layer_summary.parquet'"
    """
    from pipeline import catalog
    from pipeline.analyze import analysis_warnings, connect, default_views, view_files, write_views
    from pipeline.analyze.views import unknown_views
    from pipeline.outputs import inputs_stamp, output_folder, refuse_inside_normalized
    from pipeline.store import committed

    refuse_inside_normalized(out)  # before anything is read or written (write_views checks it again)
    sql_dir = catalog.SQL_DIR
    if not view_files(sql_dir):
        console.fail(f"no views in {sql_dir}: this tracepipe installation lacks its sql/ files (reinstall it)")
        sys.exit(EXIT_FAILED)
    formats = tuple(dict.fromkeys([*formats, *(["csv"] if with_csv else [])]))
    views = list(only) or default_views(sql_dir)
    if said := unknown_views(views, sql_dir):
        raise click.BadParameter(said, param_hint="--view")
    from pipeline.analyze import incremental as inc

    output_folder(out)  # a file there, or the normalized data: exit 2 before anything is computed
    if device is not None and not as_json:
        part = DEVICE_PRESETS[device]
        console.out.print(
            f"PROJECTION: every traced device replaced by {part[0]} (sm_{part[1][0]}{part[1][1]}, {part[2]} SMs); "
            "occupancy, waves and SM views are what these launches would give there, not a measurement"
        )
    ticks = console.progress(iter(views), len(views), "analyze", quiet)
    next(ticks, None)  # the bar shows 0 of N until the first view is written
    tick = lambda _view: next(ticks, None)  # noqa: E731
    # The warnings are computed with the views (their inputs staged as the views' are), unless -q
    warned: list[str] = []
    also = () if quiet else ("analysis_warnings",)
    inspect = None if quiet else lambda c: warned.extend(analysis_warnings(c))
    # Each view's file says what it was computed over: a report refuses a folder whose views disagree
    stamp = inputs_stamp({t: c.generation for t, c in committed(normalized).items()}, device)
    if incremental:
        _, outcome = inc.analyze_incremental(
            normalized, out, views, formats, device, sql_dir, done=tick, also=also, inspect=inspect, stamp=stamp
        )
        written = outcome.rows
    else:
        inc.forget(out)  # an incremental run's state no longer describes these outputs
        con = connect(normalized, sql_dir, views=[], device=device)  # write_views creates each view as it goes
        written = write_views(
            con, out, views, formats, done=tick, sql_dir=sql_dir, also=also, inspect=inspect, stamp=stamp
        )
    rows = {view: written[view] for view in views}
    for line in warned:
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


@click.command(cls=CatalogCommand)
@click.argument("normalized", metavar="FOLDER", type=click.Path(path_type=Path))
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
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Write the result to this file (.csv, .json, .parquet). It holds one result: a QUERY with two statements "
    "that return rows is refused (exit 2); CREATE TEMP TABLE ... before the one SELECT is fine.",
)
@click.option("--max-rows", default=40, show_default=True, help="Rows shown by the table format.")
@device_option("Views as a projection onto this GPU's limits (see tracepipe analyze --device).")
def sql(
    normalized: Path, query: str | None, fmt: str | None, output: Path | None, max_rows: int, device: str | None
) -> None:
    """Run DuckDB SQL over FOLDER with every table and view registered (read-only).

    FOLDER is a normalized folder (every table, and every view computed as a statement reads it) or an analysis
    folder (tracepipe analyze's --out: the views it wrote, read from their Parquet as they are).

    QUERY may hold several statements separated by ';': each runs in turn and each result is printed, as
    DuckDB's CLI does (CREATE and DROP print nothing); the first that fails stops the rest, exit 2. A QUERY
    starting with '.' or '\\' is the shell's commands, one a line (".tables", ".schema layer_summary").

    No QUERY opens an interactive shell like DuckDB's (.help, .tables, .schema [NAME] for CREATE statements,
    \\d NAME for columns, .mode, .maxrows, .output FILE; Ctrl-C cancels the line or the query; history in
    ~/.tracepipe_history). With piped input it runs the statements and prints only their results. Queries cannot
    write files or change the data.

    \b
    Examples:
      tracepipe sql build/normalized "SELECT path, kernels, gpu_time_ns FROM layer_summary"
      tracepipe sql build/normalized "SELECT * FROM kernel_layers" -o kl.parquet     # format from the extension
      tracepipe sql build/normalized "SELECT * FROM layer_summary" --format json | jq .share_pct
      tracepipe sql build/normalized "SELECT count(*) FROM kernels; SELECT count(*) FROM nvtx_ranges"
      tracepipe sql build/normalized ".tables"           # a shell command; "\\d kernels" for columns
      tracepipe sql build/normalized                     # interactive
      echo "SELECT count(*) FROM kernels;" | tracepipe sql build/normalized
      tracepipe sql build/analysis "SELECT * FROM findings LIMIT 5"     # analyze's written views
    """
    from pipeline.analyze import connect_folder
    from pipeline.analyze.readonly import reading_statements
    from pipeline.analyze.shell import (
        MAX_ROWS,
        RESULT_STATEMENTS,
        OutputError,
        check_new_file,
        first_line,
        format_for,
        is_dot_command,
        render,
        repl,
        run_dot_commands,
        run_statement,
        write_result,
    )
    from pipeline.outputs import is_normalized, mixed_inputs

    if not 1 <= max_rows <= MAX_ROWS:  # DuckDB's renderer counts rows in 64 bits
        raise click.BadParameter(f"{max_rows} is not a whole number from 1 to {MAX_ROWS}", param_hint="--max-rows")
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
    if query is not None and is_dot_command(query):  # `.tables`, `.schema NAME`, `\\d NAME` as in the shell
        if output is not None:
            console.fail("-o writes a query's result; a dot command prints (in the shell, .output FILE writes)")
            sys.exit(EXIT_BAD_INPUT)
        if run_dot_commands(connect_folder(normalized, device), normalized, query, fmt or "table", max_rows):
            sys.exit(EXIT_BAD_INPUT)
        return
    statements: list[duckdb.Statement] = []
    if query is not None:
        # Split by DuckDB's parser before the folder is opened: a syntax error, or a statement that could write
        # anywhere in QUERY, is said before any statement runs (and before the views' connection is paid for).
        try:
            statements = reading_statements(query)
        except duckdb_error() as e:
            console.fail(f"query failed: {first_line(e)}")
            sys.exit(EXIT_BAD_INPUT)
        answers = sum(st.type in RESULT_STATEMENTS for st in statements)
        if output is not None and answers > 1:
            # A Parquet file holds one table, and two CSV headers in one file are no CSV: keeping the last result
            # would drop the others without a word.
            console.fail(
                f"-o {output} writes one result and QUERY has {answers} statements that return rows: keep the one "
                "to write (CREATE TEMP TABLE ... AS before it is fine), or leave out -o to print them all"
            )
            sys.exit(EXIT_BAD_INPUT)
    # The views a statement names (and those they read) are created as it comes: creating every view binds each
    # body again under the views that read it (2.1 CPU-s on a 220k-kernel trace).
    con = connect_folder(normalized, device)  # or analyze's output, its views as written
    if said := mixed_inputs(normalized):  # an analysis folder whose views disagree: read as written, but said
        console.warn(f"{normalized}: {said}")
    if device is not None:  # stderr: the result on stdout stays clean CSV/JSON
        part = DEVICE_PRESETS[device][0]
        click.echo(f"PROJECTION onto {part}: device_limits and the SM views are not the trace's", err=True)
    if query is None:
        repl(con, normalized, fmt or "table", max_rows)
        return
    # Every statement in order, each result printed as it comes (DuckDB's CLI with -c); the first that fails stops
    # the rest, as there: a later statement most often reads what the failed one was to make.
    for statement in statements:
        try:
            table = run_statement(con, statement)
        except duckdb_error() as e:  # duckdb's errors are the user's SQL errors: one line, exit 2
            said = first_line(e)
            if said.startswith("Catalog Error") and not is_normalized(normalized):  # an analysis folder
                said += " (an analysis folder holds the views analyze wrote; the tables are the normalized folder's)"
            sys.stdout.flush()  # the results before it, then the error: in that order on a terminal
            console.fail(f"query failed: {said}")
            sys.exit(EXIT_BAD_INPUT)
        if table is None:
            continue
        if output is not None and file_format is not None:
            write_result(table, output, file_format)
        else:
            sys.stdout.write(render(table, fmt or "table", max_rows))


def duckdb_error() -> type[Exception]:
    import duckdb

    return duckdb.Error


@click.command()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "dot", "mermaid", "markdown"]),
    default="text",
    show_default=True,
    help="text: each view with what it reads, top first, tables last; dot: Graphviz; mermaid: a Mermaid "
    "flowchart; markdown: docs/views.md (the Mermaid drawing and one line per view and table).",
)
def views(fmt: str) -> None:
    """Draw the view graph: each view of sql/ with the tables and views it reads (its -- Inputs: header),
    tables at the bottom.

    \b
    Examples:
      tracepipe views                                    # the graph as text
      tracepipe views --format dot | dot -Tsvg -o views.svg
      tracepipe views --format markdown > docs/views.md  # regenerate the docs page
    """
    from pipeline.analyze.graph import draw, read_graph

    click.echo(draw(read_graph(), fmt), nl=False)
