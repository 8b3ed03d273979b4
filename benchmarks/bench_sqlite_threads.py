"""Whether ADBC's sqlite driver reads on several threads at once: the kernel table's columns of an nsys export read
whole by one thread, then in two rowid halves by two threads (each on its own connection), alternating rounds.
Two threads finishing in about half the wall of one means the driver lets go of the GIL while sqlite steps rows,
the premise of ``nsys.Sqlite.chunked_batches``.

    python benchmarks/bench_sqlite_threads.py EXPORT.sqlite [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import adbc_driver_manager as adbc
import adbc_driver_sqlite
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._measure import provenance  # noqa: E402

TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
COLUMNS = (
    'start, "end", globalPid, demangledName, shortName, correlationId, gridX, gridY, gridZ, blockX, blockY, blockZ, '
    "registersPerThread, staticSharedMemory, dynamicSharedMemory, deviceId, contextId, streamId"
)


def rows(database: adbc.AdbcDatabase, sql: str) -> int:
    conn = adbc.AdbcConnection(database)
    stmt = adbc.AdbcStatement(conn)
    stmt.set_options(**{adbc_driver_sqlite.StatementOptions.BATCH_ROWS.value: "65536"})
    stmt.set_sql_query(sql)
    stream, _ = stmt.execute_query()
    reader = pa.RecordBatchReader._import_from_c(stream.address)
    n = sum(b.num_rows for b in reader)
    reader.close()
    stmt.close()
    conn.close()
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sqlite", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(provenance())
    database = adbc_driver_sqlite.connect(f"file:{args.sqlite}?mode=ro")
    conn = adbc.AdbcConnection(database)
    stmt = adbc.AdbcStatement(conn)
    stmt.set_sql_query(f"SELECT max(rowid) FROM {TABLE}")
    stream, _ = stmt.execute_query()
    last = pa.RecordBatchReader._import_from_c(stream.address).read_all().column(0)[0].as_py()
    stmt.close()
    conn.close()
    for r in range(args.rounds):
        for k in (1, 2):
            counts: list[int] = []
            bounds = [(last * i // k, last * (i + 1) // k) for i in range(k)]
            sqls = [
                f"SELECT {COLUMNS} FROM {TABLE} WHERE rowid > {lo} AND rowid <= {hi} ORDER BY rowid"
                for lo, hi in bounds
            ]
            t, c = time.perf_counter(), time.process_time()
            threads = [threading.Thread(target=lambda s=s, out=counts: out.append(rows(database, s))) for s in sqls]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            print(
                f"round {r + 1}: {k} thread(s) {sum(counts):,} rows  wall {time.perf_counter() - t:.2f} s  "
                f"CPU {time.process_time() - c:.2f} s",
                flush=True,
            )
    database.close()


if __name__ == "__main__":
    main()
