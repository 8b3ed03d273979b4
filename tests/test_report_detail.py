"""The report's per-layer detail (issue 20.2/20.3) against numbers computed here from the raw sample files:
the small-CNN nsys sqlite (plain sqlite3 + statistics), its ncu raw CSV (csv module) and the --sm-counters
ncu capture; each view's rule is re-done in plain Python, then the view and the HTML cell are compared."""

from __future__ import annotations

import csv
import gzip
import io
import math
import re
import sqlite3
import statistics
from pathlib import Path

import polars as pl
import pytest

from pipeline.analyze import connect, view_files, write_views
from pipeline.normalize import normalize_file
from pipeline.report.build import build_report
from pipeline.report.html import pct, us
from tests.conftest import SAMPLES, SMALLCNN

TRACE = "h200_smallcnn.nsys"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The small CNN's nsys + ncu raw capture and the ncu-only --sm-counters capture, analysed and reported."""
    norm, out, rep = (tmp_path_factory.mktemp(n) for n in ("n", "a", "r"))
    spread = SAMPLES / "h200_sm_spread_smallcnn/ncu_raw.csv.gz"
    for f in (SMALLCNN / "nsys.sqlite.gz", SMALLCNN / "ncu_raw.csv", spread):
        normalize_file(f, norm)
    write_views(connect(norm, materialize=True), out, list(view_files()), ("parquet",))
    build_report(out, rep)
    return out, (rep / "report.html").read_text()


def view(out: Path, name: str, trace: str = TRACE) -> pl.DataFrame:
    return pl.read_parquet(out / f"{name}.parquet").filter(pl.col("trace_id") == trace)


def section(html: str, trace: str) -> str:
    return re.search(rf'<section id="{re.escape(trace)}">(.*?)</section>', html, re.S).group(1)


def cells(*values: str) -> str:
    return "".join(f"<td>{v}</td>" for v in values)


def close(a: float | None, b: float | None, tol: float = 1e-6) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and abs(a - b) <= tol * max(1, abs(b)))


def raw_kernels(db: sqlite3.Connection) -> list[tuple]:
    return db.execute(
        """SELECT s.value, k."end" - k.start, k.correlationId, k.start, k."end", k.gridX, k.gridY, k.gridZ,
                  k.blockX, k.blockY, k.blockZ, sh.value
           FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
           JOIN StringIds sh ON sh.id = k.shortName ORDER BY k.correlationId"""
    ).fetchall()


def raw_path(db: sqlite3.Connection, corr: int) -> str | None:
    """Enclosing push/pop ranges of the launching runtime call on its thread, outermost first."""
    rows = db.execute(
        """SELECT n.text FROM CUPTI_ACTIVITY_KIND_RUNTIME r
           JOIN NVTX_EVENTS n ON n.eventType = 59 AND n.globalTid = r.globalTid
            AND n.start <= r.start AND r.start <= n."end"
           WHERE r.correlationId = ? ORDER BY n.start""",
        [corr],
    ).fetchall()
    return "/".join(t for (t,) in rows) or None


def test_kernel_name_summary_is_nsys_cuda_gpu_kern_sum(built: tuple[Path, str], nsys_sqlite: Path) -> None:
    """Per demangled name: total, instances, avg, median, min, max and the *sample* stddev, as nsys defines them."""
    out, html = built
    db = sqlite3.connect(nsys_sqlite)
    by_name: dict[str, list[int]] = {}
    for name, dur, *_ in raw_kernels(db):
        by_name.setdefault(name, []).append(dur)
    total = sum(sum(d) for d in by_name.values())
    got = {r["name"]: r for r in view(out, "kernel_name_summary").iter_rows(named=True)}
    assert set(got) == set(by_name)
    odd_even = set()
    for name, d in by_name.items():
        r = got[name]
        assert (r["instances"], r["total_ns"], r["min_ns"], r["max_ns"]) == (len(d), sum(d), min(d), max(d))
        assert close(r["avg_ns"], statistics.fmean(d)) and close(r["med_ns"], statistics.median(d))
        assert close(r["stddev_ns"], statistics.stdev(d) if len(d) > 1 else None)
        assert close(r["time_pct"], 100 * sum(d) / total)
        odd_even.add(len(d) % 2)
    assert odd_even == {0, 1}  # both median rules (middle one, mean of the middle two) are exercised
    # the page's row of the top kernel: Time %, Total, Instances, Avg, Med, Min, Max, StdDev
    name, d = max(by_name.items(), key=lambda kv: sum(kv[1]))
    row = cells(pct(100 * sum(d) / total), us(sum(d)), str(len(d)), us(statistics.fmean(d)), us(statistics.median(d)),
                us(min(d)), us(max(d)), us(statistics.stdev(d)))  # fmt: skip
    assert row in section(html, TRACE)


def test_memory_operations_per_layer_from_the_raw_tables(built: tuple[Path, str], nsys_sqlite: Path) -> None:
    out, html = built
    db = sqlite3.connect(nsys_sqlite)
    kinds = dict(db.execute("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER"))
    want: dict[tuple, list[int]] = {}
    for table, kind_col in (("MEMCPY", "copyKind"), ("MEMSET", "NULL")):
        for corr, kind, nbytes, dur in db.execute(
            f'SELECT correlationId, {kind_col}, bytes, "end" - start FROM CUPTI_ACTIVITY_KIND_{table}'
        ).fetchall():
            key = (raw_path(db, corr), table.lower(), kinds.get(kind))
            acc = want.setdefault(key, [0, 0, 0])
            acc[0], acc[1], acc[2] = acc[0] + 1, acc[1] + nbytes, acc[2] + dur
    rows = view(out, "layer_memory_ops").select("path", "op_kind", "copy_kind", "count", "bytes", "duration_ns")
    got = {(p, o, k): [c, b, t] for p, o, k, c, b, t in rows.iter_rows()}
    assert got == want and len(want) >= 2, (got, want)
    (_, _, kind), (n, nbytes, dur) = max(want.items(), key=lambda kv: kv[1][2])
    assert f'<td class="name">{kind}</td><td>{n}</td>' in section(html, TRACE)
    assert f"<td>{us(dur)}</td><td>{nbytes / dur:.2f}</td>" in section(html, TRACE)


def test_step_idle_and_launch_gaps_re_derived(built: tuple[Path, str], nsys_sqlite: Path) -> None:
    """step_gpu_idle's rule done with a plain interval sweep over the raw tables: the `step` range's window, the
    union of every GPU operation in it, and each idle gap split by whether its next operation was already launched."""
    out, html = built
    db = sqlite3.connect(nsys_sqlite)
    s0, s1 = db.execute("SELECT start, \"end\" FROM NVTX_EVENTS WHERE eventType = 59 AND text = 'step'").fetchone()
    ops = []  # (start, end, launching call start)
    for table in ("KERNEL", "MEMCPY", "MEMSET"):
        ops += db.execute(
            f"""SELECT o.start, o."end", r.start FROM CUPTI_ACTIVITY_KIND_{table} o
                JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)"""
        ).fetchall()
    own = [o for o in ops if s0 <= o[2] <= s1]
    w0, w1 = s0, max(s1, max(e for _, e, _ in own))
    busy_end, idle_launch, idle_host, busy = None, 0, 0, 0
    for s, e, call in sorted((max(s, w0), min(e, w1), c) for s, e, c in ops if s < w1 and e > w0):
        if busy_end is None or s > busy_end:
            gap = s - (w0 if busy_end is None else busy_end)
            if busy_end is not None and call <= busy_end:
                idle_launch += gap
            else:
                idle_host += gap
            busy_end = e
            busy += e - s
        elif e > busy_end:
            busy += e - busy_end
            busy_end = e
    idle_host += w1 - busy_end
    (r,) = view(out, "step_gpu_idle").iter_rows(named=True)
    assert (r["step"], r["step_name"], r["wall_ns"], r["ops"]) == (1, "step", w1 - w0, len(own))
    assert (r["busy_ns"], r["idle_ns"]) == (busy, w1 - w0 - busy)
    assert (r["launch_gap_ns"], r["host_wait_ns"]) == (idle_launch, idle_host) and idle_launch > 0
    row = cells(us(w1 - w0), us(busy), us(w1 - w0 - busy), pct(100 * (w1 - w0 - busy) / (w1 - w0)), us(idle_launch))
    assert row in section(html, TRACE)


def ncu_rows(path: Path) -> list[dict[str, str]]:
    raw = gzip.open(path, "rt") if path.suffix == ".gz" else open(path)  # noqa: SIM115
    with raw:
        lines = [ln for ln in raw if not ln.startswith("==")]
    lines = lines[next(i for i, ln in enumerate(lines) if ln.startswith('"ID"')) :]  # program output before it
    return [r for r in csv.DictReader(io.StringIO("".join(lines))) if r["ID"].isdigit()]


def test_waves_tail_and_measured_occupancy_against_ncu(built: tuple[Path, str], nsys_sqlite: Path) -> None:
    """ncu profiled every launch of the same program in the same order: the i-th ncu row measured the i-th kernel.
    Per (path, kernel, grid, block): ncu's achieved occupancy beside ours, and our estimated waves per SM and
    last-wave fill equal to ncu's launch__waves_per_multiprocessor."""
    out, html = built
    db = sqlite3.connect(nsys_sqlite)
    kernels, ncu = raw_kernels(db), ncu_rows(SMALLCNN / "ncu_raw.csv")
    assert len(kernels) == len(ncu) == 33
    groups: dict[tuple, list[tuple[float, float, float]]] = {}
    for k, n in zip(kernels, ncu, strict=True):
        _, _, corr, *_, gx, gy, gz, bx, by, bz, short = k
        key = (raw_path(db, corr), short, f"{gx}×{gy}×{gz}", f"{bx}×{by}×{bz}")
        # the last wave's fill from ncu's own launch numbers: grid size, SMs and its resident-block limit
        limits = ("barriers", "blocks", "registers", "shared_mem", "warps")
        num = lambda m: float(n[m].replace(",", ""))  # noqa: B023, E731  (ncu writes thousands separators)
        slots = num("launch__sm_count") * min(num(f"launch__occupancy_limit_{x}") for x in limits)
        blocks = num("launch__grid_size")
        assert blocks == gx * gy * gz  # same launch in both runs
        fill = 100 * (blocks - (math.ceil(blocks / slots) - 1) * slots) / slots
        occ, waves = num("sm__warps_active.avg.pct_of_peak_sustained_active"), num("launch__waves_per_multiprocessor")
        groups.setdefault(key, []).append((occ, waves, fill))
    rows = view(out, "layer_kernel_summary").iter_rows(named=True)
    got = {(r["path"], r["short_name"], r["grid"], r["block"]): r for r in rows}
    assert set(got) == set(groups)
    for key, meas in groups.items():
        r = got[key]
        assert r["ncu_launches"] == len(meas)
        assert close(r["ncu_achieved_occupancy_pct"], statistics.fmean(m[0] for m in meas)), key
        waves = statistics.fmean(m[1] for m in meas)
        assert abs(r["waves_per_sm"] - waves) < 0.006, (key, r["waves_per_sm"], waves)  # ncu prints 2 decimals
        fill = statistics.fmean(m[2] for m in meas)
        assert close(r["tail_fill_pct"], fill), (key, r["tail_fill_pct"], fill)
    # the page: ncu's measured occupancy of each row beside the estimate
    own = section(html, TRACE)
    assert "achieved % (ncu, measured)" in own
    for key, meas in groups.items():
        assert f"<td>{pct(statistics.fmean(m[0] for m in meas))}</td>" in own, key


def test_measured_sm_spread_beside_the_model(built: tuple[Path, str]) -> None:
    """layer_sm_spread against the --sm-counters CSV: per layer and kernel, ncu's per-SM .min/.avg/.max of
    blocks and active cycles; shown in the ncu-only section, and the cycles of the small CNN's own ncu run
    in its trace section."""
    out, html = built
    want: dict[tuple[str, str], list[dict[str, str]]] = {}
    for r in ncu_rows(SAMPLES / "h200_sm_spread_smallcnn/ncu_raw.csv.gz"):
        # the NVTX stack column: quoted ranges outermost first, each ending in its message (the range text)
        nvtx = r["thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"]
        want.setdefault((re.findall(r'"([^"]*)"', nvtx)[-1].split(":")[-1], r["Kernel Name"]), []).append(r)
    got = view(out, "layer_sm_spread", "h200_sm_spread_smallcnn.ncu_raw")
    assert {(g["layer"], g["name"]) for g in got.iter_rows(named=True)} == set(want)
    for g in got.iter_rows(named=True):
        rows = want[(g["layer"], g["name"])]
        f = lambda m, rows=rows: [float(r[m]) for r in rows]  # noqa: E731
        assert g["launches"] == len(rows)
        assert (g["ctas_min"], g["ctas_max"]) == (min(f("sm__ctas_launched.min")), max(f("sm__ctas_launched.max")))
        assert (g["cycles_min"], g["cycles_max"]) == (min(f("sm__cycles_active.min")), max(f("sm__cycles_active.max")))
        assert close(g["ctas_avg"], statistics.fmean(f("sm__ctas_launched.avg")))
        assert close(g["cycles_avg"], statistics.fmean(f("sm__cycles_active.avg")))
        ratios = [mx / av for mx, av in zip(f("sm__cycles_active.max"), f("sm__cycles_active.avg"), strict=True)]
        assert close(g["cycle_max_over_avg"], statistics.fmean(ratios))
    only = re.search(r'<section id="ncu-sm-spread">(.*?)</section>', html, re.S).group(1)
    assert "h200_sm_spread_smallcnn.ncu_raw" in only and "min blocks/SM" in only
    # the fc gemm: 2 blocks on 132 SMs; ncu: some SM ran 0, one ran 1; measured cycles max/mean shown
    fc = next(r for r in ncu_rows(SAMPLES / "h200_sm_spread_smallcnn/ncu_raw.csv.gz") if "gemmSN" in r["Kernel Name"])
    ratio = float(fc["sm__cycles_active.max"]) / float(fc["sm__cycles_active.avg"])
    assert f"<td>{ratio:.2f}</td>" in only and ratio > 10
    # the trace's own capture ran ncu without --sm-counters: cycles only, beside the heatmap
    own = section(html, TRACE)
    assert "Measured per-SM spread (ncu)" in own and "h200_smallcnn.ncu_raw" in own
    assert "h200_sm_spread_smallcnn" not in own  # another capture's run is not this trace's measurement


def test_pass_split_on_a_training_trace(tmp_path: Path) -> None:
    """Optimizer GPU time = kernels whose launching call lies inside an `optimizer` range (raw sqlite);
    an inference trace hides the pass columns and says why."""
    from tests.conftest import gunzip_to

    src = SAMPLES / "h200_train_decoder/nsys.sqlite.gz"
    norm, out, rep = tmp_path / "n", tmp_path / "a", tmp_path / "r"
    normalize_file(src, norm)
    write_views(connect(norm, materialize=True), out, list(view_files()), ("parquet",))
    build_report(out, rep)
    html = (rep / "report.html").read_text()
    db = sqlite3.connect(gunzip_to(src, tmp_path / "raw.sqlite"))
    opt, total = db.execute(
        """SELECT sum(CASE WHEN EXISTS (SELECT 1 FROM NVTX_EVENTS n WHERE n.eventType = 59
                                        AND coalesce(n.text, (SELECT value FROM StringIds s WHERE s.id = n.textId))
                                            = 'optimizer'
                                        AND n.globalTid = r.globalTid AND r.start BETWEEN n.start AND n."end")
                      THEN k."end" - k.start ELSE 0 END), sum(k."end" - k.start)
           FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)"""
    ).fetchone()
    assert 0 < opt < total
    assert f"<b>{opt / 1e3:,.1f} µs</b>optimizer ({100 * opt / total:.1f}%)" in html
    assert "backward (" in html and "<th>backward µs</th>" in html
    # the four passes' figures add up to the trace's kernel time (no pass: outside every range, neither backward
    # nor optimizer), in the KPI row and as the pass table's fourth column
    kpis = re.findall(r"<b>([0-9,.]+) µs</b>(forward|backward|optimizer|outside every range, no pass) \(", html)
    assert [k for _, k in kpis[:4]] == ["forward", "backward", "optimizer", "outside every range, no pass"]
    assert abs(sum(float(v.replace(",", "")) for v, _ in kpis[:4]) - total / 1e3) < 0.2
    assert "<th>no pass µs</th>" in html


def test_inference_trace_hides_pass_columns(built: tuple[Path, str]) -> None:
    _, html = built
    own = section(html, TRACE)
    assert "<th>backward µs</th>" not in own and "ran in the forward pass (no backward or optimizer" in own


def test_step_idle_rules_on_a_hand_made_trace() -> None:
    """step_gpu_idle's body on tables written here (ns): two ProfilerStep ranges with a nested `step` range that
    is not a step, a kernel of step 1 running into step 2 (busy there, not idle), queued and not-queued gaps,
    a memcpy overlapping a kernel, a trailing gap; and a trace without step ranges (one whole-trace row)."""
    import duckdb

    from pipeline.analyze import create_views

    con = duckdb.connect()
    con.execute(
        """CREATE TABLE nvtx_ranges AS SELECT * FROM (VALUES
             ('t', 1, 1, 'ProfilerStep#1', 0, 100, 0, 'push_pop'), ('t', 2, 1, 'step', 10, 20, 1, 'push_pop'),
             ('t', 3, 1, 'ProfilerStep#2', 100, 200, 0, 'push_pop'), ('t', 4, 1, 'conv', 101, 150, 1, 'push_pop'))
           t(trace_id, range_id, pid, text, start_ns, end_ns, depth, kind)"""
    )
    ops = [  # trace, kind, start, end, launching call start
        ("t", "kernel", 10, 30, 5), ("t", "kernel", 40, 50, 8), ("t", "kernel", 60, 70, 45),
        ("t", "kernel", 95, 130, 90), ("t", "memcpy", 120, 140, 110), ("t", "kernel", 160, 170, 150),
        ("w", "kernel", 0, 10, -5), ("w", "kernel", 15, 20, 1),
    ]  # fmt: skip
    con.execute(
        "CREATE TABLE api_calls AS SELECT * FROM (VALUES "
        + ", ".join(f"('{t}', {i}, {c})" for i, (t, _, _, _, c) in enumerate(ops))
        + ") t(trace_id, call_id, start_ns)"
    )
    con.execute(
        "CREATE TABLE gpu_op_layers AS SELECT * FROM (VALUES "
        + ", ".join(f"('{t}', 0, '{k}', {s}, {e}, 1, {i}, NULL, {c})" for i, (t, k, s, e, c) in enumerate(ops))
        + ") t(trace_id, device_id, op_kind, start_ns, end_ns, launch_pid, launch_call_id, graph_node_id, "
        "launch_start_ns)"
    )
    cols = "trace_id, step, step_name, wall_ns, ops, kernels, kernel_ns, memop_ns, busy_ns, idle_ns, launch_gap_ns, "
    cols += "host_wait_ns, launch_gaps, host_waits"
    create_views(con, only=["step_gpu_idle"], keep_existing=True)  # its stages, over the tables made here
    got = con.execute(f"SELECT {cols} FROM step_gpu_idle ORDER BY 1, 2").fetchall()
    assert got == [
        # window 0..130 (k4 ends past the CPU range); busy 20+10+10+35; gaps: 0-10 host, 30-40 and 50-60 queued
        # (launched at 8 and 45), 70-95 host (launched at 90); step 2's memcpy runs 120-130 inside this window too
        ("t", 1, "ProfilerStep#1", 130, 4, 4, 75, 10, 75, 55, 20, 35, 2, 2),
        # window 100..200; k4 of step 1 keeps the GPU busy 100-130, the memcpy to 140; 140-160 host, 170-200 trailing
        ("t", 2, "ProfilerStep#2", 100, 2, 1, 40, 20, 50, 50, 0, 50, 0, 2),
        ("w", 0, "(whole trace)", 20, 2, 2, 15, 0, 15, 5, 5, 0, 1, 0),
    ]
