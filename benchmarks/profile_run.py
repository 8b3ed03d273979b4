"""Where one ``tracepipe run`` spends wall time, CPU and memory, stage by stage (#44 deliverable 1).

    python benchmarks/profile_run.py INPUT [--view V ...] [--rounds 3] [--cprofile 25] [--analyze-only]

Each round runs ``tracepipe run INPUT --out TMP -q [--view V ...]`` in a fresh interpreter whose library functions
are wrapped by timers (nothing in ``pipeline/`` changes), from compiled bytecode as an installed package runs
(``_measure.installed_env``, filled by one unmeasured round first):

* stages: the import of ``pipeline.cli``; normalize's SQLite reads (ADBC), the Arrow work on what they return
  (``read+convert``: raw columns joined, numbered, conformed; a chrome trace's decode and mapping), each table's
  Parquet write, nesting, checks, commit; analyze's connect (views over the Parquet files, memory limit) and each
  view (its computation and Parquet write together: DuckDB streams one into the other), and what is left.
  Each figure is the stage's own (exclusive) time: a stage called inside another is not counted twice.
* wall: ``perf_counter``; CPU: ``process_time`` (every thread of the process, DuckDB's included) plus reaped
  children; a stage run on another Python thread (views computed side by side on a small input, chrome's ops
  thread) is listed apart with that thread's own CPU (``thread_time``) and its wall interval.
* memory: the RSS of the process and its children sampled every 2 ms; each stage's line gives the peak seen while
  it was the innermost stage of the main thread.
* ``--cprofile N``: the N Python functions with the most own time (one extra round, not in the medians).
* ``--analyze-only``: normalize once beforehand and profile ``tracepipe analyze`` (the ``sql`` shell's reads).

The outer figures (``process``) are the child's own wall from interpreter start to exit and the CPU and peak RSS
of its process tree (``_measure.measure``), so the per-stage rows can be checked against them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import ROOT, compile_tree, installed_env, measure, provenance

# The child: timers installed before the command runs; the report goes to the file named in argv[1].
CHILD = r"""
import sys, time, os, threading, resource, json
T0 = time.perf_counter()
C0 = time.process_time()
report_path, argv, prof_n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
PAGE = os.sysconf("SC_PAGE_SIZE")

def tree_rss(pid):
    try:
        with open(f"/proc/{pid}/statm") as f:
            rss = int(f.read().split()[1]) * PAGE
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
    except OSError:
        return 0
    return rss + sum(tree_rss(k) for k in kids)

stats, tstats, local = {}, {}, threading.local()
MAIN = threading.main_thread()
current = ["(start)"]
peak = {}

def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

def cpu_now():
    return time.process_time() + children_cpu()

class Stage:
    __slots__ = ("label", "w", "c", "cw", "cc", "main")
    def __init__(self, label):
        self.label = label
    def __enter__(self):
        self.main = threading.current_thread() is MAIN
        stack = local.__dict__.setdefault("stack", [])
        self.w = time.perf_counter()
        self.c = cpu_now() if self.main else time.thread_time()
        self.cw = self.cc = 0.0
        stack.append(self)
        if self.main:
            current[0] = self.label
        return self
    def __exit__(self, *exc):
        stack = local.stack
        stack.pop()
        dw = time.perf_counter() - self.w
        dc = (cpu_now() if self.main else time.thread_time()) - self.c
        if stack:
            stack[-1].cw += dw
            stack[-1].cc += dc
        table = stats if self.main else tstats
        s = table.setdefault(self.label, [0.0, 0.0, 0])
        s[0] += dw - self.cw
        s[1] += dc - self.cc
        s[2] += 1
        if self.main:
            current[0] = stack[-1].label if stack else "(other)"

def sampler():
    pid = os.getpid()
    while not done.is_set():
        rss = tree_rss(pid)
        lab = current[0]
        if rss > peak.get(lab, 0):
            peak[lab] = rss
        time.sleep(0.002)

done = threading.Event()
threading.Thread(target=sampler, daemon=True).start()

def wrap(owner, name, label):
    fn = getattr(owner, name)
    def timed(*a, **k):
        with Stage(label(a, k) if callable(label) else label):
            return fn(*a, **k)
    setattr(owner, name, timed)

def wrap_gen(owner, name, label):
    fn = getattr(owner, name)
    def timed(*a, **k):
        it = iter(fn(*a, **k))
        lab = label(a, k) if callable(label) else label
        while True:
            with Stage(lab):
                try:
                    x = next(it)
                except StopIteration:
                    return
            yield x
    setattr(owner, name, timed)

with Stage("import pipeline.cli (+ pyarrow, duckdb, click)"):
    import pipeline.cli
current[0] = "(other)"

import pipeline.analyze as an
import pipeline.analyze.engine as engine
import pipeline.analyze.write as write
import pipeline.normalize.batch as batch
import pipeline.normalize.chrome as chrome
import pipeline.normalize.nsys as nsys
import pipeline.normalize.sqlite_reader as sr
import pipeline.store as store

wrap(batch, "normalize_one", "normalize: other (detect, open, sha256, trace_meta)")
wrap(store.TraceWriter, "commit", "normalize: commit")
wrap(nsys, "with_nesting", "normalize: nvtx nesting")
wrap(nsys, "split_op_ranges", "normalize: op ranges split")
wrap(nsys, "_usable_tables", "normalize: sqlite schema checks")
wrap(nsys, "_unended_ranges", "normalize: sqlite schema checks")
wrap(nsys, "whole_graph_warning", "normalize: sqlite schema checks")
wrap(nsys, "read_meta", "normalize: sqlite schema checks")
wrap(nsys, "_missing_columns", "normalize: sqlite schema checks")
wrap(sr.Sqlite, "arrow", "normalize: sqlite read (ADBC)")
wrap_gen(sr.Sqlite, "batches", "normalize: sqlite read (ADBC)")
wrap_gen(sr.Sqlite, "chunked_batches", "normalize: sqlite read (ADBC)")
wrap(chrome, "decode", "normalize: chrome decode (JSON -> Arrow)")
wrap(chrome, "_without_duplicates", "normalize: chrome duplicates")
wrap(chrome, "_ranges", "normalize: chrome ranges")
wrap(chrome, "_ops", "normalize: chrome ops + call stacks")
wrap(chrome, "count_in", "normalize: checks")
wrap(chrome, "_write_tables", "normalize: chrome tables (mapping)")
orig_write_batches = store.TraceWriter.write_batches
def write_batches(self, table, batches):
    def produced():
        it = iter(batches)
        while True:
            with Stage(f"normalize: read+convert {table}"):
                try:
                    x = next(it)
                except StopIteration:
                    return
            yield x
    with Stage(f"normalize: parquet write {table}"):
        return orig_write_batches(self, table, produced())
store.TraceWriter.write_batches = write_batches
for mod in (an, engine):
    wrap(mod, "connect", "analyze: connect (register tables, macros)")
for mod in (an, write):
    wrap(mod, "write_views", "analyze: views, other (create view, plan)")
wrap(write, "copy_view", lambda a, k: f"view {a[1]}")
wrap(write, "read_back", "analyze: read-back of a written view")

import concurrent.futures as cf
class Pool(cf.ThreadPoolExecutor):
    def submit(self, fn, *a, **k):
        label = f"view {a[0]} (create + copy)" if a and isinstance(a[0], str) else getattr(fn, "__name__", "task")
        def timed(*a2, **k2):
            with Stage(label):
                return fn(*a2, **k2)
        return super().submit(timed, *a, **k)
class _Futures:
    ThreadPoolExecutor = Pool
    wait = staticmethod(cf.wait)
    FIRST_COMPLETED = cf.FIRST_COMPLETED
    Future = cf.Future
class _Concurrent:
    futures = _Futures
write.concurrent = _Concurrent

if prof_n:
    import cProfile, pstats, io
    prof = cProfile.Profile()
    prof.enable()

import pipeline.lean as lean
orig_exit = lean.exit_without_teardown
def report_and_exit(code):
    if prof_n:
        prof.disable()
    done.set()
    out = {"wall": time.perf_counter() - T0, "cpu": cpu_now() - C0, "stages": stats, "threads": tstats,
           "peak": peak, "maxrss_self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if prof_n:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(prof_n)
        out["cprofile"] = s.getvalue()
    with open(report_path, "w") as f:
        json.dump(out, f)
    time.sleep(0.005)
    orig_exit(code)
lean.exit_without_teardown = report_and_exit
sys.argv = ["tracepipe", *argv]
pipeline.cli.run()
"""


def one_round(argv: list[str], env: dict[str, str], prof_n: int = 0) -> tuple[dict, object]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        report = Path(f.name)
    try:
        m = measure([sys.executable, "-c", CHILD, str(report), json.dumps(argv), str(prof_n)], env=env, cwd=ROOT)
        if m.returncode != 0:
            raise SystemExit(f"round failed ({m.returncode}): {m.stdout[-2000:]}")
        return json.loads(report.read_text()), m
    finally:
        report.unlink(missing_ok=True)


def import_breakdown(env: dict[str, str]) -> list[tuple[str, float]]:
    """Cumulative import time of each top-level package under ``import pipeline.cli`` (``-X importtime``)."""
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import pipeline.cli"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    own: dict[str, float] = {}
    for line in r.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = (p.strip() for p in line[len("import time:") :].split("|"))
        top = name.strip().split(".")[0]
        own[top] = own.get(top, 0.0) + int(self_us) / 1e6
    return sorted(own.items(), key=lambda kv: -kv[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", type=Path)
    p.add_argument("--view", action="append", default=[])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cprofile", type=int, default=0, metavar="N")
    p.add_argument("--analyze-only", action="store_true")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="profile-run-"))
    views = [a for v in args.view for a in ("--view", v)]
    if args.analyze_only:
        subprocess.run(
            [sys.executable, "-m", "pipeline", "normalize", str(args.input), "--out", str(tmp / "n"), "-q"], check=True
        )

    def argv() -> list[str]:
        shutil.rmtree(tmp / "o", ignore_errors=True)
        if args.analyze_only:
            return ["analyze", str(tmp / "n"), "--out", str(tmp / "o"), "-q", *views]
        return ["run", str(args.input), "--out", str(tmp / "o"), "-q", *views]

    env = installed_env(tmp / "pycache")  # from compiled bytecode, as an installed package runs
    compile_tree(env)
    one_round(argv(), env)  # unmeasured: the bytecode of what a run imports, the input in the page cache
    print(provenance())
    size = args.input.stat().st_size
    print(f"# input: {args.input} ({size / 2**20:.1f} MiB); cores allowed: {len(os.sched_getaffinity(0))}")
    reports, outer = [], []
    for _ in range(args.rounds):
        rep, m = one_round(argv(), env)
        reports.append(rep)
        outer.append(m)
    med = statistics.median
    wall, cpu = med(m.wall_s for m in outer), med(m.cpu_s for m in outer)
    rss = med(m.peak_rss_bytes for m in outer) / 1e6
    inner_wall, inner_cpu = med(r["wall"] for r in reports), med(r["cpu"] for r in reports)
    print(
        f"process (median of {args.rounds}): wall {wall:.3f} s, CPU {cpu:.3f} s, peak RSS (tree) {rss:.0f} MB;"
        f" in-process from first line to exit: wall {inner_wall:.3f} s, CPU {inner_cpu:.3f} s"
    )
    labels = list(dict.fromkeys(k for r in reports for k in r["stages"]))
    rows = []
    for lab in labels:
        w = med(r["stages"].get(lab, [0, 0, 0])[0] for r in reports)
        c = med(r["stages"].get(lab, [0, 0, 0])[1] for r in reports)
        n = max(r["stages"].get(lab, [0, 0, 0])[2] for r in reports)
        pk = med(r["peak"].get(lab, 0) for r in reports) / 1e6
        rows.append((lab, w, c, pk, n))
    rest_w = med(r["wall"] - sum(s[0] for s in r["stages"].values()) for r in reports)
    rest_c = med(r["cpu"] - sum(s[1] for s in r["stages"].values()) for r in reports)
    rows.append(
        (
            "(outside every stage: click, progress, exit)",
            rest_w,
            rest_c,
            med(r["peak"].get("(other)", 0) for r in reports) / 1e6,
            1,
        )
    )
    print(f"\n{'stage (own time, main thread)':62s} {'wall s':>7s} {'CPU s':>7s} {'peak MB':>8s} {'calls':>6s}")
    for lab, w, c, pk, n in sorted(rows, key=lambda r: -r[2]):
        print(f"{lab[:62]:62s} {w:7.3f} {c:7.3f} {pk:8.0f} {n:6d}")
    tl = list(dict.fromkeys(k for r in reports for k in r["threads"]))
    if tl:
        print(f"\n{'on other threads (own CPU of that thread)':62s} {'wall s':>7s} {'CPU s':>7s}")
        trows = [
            (
                lab,
                med(r["threads"].get(lab, [0, 0])[0] for r in reports),
                med(r["threads"].get(lab, [0, 0])[1] for r in reports),
            )
            for lab in tl
        ]
        for lab, w, c in sorted(trows, key=lambda r: -r[2]):
            print(f"{lab[:62]:62s} {w:7.3f} {c:7.3f}")
    print("\nimport pipeline.cli, own import time per top-level package (-X importtime, one run):")
    imp = import_breakdown(env)
    print("  " + ", ".join(f"{name} {s:.3f}" for name, s in imp[:12]) + f"; all {sum(s for _, s in imp):.3f} s")
    if args.cprofile:
        rep, _ = one_round(argv(), env, args.cprofile)
        print(f"\ncProfile (one more round), top {args.cprofile} by own time:")
        print("\n".join(line for line in rep["cprofile"].splitlines() if line.strip())[:6000])
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
