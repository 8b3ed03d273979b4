"""The report's figures (matplotlib, Agg: no display needed), each returned as PNG bytes."""

from __future__ import annotations

import io
import textwrap

import matplotlib

matplotlib.use("Agg")  # before pyplot: a headless CI box has no display

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.patches import Patch

from pipeline.report.tables import OUTSIDE, SmLoad, Window

DPI = 96
#: 11.5 in x 96 dpi = 1104 px: fits the page's 1272 px content box unscaled (the browser check fails a shrunk image)
WIDTH_IN = 11.5
#: rows drawn in the bar chart and heatmap; the tables below them list the rest
MAX_ROWS = 10
#: colours of the PNGs' palette: the figures are flat colours and anti-aliased text; the palette holds every colour
#: the figures draw with (LAYER_PALETTE, the greys, black and white) and the most frequent others (an RGB PNG of
#: the same figure is 3-4x the bytes; the demo report, 70-odd figures embedded, must stay under 2 MB)
PALETTE_COLOURS = 28
#: the secondary figures (SM heatmap, timeline) are drawn at this resolution: 966 px wide, 11 px text
DPI_SECONDARY = 84
PARENT_GREY = "#c8c8c8"
OUTSIDE_GREY = "#7f7f7f"
OTHER_GREY = "#d9d9d9"
#: layers past the 19 with most GPU time share one "other layers" colour: colours never repeat, legends stay short
MAX_COLOURED = 19

plt.rcParams.update({"font.size": 9, "axes.titlesize": 11, "axes.spines.top": False, "axes.spines.right": False})


#: the layers' colours, most GPU time first
LAYER_PALETTE = (
    [matplotlib.colors.to_hex(c) for c in plt.get_cmap("tab10").colors]
    + [matplotlib.colors.to_hex(c) for c in plt.get_cmap("tab20").colors[1::2]]
)[:MAX_COLOURED]


def layer_colours(layers: list[str]) -> dict[str, str]:
    """A stable colour per layer name (ordered by GPU time), shared by every figure of a trace."""
    palette = LAYER_PALETTE
    out: dict[str, str] = {}
    coloured = 0
    for name in layers:
        if name in out:
            continue
        if name == OUTSIDE:
            out[name] = OUTSIDE_GREY
        elif coloured < len(palette):
            out[name] = palette[coloured]
            coloured += 1
        else:
            out[name] = OTHER_GREY
    return out


def _png(fig: plt.Figure, dpi: int = DPI, gradient: bool = False) -> bytes:
    """The figure as a palette PNG, its titles first wrapped (then shrunk) until none runs past the figure's edge.
    ``gradient``: a figure of continuous colour (the heatmap's colormap) takes an adaptive palette instead of the
    exact colours of :func:`palette_png`, which would map a gradient's rare shades to the text's greys."""
    from PIL import Image

    fit_titles(fig, dpi)
    # the drawn canvas's pixels, as savefig would write them: its PNG, decoded again, cost ~60 ms a figure
    fig.set_dpi(dpi)
    fig.canvas.draw()
    image = Image.frombuffer("RGBA", fig.canvas.get_width_height(), fig.canvas.buffer_rgba()).convert("RGB")
    plt.close(fig)
    if not gradient:
        return palette_png(image)
    out = io.BytesIO()
    image.quantize(PALETTE_COLOURS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        out, format="png", optimize=True
    )
    return out.getvalue()


def palette_png(image: object, n: int = PALETTE_COLOURS) -> bytes:
    """``image`` (RGB) as a PNG of at most ``n`` exact colours: those the figures draw with that it holds, then its
    most frequent others; every other pixel (anti-aliased edges) takes its nearest. An adaptive quantizer weighs by
    pixel count and merged the light-grey range bars into the white background."""
    from PIL import Image

    # a figure holds a few thousand colours at most: counting them in a table of 2^16 first takes ~1 ms, where a
    # table of 2^24 took 75 ms a figure (7 s of the demo report's 37)
    counts = image.getcolors(maxcolors=1 << 16) or image.getcolors(maxcolors=1 << 24)  # type: ignore[attr-defined]
    present = {rgb for _, rgb in counts}
    drawn = [*LAYER_PALETTE, PARENT_GREY, OUTSIDE_GREY, OTHER_GREY, "#ffffff", "#000000"]
    keep = [rgb for rgb in (tuple(int(h[i : i + 2], 16) for i in (1, 3, 5)) for h in drawn) if rgb in present]
    for _, rgb in sorted(counts, reverse=True):
        if len(keep) >= n:
            break
        if rgb not in keep:
            keep.append(rgb)
    palette = Image.new("P", (1, 1))
    palette.putpalette([v for rgb in keep for v in rgb] + [0] * (768 - 3 * len(keep)))
    out = io.BytesIO()
    image.quantize(palette=palette, dither=Image.Dither.NONE).save(out, format="png", optimize=True)  # type: ignore[attr-defined]
    return out.getvalue()


def _titles(fig: plt.Figure) -> list:
    found = [ax.title for ax in fig.axes if ax.get_title()]
    suptitle = getattr(fig, "_suptitle", None)
    return found + ([suptitle] if suptitle is not None and suptitle.get_text() else [])


def _room(fig: plt.Figure, title: object) -> float:
    """Pixels a title may take: twice the distance from its centre to the nearer edge of the figure (its axes'
    centre as placed before the layout runs, the figure's for a suptitle), less 10 % for the layout moving it."""
    width = fig.get_figwidth() * fig.dpi
    if title is getattr(fig, "_suptitle", None):
        centre = width / 2
    else:
        pos = title.axes.get_position()  # type: ignore[attr-defined]
        centre = (pos.x0 + pos.x1) / 2 * width
    return 2 * min(centre, width - centre) * 0.9


def fit_titles(fig: plt.Figure, dpi: int = DPI) -> None:
    """Wrap each title wider than its room (:func:`_room`) onto more lines, then shrink its font, until it fits: a
    title is never clipped at the figure's edge (a long trace id, a diff's two labels). Text is measured without
    drawing the figure (its width does not depend on the layout): the figure is drawn once, when it is saved."""
    fig.set_dpi(dpi)
    renderer = fig.canvas.get_renderer()
    for title in _titles(fig):
        room = _room(fig, title)
        width = title.get_window_extent(renderer).width
        if width <= room:
            continue
        lines = title.get_text().splitlines()
        chars = max(20, int(max(len(line) for line in lines) * room / width))
        title.set_text("\n".join(textwrap.fill(line, chars) for line in lines))
        while title.get_window_extent(renderer).width > room and title.get_fontsize() > 6:
            title.set_fontsize(title.get_fontsize() - 1)


def fit_labels(fig: plt.Figure, labels: list[tuple[object, float, float]], dpi: int = DPI) -> list[object]:
    """Of ``labels`` (text, left and right edge of the bar it names, in data coordinates), keep those that lie
    inside their bar and clear of every label kept before; remove the others. Measured on the drawn figure, not
    guessed from a character count: a label that does not fit is left out, never overlapped. Returns the kept."""
    fig.set_dpi(dpi)
    fig.draw_without_rendering()  # the layout places the labels; no pixels are needed yet
    renderer = fig.canvas.get_renderer()
    kept: list[object] = []
    boxes = []
    for text, left, right in labels:
        ax = text.axes  # type: ignore[attr-defined]
        box = text.get_window_extent(renderer)  # type: ignore[attr-defined]
        x0, x1 = (ax.transData.transform((x, 0))[0] for x in (left, right))
        fits = box.x0 >= x0 + 1 and box.x1 <= x1 - 1 and not any(box.overlaps(b) for b in boxes)
        if fits:
            kept.append(text)
            boxes.append(box)
        else:
            text.remove()  # type: ignore[attr-defined]
    return kept


def _us(ns: float) -> str:
    us = ns / 1e3
    return f"{us / 1e3:,.2f} ms" if us >= 1e4 else f"{us:,.1f} µs"


def _short(text: str, n: int = 38) -> str:
    return text if len(text) <= n else "…" + text[-(n - 1) :]


def _hbars(ax: plt.Axes, df: pl.DataFrame, label_col: str, colour_col: str, colours: dict[str, str]) -> None:
    df = df.head(MAX_ROWS)
    y = np.arange(df.height)
    t = df["gpu_time_ns"].to_numpy() / 1e3
    ax.barh(y, t, color=[colours.get(c, OUTSIDE_GREY) for c in df[colour_col].to_list()])
    ax.set_yticks(y, [_short(x) for x in df[label_col].to_list()])
    ax.invert_yaxis()
    ax.set_xlabel("GPU time (µs, sum of kernel durations)")
    for yi, ti, ns, share in zip(y, t, df["gpu_time_ns"], df["share_pct"], strict=True):
        ax.text(ti, yi, f" {_us(ns)} · {share:.1f}%", va="center", fontsize=8)
    ax.set_xlim(0, max(t.max(), 1e-9) * 1.35)  # room for the value labels right of the longest bar


def layer_bars(by_name: pl.DataFrame, by_path: pl.DataFrame, colours: dict[str, str], trace: str) -> bytes:
    rows = max(min(by_name.height, MAX_ROWS), min(by_path.height, MAX_ROWS))
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH_IN, max(3.2, 1.2 + 0.26 * rows)), layout="constrained")
    _hbars(a, by_name, "layer", "layer", colours)
    a.set_title("by layer name (all calls)")
    _hbars(b, by_path, "path", "layer", colours)
    b.set_title("by range path (innermost)")
    fig.suptitle(f"{trace}: GPU time per layer", fontweight="bold")
    return _png(fig)


def sm_heatmap(load: SmLoad, trace: str) -> bytes:
    """Rows: layer paths; columns: SM ids; colour: the SM's modelled load on ONE absolute log scale for every
    layer (so layers compare); idle SMs black; the row label gives SMs used. A model, not a measurement."""
    m = load.matrix.head(MAX_ROWS)
    values = m.drop("path").to_numpy().astype(float)
    top = float(values.max()) if values.size else 0.0
    norm = matplotlib.colors.LogNorm(vmin=max(top * 1e-4, 1e-9), vmax=max(top, 1e-9))
    rel = np.ma.masked_less_equal(values, 0)
    cmap = plt.get_cmap("viridis").with_extremes(bad="black")
    n_sm = values.shape[1]
    used = (values > 0).sum(axis=1)
    labels = [f"{_short(p, 30)}  [{u}/{n_sm} SMs]" for p, u in zip(m["path"].to_list(), used, strict=True)]
    # 8 in: the 132 SMs need no more, and the figure is one of three a trace embeds
    fig, ax = plt.subplots(figsize=(8, max(3.6, 1.4 + 0.24 * len(labels))), layout="constrained")
    im = ax.imshow(rel, aspect="auto", cmap=cmap, norm=norm, interpolation="nearest")
    ax.set_yticks(np.arange(len(labels)), labels)
    step = 12 if n_sm > 48 else max(1, n_sm // 8)
    ax.set_xticks(np.arange(0, n_sm, step))
    ax.set_xlabel("SM id (dispatch order, round-robin model)")
    cb = fig.colorbar(im, ax=ax, pad=0.01, fraction=0.03)
    cb.set_label(f"{load.value_name} per SM (log; black: idle)")
    ax.set_title(
        f"{trace}: load per SM and layer ({load.value_name}) — model (round-robin dispatch estimate)",
        fontweight="bold",
    )
    return _png(fig, DPI_SECONDARY, gradient=True)


def timeline(w: Window, colours: dict[str, str], trace: str) -> bytes:
    """GPU timeline of one window: NVTX ranges (their kernels' GPU span) above, kernels per stream below."""
    t0 = w.start_ns
    # ms ticks once the window is long, so tick labels stay short (no 250000 µs)
    unit, scale = ("ms", 1e6) if w.end_ns - t0 > 1e7 else ("µs", 1e3)
    span = max((w.end_ns - t0) / scale, 1e-6)
    depths = sorted(set(w.ranges["depth"].to_list())) if w.ranges.height else []
    k = w.kernels
    if "stream_id" not in k.columns:
        k = k.with_columns(pl.lit(None, pl.Int64).alias("stream_id"))
    if "device_id" not in k.columns:
        k = k.with_columns(pl.lit(None, pl.Int32).alias("device_id"))
    streams = k.select("device_id", "stream_id").unique().sort("device_id", "stream_id", nulls_last=True).rows()
    lanes = [f"NVTX depth {d}" for d in depths] + [f"GPU {d} · stream {s}" for d, s in streams]
    n_legend = min(len(set(k["layer"].to_list())), MAX_COLOURED + 1)
    legend_in = 0.5 + 0.22 * -(-n_legend // 5)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, max(3.6, 1.7 + 0.45 * len(lanes)) + legend_in), layout="constrained")
    lane_of = {("r", d): i for i, d in enumerate(depths)}
    lane_of.update({("k", ds): len(depths) + i for i, ds in enumerate(streams)})
    # One collection per lane, its bars in row order: one broken_barh per bar made a collection each, and
    # matplotlib re-fit the axes' limits after every one (the demo report's 37 timelines, 15k bars: most of its
    # time). Lanes never overlap, so the picture is the same.
    ranges: dict[int, tuple[list, list]] = {}
    labels = []
    for r in w.ranges.iter_rows(named=True):
        x = (max(r["gpu_start_ns"], t0) - t0) / scale
        width = (min(r["gpu_end_ns"], w.end_ns) - t0) / scale - x
        lane = lane_of[("r", r["depth"])]
        bars, fills = ranges.setdefault(lane, ([], []))
        bars.append((x, width))
        fills.append(colours.get(r["layer"], PARENT_GREY))
        if width / span > 0.01:  # bars under 1 % of the axis cannot hold a word; fit_labels measures the rest
            text = ax.text(x + width / 2, lane, _short(r["layer"], 16), ha="center", va="center", fontsize=8)
            labels.append((text, x, x + width))
    for lane, (bars, fills) in ranges.items():
        ax.broken_barh(bars, (lane - 0.4, 0.8), facecolors=fills, edgecolors="white", linewidth=0.6, alpha=0.85)
    kernels: dict[int, tuple[list, list]] = {}
    for r in k.iter_rows(named=True):
        x = (r["start_ns"] - t0) / scale
        width = max(r["duration_ns"] / scale, span * 0.002)  # a 1 µs kernel still shows as a sliver
        bars, fills = kernels.setdefault(lane_of[("k", (r["device_id"], r["stream_id"]))], ([], []))
        bars.append((x, width))
        fills.append(colours.get(r["layer"], OUTSIDE_GREY))
    for lane, (bars, fills) in kernels.items():
        ax.broken_barh(bars, (lane - 0.4, 0.8), facecolors=fills, edgecolors="black", linewidth=0.3)
    ax.set_yticks(np.arange(len(lanes)), lanes)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlim(0, span)
    ax.set_xlabel(f"GPU time since the window start ({unit})")
    busy = k["duration_ns"].sum() / max(w.end_ns - w.start_ns, 1) * 100
    title = (
        f"{trace}: {w.title} — {_us(w.end_ns - w.start_ns)} span, {k.height} kernels, "
        f"kernels busy {busy:.{0 if busy >= 1 else 2}f}% of it"
    )
    ax.set_title(textwrap.fill(title, 100), fontweight="bold")  # two lines rather than a title cut at the edge
    present = set(k["layer"].to_list())
    handles = [
        Patch(facecolor=c, edgecolor="black", linewidth=0.3, label=_short(n, 24))
        for n, c in colours.items()
        if n in present and c != OTHER_GREY
    ]
    others = sum(1 for n in present if colours.get(n, OTHER_GREY) == OTHER_GREY)
    if others:
        handles.append(Patch(facecolor=OTHER_GREY, edgecolor="black", linewidth=0.3, label=f"{others} other layers"))
    if handles:
        # below the axes, as a figure legend: the plot keeps the full width whatever the number of entries
        fig.legend(
            handles=handles,
            loc="outside lower center",
            ncol=min(len(handles), 5),
            frameon=False,
            title="kernels coloured by layer (top layers by GPU time)",
        )
    fit_labels(fig, labels, DPI_SECONDARY)
    return _png(fig, DPI_SECONDARY)
