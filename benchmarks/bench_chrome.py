"""Chrome-trace normalizer vs the json.load + pandas baseline, on a synthetic trace shaped like the real one.

The synthetic trace replicates the real H200 small-CNN trace's events (shifted in time, with jittered gaps,
renumbered correlation / External / Python ids so links stay one-to-one) up to ``--mb`` megabytes, and is
written to a temp dir, never into the repo.  Each side runs in its own subprocess: wall and CPU time (its decode
workers' CPU included) of its timed section, and the peak RSS of its whole process tree sampled from outside
(``benchmarks/_measure.py``).  Both sides' kernels are compared one by one (correlation id, start, duration).

    PYTHONPATH=. python benchmarks/bench_chrome.py --mb 500 --repeat 3
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._measure import measure, median, provenance

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


def _kernel_digest(rows: list[tuple[int, int, int]]) -> dict:
    """Per-kernel fingerprint: (correlation id, start ns, duration ns) of every kernel, sorted and hashed, so
    the two sides are compared kernel by kernel, not by a count."""
    h = hashlib.sha256()
    for row in sorted(rows):
        h.update(b"%d,%d,%d;" % row)
    return {"kernels": len(rows), "kernel_sha256": h.hexdigest()}


def _child(mode: str, path: str) -> None:
    """One side, in its own process.  Wall and CPU are of the timed section (the work, not the interpreter
    start or the per-kernel check after it); CPU includes the decode workers it forked and reaped."""
    t = time.perf_counter()
    check: dict = {}
    if mode == "baseline":
        import pandas as pd

        with open(path, "rb") as f:
            trace = json.load(f)
        df = pd.DataFrame(trace["traceEvents"])
        rows = len(df)
    elif mode == "decode":
        # The baseline's scope (JSON -> tables in memory), for comparison: the events decoded and merged
        # into one Arrow table per category, exact ns timestamps, nothing linked, sorted or written.
        from pipeline.normalize import chrome_decode

        _, got = chrome_decode.decode(Path(path))
        tables = [got.table(group) for group in got.parts]
        rows = sum(t.num_rows for t in tables if t is not None)
    else:
        from pipeline.normalize import normalize_file

        out = tempfile.TemporaryDirectory(prefix="bench-chrome-")
        res = normalize_file(Path(path), Path(out.name))
        rows = sum(res.rows.values())
    secs = time.perf_counter() - t
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    if mode == "baseline":
        k = df[df["cat"] == "kernel"]
        check = _kernel_digest(
            [(a["correlation"], _ns(ts), _ns(d)) for a, ts, d in zip(k["args"], k["ts"], k["dur"], strict=True)]
        )
    elif mode == "ours":
        import pyarrow.dataset as pads

        table = pads.dataset(Path(out.name) / "kernels", format="parquet").to_table(
            columns=["correlation_id", "start_ns", "duration_ns"]
        )
        check = _kernel_digest(list(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True)))
        out.cleanup()
    print(json.dumps({"secs": secs, "cpu": cpu, "rows": rows, **check}))


def run(mode: str, path: Path) -> dict:
    """The side's own timed figures plus the peak RSS of its whole process tree (benchmarks/_measure.py)."""
    m = measure([sys.executable, __file__, "--child", mode, str(path)])
    return {**json.loads(m.stdout.strip().splitlines()[-1]), "rss": m.peak_rss_bytes}


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
    print(provenance())
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
                print(
                    f"run {i + 1} {name:22s} wall {r['secs']:7.2f} s  {size / 1e6 / r['secs']:7.1f} MB/s  "
                    f"CPU {r['cpu']:6.2f} s  peak RSS (process tree) {r['rss'] / 1e6:6.0f} MB "
                    f"({r['rss'] / size:.2f}x file)",
                    flush=True,
                )
                if mode == "ours":
                    # Every run, against the baseline's first: the same kernels, kernel by kernel.
                    ref = runs["baseline"][0] if runs["baseline"] else None
                    assert ref is None or (r["kernels"], r["kernel_sha256"]) == (ref["kernels"], ref["kernel_sha256"])
        base_k = {(r["kernels"], r["kernel_sha256"]) for r in runs["baseline"]}
        ours_k = {(r["kernels"], r["kernel_sha256"]) for r in runs["ours"]}
        assert len(base_k) == 1 and ours_k == base_k, (ours_k, base_k)
        print(
            f"per-kernel check: every run of both sides gave the same {runs['ours'][0]['kernels']:,} kernels "
            f"(correlation id, start ns, duration ns; sha256 {runs['ours'][0]['kernel_sha256'][:16]})"
        )

        def med(mode: str, key: str) -> float:
            return median([r[key] for r in runs[mode]])

        rss = {m: max(r["rss"] for r in runs[m]) for m in runs}
        print(
            f"median wall: ours {med('ours', 'secs'):.2f} s, baseline {med('baseline', 'secs'):.2f} s -> "
            f"{med('baseline', 'secs') / med('ours', 'secs'):.1f}x; median CPU: ours {med('ours', 'cpu'):.2f} s, "
            f"baseline {med('baseline', 'cpu'):.2f} s -> {med('baseline', 'cpu') / med('ours', 'cpu'):.1f}x; "
            f"peak RSS (process tree): ours {rss['ours'] / size:.2f}x the file, baseline {rss['baseline'] / size:.2f}x"
        )
        print(
            f"decode stage alone (the baseline's scope: JSON -> tables in memory): median wall "
            f"{med('decode', 'secs'):.2f} s ({med('baseline', 'secs') / med('decode', 'secs'):.1f}x), CPU "
            f"{med('decode', 'cpu'):.2f} s ({med('baseline', 'cpu') / med('decode', 'cpu'):.1f}x)"
        )


if __name__ == "__main__":
    main()
