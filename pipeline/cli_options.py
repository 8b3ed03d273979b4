"""The output options every writing command shares (--out/-o, --format, --json, --quiet/-q), declared once so
their names, short forms, types and defaults' display cannot drift apart between commands; each command says
only what its files and its JSON are."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from pipeline.analyze.devices import DEVICE_PRESETS

F = TypeVar("F", bound=Callable[..., Any])

#: Where ``normalize`` writes and ``analyze`` reads unless told otherwise.
DEFAULT_NORMALIZED = Path("build/normalized")

QUIET_HELP = "No progress bar, no summary; errors still go to stderr."


def output_options(
    out_help: str,
    out_default: Path | None = None,
    formats: tuple[str, ...] = (),
    formats_help: str = "",
    json_help: str | None = None,
) -> Callable[[F], F]:
    """``--out``/``-o`` (a Path; ``out_default`` shown in --help), ``--format`` into ``formats`` (repeatable,
    one of ``formats``, the first by default; only when ``formats`` is given), ``--json`` into ``as_json`` (only
    with ``json_help``: what it prints) and ``--quiet``/``-q``, in that order."""
    options = [
        click.option(
            "--out",
            "-o",
            type=click.Path(path_type=Path),
            default=out_default,
            show_default=out_default is not None,
            help=out_help,
        )
    ]
    if formats:
        options.append(
            click.option(
                "--format",
                "formats",
                multiple=True,
                type=click.Choice(formats),
                default=formats[:1],
                show_default=True,
                help=formats_help,
            )
        )
    if json_help is not None:
        options.append(click.option("--json", "as_json", is_flag=True, help=json_help))
    options.append(click.option("--quiet", "-q", is_flag=True, help=QUIET_HELP))

    def apply(command: F) -> F:
        for option in reversed(options):  # click lists options in the order their decorators are written
            command = option(command)
        return command

    return apply


# Options `run` shares with `normalize` (jobs) or `analyze` (the rest): one declaration each, so that the
# one-process command cannot drift from the two it stands for.
jobs_option = click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Normalize this many inputs at once in worker processes (0 = one per CPU core).",
)
csv_option = click.option(
    "--csv", "with_csv", is_flag=True, help="Also write <view>.csv (same as --format parquet --format csv)."
)
view_option = click.option(
    "--view",
    "only",
    multiple=True,
    help="Write only these views (repeatable). Default: every public view but the four written on request: "
    "kernel_sm_load (kernels x SMs rows) and the intermediates compiled_statements, gpu_op_launches, "
    "launch_point_layers.",
)


def device_option(help_text: str) -> Callable[[F], F]:
    """``--device`` into ``device``: one of the parts views can be projected onto (pipeline.analyze.devices)."""
    return click.option("--device", type=click.Choice(sorted(DEVICE_PRESETS)), default=None, help=help_text)


DEVICE_HELP = (
    "Project onto another GPU: occupancy, waves and the SM views use its limits (rtx3090: 82 SMs, sm_86) "
    "instead of the traced device's; rows say projected_device. Kernel durations stay the traced ones."
)
