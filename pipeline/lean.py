"""Start-up costs a command-line process does not need to pay."""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb


#: What the command line sets in its own environment before anything imports numpy (duckdb and pyarrow do), where
#: the user has not set it: numpy's OpenBLAS starts a thread per core at import, which spin for a while waiting
#: for work a tracepipe process never gives them (no linear algebra here). On the 16-core GPU host that was 2.0 of
#: the 2.6 CPU-s of the command line's imports, a third of a `run`'s CPU (benchmarks/results/
#: openblas_threads_44.txt). Children of tracepipe's own (the kernel writer, --jobs workers) inherit it; the
#: programs it runs for the user (`capture`) get the environment the user gave (:func:`users_environment`).
PROCESS_ENVIRONMENT = {"OPENBLAS_NUM_THREADS": "1"}
_SET_BY_US: set[str] = set()


def settle_process_environment() -> None:
    """Set :data:`PROCESS_ENVIRONMENT` where the user has not (call it before numpy is imported)."""
    for name, value in PROCESS_ENVIRONMENT.items():
        if name not in os.environ:
            os.environ[name] = value
            _SET_BY_US.add(name)


def users_environment() -> dict[str, str]:
    """This process's environment without what :func:`settle_process_environment` set: for the user's programs."""
    return {k: v for k, v in os.environ.items() if k not in _SET_BY_US}


class _NoPandas:
    """A meta path finder that makes pandas look absent."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not used here")


def block_pandas() -> _NoPandas:
    """Make pandas look absent in this process until ``unblock(finder)``."""
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    return finder


def unblock(finder: _NoPandas) -> None:
    sys.meta_path.remove(finder)


def pyarrow_without_pandas() -> None:
    """Let pyarrow settle, once, on running without pandas.

    pyarrow imports pandas (when installed) on its first conversion of any Python list or numpy array, to
    check whether the object is a pandas one: 0.35 CPU-s per process, which nothing in normalize or analyze
    uses.  With pandas hidden for that first conversion pyarrow remembers it as absent; pandas is importable
    again afterwards (``Table.to_pandas`` still works).  A no-op where pandas is already imported.
    """
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    finder = block_pandas()
    try:
        pa.array([0])
    finally:
        unblock(finder)


#: Commands that end once their inputs are done and make few reference cycles: their process may leave those
#: to its end. Not the interactive ``sql`` shell, nor ``report``/``diff`` (matplotlib figures hold cycles).
BATCH_COMMANDS = frozenset({"normalize", "analyze", "run"})


def batch_gc() -> None:
    """Stop Python's cyclic garbage collector for the rest of a batch command's process.

    Reference counting still frees every object once nothing points at it; only objects in reference cycles
    wait for the process to end: 481 of them after normalizing the 54 MB chrome trace.  The collector's passes
    over everything alive (the modules imported, the events a decode holds) cost ~25 ms of CPU in a 1 MB chrome
    trace's ``run``, 12% of its normalize stage (benchmarks/results/run_fixed_costs.txt).
    """
    gc.disable()


def exit_without_teardown(code: object) -> None:
    """End a batch command's process with exit status ``code`` (``SystemExit.code``) now, without the
    interpreter's teardown; returns (the caller then exits normally) where that would not be safe.

    Teardown frees every object and module one by one: ~50 ms after a 54 MB chrome trace's ``run`` (numpy,
    pyarrow, duckdb and what they hold), ~5% of it and more on the GPU host. Nothing of it is needed once the
    command is done: its files are closed and renamed into place, its DuckDB databases are in memory. What
    a process must still do at exit does run first: the ``atexit`` functions (the spill folders' removal,
    ``weakref.finalize``), then stdout and stderr are flushed. Not while another thread runs (Python's exit
    would wait for it: cutting it off could leave its work half done), nor for a ``sys.exit("message")``.
    """
    if not (code is None or isinstance(code, int)) or threading.active_count() > 1:
        return
    atexit._run_exitfuncs()  # what Py_Finalize runs first, in the same order (LIFO)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: 120 unless failing already, as Python's exit does
            code = code or 120
    os._exit(code or 0)


@contextlib.contextmanager
def jemalloc_pool() -> Iterator[None]:
    """jemalloc as Arrow's allocator while a trace is normalized (a chrome trace's forked decode workers inherit
    it), where this pyarrow has it; the previous pool is restored afterwards (buffers remember their pool).

    The default mimalloc costs more in the merge, take and write steps (big fresh buffers, freed and allocated
    again): chrome normalize of the 500 MB bench trace 6.38 -> 5.79 CPU-s median (-9%; -12% with the pool set for
    the whole process), the 100 MB one 1.94 -> 1.85 (-5%) (benchmarks/results/bench_chrome_s_chrome.txt). And
    it holds less: normalizing a 220k-kernel nsys export peaked at 245 MB of RSS with mimalloc, which then kept
    228 MB, 203 and 118 MB with jemalloc (benchmarks/results/run_memory_44.txt).
    """
    import pyarrow as pa

    before = pa.default_memory_pool()
    pool = _jemalloc_pool()
    if pool is None:
        yield
        return
    pa.set_memory_pool(pool)
    try:
        yield
    finally:
        pa.set_memory_pool(before)


def release_arrow_memory() -> None:
    """Hand the memory Arrow's allocators keep for reuse back to the system (between ``run``'s stages).

    Arrow's pools keep freed pages for their next allocations: after normalizing a 220k-kernel nsys export the
    default pool (mimalloc) held ~100 MB nothing would use again, which stayed in the process's RSS through
    analyze (DuckDB allocates with its own allocator) and added to its peak."""
    import pyarrow as pa

    for pool in (pa.default_memory_pool(), _jemalloc_pool()):
        if pool is not None:
            pool.release_unused()


def _jemalloc_pool():  # type: ignore[no-untyped-def]
    import pyarrow as pa

    try:
        return pa.jemalloc_memory_pool()
    except (NotImplementedError, pa.ArrowNotImplementedError):  # a pyarrow built without jemalloc
        return None


def cores() -> int:
    """CPU cores this process may run on (its affinity: ``taskset``, a container's cpuset), not the host's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


#: Overrides the DuckDB threads of every connection (a positive whole number): :func:`duckdb_threads`.
THREADS_ENV = "TRACEPIPE_THREADS"
#: Rows per DuckDB thread: a scan's unit of parallel work is a Parquet row group, and normalize writes row groups
#: of 65,536 rows (``sqlite_reader.BATCH_ROWS``): a table of fewer groups than threads leaves the extra threads
#: nothing to scan, while each still builds its own hash tables and buffers (on the 16-core GPU host the
#: 220k-kernel run took 7.1 CPU-s and 830 MB with 16 threads, 5.4 CPU-s and 525 MB on 2 cores, #44).
ROWS_PER_THREAD = 65_536
#: DuckDB memory limit per thread: each thread pins buffers of its own (its partitions of a join's hash table, its
#: sort runs, its Parquet row groups), and below some share of the limit per thread DuckDB can no longer spill its
#: way through and fails ("failed to pin block"). On the 16-core GPU host the 10M-kernel trace ran with 16 threads
#: at its default limit of 1.6 GB (100 MB a thread) and failed at 1.2 GB (75 MB), which 8 threads pass; on 1M
#: kernels 16 threads failed at 600 and 400 MB, which 4 threads pass (benchmarks/results/threads_by_memory_44.txt).
#: By that measure a machine of more than 21 cores started threads that ran out of memory on the 10M trace under
#: the default limit; it gets 11 threads.
MEMORY_PER_THREAD = 128 * 2**20


def duckdb_threads(rows: int | None = None, memory_limit: int | None = None) -> int:
    """DuckDB threads for work over ``rows`` rows (None: unknown) under a memory limit of ``memory_limit`` bytes
    (None: DuckDB's default): one per core this process may use (DuckDB sizes its pool by the host's cores, so on
    2 allowed cores of 16 it would start 16 threads that take turns), at most one per :data:`ROWS_PER_THREAD` rows
    and at least 2, and at most one per :data:`MEMORY_PER_THREAD` of the limit (at least 1); TRACEPIPE_THREADS
    overrides it."""
    raw = os.environ.get(THREADS_ENV)
    if raw is not None:
        if not raw.strip().isdigit() or int(raw) < 1:
            from pipeline.errors import SettingError

            raise SettingError(f"{THREADS_ENV}={raw!r}: expected a positive whole number of threads")
        return int(raw)
    n = cores()
    if rows is not None:
        n = min(n, max(2, -(-rows // ROWS_PER_THREAD)))
    if memory_limit is not None:
        n = threads_within(memory_limit, n)
    return n


def threads_within(memory_limit: int, threads: int) -> int:
    """Of ``threads`` DuckDB threads, as many as a memory limit of ``memory_limit`` bytes leaves
    :data:`MEMORY_PER_THREAD` each (at least 1); TRACEPIPE_THREADS, when set, is kept as it is."""
    if THREADS_ENV in os.environ:
        return threads
    return min(threads, max(1, memory_limit // MEMORY_PER_THREAD))


#: Environment variable Arrow sizes its CPU pool by when it starts (a fresh interpreter: the nsys kernel writer).
ARROW_THREADS_ENV = "OMP_NUM_THREADS"


def size_arrow_pool(rows: int | None = None) -> int:
    """Arrow's CPU thread pool sized as :func:`duckdb_threads` sizes DuckDB's, for work over ``rows`` rows; returns
    the size. Arrow starts one thread per host core, which Parquet reads and writes and the compute kernels keep
    busy on a small table: on the 16-core GPU host, the three views over the 231k-kernel export with Arrow's pool
    left at a thread per core peaked at 710 MB against 595 MB sized, for the same wall and CPU (side
    ``arrow_unsized``, benchmarks/results/device_44_threads_h100.txt)."""
    import pyarrow as pa

    n = duckdb_threads(rows)
    pa.set_cpu_count(n)
    return n


def duckdb_connect(config: dict[str, str] | None = None, rows: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with :func:`duckdb_threads` threads for ``rows`` rows (``config`` may say
    otherwise)."""
    import duckdb

    return duckdb.connect(":memory:", config={"threads": str(duckdb_threads(rows)), **(config or {})})
