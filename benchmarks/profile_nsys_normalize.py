"""CPU time per stage of normalizing one nsys .sqlite: each table's write and the nesting pass.

    python benchmarks/profile_nsys_normalize.py trace.sqlite

CPU time (time.process_time, all threads of this process) is the measure on a shared machine; a stage's figure
includes the sqlite query feeding its writer.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    c0 = time.process_time()
    import pipeline.normalize.batch as batch
    import pipeline.normalize.nsys as nsys
    import pipeline.store as store

    print(f"import       {time.process_time() - c0:6.2f} CPU-s")
    write_batches, with_nesting = store.TraceWriter.write_batches, nsys.with_nesting

    def timed_write(self: store.TraceWriter, table: str, batches: object) -> int:
        c = time.process_time()
        rows = write_batches(self, table, batches)
        print(f"{table:12s} {time.process_time() - c:6.2f} CPU-s  {rows:,} rows")
        return rows

    def timed_nesting(ranges: object) -> object:
        c = time.process_time()
        out = with_nesting(ranges)
        print(f"{'nesting':12s} {time.process_time() - c:6.2f} CPU-s")
        return out

    store.TraceWriter.write_batches = timed_write  # type: ignore[method-assign]
    nsys.with_nesting = timed_nesting
    out = Path(tempfile.mkdtemp(prefix="profile-nsys-"))
    try:
        c1, w1 = time.process_time(), time.perf_counter()
        outcome = batch.normalize_one(0, Path(sys.argv[1]), out)
        if outcome.error:
            sys.exit(outcome.error)
        print(f"normalize    {time.process_time() - c1:6.2f} CPU-s, {time.perf_counter() - w1:.2f} s wall")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
