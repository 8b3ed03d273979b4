"""Chrome-trace normalizer vs the json.load + pandas baseline, on a synthetic trace shaped like the real one.

The synthetic trace replicates the real H200 small-CNN trace's events (shifted in time, with jittered gaps,
renumbered correlation / External / Python ids so links stay one-to-one) up to ``--mb`` megabytes, and is
written to a temp dir, never into the repo.  Each side runs in its own subprocess so its peak RSS
(``ru_maxrss``) is its own.

    PYTHONPATH=. python benchmarks/bench_chrome.py --mb 500 --repeat 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "h200_smallcnn" / "torch_trace.json.gz"


def _ns(us: float) -> int:
    # The sample's values have 3 decimals and are < 2**43 us, so this recovers the written ns exactly.
    whole = int(us // 1)
    return whole * 1000 + round((us - whole) * 1000)


def generate(dest: Path, mb: float, seed: int = 0) -> int:
    """Write a trace of about ``mb`` MB to ``dest``; return the number of events."""
    rnd = random.Random(seed)
    trace = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    events = trace.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M" and isinstance(e.get("pid"), int)]
    base = {id(e): (_ns(e["ts"]), e.get("args", {}).copy(), e.get("id")) for e in timed}
    t0 = min(v[0] for v in base.values())
    span = max(_ns(e["ts"]) + _ns(e.get("dur", 0)) for e in timed) - t0
    max_corr = max(e.get("args", {}).get("correlation", 0) for e in timed) + 1
    max_ext = max(e.get("args", {}).get("External id", 0) for e in timed) + 1
    max_py = max((e.get("args", {}).get("Python id") or 0) for e in timed) + 1
    head = msgspec.json.encode(trace)[:-1] + b', "traceEvents": [\n'
    target = int(mb * 1e6)
    written, n, rep, shift = 0, 0, 0, 0
    with open(dest, "wb") as f:
        f.write(head)
        body = b",\n".join(msgspec.json.encode(e) for e in meta)
        f.write(body)
        written += len(head) + len(body)
        n += len(meta)
        while written < target:
            parts = []
            for e in timed:
                ts_ns, args, flow_id = base[id(e)]
                e["ts"] = (ts_ns + shift) / 1000
                if args:
                    a = e["args"]
                    for key, step in (("correlation", max_corr), ("External id", max_ext)):
                        if key in args:
                            a[key] = args[key] + rep * step
                    for key in ("Python id", "Python parent id"):
                        if args.get(key) is not None:
                            a[key] = args[key] + rep * max_py
                if flow_id is not None:
                    e["id"] = flow_id + rep * max_corr
                parts.append(msgspec.json.encode(e))
            chunk = b",\n" + b",\n".join(parts)
            f.write(chunk)
            written += len(chunk)
            n += len(parts)
            rep += 1
            shift += span + rnd.randint(1_000, 50_000)  # 1-50 us idle gap between replicas
        f.write(b"\n]}\n")
    return n


def _child(mode: str, path: str) -> None:
    t = time.perf_counter()
    if mode == "baseline":
        import pandas as pd

        with open(path, "rb") as f:
            trace = json.load(f)
        df = pd.DataFrame(trace["traceEvents"])
        rows = len(df)
    elif mode == "decode":
        # The baseline's scope (JSON -> tables in memory), for comparison: the events decoded and merged
        # into one Arrow table per category, exact ns timestamps, nothing linked, sorted or written.
        from pipeline.normalize import chrome, chrome_decode

        with chrome._arrow_pool():
            _, got = chrome_decode.decode(Path(path))
            tables = [got.table(group) for group in got.parts]
        rows = sum(t.num_rows for t in tables if t is not None)
    else:
        from pipeline.normalize import normalize_file

        with tempfile.TemporaryDirectory(prefix="bench-chrome-") as out:
            res = normalize_file(Path(path), Path(out))
            rows = sum(res.rows.values())
    secs = time.perf_counter() - t
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # ours forks decode workers: their CPU counts too, and the largest one's peak RSS is shown apart (it
    # includes the pages of the memory-mapped input it read, which are shared page cache, not extra memory).
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    print(
        json.dumps(
            {"secs": secs, "rss": me.ru_maxrss * 1024, "worker_rss": kids.ru_maxrss * 1024, "cpu": cpu, "rows": rows}
        )
    )


def run(mode: str, path: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(path)], capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=500, help="size of the synthetic trace in MB (default 500)")
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs of each side, interleaved (default 3); medians are compared"
    )
    ap.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--keep", type=Path, help="write the synthetic trace here instead of a temp dir")
    args = ap.parse_args()
    if args.child:
        _child(*args.child)
        return
    with tempfile.TemporaryDirectory(prefix="bench-chrome-") as tmp:
        path = args.keep or Path(tmp) / "trace.json"
        t = time.perf_counter()
        n = generate(path, args.mb)
        size = path.stat().st_size
        print(f"synthetic trace: {size / 1e6:.0f} MB, {n} events (generated in {time.perf_counter() - t:.1f} s)")
        # Interleaved (ours, baseline, ours, ...) so that a slow spell of a shared machine hits both sides.
        runs: dict[str, list[dict]] = {"ours": [], "decode": [], "baseline": []}
        sides = (("ours", "tracepipe normalize"), ("decode", "  its decode stage"), ("baseline", "json.load + pandas"))
        for i in range(args.repeat):
            for mode, name in sides:
                r = run(mode, path)
                runs[mode].append(r)
                workers = f", largest worker {r['worker_rss'] / 1e6:.0f} MB" if r["worker_rss"] else ""
                print(
                    f"run {i + 1} {name:22s} {r['secs']:7.2f} s  {size / 1e6 / r['secs']:7.1f} MB/s  "
                    f"CPU {r['cpu']:6.2f} s  peak RSS {r['rss'] / 1e6:7.0f} MB ({r['rss'] / size:.2f}x file{workers})"
                )
        ours, decode, base = ([r["secs"] for r in runs[m]] for m, _ in sides)
        rss = max(r["rss"] for r in runs["ours"])
        print(
            f"median: ours {_median(ours):.2f} s, baseline {_median(base):.2f} s; "
            f"speedup: {_median(base) / _median(ours):.1f}x (best runs: {min(base) / min(ours):.1f}x); "
            f"ours peak RSS {rss / size:.2f}x the file, {rss / max(r['rss'] for r in runs['baseline']):.2f}x baseline's"
        )
        print(
            f"decode stage alone (the baseline's scope: JSON -> tables in memory): median {_median(decode):.2f} s, "
            f"{_median(base) / _median(decode):.1f}x the baseline"
        )


if __name__ == "__main__":
    main()
