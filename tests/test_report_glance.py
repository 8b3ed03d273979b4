"""The report answers at a glance (#42): it opens with the findings and the GPU time by pass, long tables fold,
timeline labels that do not fit are left out (never overlapped), no figure title runs past the figure's edge."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl
import pytest

from pipeline.analyze import connect, view_files, write_views
from pipeline.normalize import normalize_file
from pipeline.report import plots
from pipeline.report.build import build_report
from pipeline.report.html import MAX_ROWS, TOP_ROWS, WHOLE_ROWS, Col, table
from pipeline.report.tables import Window
from tests.conftest import SAMPLES, gunzip_to

TRAIN = SAMPLES / "h200_train_decoder"


@pytest.fixture(scope="module")
def train_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    tmp = tmp_path_factory.mktemp("train")
    raw = gunzip_to(TRAIN / "nsys.sqlite.gz", tmp / "nsys.sqlite")
    normalize_file(raw, tmp / "n", "train.nsys")
    write_views(connect(tmp / "n", views=[]), tmp / "a", list(view_files()), ("parquet",))
    build_report(tmp / "a", tmp / "r")
    return (tmp / "r" / "report.html").read_text(), raw


def test_the_report_opens_with_findings_then_the_split_by_pass(train_report: tuple[str, Path]) -> None:
    page, raw = train_report
    sections = re.findall(r'<section id="([^"]+)">', page)
    assert sections[:2] == ["findings", "passes"]
    # the optimizer's GPU time, independently: kernels launched inside the `optimizer` NVTX ranges of the raw export
    (optimizer_ns,) = (
        sqlite3.connect(raw)
        .execute(
            """SELECT sum(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
           JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)
           JOIN NVTX_EVENTS n ON n.eventType = 59 AND r.globalTid = n.globalTid
           LEFT JOIN StringIds t ON t.id = n.textId
           WHERE coalesce(n.text, t.value) = 'optimizer'
            AND r.start BETWEEN n.start AND n."end\""""
        )
        .fetchone()
    )
    passes = page.split('<section id="passes">')[1].split("</section>")[0]
    whole = re.search(r'<td class="name">train\.nsys</td><td class="name">\(whole trace\)</td>(.*?)</tr>', passes)
    cells = re.findall(r"<td>([^<]*)</td>", whole.group(1))
    assert cells[3] == f"{optimizer_ns / 1e3:,.1f}"  # GPU time, forward, backward, optimizer
    findings = page.split('<section id="findings">')[1].split("</section>")[0]
    assert "slow backward" in findings and "step/model/tok" in findings
    # one trace's findings: no trace column (every row would name it), and its section links to them, not a copy
    assert "<th>trace</th>" not in findings and "<th>at stake</th>" in findings
    own = page.split('<section id="train.nsys">')[1].split("</section>")[0]
    assert '<table class="finding">' not in own and 'the <a href="#findings">opening table</a> holds them' in own


def test_long_tables_fold_the_rest_and_short_ones_are_whole() -> None:
    cols = [Col("x", "x", str, True)]
    long = table(pl.DataFrame({"x": list(range(WHOLE_ROWS + 5))}), cols)
    first, folded = long.split("<details>")
    assert first.count("<tr>") == 1 + TOP_ROWS and folded.count("<tr>") == 1 + MAX_ROWS - TOP_ROWS
    assert f"{WHOLE_ROWS + 5 - MAX_ROWS} more rows in the analysis Parquet" in folded
    short = table(pl.DataFrame({"x": list(range(WHOLE_ROWS))}), cols)
    assert short.count("<tr>") == 2 + WHOLE_ROWS and "more rows in the analysis Parquet" not in short


def test_no_title_runs_past_the_figure() -> None:
    fig, (a, _) = plt.subplots(1, 2, figsize=(plots.WIDTH_IN, 3), layout="constrained")
    a.set_title("A: " + "/very/long/trace/folder/name" * 6 + "   B: " + "another_long_label" * 5, fontweight="bold")
    fig.suptitle("x" * 400)
    plots.fit_titles(fig)
    renderer = fig.canvas.get_renderer()
    width = fig.get_figwidth() * fig.dpi
    for t in (a.title, fig._suptitle):
        box = t.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= width, (t.get_text()[:40], box)
    plt.close(fig)


def test_timeline_labels_that_do_not_fit_are_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # one window of 1000 µs: `wide` spans 600 µs (its label fits); `narrow_layer` 15 µs (too narrow for its name);
    # `alpha_layer` and `beta_layer` overlap in one lane, their labels 50 µs apart: each fits its bar, not both
    ranges = pl.DataFrame(
        {
            "layer": ["wide", "narrow_layer", "alpha_layer", "beta_layer"],
            "depth": [0, 1, 1, 1],
            "gpu_start_ns": [0, 700_000, 100_000, 150_000],
            "gpu_end_ns": [600_000, 715_000, 400_000, 450_000],
        }
    )
    kernels = pl.DataFrame(
        {
            "start_ns": [0],
            "end_ns": [1_000_000],
            "duration_ns": [1_000_000],
            "layer": ["wide"],
            "stream_id": [7],
            "device_id": [0],
        }
    )
    kept: list[list] = []
    real = plots.fit_labels

    def spy(fig: plt.Figure, labels: list, dpi: int = plots.DPI) -> list:
        out = real(fig, labels, dpi)
        renderer = fig.canvas.get_renderer()
        kept.append([(t.get_text(), t.get_window_extent(renderer)) for t in out])
        ax = out[0].axes if out else None
        bars = {t.get_text(): ax.transData.transform([(x0, 0), (x1, 0)])[:, 0] for t, x0, x1 in labels} if ax else {}
        kept.append(bars)
        return out

    monkeypatch.setattr(plots, "fit_labels", spy)
    plots.timeline(Window(0, 1_000_000, "window", kernels, ranges), {"wide": "#1f77b4"}, "t")
    shown, bars = kept
    names = [n for n, _ in shown]
    assert "wide" in names and "narrow_layer" not in names
    assert len({"alpha_layer", "beta_layer"} & set(names)) == 1
    for i, (name, box) in enumerate(shown):
        x0, x1 = bars[name]
        assert x0 <= box.x0 and box.x1 <= x1, name  # inside its bar
        assert not any(box.overlaps(other) for _, other in shown[i + 1 :]), name


def test_the_page_embeds_the_figures_of_the_traces_with_most_gpu_time(tmp_path: Path) -> None:
    # Two traces, --figures 1: the one with more GPU time (summed kernel durations, read from the raw files here)
    # has its figures in the page; the other's are the PNG files beside it, linked, not embedded.
    raw = {
        "big.nsys": gunzip_to(TRAIN / "nsys.sqlite.gz", tmp_path / "big.sqlite"),
        "small.nsys": gunzip_to(SAMPLES / "h200_smallcnn" / "nsys.sqlite.gz", tmp_path / "small.sqlite"),
    }
    gpu = {t: sqlite3.connect(p).execute('SELECT sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0]
           for t, p in raw.items()}  # fmt: skip
    assert gpu["big.nsys"] > gpu["small.nsys"]
    for trace, path in raw.items():
        normalize_file(path, tmp_path / "n", trace)
    write_views(connect(tmp_path / "n", views=[]), tmp_path / "a", list(view_files()), ("parquet",))
    build_report(tmp_path / "a", tmp_path / "r", figures=1)
    page = (tmp_path / "r" / "report.html").read_text()
    big = page.split('<section id="big.nsys">')[1].split("</section>")[0]
    small = page.split('<section id="small.nsys">')[1].split("</section>")[0]
    assert "data:image/png;base64" in big
    assert "data:image/png;base64" not in small
    for name in re.findall(r'<a href="([^"]+\.png)">', small):
        assert name.startswith("small.nsys.") and (tmp_path / "r" / name).is_file()
    assert 'href="small.nsys.timeline.png"' in small
