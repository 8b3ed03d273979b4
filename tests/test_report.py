"""tracepipe report on the real small-CNN nsys sample: every layer in the page, valid PNGs, nothing fetched,
numbers checked against the raw sqlite and hand computation, optional views drawn only when present."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import sqlite3
import struct
import subprocess
from pathlib import Path

import matplotlib.image
import polars as pl
import pytest

from pipeline.analyze import connect, view_files, write_views
from pipeline.report.browser_check import overflows
from pipeline.report.build import build_report
from pipeline.report.tables import kernel_table
from tests.conftest import ROOT, SAMPLES, SMALLCNN
from tests.test_cli import TP, tp

SM_COUNT = 132  # H200
LAYERS = ["conv1", "conv2", "relu", "pool", "fc"]


@pytest.fixture(scope="module")
def analysis(nsys_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("analysis")
    write_views(connect(nsys_out, materialize=True), out, list(view_files()), ("parquet",))
    return out


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk, after checking the PNG signature."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def check_png(path: Path) -> None:
    w, h = png_size(path)
    assert 300 <= w <= 5000 and 300 <= h <= 5000, (path, w, h)
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[:2] == (h, w)
    assert pixels.std() > 0.05, f"{path} is (almost) one colour"  # an empty plot is a white square


def no_network(html: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "<script" not in html.lower() and "@import" not in html and "url(" not in html


def raw_conv2_time(nsys_sqlite: Path) -> int:
    """GPU time of kernels launched inside the top-level conv2 ranges (the warm-up ones, not step/conv2),
    straight from the nsys tables: runtime call start within the range, matched by correlation id."""
    raw = sqlite3.connect(nsys_sqlite)
    return raw.execute(
        """SELECT sum(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
           JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)
           JOIN NVTX_EVENTS n ON n.eventType = 59 AND n.text = 'conv2' AND r.start BETWEEN n.start AND n."end"
           WHERE n.start > (SELECT "end" FROM NVTX_EVENTS WHERE text = 'step')
              OR n."end" < (SELECT start FROM NVTX_EVENTS WHERE text = 'step')"""
    ).fetchone()[0]


def test_report_on_the_sample(analysis: Path, nsys_sqlite: Path, tmp_path: Path) -> None:
    rep = build_report(analysis, tmp_path)
    html = (tmp_path / "report.html").read_text()
    for layer in [*LAYERS, *(f"step/{x}" for x in LAYERS)]:
        assert f">{layer}<" in html, layer  # a table cell of its own, not a substring of a kernel name
    assert "(outside ranges)" in html  # the one kernel launched before any range (the input randn)
    no_network(html)
    assert rep.pngs and {p.name.split(".")[-2] for p in rep.pngs} == {"layer_time", "timeline", "sm_load"}
    for png in rep.pngs:
        check_png(png)
        assert f"base64,{__import__('base64').b64encode(png.read_bytes()).decode()}" in html  # embedded
    # an optional view with nothing for this trace (no capture-side layer shapes): said so, not drawn
    assert "not available (no layer shapes were captured for this trace" in html
    assert not list(tmp_path.glob(".*tmp*"))

    raw = sqlite3.connect(nsys_sqlite)
    total = raw.execute('SELECT sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0]
    (trace,) = rep.traces
    assert (trace.kernels, trace.gpu_time_ns) == (33, total)
    top = trace.top_layers[0]
    assert (top["path"], top["gpu_time_ns"]) == ("conv2", raw_conv2_time(nsys_sqlite))
    # the timeline shows the one `step` iteration: its 8 kernels (5 layers, conv1/conv2 launch 2 each)
    assert "last `step` range" in trace.sections["timeline"]
    assert ", 8 kernels, " in html


def test_sm_heatmap_and_macs_from_independent_views(analysis: Path, nsys_sqlite: Path, tmp_path: Path) -> None:
    """Views of other branches, computed here by hand: layer_sm_load by the round-robin rule (SM s gets
    blocks // 132 + (s < blocks % 132) of each kernel), layer_macs from the conv/linear shapes of
    capture_model.py, and a kernel_occupancy without the column the report needs."""
    folder = tmp_path / "analysis"
    shutil.copytree(analysis, folder)
    raw = sqlite3.connect(nsys_sqlite)
    grids = dict(raw.execute("SELECT correlationId, gridX * gridY * gridZ FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    tpb = dict(raw.execute("SELECT correlationId, blockX * blockY * blockZ FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    kl = pl.read_parquet(folder / "kernel_layers.parquet")
    load: dict[tuple, list[int]] = {}
    for trace_id, path, layer, corr in kl.select("trace_id", "path", "layer", "correlation_id").iter_rows():
        b, per_sm = grids[corr], load.setdefault((trace_id, path, layer), [0] * SM_COUNT)
        for s in range(SM_COUNT):
            per_sm[s] += (b // SM_COUNT + (s < b % SM_COUNT)) * tpb[corr]
    rows = [(*key, s, SM_COUNT, threads) for key, per_sm in load.items() for s, threads in enumerate(per_sm)]
    pl.DataFrame(
        rows,
        schema=["trace_id", "path", "layer", "sm_id", "sm_count", "threads"],
        orient="row",
        infer_schema_length=None,
    ).write_parquet(folder / "layer_sm_load.parquet")
    # MACs per call: conv = N*Cout*H*W*Cin*k*k on 8x3x64x64 input, padding 1; fc = N*in*out
    per_call = {"conv1": 8 * 16 * 64 * 64 * 3 * 9, "conv2": 8 * 32 * 64 * 64 * 16 * 9, "fc": 8 * 32 * 10}
    trace_id = kl["trace_id"][0]
    # layer_macs' shape: per module and forward (each of these modules runs once per forward).
    macs = [(trace_id, layer, 1, m, None) for layer, m in per_call.items()]
    pl.DataFrame(
        macs, schema=["trace_id", "layer", "calls_per_forward", "analytic_macs", "measured_macs"], orient="row"
    ).write_parquet(folder / "layer_macs.parquet")
    pl.DataFrame({"trace_id": [trace_id], "kernel_id": [1], "occupancy": [50.0]}).write_parquet(
        folder / "kernel_occupancy.parquet"
    )

    r = tp("report", folder, "--out", tmp_path / "out", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    sections = summary["traces"][trace_id]["sections"]
    assert sections["sm_load"] == "drawn" and sections["macs"] == "drawn"
    assert sections["occupancy"].startswith("not available (view kernel_occupancy has no column")
    pngs = [Path(f) for f in summary["files"] if f.endswith(".png")]
    assert {p.name.split(".")[-2] for p in pngs} == {"layer_time", "sm_load", "timeline"}
    for png in pngs:
        check_png(png)
    html = (tmp_path / "out" / "report.html").read_text()
    no_network(html)
    # SMs used per layer: fc's gemm runs 2 blocks, pool's reduce 16 (gridX in the raw sqlite), the rest >= 132
    for path, used in (("fc", 2), ("pool", 16), ("step/fc", 2), ("conv1", 132)):
        assert re.search(rf'<td class="name"[^>]*>{re.escape(path)}</td><td>{used}</td>', html), path
    # achieved MAC/s = MACs / GPU time: conv1 (3 calls) ran 30,464 ns of kernels (raw sqlite, checked below)
    conv1_ns = raw.execute(
        """SELECT sum(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
           JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)
           JOIN NVTX_EVENTS n ON n.eventType = 59 AND n.text = 'conv1' AND r.start BETWEEN n.start AND n."end"
           WHERE n."end" < (SELECT start FROM NVTX_EVENTS WHERE text = 'step')"""
    ).fetchone()[0]
    rate = 3 * per_call["conv1"] / conv1_ns * 1e9
    assert conv1_ns == 30464 and f"{rate / 1e12:,.2f} T" in html  # 1.39 T MAC/s


def test_cli_summary_quiet_and_help(analysis: Path, tmp_path: Path) -> None:
    r = tp("report", analysis, "--out", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    assert "top layer" in r.stdout and "conv2" in r.stdout and "sm80_xmma_fprop_implicit_gemm" in r.stdout
    assert "report.html" in r.stdout
    r = tp("report", analysis, "--out", tmp_path / "b", "--quiet")
    assert r.returncode == 0 and r.stdout == "" and (tmp_path / "b" / "report.html").is_file()
    r = tp("report", "--help")
    assert r.returncode == 0 and "Example" in r.stdout
    assert "report" in tp("--help").stdout


def test_bad_input_names_the_folder_and_writes_nothing(analysis: Path, tmp_path: Path) -> None:
    empty, out = tmp_path / "empty", tmp_path / "out"
    empty.mkdir()
    r = tp("report", empty, "--out", out)
    assert r.returncode == 2 and str(empty) in r.stderr and "no analysis Parquet" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not out.exists()
    r = tp("report", tmp_path / "nope", "--out", out)
    assert r.returncode == 2 and "no such folder" in r.stderr and not out.exists()
    broken = tmp_path / "broken"
    shutil.copytree(analysis, broken)
    data = (broken / "kernel_layers.parquet").read_bytes()
    (broken / "kernel_layers.parquet").write_bytes(data[: len(data) // 2])
    r = tp("report", broken, "--out", out)
    assert r.returncode == 2 and "kernel_layers.parquet" in r.stderr and not out.exists(), r.stderr
    (broken / "layer_timeline.parquet").unlink()
    r = tp("report", broken, "--out", out)
    assert r.returncode == 2 and "layer_timeline.parquet: missing" in r.stderr, r.stderr


def test_views_over_different_inputs_are_refused_and_views_added_later_are_not(tmp_path: Path) -> None:
    # An analyze of two views after a trace was added (or one killed midway) left kernel_layers over two traces and
    # layer_summary over one: the report drew an empty bar chart and exited 1 (ValueError). Each view's file now
    # says what it was computed over; a view written later over the same traces (kernel_sm_load) is fine.
    out = tmp_path / "o"
    assert tp("run", SMALLCNN / "torch_trace.json.gz", "--out", out, "-q").returncode == 0
    assert tp("normalize", SMALLCNN / "nsys.sqlite.gz", "--out", out / "normalized", "-q").returncode == 0
    views = ("--view", "kernel_layers", "--view", "layer_timeline")
    assert tp("analyze", out / "normalized", "--out", out / "analysis", *views, "-q").returncode == 0
    r = tp("report", out / "analysis", "--out", tmp_path / "r", "-q")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "computed over different traces" in r.stderr
    assert not (tmp_path / "r").exists()
    r = tp("sql", out / "analysis", "SELECT count(DISTINCT trace_id) AS n FROM kernel_layers", "--format", "csv")
    assert r.returncode == 0 and r.stdout.split() == ["n", "2"]  # read as written, and said:
    assert "computed over different traces" in r.stderr
    for more in ((), ("--view", "kernel_sm_load")):
        assert tp("analyze", out / "normalized", "--out", out / "analysis", *more, "-q").returncode == 0
    r = tp("report", out / "analysis", "--out", tmp_path / "r", "--json")
    assert r.returncode == 0, r.stderr
    assert sorted(json.loads(r.stdout)["traces"]) == ["h200_smallcnn.nsys", "h200_smallcnn.torch_trace"]


def test_demo_pipeline_on_every_sample(tmp_path: Path) -> None:
    """What `make demo` runs, over all of sample_traces/: several traces, captures with shapes and two ncu pages."""
    from tests.conftest import SAMPLES

    norm, analysed, out = tmp_path / "n", tmp_path / "a", tmp_path / "r"
    assert tp("normalize", SAMPLES, "--out", norm, "--quiet").returncode == 0
    full = tp("analyze", norm, "--out", analysed)
    assert full.returncode == 0, full.stderr
    # One view of every sample, not quiet: analysis_warnings' inputs are computed staged, with the view, as the full
    # run computes them. Created over views never computed, its SQL was one statement over every view below it,
    # which ran out of DuckDB's memory here (1.4 GiB at the default limit; now < 512 MB). Same warnings.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACEPIPE_MEMORY_LIMIT": "512MB"}
    one = subprocess.run(
        [*TP, "analyze", str(norm), "--out", str(tmp_path / "one"), "--view", "kernel_name_summary"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert one.returncode == 0, one.stderr[-500:]
    warned = [line for line in full.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) > 5 and [line for line in one.stderr.splitlines() if line.startswith("warning:")] == warned
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["kernel_name_summary.parquet"]
    r = tp("report", analysed, "--out", out, "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    timelines = {p.parent.name for p in SAMPLES.glob("*/*.sqlite.gz")} | {
        p.parent.name for p in SAMPLES.glob("*/torch_trace.json.gz")
    }
    timelines |= {"external"}  # sample_traces/external/: other projects' traces, trace ids external.<name>
    timelines |= {p.parent.name for p in SAMPLES.glob("*/rank*.json.gz")}  # one PyTorch trace per rank of a job
    timelines -= {"cpu_compiled_train"}  # a CPU capture: no GPU work, so no layer
    assert {t.split(".")[0] for t in summary["traces"]} == timelines
    # Captures that recorded layer shapes get MACs; the plain small-CNN capture did not record any.
    assert summary["traces"]["h200_resnet18.nsys"]["sections"]["macs"] == "drawn"
    assert summary["traces"]["h200_smallcnn.nsys"]["sections"]["macs"].startswith("not available")
    html = (out / "report.html").read_text()
    no_network(html)
    # issue #42: the page was 9.5 MB; it opens with the findings and the split by pass; ranks only of one job
    # (h100_ddp_2rank's two), never the unrelated external traces that carry rank numbers
    assert (out / "report.html").stat().st_size <= 2_000_000
    assert re.findall(r'<section id="([^"]+)">', html)[:3] == ["findings", "passes", "ranks"]
    assert "Ranks: 2 ranks compared (one job)" in html and 'id="ranks-2"' not in html
    # several traces' findings: the opening table names each row's trace, each trace's section has its own table
    opening = html.split('<section id="findings">')[1].split("</section>")[0]
    assert "<th>trace</th>" in opening
    own = html.split('<section id="h200_train_decoder.nsys">')[1].split("</section>")[0]
    assert own.count('<table class="finding">') >= 1 and "opening table" not in own  # 2: the rest folded
    for png in out.glob("*.png"):
        check_png(png)
    # rendered in headless Chromium at 1400 px: no table scrolls, no figure is shrunk or cut, the nav wraps
    assert overflows(out / "report.html") == []


def many_traces(analysis: Path, dest: Path, n: int) -> list[str]:
    """The sample's four required views repeated under ``n`` trace ids (only those views: the rest stay optional)."""
    from pipeline.report.data import REQUIRED

    dest.mkdir()
    ids = [f"run{i:03d}.nsys" for i in range(n)]
    for view in REQUIRED:
        df = pl.read_parquet(analysis / f"{view}.parquet")
        pl.concat([df.with_columns(pl.lit(t).alias("trace_id")) for t in ids]).write_parquet(dest / f"{view}.parquet")
    return ids


def test_terminal_summary_fits_40_lines_for_many_traces(analysis: Path, tmp_path: Path) -> None:
    n = 12
    ids = many_traces(analysis, tmp_path / "a", n)
    r = tp("report", tmp_path / "a", "--out", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) <= 40, len(lines)
    shown = [t for t in ids if t in r.stdout]
    assert shown == ids
    assert "conv2" in r.stdout  # each row names the trace's top layer (conv2: 45% of the sample's GPU time)
    # --json is not cut: every trace with its top layers and kernels
    j = json.loads(tp("report", tmp_path / "a", "--out", tmp_path / "r", "--json").stdout)
    assert sorted(j["traces"]) == ids and all(len(t["top_layers"]) == 5 for t in j["traces"].values())
    # 12 links in the nav bar: they wrap inside the page instead of running past the 8th
    assert overflows(tmp_path / "r" / "report.html") == []


def test_figures_drawn_by_workers_are_those_drawn_in_process(analysis: Path, tmp_path: Path) -> None:
    """--jobs: the figures drawn on worker processes are byte for byte those of one process, in the same places
    of the same page (figures of 4 traces: 8 PNGs, two workers)."""
    many_traces(analysis, tmp_path / "a", 4)
    here = build_report(tmp_path / "a", tmp_path / "one", jobs=1)
    there = build_report(tmp_path / "a", tmp_path / "two", jobs=2)
    assert [p.name for p in there.pngs] == [p.name for p in here.pngs] and len(here.pngs) == 8
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(here.pngs, there.pngs, strict=True))
    stamp = re.compile(r"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC")
    pages = [stamp.sub("", r.html.read_text()) for r in (here, there)]
    assert pages[0] == pages[1] and "\x00" not in pages[0]


def test_workers_for_the_figures() -> None:
    from pipeline.report.figures import workers_for

    assert workers_for(3, 16) == 1  # one trace: drawn here, no worker's start to pay
    assert workers_for(11, 16) == 1 and workers_for(12, 16) == 2  # one worker per 6 figures
    assert workers_for(109, 16) == 4 and workers_for(109, 2) == 2 and workers_for(109, 1) == 1


def test_a_worker_dying_names_the_figure(tmp_path: Path) -> None:
    import os

    from pipeline.report.figures import Figures

    with Figures(2) as drawn, pytest.raises(RuntimeError, match=r"died .*t\.timeline\.png"):
        drawn.add(tmp_path / "t.timeline.png", "GPU timeline", True, os._exit, 9)
        drawn.wait()


def test_a_killed_report_leaves_no_worker(analysis: Path, tmp_path: Path) -> None:
    """SIGKILL (the OOM killer) on a report drawing on workers: each worker, and so the forkserver above it, exits
    once the report's process is gone, instead of waiting on its queue forever."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    many_traces(analysis, tmp_path / "a", 12)
    cmd = [sys.executable, "-m", "pipeline.cli", "report", tmp_path / "a", "--out", tmp_path / "r", "-q", "-j", "2"]
    proc = subprocess.Popen(cmd)
    report = psutil.Process(proc.pid)
    workers: list[psutil.Process] = []
    give_up = time.monotonic() + 120
    while len(workers) < 2 and proc.poll() is None and time.monotonic() < give_up:
        workers = [p for p in report.children(recursive=True) if p.ppid() != proc.pid]  # the forkserver's children
        time.sleep(0.02)
    assert len(workers) == 2 and proc.poll() is None, "the report ended before its workers could be seen"
    everyone = report.children(recursive=True)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _, alive = psutil.wait_procs(everyone, timeout=30)
    assert alive == []
    assert not (tmp_path / "r" / "report.html").exists()


def test_kernel_table_orders_equal_times_by_first_launch() -> None:
    """Kernels of one layer with equal GPU time are listed in launch order, the same on every run."""
    names = [f"k{i:02d}" for i in range(40)]
    launch_order = names[::-1]  # not the names' order, nor any hash order
    k = pl.DataFrame(
        {
            "path": ["model/layer"] * 80,
            "short_name": launch_order * 2,
            "duration_ns": [500] * 80,
            "start_ns": list(range(80)),
        }
    )
    assert kernel_table(k)["short_name"].to_list() == launch_order


def test_terminal_summary_cuts_past_40_lines() -> None:
    """300 traces (a sweep): the table stops in time and says how many traces only the HTML lists."""
    from rich.console import Console

    from pipeline.report.build import Report, TraceReport
    from pipeline.report.cli import _print_summary

    top = [{"path": "a/conv", "kernels": 3, "gpu_time_ns": 9, "share_pct": 50.0}]
    kern = [{"short_name": "k", "launches": 3, "gpu_time_ns": 9, "share_pct": 50.0}]
    traces = [TraceReport(f"t{i:03d}", 3, 18, top, kern, {"macs": "not available (x)"}) for i in range(300)]
    cap = Console(width=80, record=True, file=io.StringIO())
    _print_summary(Report(Path("r/report.html"), [], traces), cap)
    text = cap.export_text()
    shown = [t.trace_id for t in traces if t.trace_id in text]
    assert len(text.splitlines()) <= 40 and len(shown) >= 25
    assert f"{300 - len(shown)} more trace(s)" in text and "macs in 300" in text


def test_browser_check_sees_what_overflows(tmp_path: Path) -> None:
    """The check itself: a nav without wrapping, a table wider than the page and a shrunk image are each found."""
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(20, 2), dpi=100)  # 2000 px wide: the page draws it at most 1320 px
    fig.text(0.5, 0.5, "wide")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    from pipeline.report.html import CSS, image

    nav = "".join(f'<a href="#t{i}">trace_number_{i:03d}</a>' for i in range(30))
    wide = "<table><tr>" + "".join(f"<td>column_{i:03d}_value</td>" for i in range(60)) + "</tr></table>"
    page = f"<html><head><style>{CSS} nav {{ white-space: nowrap; display: block; }}</style></head><body>"
    (tmp_path / "bad.html").write_text(
        f"{page}<nav>{nav}</nav><div class=scroll>{wide}</div>{image(buf.getvalue(), 'w')}</body></html>"
    )
    found = "\n".join(overflows(tmp_path / "bad.html"))
    assert "a: right edge" in found and "div.scroll" in found and "img[w]: image drawn" in found, found
    (tmp_path / "ok.html").write_text(f"<html><head><style>{CSS}</style></head><body><nav>{nav}</nav></body></html>")
    assert overflows(tmp_path / "ok.html") == []


def test_the_summary_top_layer_is_a_layer_over_its_steps(tmp_path: Path) -> None:
    # A PyTorch trace of three profiled steps: its top layer was `ProfilerStep#1/model/head` at 16.4% of GPU time,
    # where the head took ~49% over the three steps (each its own path in layer_summary).
    r = tp("run", SAMPLES / "h100_ddp_2rank" / "rank0.json.gz", "--out", tmp_path / "o", "-q")
    assert r.returncode == 0, r.stderr
    r = tp("report", tmp_path / "o" / "analysis", "--out", tmp_path / "rep", "-j", "1", "--json")
    assert r.returncode == 0, r.stderr
    [top, *_] = next(iter(json.loads(r.stdout)["traces"].values()))["top_layers"]
    rows = pl.read_parquet(tmp_path / "o" / "analysis" / "layer_summary.parquet").filter(
        pl.col("path").str.contains(r"^ProfilerStep#\d+/model/head$")
    )
    assert rows.height == 3 and top["path"] == "ProfilerStep#*/model/head" and top["layer"] == "head"
    assert top["gpu_time_ns"] == rows["gpu_time_ns"].sum() and top["kernels"] == rows["kernels"].sum()
