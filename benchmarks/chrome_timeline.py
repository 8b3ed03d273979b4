"""When each step of one chrome normalize runs, on a wall clock from the start of ``import pipeline.normalize``:
main-thread steps (begin-end, ms) and each Python thread's life, in a fresh process calling the library (as
bench_chrome_trees' child does).  Shows which steps overlap and which wait, for any tree:

    python benchmarks/chrome_timeline.py TREE TRACE
"""

from __future__ import annotations

import functools
import sys
import tempfile
import threading
import time
from pathlib import Path

T0 = time.perf_counter()
EVENTS: list[tuple[float, float, str, str]] = []


def _ms() -> float:
    return (time.perf_counter() - T0) * 1000


_run = threading.Thread.run


def _counted_run(self: threading.Thread) -> None:
    start, c = _ms(), time.thread_time()
    try:
        _run(self)
    finally:
        EVENTS.append((start, _ms(), f"thread {self.name.split('_')[0]}", f"cpu {1000 * (time.thread_time() - c):.0f}"))


def _wrap(mod: object, name: str) -> None:
    f = getattr(mod, name)

    @functools.wraps(f)
    def g(*a: object, **k: object) -> object:
        start, c = _ms(), time.thread_time()
        try:
            return f(*a, **k)
        finally:
            who = threading.current_thread().name.split("_")[0]
            EVENTS.append((start, _ms(), f"{name} [{who}]", f"cpu {1000 * (time.thread_time() - c):.0f}"))

    setattr(mod, name, g)


def main() -> None:
    tree, trace = sys.argv[1], Path(sys.argv[2])
    sys.path.insert(0, tree)
    threading.Thread.run = _counted_run  # type: ignore[method-assign]
    start = _ms()
    import pipeline.normalize as norm
    import pipeline.normalize.chrome as chrome

    EVENTS.append((start, _ms(), "import pipeline.normalize", ""))
    modules = [chrome]
    try:
        import pipeline.normalize.chrome_decode as decode

        modules.append(decode)
    except ImportError:
        pass
    wanted = [
        "decode",
        "_events",
        "_collect_fast",
        "_read",
        "_without_duplicates",
        "_write_tables",
        "_kernels",
        "_copies",
        "_api_calls",
        "_ops",
        "_ranges",
        "count_in",
        "_devices",
        "duckdb_connect",
        "_warm_pyarrow",
    ]
    for mod in modules:
        for name in wanted:
            if hasattr(mod, name) and callable(getattr(mod, name)):
                _wrap(mod, name)
    start = _ms()
    norm.normalize_file(trace, Path(tempfile.mkdtemp(prefix="chrome-timeline-")))
    EVENTS.append((start, _ms(), "normalize_file", ""))
    for a, b, what, extra in sorted(EVENTS):
        print(f"{a:8.1f} {b:8.1f} {b - a:7.1f} ms  {what:40s} {extra}")


if __name__ == "__main__":
    main()
