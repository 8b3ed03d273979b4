"""The output options every writing command shares (--out/-o, --format, --json, --quiet/-q), declared once so
their names, short forms, types and defaults' display cannot drift apart between commands; each command says
only what its files and its JSON are."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

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
