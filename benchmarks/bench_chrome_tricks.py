"""What each remaining speed trick of the chrome decode buys: ``tracepipe normalize`` on the synthetic trace of
``bench_chrome.py``, as shipped and with one trick switched off at a time (patched in the child process, never
in the code), runs interleaved so a slow spell of the shared machine hits every variant.  A trick keeps its
place only if switching it off costs >= 10% (median CPU time of the whole process tree, and wall time).

    PYTHONPATH=. python benchmarks/bench_chrome_tricks.py --mb 100 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_chrome import generate  # noqa: E402

#: variant -> what is switched off.
VARIANTS = {
    "shipped": "nothing",
    "no_fast_route": "the one-pass tagged-union decode (every piece decoded the general way)",
    "pool": "forked.py's transport (multiprocessing Pool of forked workers instead, pandas still blocked)",
    "no_pandas_block": "the pandas import blocker in workers and the parent's background import",
}


def _patch(variant: str) -> None:
    from pipeline.normalize import chrome_decode

    if variant == "no_fast_route":

        class Reject:
            def decode(self, chunk: bytes) -> None:
                raise chrome_decode.msgspec.ValidationError("fast route off")

        chrome_decode._TAGGED = Reject()  # every piece then goes the general route
    elif variant == "pool":
        import multiprocessing

        def imap(fn, count: int, children: int, init=None):  # same signature as forked.imap
            with multiprocessing.get_context("fork").Pool(children, initializer=init) as pool:
                yield from pool.imap(fn, range(count))
                pool.close()
                pool.join()

        chrome_decode.forked.imap = imap
    elif variant == "no_pandas_block":
        chrome_decode._without_pandas = lambda: None
        chrome_decode._warm_pyarrow = lambda: type("T", (), {"join": lambda self: None})()


def _child(variant: str, path: str) -> None:
    _patch(variant)
    from pipeline.normalize import normalize_file

    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-tricks-") as out:
        rows = sum(normalize_file(Path(path), Path(out)).rows.values())
    secs = time.perf_counter() - t
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    print(json.dumps({"secs": secs, "cpu": cpu, "rows": rows}))


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(*args.child)
        return
    with tempfile.TemporaryDirectory(prefix="bench-tricks-") as tmp:
        path = Path(tmp) / "trace.json"
        n = generate(path, args.mb)
        print(f"synthetic trace: {path.stat().st_size / 1e6:.0f} MB, {n} events")
        runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for i in range(args.repeat):
            for v in VARIANTS:
                proc = subprocess.run(
                    [sys.executable, __file__, "--child", v, str(path)], capture_output=True, text=True, check=True
                )
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                runs[v].append(r)
                print(f"run {i + 1} {v:16s} wall {r['secs']:6.2f} s  CPU {r['cpu']:6.2f} s  rows {r['rows']}")
        base_wall = _median([r["secs"] for r in runs["shipped"]])
        base_cpu = _median([r["cpu"] for r in runs["shipped"]])
        for v, what in VARIANTS.items():
            wall, cpu = _median([r["secs"] for r in runs[v]]), _median([r["cpu"] for r in runs[v]])
            print(
                f"median {v:16s} wall {wall:6.2f} s ({wall / base_wall - 1:+.0%})  "
                f"CPU {cpu:6.2f} s ({cpu / base_cpu - 1:+.0%})  off: {what}"
            )


if __name__ == "__main__":
    main()
