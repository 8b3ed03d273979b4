"""What every benchmark measures, one way: wall time, CPU time of the whole process tree, peak RSS of the
whole process tree, and the command + commit that a results file must name.

Run each side as its own command (``measure([...])``) so its numbers are its own:

* ``wall_s``: ``time.perf_counter`` around the process, start to exit.
* ``cpu_s``: user + system CPU of the process tree: the larger of two lower bounds, ``os.wait4``'s rusage (the
  process and every descendant reaped inside the tree: forked workers, pools, subprocesses) and the sum over
  every process the sampler saw of its last-seen CPU (catches descendants nobody in the tree reaps, such as
  the workers of a multiprocessing forkserver, which is itself left to init; misses at most ``interval``
  per process).
* ``peak_rss_bytes``: the largest sum of RSS over the process and all its live descendants, sampled every
  ``interval`` s with psutil; never below the largest single process's own peak (its VmHWM as last sampled,
  and wait4's ``ru_maxrss`` where that exceeds the measuring process's own peak: Linux carries the forking
  process's RSS into a child's ``ru_maxrss`` across the exec, so a harness holding 1.5 GB made every child read
  1.5 GB), which catches a spike between two samples.  A sum of RSS counts pages shared between processes
  (fork's copy-on-write pages, a memory-mapped input) once per process: it is an upper bound on the memory the
  tree needs.

``ratios(ours, theirs)`` gives the wall and CPU ratios side by side: a parallel tool can win on wall time
while spending more CPU, and a reader should see both.  ``provenance(argv)`` is the header a file in
``benchmarks/results/`` starts with.
"""

from __future__ import annotations

import contextlib
import os
import platform
import random
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

try:
    import psutil
except ImportError:  # a bare host (the GPU machine's Python): the same sums read from /proc
    psutil = None

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Measurement:
    wall_s: float
    cpu_s: float  # user + system of the process tree, see the module docstring
    peak_rss_bytes: int  # process tree, see the module docstring
    max_single_rss_bytes: int  # the largest one process's own peak (VmHWM; see the module docstring)
    returncode: int
    stdout: str

    def line(self) -> str:
        rss = self.peak_rss_bytes / 1e6
        return f"wall {self.wall_s:7.2f} s  CPU {self.cpu_s:7.2f} s  peak RSS (tree) {rss:7.0f} MB"


def own_peak_rss_bytes(pid: int | str = "self") -> int:
    """Peak RSS of one process's own memory: Linux's VmHWM, which an exec starts afresh (0 when unreadable).
    For this process off Linux, ``ru_maxrss``."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0
    if pid != "self":
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def _tree_rss(root: psutil.Process, known: dict[int, psutil.Process], cpu: dict[int, float], seen: list[int]) -> int:  # type: ignore[name-defined]
    """Sum of RSS over ``root`` and its descendants now (processes that vanish mid-walk count 0); each one's
    CPU so far goes into ``cpu`` (pid -> seconds), its pid into ``seen``."""
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    seen += [p.pid for p in procs]
    total = 0
    for p in procs:
        p = known.setdefault(p.pid, p)  # keep one Process per pid: psutil caches what it can per object
        with contextlib.suppress(psutil.Error), p.oneshot():
            total += p.memory_info().rss
            t = p.cpu_times()
            cpu[p.pid] = t.user + t.system
    return total


def _proc_tree_pids(root: int) -> list[int]:
    """``root`` and its descendants, from the parent links of /proc/<pid>/stat."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d.name))
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo += children.get(pid, [])
    return pids


def _proc_tree_rss(root: int, seen: list[int]) -> int:
    """``_tree_rss`` without psutil: RSS pages from /proc/<pid>/statm of ``_proc_tree_pids`` (into ``seen``)."""
    total, page = 0, os.sysconf("SC_PAGE_SIZE")
    seen += _proc_tree_pids(root)
    for pid in seen:
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
    return total


class _Sampler(threading.Thread):
    """The tree's summed RSS every ``interval`` s (``peak``), and the largest single process's own peak seen
    (``single``: VmHWM, which includes spikes between samples)."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.root = psutil.Process(pid) if psutil is not None else None
        self.interval = interval
        self.peak = 0
        self.single = 0
        self.cpu: dict[int, float] = {}  # psutil only: the /proc fallback leaves it empty (wait4 alone)
        self.stop = threading.Event()

    def run(self) -> None:
        known: dict[int, psutil.Process] = {}
        while not self.stop.is_set():
            pids: list[int] = []
            now = (
                _tree_rss(self.root, known, self.cpu, pids) if self.root is not None else _proc_tree_rss(self.pid, pids)
            )
            self.peak = max(self.peak, now)
            self.single = max([self.single, *(own_peak_rss_bytes(pid) for pid in pids)])
            self.stop.wait(self.interval)


def measure(
    argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, interval: float = 0.02
) -> Measurement:
    """Run ``argv`` to completion and measure it (stdout kept, stderr passed through); raises
    ``subprocess.CalledProcessError`` when it fails, so a broken side never yields a ratio."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, env=env, cwd=cwd)
        sampler = _Sampler(proc.pid, interval)
        sampler.start()
        # wait4 instead of proc.wait(): it also returns the rusage of the child and its reaped descendants.
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        # What the child's ru_maxrss may have inherited from this process: its RSS at the fork, which its peak read
        # now includes (read before the fork, a page touched between the two made the harness's size count as the
        # child's: a 400 MB harness once measured a 60 MB child at 416 MB).
        own_peak = own_peak_rss_bytes()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting again
        sampler.stop.set()
        sampler.join()
        out.seek(0)
        stdout = out.read().decode()
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv, stdout)
    waited = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    single = max(sampler.single, waited if waited > own_peak else 0)
    return Measurement(
        wall_s=wall,
        cpu_s=max(usage.ru_utime + usage.ru_stime, sum(sampler.cpu.values())),
        peak_rss_bytes=max(sampler.peak, single),
        max_single_rss_bytes=single,
        returncode=proc.returncode,
        stdout=stdout,
    )


def rows_only_in(con, a: str, b: str, params: dict[str, object] | None = None) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """Rows of query ``a`` that query ``b`` lacks, and of ``b`` that ``a`` lacks, as bags (EXCEPT ALL both ways, so
    duplicates count): (0, 0) when the two hold the same rows. ``con`` is a DuckDB connection."""
    ab, ba = (
        con.execute(f"SELECT count(*) FROM ({x} EXCEPT ALL {y})", params or {}).fetchall()[0][0]
        for x, y in ((a, b), (b, a))
    )
    return ab, ba


def median(values: list[float]) -> float:
    """The middle value (upper middle for an even count): one real run, not an average of two."""
    return sorted(values)[len(values) // 2]


def bootstrap_median(values: list[float], resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of the median of ``values`` resampled with replacement (a 95% interval)."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


def ratios(ours: list[Measurement], theirs: list[Measurement]) -> str:
    """'wall 3.1x, CPU 1.2x, peak RSS 0.4x' -- theirs / ours for time (> 1: we are faster / cheaper),
    ours / theirs for memory (< 1: we use less), over the medians of each side."""
    wall = median([m.wall_s for m in theirs]) / median([m.wall_s for m in ours])
    cpu = median([m.cpu_s for m in theirs]) / median([m.cpu_s for m in ours])
    rss = max(m.peak_rss_bytes for m in ours) / max(m.peak_rss_bytes for m in theirs)
    return f"wall {wall:.2f}x faster, CPU {cpu:.2f}x less, peak RSS {rss:.2f}x theirs"


def git_commit() -> str:
    """The commit the benchmark ran at, '+dirty' when the tree had uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
        return head + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def installed_env(pycache: Path) -> dict[str, str]:
    """This environment for a child that runs this tree's ``pipeline`` as an installed package runs: from compiled
    bytecode (pip compiles at install time), kept under ``pycache`` (a private ``PYTHONPYCACHEPREFIX``) even where
    ``PYTHONDONTWRITEBYTECODE`` is set, as on the development VMs: there every run compiled pipeline's sources again,
    ~0.05 s of a 0.6 s run of the 1.1 MB trace. Fill it with :func:`compile_tree` and one unmeasured run."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}", "PYTHONPYCACHEPREFIX": str(pycache)}


def compile_tree(env: dict[str, str], root: Path = ROOT) -> None:
    """Compile the ``pipeline`` of the tree at ``root`` (default: this one) under ``env``'s bytecode prefix
    (:func:`installed_env`); the modules of the standard library and site-packages a run imports are compiled
    there by that run."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "pipeline")], env=env, check=True)


def provenance(argv: list[str] | None = None) -> str:
    """Header lines for a results file: command, commit, date, machine."""
    command = shlex.join(argv if argv is not None else [Path(sys.executable).name, *sys.argv])
    return "\n".join(
        [
            f"# command: {command}",
            f"# commit:  {git_commit()}",
            f"# date:    {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
            f"# machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        ]
    )
