"""``tracepipe``: capture -> normalize -> analyze -> report, one subcommand per stage.

Exit codes: 0 success, 1 a failure of the tool itself, 2 bad input (the message
names the file and what was wrong with it).
"""

from __future__ import annotations

import sys

import click

from pipeline import __version__, console
from pipeline.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    BadInputError,
    OutputError,
    SettingError,
    damaged_parquet,
    os_error_reason,
)

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
    except (BadInputError, OutputError, SettingError, TraceIdError) as e:
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
                "TRACEPIPE_TEMP_LIMIT (spill space under TMPDIR), lower TRACEPIPE_THREADS, or query fewer traces"
            )
            sys.exit(EXIT_BAD_INPUT)
        if (damaged := damaged_parquet(e)) is not None:  # a file of a tracepipe folder, cut short or removed
            console.fail(str(damaged))
            sys.exit(EXIT_BAD_INPUT)
        _internal(e)


def _internal(e: BaseException) -> None:
    console.fail(f"{type(e).__name__}: {e} (set TRACEPIPE_DEBUG=1 for the traceback)")
    if __import__("os").environ.get("TRACEPIPE_DEBUG"):
        raise e
    sys.exit(EXIT_FAILED)


from pipeline.lean import settle_process_environment  # noqa: E402

settle_process_environment()  # before the commands' modules import numpy (duckdb, pyarrow): lean.PROCESS_ENVIRONMENT

# Each command is defined in a module of its own, registered here (imports stay lazy inside each command): the
# commands import the library below them, never this module.
from pipeline.analyze_cli import analyze, sql, views  # noqa: E402
from pipeline.capture.cli import capture  # noqa: E402
from pipeline.export.cli import export  # noqa: E402
from pipeline.normalize_cli import normalize  # noqa: E402
from pipeline.oneshot import run_command  # noqa: E402
from pipeline.report.cli import report  # noqa: E402
from pipeline.report.diff_cli import diff  # noqa: E402
from pipeline.report.findings_cli import findings  # noqa: E402

for command in (normalize, analyze, sql, views, capture, report, diff, findings, export, run_command):
    main.add_command(command)

if __name__ == "__main__":
    run()
