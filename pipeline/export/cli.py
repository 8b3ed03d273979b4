"""The ``tracepipe export`` commands (registered in pipeline/cli.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from pipeline import console
from pipeline.cli_options import output_options


@click.group()
def export() -> None:
    """Write a normalized trace in another tool's format.

    \b
    Examples:
      tracepipe export perfetto build/normalized --trace-id h200_resnet18.nsys -o resnet18.json.gz
    """


@export.command()
@click.argument("normalized", type=click.Path(path_type=Path))
@click.option("--trace-id", help="The trace to export (needed when NORMALIZED holds more than one).")
@output_options(
    "Output file: .json, or .json.gz to compress. Default: <trace id>.perfetto.json.gz here.",
    json_help="Print what was written as one JSON object.",
)
@click.option(
    "--counter-depth",
    type=click.IntRange(min=1),
    help="Cut layer paths to this many names for the per-layer counter tracks "
    "(default: the deepest giving at most 16 layers).",
)
def perfetto(
    normalized: Path, trace_id: str | None, out: Path | None, counter_depth: int | None, as_json: bool, quiet: bool
) -> None:
    """Chrome Trace Event Format JSON of one trace's timeline, for ui.perfetto.dev and chrome://tracing.

    \b
    CPU threads: NVTX / record_function ranges, PyTorch ops, CUDA runtime and driver calls.
    GPU streams: kernels, memcpy, memset, each with its layer path, pass (forward / backward /
    optimizer), launching op, grid/block, registers, shared memory and the model's occupancy, limiter
    and waves in its args; flow arrows from each launch call to its GPU op; counter tracks of the
    GPU ops running per layer (and per pass in a training trace).

    \b
    The events use the PyTorch profiler's categories and arg names (kernel, gpu_memcpy, gpu_memset,
    cuda_runtime, cuda_driver, cpu_op, user_annotation, gpu_user_annotation, ac2g flows), so the file
    is also a chrome trace `tracepipe normalize` reads back with the same kernels (names, streams,
    start/end ns). ts/dur are microseconds with 3 decimals: exact to the ns.

    \b
    Examples:
      tracepipe export perfetto build/normalized --trace-id h200_resnet18.nsys -o resnet18.json.gz
      tracepipe normalize resnet18.json.gz --out build/roundtrip      # read it back
    """
    from pipeline.export.perfetto import export_perfetto

    result = export_perfetto(normalized, out, trace_id, counter_depth)
    if as_json:
        click.echo(json.dumps(result.to_json()))
    elif not quiet:
        total = sum(result.events.values())
        parts = ", ".join(f"{k} {n}" for k, n in result.events.items() if n)
        console.out.print(f"wrote {result.out}: {total} events of {result.trace_id} ({parts})")
        for line in result.skipped:
            console.out.print(f"left out: {line}")
        console.out.print("open it at https://ui.perfetto.dev or chrome://tracing")
