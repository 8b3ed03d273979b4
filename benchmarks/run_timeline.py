"""Where one `tracepipe run` spends its wall time: marks (wall and this process's CPU, seconds since start) at the
imports and at entry/exit of the stages of a chrome trace's run, printed to stderr.

    python benchmarks/run_timeline.py [--in-process-decode] -- run TRACE --out W -q

``--in-process-decode``: the chrome decode in this process (no forked workers), to compare with the default.
Children's CPU (decode workers) is not in the CPU column: compare walls.  Run it twice: the first run of a tree
may compile its bytecode (PYTHONDONTWRITEBYTECODE is set on the GPU host: set PYTHONPYCACHEPREFIX there).
"""

from __future__ import annotations

import atexit
import sys
import time
from collections.abc import Callable
from pathlib import Path

T0, C0 = time.perf_counter(), time.process_time()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def mark(what: str) -> None:
    print(f"{time.perf_counter() - T0:7.3f} s wall {time.process_time() - C0:7.3f} CPU-s  {what}", file=sys.stderr)


def traced(module: object, name: str) -> None:
    """Replace ``module.name`` by a function that marks its entry and exit."""
    fn: Callable = getattr(module, name)

    def wrapper(*args: object, **kwargs: object) -> object:
        mark(f"> {name}")
        try:
            return fn(*args, **kwargs)
        finally:
            mark(f"< {name}")

    setattr(module, name, wrapper)


def main() -> None:
    argv = sys.argv[1:]
    in_process = "--in-process-decode" in argv
    argv = [a for a in argv if a != "--in-process-decode"]
    if argv and argv[0] == "--":
        argv = argv[1:]
    mark("interpreter up")
    import numpy  # noqa: F401

    mark("numpy")
    import pyarrow  # noqa: F401

    mark("pyarrow")
    import duckdb  # noqa: F401

    mark("duckdb")
    import pipeline.cli as cli

    mark("pipeline.cli")
    import pipeline.analyze as analyze
    import pipeline.normalize as normalize
    import pipeline.normalize.chrome as chrome
    import pipeline.normalize.chrome_decode as chrome_decode

    mark("pipeline.analyze, pipeline.normalize.chrome")
    if in_process:
        chrome_decode._workers = lambda pieces: 1
    for module, name in [
        (normalize, "normalize_file"),
        (chrome, "normalize_chrome"),
        (chrome, "decode"),
        (chrome, "_write_tables"),
        (chrome, "_ranges"),
        (analyze, "connect"),
        (analyze, "write_views"),
    ]:
        traced(module, name)
    sys.argv = ["tracepipe", *argv]
    # A batch command's process ends inside cli.run, after the atexit functions (lean.exit_without_teardown).
    atexit.register(mark, "end")
    cli.run()  # the console script's entry point (it keeps pandas out of pyarrow, stops the collector)


if __name__ == "__main__":
    main()
