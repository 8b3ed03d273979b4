"""Where one chrome normalize's CPU goes, by thread: main, each Python thread (pandas warm-up, ops/call stacks,
sha256 where a thread does it), native threads (DuckDB, Arrow: the rest of the process) and reaped children
(decode workers, the sha256 child).  A fresh process calling the library, as bench_chrome's child does:

    python benchmarks/chrome_threads.py TREE TRACE     (TREE: a checkout or `git archive` of any commit)
"""

from __future__ import annotations

import importlib
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

_CPU: dict[str, float] = {}
_run = threading.Thread.run


def _counted_run(self: threading.Thread) -> None:
    """Thread.run, then the thread's own CPU time recorded under its name (pool suffixes dropped)."""
    try:
        _run(self)
    finally:
        name = self.name.split("_")[0].rstrip("0123456789-")
        _CPU[name] = _CPU.get(name, 0.0) + time.thread_time()


def main() -> None:
    tree, trace = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    sys.path.insert(0, str(tree))
    os.chdir(tree)
    threading.Thread.run = _counted_run  # type: ignore[method-assign]
    cpu0, main0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
    normalize = importlib.import_module("pipeline.normalize")
    imports = time.process_time() - cpu0
    normalize.normalize_file(trace, Path(tempfile.mkdtemp(prefix="chrome-threads-")))
    total, main_thread = time.process_time() - cpu0, time.thread_time() - main0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    threads = " ".join(f"{name}={cpu:.3f}" for name, cpu in sorted(_CPU.items()))
    print(
        f"{tree.name:12s} process {total:.3f} (imports {imports:.3f}) main thread {main_thread:.3f} {threads} "
        f"native threads {total - main_thread - sum(_CPU.values()):.3f} children {kids.ru_utime + kids.ru_stime:.3f} "
        f"wall {time.perf_counter() - wall0:.2f}"
    )


if __name__ == "__main__":
    main()
