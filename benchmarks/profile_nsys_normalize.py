"""Where one nsys .sqlite's normalize spends its time: CPU and wall of each stage of this process, and when (wall
offset from the start), plus when the kernels child starts and how long this process then waits for it.

    python benchmarks/profile_nsys_normalize.py trace.sqlite

CPU time (time.process_time, all threads of this process) is the measure on a shared machine; a stage's figure
includes the sqlite query feeding its writer. The kernels child (from ``nsys.PARALLEL_MIN_KERNELS`` kernels on)
and the sha256 child are other processes: their CPU is the ``children cpu`` of the last line. The timeline
answers whether the wall is max(this process, the child): ``kernels wait`` is the time this process sat idle
for the child after writing every other table.
"""

from __future__ import annotations

import functools
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
W0, C0 = time.perf_counter(), time.process_time()


def stamp() -> str:
    return f"@{time.perf_counter() - W0:6.2f} s"


def timed(owner: object, name: str, label: str | None = None, least_s: float = 0.0) -> None:
    """Print wall and CPU of every call of ``owner.name`` taking at least ``least_s`` of wall, with the wall
    offset at which it ended."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def wrapper(*args: object, **kwargs: object) -> object:
        w, c = time.perf_counter(), time.process_time()
        out = inner(*args, **kwargs)
        what = label or (f"write {args[1]}" if name == "write_batches" else name)
        if time.perf_counter() - w < least_s:
            return out
        print(f"{what:22s} {stamp()}  wall {time.perf_counter() - w:6.2f} s  CPU {time.process_time() - c:6.2f} s")
        return out

    setattr(owner, name, wrapper)


def main() -> None:
    import pipeline.normalize as normalize
    import pipeline.normalize.batch as batch
    import pipeline.normalize.nsys as nsys
    import pipeline.store as store

    print(f"{'import':22s} {stamp()}  CPU {time.process_time() - C0:6.2f} s")
    timed(store.TraceWriter, "write_batches")
    timed(nsys.Sqlite, "arrow", "sqlite query (whole)", least_s=0.05)  # the NVTX ranges; not the small ones
    timed(nsys, "split_op_ranges")
    timed(nsys, "with_nesting", "nesting")
    timed(normalize, "staged_warnings")
    timed(normalize.Sha256Job, "result", "sha256 wait")
    timed(store.TraceWriter, "commit")
    start_kernels = nsys._kernels_writer

    def kernels_writer(*args: object, **kwargs: object) -> Callable[[], None]:
        wait = start_kernels(*args, **kwargs)
        print(f"{'kernels started':22s} {stamp()}")

        def timed_wait() -> None:
            w = time.perf_counter()
            wait()
            print(f"{'kernels wait':22s} {stamp()}  idle {time.perf_counter() - w:6.2f} s (waiting for the child)")

        return timed_wait

    nsys._kernels_writer = kernels_writer
    out = Path(tempfile.mkdtemp(prefix="profile-nsys-"))
    try:
        c1, w1 = time.process_time(), time.perf_counter()
        outcome = batch.normalize_one(0, Path(sys.argv[1]), out)
        if outcome.error:
            sys.exit(outcome.error)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(
            f"{'normalize':22s} {stamp()}  wall {time.perf_counter() - w1:6.2f} s  CPU {time.process_time() - c1:6.2f}"
            f" s in this process, children cpu {children.ru_utime + children.ru_stime:6.2f} s (kernels + sha256)"
        )
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
