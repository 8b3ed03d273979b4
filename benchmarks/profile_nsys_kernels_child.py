"""Where the kernels child of an nsys normalize spends its time (the process ``nsys._kernels_writer`` starts for
large exports, the wall of a 10M-kernel normalize): ``write_kernels_in`` in this process under cProfile, with the
child's own setup (pandas kept out of pyarrow), into a temporary staging folder that is removed after.

    python benchmarks/profile_nsys_kernels_child.py EXPORT.sqlite
"""

from __future__ import annotations

import cProfile
import pstats
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(export: Path) -> None:
    from pipeline.lean import pyarrow_without_pandas

    pyarrow_without_pandas()  # as the child does
    from pipeline.normalize.nsys import StagedWriter, write_kernels_in

    out = Path(tempfile.mkdtemp(prefix="profile-kernels-child-"))
    try:
        (out / "staging").mkdir()
        writer = StagedWriter(out, "t", out / "staging")
        prof = cProfile.Profile()
        cpu, wall = time.process_time(), time.perf_counter()
        prof.enable()
        rows = write_kernels_in(export, export, writer)
        prof.disable()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{rows:,} kernels: {cpu:.2f} CPU-s, {wall:.2f} s wall, peak RSS {peak:.0f} MB")
        pstats.Stats(prof).sort_stats("tottime").print_stats(22)
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
