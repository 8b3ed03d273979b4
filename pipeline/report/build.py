"""Build the report: one section per trace, every figure a PNG beside the self-contained report.html.

Reads only ``<view>.parquet`` files of ``tracepipe analyze``'s output (polars), so a report can be made on
any machine that has the folder. Per trace: GPU time per layer (bar chart + table), the kernels each layer
runs (launch shape, threads, occupancy, limiter), MACs where ``layer_macs`` exists, the estimated per-SM
load (heatmap, from ``layer_sm_load``) and a GPU timeline of one iteration coloured by layer. Optional views
that are absent are reported as "not available (view X missing)", never an error.
"""

from __future__ import annotations

import datetime as dt
import html as _html
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from pipeline import console
from pipeline.lean import cores
from pipeline.outputs import output_folder, refuse_inside_normalized, writing
from pipeline.report import EMBEDDED_FIGURES, detail, tables
from pipeline.report.data import Views, load
from pipeline.report.figures import Figure, Figures, workers_for
from pipeline.report.html import (
    MAX_LAYER_ROWS,
    Col,
    Page,
    block,
    image,
    integer,
    known,
    kpis,
    linked_image,
    na,
    note,
    pct,
    si,
    table,
    us,
)
from pipeline.report.html import name as cut_name

TOP_N = 5
#: a trace's figures: the layer bars, the SM heatmap and the timeline
FIGURES_PER_TRACE = 3


def write_atomic(path: Path, data: bytes) -> Path:
    """Write beside the target, then rename: a reader never sees half a file, a crash leaves the old one."""
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with writing(path):  # a full disk names the file: exit 2
            tmp.write_bytes(data)
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def slug(trace_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", trace_id)


@dataclass
class TraceReport:
    trace_id: str
    kernels: int
    gpu_time_ns: int
    top_layers: list[dict]
    top_kernels: list[dict]
    #: section -> "drawn" or why not ("not available (view X missing)")
    sections: dict[str, str] = field(default_factory=dict)
    html: str = ""


@dataclass
class Report:
    html: Path
    pngs: list[Path]
    traces: list[TraceReport]
    #: the findings view of the analysis folder, most at stake first (None: the folder has no findings.parquet)
    findings: pl.DataFrame | None = None
    analysis: Path | None = None

    def to_json(self) -> dict:
        return {
            "html": str(self.html),
            "files": [str(self.html), *map(str, self.pngs)],
            "findings": [] if self.findings is None else self.findings.to_dicts(),
            "traces": {
                t.trace_id: {
                    "kernels": t.kernels,
                    "gpu_time_ns": t.gpu_time_ns,
                    "top_layers": t.top_layers,
                    "top_kernels": t.top_kernels,
                    "sections": t.sections,
                }
                for t in self.traces
            },
        }


@dataclass
class _Stage:
    """One unit of work for the progress bar (``name`` is what the bar shows)."""

    name: str
    run: Callable[[], None]


LAYER_COLS = [
    Col("path", "path"),
    Col("calls", "calls", integer, True),
    Col("kernels", "kernels", integer, True),
    Col("launches_per_call", "kernels/call", lambda x: "" if x is None else f"{x:.1f}", True),
    Col("gpu_time_ns", "GPU time µs", us, True),
    Col("share_pct", "share %", pct, True),
    # training traces: the same GPU time split by pass (sql/launch_point_layers.sql); zeros for inference
    Col("forward_gpu_time_ns", "forward µs", us, True),
    Col("backward_gpu_time_ns", "backward µs", us, True),
    Col("optimizer_gpu_time_ns", "optimizer µs", us, True),
    Col("mean_ns", "mean µs", us, True),
    Col("min_ns", "min µs", us, True),
    Col("max_ns", "max µs", us, True),
    Col("macs", "MACs (analytic)", known(si), True),
    Col("measured_macs", "measured MACs", si, True),
    Col("macs_per_s", "achieved MAC/s", si, True),
]

KERNEL_COLS = [
    Col("path", "path"),
    Col("short_name", "kernel", cut_name),
    Col("launches", "launches", integer, True),
    Col("gpu_time_ns", "GPU time µs", us, True),
    Col("share_pct", "share %", pct, True),
    Col("mean_ns", "mean µs", us, True),
    Col("grid", "grid"),
    Col("block", "block"),
    Col("threads", "threads/launch", integer, True),
    Col("regs", "regs/thread", integer, True),
    Col("occupancy_pct", "occupancy %", pct, True),
    Col("limiter", "limiter"),
]


def sm_cols(unit: str) -> list[Col]:
    return [
        Col("path", "path"),
        Col("sms_used", "SMs used", integer, True),
        Col("sm_count", "SMs", integer, True),
        Col("min_per_sm", f"min {unit}/SM", si, True),
        Col("mean_per_sm", f"mean {unit}/SM", si, True),
        Col("max_per_sm", f"max {unit}/SM", si, True),
        Col("imbalance", "max/mean", lambda x: "" if x is None else f"{x:.2f}", True),
    ]


def steps_folded(by_path: pl.DataFrame) -> pl.DataFrame:
    """``by_path`` (path, layer, kernels, gpu_time_ns, share_pct) with a leading numbered step folded (step_prefix)
    and the rows of one folded path summed, most GPU time first: the summary's top layer is a layer over its steps
    (a PyTorch trace's `ProfilerStep#1/model/head` was the top at 16.4% where the head took 49% over three)."""
    cols = [c for c in ("kernels", "gpu_time_ns", "share_pct") if c in by_path.columns]
    return (
        by_path.with_columns(step_folded(pl.col("path")), step_folded(pl.col("layer")))
        .group_by("path", maintain_order=True)
        .agg(pl.col("layer").first(), *(pl.col(c).sum() for c in cols))
        .sort(["gpu_time_ns", "path"], descending=[True, False])
    )


def _records(df: pl.DataFrame, cols: list[str]) -> list[dict]:
    return df.select([c for c in cols if c in df.columns]).to_dicts()


class _TraceBuilder:
    """Builds one trace's section; each stage adds figures and HTML so the progress bar can follow."""

    def __init__(
        self,
        views: Views,
        trace: str,
        out: Path,
        figures: Figures,
        findings: pl.DataFrame | None = None,
        embed: bool = True,
    ) -> None:
        self.v, self.trace, self.out, self.figures = views, trace, out, figures
        self.findings = findings
        self.embed = embed
        self.parts: list[str] = []
        self.rep: TraceReport | None = None

    def _png(self, kind: str, alt: str, render: Callable[..., bytes], *args: object) -> str:
        """The placeholder of figure ``render(*args)``, written to ``<trace>.<kind>.png`` (:func:`figure_html`)."""
        return self.figures.add(self.out / f"{slug(self.trace)}.{kind}.png", alt, self.embed, render, *args)

    def tables(self) -> None:
        from pipeline.report.plots import layer_colours

        v, t = self.v, self.trace
        self.by_name = tables.layers_by_name(v, t)
        self.by_path = tables.layers_by_path(v, t)
        self.k = tables.kernels(v, t)
        self.colours = layer_colours(self.by_name["layer"].to_list())
        total = int(self.k["duration_ns"].sum())
        outside = self.by_path.filter(pl.col("path") == tables.OUTSIDE)["gpu_time_ns"].sum()
        self.rep = TraceReport(
            t,
            self.k.height,
            total,
            _records(steps_folded(self.by_path).head(TOP_N), ["path", "layer", "kernels", "gpu_time_ns", "share_pct"]),
            _records(tables.top_kernels(self.k, TOP_N), ["short_name", "launches", "gpu_time_ns", "share_pct"]),
        )
        self.parts.append(
            kpis(
                [
                    ("kernels", f"{self.k.height:,}"),
                    ("GPU time (sum of kernels)", f"{total / 1e3:,.1f} µs"),
                    ("layer paths", f"{self.by_path.filter(pl.col('path') != tables.OUTSIDE).height}"),
                    ("distinct kernels", f"{self.k['short_name'].n_unique()}"),
                    ("outside every range", f"{100 * outside / max(total, 1):.1f}%"),
                ]
            )
        )
        self.parts.append(self._findings())

    def _findings(self) -> str:
        """This trace's findings, most at stake first (the report's opening section ranks every trace's)."""
        from pipeline.report.findings import html_table

        if self.findings is None:
            return block("Findings", missing="not available (view findings missing: re-run tracepipe analyze)")
        mine = self.findings.filter(pl.col("trace_id") == self.trace)
        if mine.height == 0:
            return block("Findings", note("No rule found GPU time worth a look in this trace."))
        if mine.height == self.findings.height:  # the report's opening table is this trace's: not the rows twice
            return block(
                "Findings",
                f'<p class="note">{mine.height} finding(s): the <a href="#findings">opening table</a> holds them.</p>',
            )
        return block("Findings", html_table(mine, top=5, max_rows=10, with_trace=False))

    def layers(self) -> None:
        from pipeline.report.plots import layer_bars

        img = self._png("layer_time", "GPU time", layer_bars, self.by_name, self.by_path, self.colours, self.trace)
        macs = self.v.unavailable.get("macs")
        if macs is None and (
            "macs" not in self.by_path.columns or self.by_path["macs"].null_count() == self.by_path.height
        ):
            macs = "not available (no layer shapes were captured for this trace: see tracepipe capture)"
        self.rep.sections["macs"] = macs or "drawn"
        training, passes = detail.pass_split(self.by_path)
        cols = LAYER_COLS if training else [c for c in LAYER_COLS if not c.name.endswith("_gpu_time_ns")]
        self.parts.append(
            block(
                "GPU time per layer",
                img,
                passes,
                table(self.by_path, cols, max_rows=MAX_LAYER_ROWS, what="layer paths"),
                na(f"MACs and achieved MAC/s: {macs}")
                if macs
                else note(
                    'MACs (analytic) "—": the shape model counts GEMM MACs of Conv and Linear layers only; '
                    "batch-norm, activations, pooling and containers have no analytic count (not 0). measured MACs "
                    "are ncu's FMA + tensor MACs of the layer's kernels, elementwise work included."
                ),
            )
        )

    def kernels(self) -> None:
        occ = self.v.unavailable.get("occupancy")
        self.rep.sections["occupancy"] = occ or "drawn"
        stats = detail.kernel_stats(self.v, self.trace)
        if stats is not None:
            self.parts.append(stats + (na(f"occupancy and limiter: {occ}") if occ else ""))
            self.parts.append(detail.kernel_names(self.v, self.trace))
            return
        kt = tables.kernel_table(self.k)
        threads_from_dims = "geometry" in self.v.unavailable and "threads" in kt.columns
        self.parts.append(
            block(
                "Kernels per layer",
                table(kt, KERNEL_COLS, group="path", what="kernels"),
                note("threads/launch = gridDim × blockDim products of kernel_layers (view kernel_geometry missing)")
                if threads_from_dims
                else "",
                na(f"occupancy and limiter: {occ}") if occ else "",
            )
        )

    def sm_load(self) -> None:
        from pipeline.report.plots import sm_heatmap

        load_ = tables.sm_load(self.v, self.trace, self.by_path["path"].to_list())
        if load_ is None:
            reason = self.v.unavailable.get("sm_load", "not available (no layer_sm_load rows for this trace)")
            self.rep.sections["sm_load"] = reason
            self.parts.append(block("Load per SM", missing=reason) + detail.sm_spread(self.v, self.trace))
            return
        self.rep.sections["sm_load"] = "drawn"
        self.parts.append(
            block(
                "Load per SM",
                self._png("sm_load", "SM load heatmap", sm_heatmap, load_, self.trace),
                note(
                    f"Model, not measurement: each SM's {load_.value_name} from layer_sm_load's round-robin dispatch "
                    "estimate, on one absolute (log) scale for every layer so layers compare; black = no block "
                    "assigned. The left-to-right steps are the model's dispatch order, not measured imbalance."
                ),
                table(load_.summary, sm_cols(load_.value_name), what="layer paths"),
            )
            + detail.sm_spread(self.v, self.trace)
        )

    def steps_and_memory(self) -> None:
        self.parts.append(detail.steps(self.v, self.trace) + detail.memory_ops(self.v, self.trace))

    def timeline(self) -> None:
        from pipeline.report.plots import timeline

        w = tables.timeline_window(self.v, self.trace, self.k)
        self.rep.sections["timeline"] = w.title
        span = w.end_ns - w.start_ns
        busy = 100 * w.kernels["duration_ns"].sum() / max(span, 1)
        caption = (
            f"{w.title}: {span / 1e3:,.1f} µs of GPU time from its first kernel's start to its last one's end, "
            f"{w.kernels.height} kernels, kernels running {busy:.{0 if busy >= 1 else 2}f}% of it "
            "(sum of durations / span)."
        )
        self.parts.append(
            block(
                "GPU timeline of one iteration",
                self._png("timeline", "GPU timeline", timeline, w, self.colours, self.trace),
                f"<p>{_html.escape(caption)}</p>",
                note(
                    "Top lanes: NVTX ranges drawn over the GPU span of the kernels they launched; bottom lanes: "
                    "kernels per stream, coloured by the layer that launched them."
                ),
            )
        )

    def stages(self) -> list[_Stage]:
        return [
            _Stage(f"{self.trace} tables", self.tables),
            _Stage(f"{self.trace} layer chart", self.layers),
            _Stage(f"{self.trace} kernel table", self.kernels),
            _Stage(f"{self.trace} SM heatmap", self.sm_load),
            _Stage(f"{self.trace} timeline", self.timeline),
            _Stage(f"{self.trace} steps and memory", self.steps_and_memory),
        ]


def figure_html(f: Figure) -> str:
    """A drawn figure on the page: embedded, or a link to its PNG beside the page."""
    if f.embed:
        return image(f.png, f.alt)  # type: ignore[arg-type]
    return linked_image(
        f.path.name,
        f.alt,
        "the page embeds the figures of the traces with the most GPU time: tracepipe report --figures all "
        "embeds every trace's",
    )


def embedded_traces(views: Views, figures: int | None) -> set[str]:
    """The traces whose figures are embedded: the ``figures`` with the most GPU time (None: every one)."""
    if figures is None:
        return set(views.trace_ids)
    ls = views.required["layer_summary"]
    by_time = (
        ls.group_by("trace_id")
        .agg(pl.col("gpu_time_ns").sum())
        .sort(["gpu_time_ns", "trace_id"], descending=[True, False])
    )
    return set(by_time["trace_id"].head(figures).to_list())


def build_report(
    analysis: Path,
    out: Path,
    quiet: bool = True,
    diff: tuple[str, str] | None = None,
    figures: int | None = EMBEDDED_FIGURES,
    jobs: int | None = 1,
) -> Report:
    """Write ``out/report.html`` and ``out/<trace>.<figure>.png``; BadInputError (nothing written) when
    ``analysis`` is not an analysis folder. ``diff``: two runs (``tracepipe diff`` A and B) compared in a
    section of their own; a folder of several ranks gets a ranks section. ``figures``: how many traces' figures
    the page embeds (the others' are linked files; None: every trace's). ``jobs``: processes drawing the figures
    (1: this one; None: :func:`~pipeline.report.figures.workers_for` their number). Workers start by the
    forkserver, which imports the calling script's main module: a script calling this with ``jobs`` other
    than 1 needs the ``if __name__ == "__main__":`` guard (the command line has it)."""
    refuse_inside_normalized(out)  # before any work: nothing is ever written inside normalized data
    views = load(analysis)
    extra = _extra_sections(analysis, out, diff)
    output_folder(out)
    findings = _read_findings(analysis)
    embedded = embedded_traces(views, figures)
    workers = workers_for(FIGURES_PER_TRACE * len(views.trace_ids), cores()) if jobs is None else jobs
    with Figures(workers) as drawn:
        builders = [_TraceBuilder(views, t, out, drawn, findings, t in embedded) for t in views.trace_ids]
        stages = [s for b in builders for s in b.stages()]
        for stage in console.progress(stages, len(stages), "report", quiet):
            stage.run()
        pngs = [write_atomic(f.path, f.png) for f in drawn.wait(quiet)]  # type: ignore[arg-type]
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = Page(
        "tracepipe report",
        f"{len(builders)} trace(s) from <code>{_html.escape(str(analysis))}</code>, generated {when}. "
        "Times are sums of kernel durations on the GPU; layers are the NVTX ranges that launched the kernels.",
    )
    several = findings is not None and findings["trace_id"].n_unique() > 1
    page.sections.append(
        ("findings", "Findings: what to fix, most GPU time at stake first", _findings_html(findings, several))
    )
    page.sections.append(("passes", "GPU time by pass: forward, backward, optimizer", _passes_html(views)))
    page.sections += [(anchor, heading, body) for anchor, heading, body, _ in extra]
    pngs += [write_atomic(out / name, png) for *_, (name, png) in extra]
    for b in builders:
        page.sections.append((slug(b.trace), b.trace, drawn.fill("".join(b.parts), figure_html)))
    if ncu_only := detail.ncu_only_section(views):
        page.sections.append(ncu_only)
    html_path = write_atomic(out / "report.html", page.render().encode())
    return Report(html_path, pngs, [b.rep for b in builders], findings, analysis)


def _read_findings(analysis: Path) -> pl.DataFrame | None:
    path = analysis / "findings.parquet"
    if not path.is_file():
        return None
    from pipeline.report.findings import load as load_findings

    return load_findings(analysis)


def _findings_html(findings: pl.DataFrame | None, with_trace: bool = True) -> str:
    """The findings of every trace, most at stake first; ``with_trace`` False (every finding of one trace): no trace
    column, every row would say the same."""
    from pipeline.report.findings import html_table

    if findings is None:
        return note("No findings.parquet in the analysis folder (an older analyze): re-run tracepipe analyze.")
    if findings.height == 0:
        return note("No rule found GPU time worth a look (thresholds: pipeline/analyze/finding_rules.py).")
    return html_table(findings, top=12, max_rows=40, with_trace=with_trace) + note(
        "One row per trace, layer path, kernel and rule. At stake: the GPU time the fix could save, each rule's "
        "estimate (docs/findings.md); % of GPU wall: of the trace's GPU wall time over its steps. A leading "
        "ProfilerStep#N is folded to ProfilerStep#*: one finding for the layer in every step. Every finding: "
        "tracepipe findings ANALYSIS --all, or findings.parquet."
    )


def step_folded(text: pl.Expr) -> pl.Expr:
    """``text`` with a leading numbered step written ``<name>*`` (``ProfilerStep#7/fc`` -> ``ProfilerStep#*/fc``), as
    the macro of the same name folds it in SQL (:func:`step_prefix`)."""
    return text.str.replace(step_prefix(), "${1}*${2}")


def step_prefix() -> str:
    """The pattern of a leading numbered step range, folded to `<name>*` where a layer's steps are summed: read from
    sql/macros/step_folded.sql, the macro the findings fold paths with, so that the report folds as they do."""
    from pipeline.analyze.views import macro_files

    macro = macro_files()["step_folded"].read_text()
    found = re.search(r"regexp_replace\(text, '([^']+)'", macro)
    assert found is not None, "sql/macros/step_folded.sql: no regexp_replace(text, '<pattern>', ...)"
    return found.group(1)


PASS_COLS = [
    Col("trace_id", "trace"),
    Col("path", "layer path"),
    Col("gpu_time_ns", "GPU time µs", us, True),
    Col("forward_gpu_time_ns", "forward µs", us, True),
    Col("backward_gpu_time_ns", "backward µs", us, True),
    Col("optimizer_gpu_time_ns", "optimizer µs", us, True),
    # launched outside every range, neither backward nor optimizer: the four passes add up to the GPU time
    Col("no_pass_gpu_time_ns", "no pass µs", us, True),
    Col(
        "ratio",
        "backward / forward",
        lambda x: "" if x is None or x != x or x in (float("inf"), -float("inf")) else f"{x:.2f}",
        True,
    ),
]


def _passes_html(views: Views) -> str:
    """Per training trace: its GPU time by pass, then its top layers split forward / backward / optimizer."""
    s = views.required["layer_summary"]
    cols = ["forward_gpu_time_ns", "backward_gpu_time_ns", "optimizer_gpu_time_ns", "no_pass_gpu_time_ns"]
    if not all(c in s.columns for c in cols[:3]):
        return note("not available (layer_summary has no pass columns: re-run tracepipe analyze)")
    if cols[3] not in s.columns:  # an analysis folder written before the column: the rest of the GPU time
        s = s.with_columns((pl.col("gpu_time_ns") - pl.sum_horizontal(cols[:3])).alias(cols[3]))
    per_trace = s.group_by("trace_id").agg(pl.col("gpu_time_ns").sum(), *(pl.col(c).sum() for c in cols))
    training = per_trace.filter((pl.col("backward_gpu_time_ns") > 0) | (pl.col("optimizer_gpu_time_ns") > 0))
    inference = per_trace.height - training.height
    if training.height == 0:
        return note(f"Every trace ran forward work only ({inference} trace(s)): no backward or optimizer kernels.")
    totals = training.with_columns(pl.lit("(whole trace)").alias("path"))
    top = (
        s.filter(pl.col("trace_id").is_in(training["trace_id"].to_list()))
        # the layer in every step as one row, as the findings fold them: ProfilerStep#7/fc -> ProfilerStep#*/fc
        .with_columns(step_folded(pl.col("path").fill_null(tables.OUTSIDE)))
        .group_by("trace_id", "path")
        .agg(pl.col("gpu_time_ns").sum(), *(pl.col(c).sum() for c in cols))
        .sort(["trace_id", "gpu_time_ns", "path"], descending=[False, True, False])
        .group_by("trace_id", maintain_order=True)
        .head(5)
    )
    rows = (
        pl.concat(
            [
                totals.select("trace_id", "path", "gpu_time_ns", *cols),
                top.select("trace_id", "path", "gpu_time_ns", *cols),
            ]
        )
        .with_columns((pl.col("backward_gpu_time_ns") / pl.col("forward_gpu_time_ns")).alias("ratio"))
        .sort("trace_id", maintain_order=True)
    )
    return table(
        rows, PASS_COLS, group="trace_id", top=3 * min(training.height, 4), max_rows=6 * 12, what="rows"
    ) + note(
        f"Per training trace: the whole trace, then its 5 layer paths with the most GPU time (a leading ProfilerStep#N "
        f"folded: the layer in every step), split by pass "
        f"(backward kernels count for the forward layer of the same autograd sequence number; "
        f"sql/launch_point_layers.sql). {inference} trace(s) ran forward work only."
    )


def _extra_sections(
    analysis: Path, out: Path, diff: tuple[str, str] | None
) -> list[tuple[str, str, str, tuple[str, bytes]]]:
    """Sections over more than one trace, before the per-trace ones: (anchor, heading, body, (png name, png))."""
    from pipeline.report import diff as _diff
    from pipeline.report import ranks

    found = []
    if diff is not None:
        with _diff.open_sides(*diff) as (a, b):
            d = _diff.compare(a, b)
        png = _diff.bar_chart(a, b, d)
        found.append(("diff", "Diff: B against A", _diff.section_html(a, b, d, png), ("layer_diff.png", png)))
    for i, r in enumerate(ranks.load_jobs(analysis)):
        body, png = ranks.section(r)
        anchor, png_name = ("ranks", "ranks.png") if i == 0 else (f"ranks-{i + 1}", f"ranks-{i + 1}.png")
        found.append((anchor, f"Ranks: {r.totals.height} ranks compared (one job)", body, (png_name, png)))
    return found
