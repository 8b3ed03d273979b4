"""The report's ranks sections: for each job of the analysed folder (rank_jobs: traces of one run's ranks, never
unrelated traces that happen to carry rank numbers), how each layer's GPU time spreads across its ranks and which
rank straggles, from the views rank_layer_time, layer_rank_spread and layer_stragglers (sql/). Absent when the
folder holds no job of two or more ranks."""

from __future__ import annotations

import html as _html
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline.report.data import read_view_file
from pipeline.report.html import Col, block, integer, note, table, us

OUTSIDE = "(outside ranges)"
#: layer rows in the heatmap and the tables (the Parquet beside the report has them all)
TOP_LAYERS = 20


@dataclass
class Ranks:
    job: str  # rank_jobs.job: the key its rank files share
    per_rank: pl.DataFrame  # rank_layer_time rows of the job's traces
    spread: pl.DataFrame  # layer_rank_spread
    stragglers: pl.DataFrame  # layer_stragglers
    totals: pl.DataFrame  # trace_id, rank, host, gpu_time_ns: one row per rank's trace, by rank


VIEWS = ("rank_jobs", "rank_layer_time", "layer_rank_spread", "layer_stragglers")


def load_jobs(analysis: Path) -> list[Ranks]:
    """One Ranks per job of rank_jobs (in job order), when the folder has the four views; else none."""
    files = {v: analysis / f"{v}.parquet" for v in VIEWS}
    if not all(f.is_file() for f in files.values()):
        return []
    jobs = read_view_file(files["rank_jobs"])
    if jobs.height == 0:
        return []
    per_rank = read_view_file(files["rank_layer_time"])
    spread = read_view_file(files["layer_rank_spread"])
    stragglers = read_view_file(files["layer_stragglers"])
    out = []
    for job in sorted(jobs["job"].unique().to_list()):
        traces = jobs.filter(pl.col("job") == job)["trace_id"].to_list()
        mine = per_rank.filter(pl.col("trace_id").is_in(traces))
        totals = mine.group_by("trace_id", "rank", "host").agg(pl.col("gpu_time_ns").sum()).sort("rank", "trace_id")
        out.append(
            Ranks(
                job,
                mine,
                spread.filter(pl.col("job") == job).sort("max_minus_min_ns", "path", descending=[True, False]),
                stragglers.filter(pl.col("job") == job).sort("excess_ns", "path", descending=[True, False]),
                totals,
            )
        )
    return out


def _x(v: object) -> str:
    return "" if v is None else f"{float(v):.3f}"


SPREAD_COLS = [
    Col("path", "layer path"),
    Col("ranks", "ranks", integer, True),
    Col("min_gpu_time_ns", "min µs", us, True),
    Col("median_gpu_time_ns", "median µs", us, True),
    Col("max_gpu_time_ns", "max µs", us, True),
    Col("stddev_gpu_time_ns", "stddev µs", us, True),
    Col("max_over_median", "max / median", _x, True),
    Col("max_minus_min_ns", "max − min µs", us, True),
    Col("fastest_rank", "fastest rank", integer, True),
    Col("slowest_rank", "slowest rank", integer, True),
]

STRAGGLER_COLS = [
    Col("path", "layer path"),
    Col("slowest_rank", "straggler rank", integer, True),
    Col("slowest_trace_id", "its trace"),
    Col("slowest_host", "host"),
    Col("slowest_gpu_time_ns", "its GPU time µs", us, True),
    Col("median_gpu_time_ns", "median µs", us, True),
    Col("excess_ns", "excess µs", us, True),
    Col("slowdown", "slowdown ×", _x, True),
]


def figure(r: Ranks) -> bytes:
    """Top: each rank's total GPU time (the slowest in red). Bottom: the layers with the widest spread, each
    rank's GPU time over the layer's median across ranks (1.0 white; red slower, blue faster), the straggler
    of each layer circled."""
    import matplotlib.colors as mcolors
    import numpy as np

    from pipeline.report.plots import WIDTH_IN, _png, _short, plt

    cols = r.totals["trace_id"].to_list()
    ranks = r.totals["rank"].to_list()
    top = r.spread.head(TOP_LAYERS)
    paths = top["path"].to_list()
    cell = (
        r.per_rank.filter(pl.col("trace_id").is_in(cols))
        .join(top.select("path", "median_gpu_time_ns"), on="path", how="inner", nulls_equal=True)
        .with_columns((pl.col("gpu_time_ns") / pl.col("median_gpu_time_ns")).alias("rel"))
    )
    grid = np.full((len(paths), len(cols)), np.nan)
    row_of = {p: i for i, p in enumerate(paths)}
    col_of = {t: j for j, t in enumerate(cols)}
    for p, t, v in cell.select("path", "trace_id", "rel").iter_rows():
        grid[row_of[p], col_of[t]] = v
    fig, (ax_t, ax_h) = plt.subplots(
        2, 1, figsize=(WIDTH_IN, 3.2 + 0.3 * len(paths)), layout="constrained", sharex=True,
        gridspec_kw={"height_ratios": [1.3, max(2.0, 0.3 * len(paths))]},
    )  # fmt: skip
    totals_us = r.totals["gpu_time_ns"].to_numpy() / 1e3
    slowest = int(np.argmax(totals_us))
    colours = ["#c0392b" if j == slowest else "#5b7fa6" for j in range(len(cols))]
    ax_t.bar(np.arange(len(cols)), totals_us, color=colours)
    ax_t.axhline(float(np.median(totals_us)), color="black", linewidth=0.8, linestyle="--", label="median over ranks")
    ax_t.set_ylabel("GPU time per rank (µs)")
    ax_t.legend(loc="lower right", fontsize=8)
    ax_t.set_title(
        f"{len(cols)} ranks: total GPU time (slowest, rank {ranks[slowest]}, in red) and per-layer time / the "
        "layer's median over ranks",
        fontweight="bold",
    )
    finite = grid[np.isfinite(grid) & (grid > 0)]
    span = max(float(np.abs(np.log2(finite)).max()) if finite.size else 0.0, 0.05)
    norm = mcolors.TwoSlopeNorm(vmin=2**-span, vcenter=1.0, vmax=2**span)
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="#eeeeee")
    im = ax_h.imshow(np.ma.masked_invalid(grid), aspect="auto", cmap=cmap, norm=norm, interpolation="nearest")
    for i, j in enumerate(np.nanargmax(np.where(np.isfinite(grid), grid, -np.inf), axis=1)):
        ax_h.plot(j, i, marker="o", markersize=7, markerfacecolor="none", markeredgecolor="black")
    ax_h.set_yticks(np.arange(len(paths)), [_short(OUTSIDE if p is None else p, 40) for p in paths])
    step = max(1, len(cols) // 32)
    ax_h.set_xticks(np.arange(0, len(cols), step), [str(x) for x in ranks[::step]])
    ax_h.set_xlabel("rank (trace_meta.rank)")
    cb = fig.colorbar(im, ax=ax_h, pad=0.01, fraction=0.03)
    cb.set_label("GPU time / layer median (grey: rank did not run it; ○ straggler)")
    return _png(fig, gradient=True)


def section(r: Ranks) -> tuple[str, bytes]:
    """The section's HTML body (its figure embedded by the caller at {figure}) and the figure's PNG."""
    from pipeline.report.html import image

    png = figure(r)
    t = r.totals
    times = t["gpu_time_ns"]
    slow = t.sort("gpu_time_ns", descending=True).row(0, named=True)
    med = float(times.median())
    lead = (
        f"Job {r.job}: {t.height} ranks ({t['host'].n_unique()} host(s)); GPU time per rank: "
        f"min {times.min() / 1e3:,.1f} µs, "
        f"median {med / 1e3:,.1f} µs, max {times.max() / 1e3:,.1f} µs (rank {slow['rank']}, {slow['trace_id']}: "
        f"×{slow['gpu_time_ns'] / med:.3f} the median)." if med else f"{t.height} ranks."
    )  # fmt: skip
    label = lambda df: df.with_columns(pl.col("path").fill_null(OUTSIDE))  # noqa: E731
    body = (
        f"<p>{_html.escape(lead)}</p>"
        + image(png, "ranks: GPU time per rank and layer")
        + block(
            f"Spread across ranks per layer (widest {TOP_LAYERS}: layer_rank_spread)",
            table(label(r.spread), SPREAD_COLS, max_rows=TOP_LAYERS, top=TOP_LAYERS),
        )
        + block(
            "Straggler rank per layer (most excess first: layer_stragglers)",
            table(label(r.stragglers), STRAGGLER_COLS, max_rows=TOP_LAYERS, top=TOP_LAYERS),
            note(
                "The ranks of one job only (rank_jobs: rank files named alike but for the rank, same format and GPU); "
                "excess = the slowest rank's GPU "
                "time − the median rank's, about what the other ranks wait at the next collective. A path a rank "
                "never ran is left out of that path's statistics, not counted as 0."
            ),
        )
    )
    return body, png
