"""``tracepipe diff A B``: two runs compared per layer path and pass (B against A).

Each side is a normalized folder, an analysis folder (``tracepipe analyze``'s Parquet) or trace files
(normalized first into a temporary store), optionally ``:TRACE`` to pick one trace of several. The work is
SQL: ``sql/compare/layer_diff_side.sql`` turns each side's ``layer_summary`` (+ ``layer_macs``) into rows per
path and pass, ``sql/compare/layer_diff.sql`` joins the two. Python opens the sides, registers the two row
sets and draws: a terminal table (<= 40 lines), a bar chart of the per-layer change, an HTML section.
"""

from __future__ import annotations

import contextlib
import html as _html
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import console
from pipeline.catalog import SQL_DIR
from pipeline.errors import BadInputError
from pipeline.report.html import Col, block, image, integer, note, pct, si, table, us

COMPARE_DIR = SQL_DIR / "compare"
OUTSIDE = "(outside ranges)"
#: rows the terminal tables show: by absolute change, by relative change
TOP_ABS, TOP_REL = 10, 5
#: bars in the figure
MAX_BARS = 25


def compare_sql(name: str) -> str:
    """The SELECT of ``sql/compare/<name>.sql`` (header comment kept: DuckDB skips it)."""
    return (COMPARE_DIR / f"{name}.sql").read_text().strip().rstrip(";")


@dataclass
class Side:
    spec: str  # as the user gave it
    source: Path
    kind: str  # "normalized", "analysis" or "traces"
    trace_id: str
    rows: pa.Table  # layer_diff_side rows of the chosen trace

    @property
    def label(self) -> str:
        return f"{self.spec} ({self.trace_id})" if self.trace_id not in self.spec else self.spec


def parse_spec(spec: str) -> tuple[Path, str | None]:
    """``FOLDER`` or ``FOLDER:TRACE`` (trace ids never hold ':'); a path that exists as given wins."""
    p = Path(spec)
    if p.exists() or ":" not in spec:
        return p, None
    folder, _, trace = spec.rpartition(":")
    return Path(folder), trace or None


def _analysis_connection(folder: Path) -> duckdb.DuckDBPyConnection:
    """layer_summary (and layer_macs when written) from an analysis folder's Parquet."""
    from pipeline.analyze.engine import create_macros

    con = duckdb.connect()
    create_macros(con, names={"step_folded"})  # layer_diff_side's
    con.read_parquet(str(folder / "layer_summary.parquet")).create_view("layer_summary")
    macs = folder / "layer_macs.parquet"
    if macs.is_file():
        con.read_parquet(str(macs)).create_view("layer_macs")
    else:  # no shapes analysed: every MAC column NULL
        con.execute(
            "CREATE VIEW layer_macs AS SELECT * FROM (VALUES (NULL::VARCHAR, NULL::VARCHAR, NULL::BIGINT, "
            "NULL::BIGINT)) t(trace_id, layer, analytic_macs, calls_per_forward) WHERE false"
        )
    return con


def _is_normalized(folder: Path) -> bool:
    from pipeline.store import trace_ids

    return folder.is_dir() and bool(trace_ids(folder))


def _normalize_into(path: Path, store: Path) -> None:
    """Trace files (or a capture folder) normalized into ``store``; BadInputError when none could be."""
    from pipeline.normalize.batch import TRACE_SUFFIXES, expand_inputs, normalize_many, with_capture_side_files

    files = with_capture_side_files(expand_inputs((path,)))
    if not files:
        raise BadInputError(
            path,
            f"no trace files here (looked for {', '.join(TRACE_SUFFIXES)}) and not a normalized or analysis folder",
        )
    errors = [o.bad_input() for o in normalize_many(files, store)]
    if all(e is not None for e in errors):
        first = next(e for e in errors if e is not None)
        raise BadInputError(first.path, first.reason)
    for e in errors:  # the others still compare; say which input is left out
        if e is not None:
            console.warn(f"{e}: left out of the comparison")


def _side_rows(con: duckdb.DuckDBPyConnection, source: Path, trace: str | None) -> pa.Table:
    """layer_diff_side rows: of ``trace`` only when known (one rank of a big job is not rolled up for all)."""
    sql = compare_sql("layer_diff_side")
    try:
        if trace is None:
            return con.sql(sql).to_arrow_table()
        return con.sql(f"SELECT * FROM ({sql}) WHERE trace_id = ?", params=[trace]).to_arrow_table()
    except duckdb.Error as e:  # an analysis folder from another tracepipe version lacks a column
        raise BadInputError(source, f"cannot compare its layers ({str(e).splitlines()[0]})") from e


def resolve(wanted: str, ids: list[str]) -> str | None:
    """``wanted`` among ``ids``: the same id, or the one id ending in ``.wanted``."""
    if wanted in ids:
        return wanted
    by_suffix = [t for t in ids if t.endswith("." + wanted)]
    return by_suffix[0] if len(by_suffix) == 1 else None


def pick_trace(rows: pa.Table, source: Path, wanted: str | None) -> str:
    """The trace the user named (exactly, or by its last '.'-part: ``:nsys``), or the only one with layers."""
    ids = sorted(set(rows.column("trace_id").to_pylist()))
    if not ids:
        raise BadInputError(source, "no layers: no trace here has kernels (an ncu-only capture has no timeline)")
    if wanted is None:
        if len(ids) == 1:
            return ids[0]
        raise BadInputError(
            source, f"holds {len(ids)} traces with layers ({', '.join(ids[:6])}{' …' if ids[6:] else ''}): "
            f"name one as {source}:TRACE_ID"
        )  # fmt: skip
    if (found := resolve(wanted, ids)) is not None:
        return found
    raise BadInputError(source, f"no trace '{wanted}' with layers here (traces: {', '.join(ids[:6])})")


def open_side(spec: str, scratch: Path) -> Side:
    """One side of the comparison; ``scratch`` holds the temporary store when ``spec`` names trace files."""
    path, wanted = parse_spec(spec)
    if not path.exists():
        raise BadInputError(path, "no such file or folder (give a normalized folder, an analysis folder or traces)")
    from pipeline.analyze import connect
    from pipeline.store import trace_ids

    store: Path | None = None
    if path.is_dir() and (path / "layer_summary.parquet").is_file():
        kind, con = "analysis", _analysis_connection(path)
    elif _is_normalized(path):
        kind, store = "normalized", path
    else:
        scratch.mkdir(parents=True, exist_ok=True)
        _normalize_into(path, scratch)
        kind, store = "traces", scratch
    if store is not None:
        con = connect(store, read_only=True, lazy=True)  # the views computed once where two read them
    named = resolve(wanted, trace_ids(store)) if wanted and store is not None else None
    rows = _side_rows(con, path, named)
    con.close()
    trace = pick_trace(rows, path, wanted)
    mask = pc.equal(rows.column("trace_id"), trace)
    return Side(spec, path, kind, trace, rows.filter(mask))


@contextlib.contextmanager
def open_sides(spec_a: str, spec_b: str) -> Iterator[tuple[Side, Side]]:
    with tempfile.TemporaryDirectory(prefix="tracepipe-diff-") as tmp:
        yield open_side(spec_a, Path(tmp) / "a"), open_side(spec_b, Path(tmp) / "b")


def rolled_up(rows: pa.Table, depth: int) -> pa.Table:
    """A side's rows rolled up to the first ``depth`` levels of their paths (sql/compare/layer_diff_rollup.sql)."""
    con = duckdb.connect()
    con.register("diff_side", rows)
    out = con.sql(compare_sql("layer_diff_rollup"), params=[depth]).to_arrow_table()
    con.close()
    return out.cast(rows.schema)


def compare(a: Side, b: Side, depth: int | None = None) -> pl.DataFrame:
    """layer_diff over the two sides' rows (rolled up to ``depth`` path levels first, when given)."""
    con = duckdb.connect()
    con.register("diff_a", a.rows if depth is None else rolled_up(a.rows, depth))
    con.register("diff_b", b.rows if depth is None else rolled_up(b.rows, depth))
    return pl.from_arrow(con.sql(compare_sql("layer_diff")).to_arrow_table())  # type: ignore[return-value]


@dataclass
class Totals:
    gpu_time_a_ns: int
    gpu_time_b_ns: int
    kernels_a: int
    kernels_b: int
    both: int
    only_a: int
    only_b: int
    #: pass -> (GPU time A, GPU time B), training traces only
    passes: dict[str, tuple[int, int]]

    @property
    def ratio(self) -> float | None:
        return self.gpu_time_b_ns / self.gpu_time_a_ns if self.gpu_time_a_ns else None


def totals(d: pl.DataFrame) -> Totals:
    all_ = d.filter(pl.col("pass") == "all")
    by_pass = d.filter(pl.col("pass") != "all").group_by("pass").agg(pl.col("gpu_time_a_ns", "gpu_time_b_ns").sum())
    count = all_["status"].value_counts()
    n = dict(zip(count["status"].to_list(), count["count"].to_list(), strict=True))
    return Totals(
        int(all_["gpu_time_a_ns"].sum()),
        int(all_["gpu_time_b_ns"].sum()),
        int(all_["kernels_a"].sum()),
        int(all_["kernels_b"].sum()),
        n.get("both", 0),
        n.get("only_a", 0),
        n.get("only_b", 0),
        {r["pass"]: (r["gpu_time_a_ns"], r["gpu_time_b_ns"]) for r in by_pass.sort("pass").iter_rows(named=True)},
    )


def _path(p: object, n: int = 48) -> str:
    s = OUTSIDE if p is None else str(p)
    return s if len(s) <= n else "…" + s[-(n - 1) :]


def _ratio(x: object) -> str:
    return "" if x is None else f"×{float(x):.3f}" if 0.001 <= float(x) < 1000 else f"×{float(x):.3g}"


def _signed_us(ns: object) -> str:
    return "" if ns is None else f"{float(ns) / 1e3:+,.1f}"


def moved_most(d: pl.DataFrame, how: str, n: int) -> pl.DataFrame:
    """The 'all' rows that moved most: ``abs`` by |delta|, ``rel`` by |ln ratio| (layers >= 1% only)."""
    col = "abs_rank" if how == "abs" else "rel_rank"
    return d.filter((pl.col("pass") == "all") & pl.col(col).is_not_null()).sort(col).head(n)


def headline(a: Side, b: Side, t: Totals) -> list[str]:
    r = _ratio(t.ratio) or "n/a"
    lines = [
        f"A: {a.label}",
        f"B: {b.label}",
        f"GPU time {t.gpu_time_a_ns / 1e3:,.1f} µs -> {t.gpu_time_b_ns / 1e3:,.1f} µs ({r}), kernels "
        f"{t.kernels_a:,} -> {t.kernels_b:,}; layer paths: {t.both} on both, {t.only_a} only in A, "
        f"{t.only_b} only in B",
    ]
    if t.passes:
        lines.append(
            "by pass: "
            + ", ".join(f"{p} {pa_ / 1e3:,.1f} -> {pb / 1e3:,.1f} µs ({_ratio(pb / pa_) if pa_ else 'n/a'})"
                        for p, (pa_, pb) in t.passes.items())
        )  # fmt: skip
    return lines


def print_summary(a: Side, b: Side, d: pl.DataFrame, con: object = None) -> None:
    """At most 40 lines: headline, the layers that moved most (absolute, relative), the paths only on one side."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from pipeline import console

    out: Console = con or console.out  # type: ignore[assignment]  # (its width: the terminal's, COLUMNS, or whole)
    t = totals(d)
    for line in headline(a, b, t):
        out.print(line, highlight=False, soft_wrap=True)

    def moved(title: str, rows: pl.DataFrame) -> None:
        if rows.height == 0:
            return
        tbl = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1))
        for col in ("layer path", "A µs", "B µs", "B−A µs", "B/A", "kernels A→B"):
            tbl.add_column(col, justify="left" if col == "layer path" else "right", no_wrap=True)
        for r in rows.iter_rows(named=True):
            tbl.add_row(
                _path(r["path"]),
                us(r["gpu_time_a_ns"]),
                us(r["gpu_time_b_ns"]),
                _signed_us(r["delta_ns"]),
                {"only_a": "only in A", "only_b": "only in B"}.get(r["status"]) or _ratio(r["ratio"]),
                f"{r['kernels_a']}→{r['kernels_b']}",
            )
        out.print(tbl)

    moved(f"moved most (|B−A|, top {TOP_ABS})", moved_most(d, "abs", TOP_ABS))
    moved(f"moved most relatively (B/A, layers >= 1% of GPU time, top {TOP_REL})", moved_most(d, "rel", TOP_REL))
    for status, side in (("only_a", "A"), ("only_b", "B")):
        only = d.filter((pl.col("pass") == "all") & (pl.col("status") == status))
        if only.height:
            time_col = "gpu_time_a_ns" if side == "A" else "gpu_time_b_ns"
            names = [_path(p, 40) for p in only.sort(time_col, descending=True)["path"].head(3).to_list()]
            more = f" and {only.height - 3} more" if only.height > 3 else ""
            said = f"only in {side} ({only.height}): {', '.join(names)}{more}"
            out.print(said, highlight=False, soft_wrap=True)


def bar_chart(a: Side, b: Side, d: pl.DataFrame) -> bytes:
    """Horizontal bars: B − A GPU time of the paths that moved most (red: B slower, green: B faster; hatched:
    only on one side), each labelled with its ratio."""
    import numpy as np

    from pipeline.report.plots import WIDTH_IN, _png, _short, plt

    rows = moved_most(d, "abs", MAX_BARS)
    delta = rows["delta_ns"].to_numpy().astype(float) / 1e3
    y = np.arange(rows.height)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, max(3.0, 1.4 + 0.28 * rows.height)), layout="constrained")
    colours = ["#c0392b" if x > 0 else "#27ae60" for x in delta]
    hatch = ["//" if s != "both" else "" for s in rows["status"].to_list()]
    bars = ax.barh(y, delta, color=colours)
    for bar, h in zip(bars, hatch, strict=True):
        bar.set_hatch(h)
    ax.set_yticks(y, [_short(OUTSIDE if p is None else p, 44) for p in rows["path"].to_list()])
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.8)
    span = max(float(np.abs(delta).max()) if delta.size else 0.0, 1e-6)
    ax.set_xlim(min(delta.min(initial=0), 0) - 0.3 * span, max(delta.max(initial=0), 0) + 0.3 * span)
    for yi, x, r, s in zip(y, delta, rows["ratio"].to_list(), rows["status"].to_list(), strict=True):
        label = {"only_a": "only in A", "only_b": "only in B"}.get(s) or _ratio(r)
        ax.text(x, yi, f" {label} ", va="center", ha="left" if x >= 0 else "right", fontsize=8)
    ax.set_xlabel("GPU time B − A (µs, sum of kernel durations); < 0: B faster")
    from matplotlib.patches import Patch

    ax.legend(
        handles=[
            Patch(facecolor="#c0392b", label="B slower"),
            Patch(facecolor="#27ae60", label="B faster"),
            Patch(facecolor="white", edgecolor="black", hatch="//", label="path on one side only"),
        ],
        loc="lower right",
        fontsize=8,
    )
    t = totals(d)
    ax.set_title(
        f"B vs A per layer path, top {rows.height} by |B − A| — total {_ratio(t.ratio) or 'n/a'}\n"
        f"A: {_short(a.label, 60)}   B: {_short(b.label, 60)}",
        fontweight="bold",
    )
    return _png(fig)


DIFF_COLS = [
    Col("path", "layer path"),
    Col("status", "on"),
    Col("kernels_a", "kernels A", integer, True),
    Col("kernels_b", "kernels B", integer, True),
    Col("gpu_time_a_ns", "GPU time A µs", us, True),
    Col("gpu_time_b_ns", "GPU time B µs", us, True),
    Col("delta_ns", "B − A µs", _signed_us, True),
    Col("ratio", "B / A", _ratio, True),
    Col("share_a_pct", "share A %", pct, True),
    Col("share_b_pct", "share B %", pct, True),
    Col("macs_per_s_a", "MAC/s A", si, True),
    Col("macs_per_s_b", "MAC/s B", si, True),
    Col("macs_per_s_ratio", "MAC/s B / A", _ratio, True),
]


def section_html(a: Side, b: Side, d: pl.DataFrame, png: bytes) -> str:
    """The comparison as an HTML section body: headline, bar chart, moved-most tables, per-pass tables."""
    t = totals(d)
    # MAC/s columns only where some layer has analytic MACs (captures with layer shapes)
    cols = [c for c in DIFF_COLS if not c.name.startswith("macs") or d[c.name].null_count() < d.height]
    label = lambda df: df.with_columns(  # noqa: E731
        pl.col("path").fill_null(OUTSIDE), pl.col("status").replace({"only_a": "A only", "only_b": "B only"})
    )
    parts = ["<p>" + "<br>".join(_html.escape(x) for x in headline(a, b, t)) + "</p>", image(png, "GPU time change")]
    parts.append(block("Moved most: |B − A|", table(label(moved_most(d, "abs", 20)), cols)))
    rel = moved_most(d, "rel", 10)
    parts.append(
        block(
            "Moved most relatively: B / A",
            table(label(rel), cols) if rel.height else "<p>no layer on both sides with >= 1% of GPU time</p>",
            note(
                "Relative ranking over layers on both sides with at least 1% of either side's GPU time: smaller "
                "layers' ratios are noise."
            ),
        )
    )
    every = d.filter(pl.col("pass") == "all").sort("path", nulls_last=True)
    parts.append(block("Every layer path", table(label(every), cols, max_rows=300)))
    for p in ("forward", "backward", "optimizer"):
        rows = d.filter(pl.col("pass") == p)
        if rows.height:
            parts.append(block(f"{p.capitalize()} pass: moved most", table(label(rows.head(15)), cols)))
    parts.append(
        note(
            "Paths match by their full NVTX range path; GPU time is the sum of the durations of the kernels whose "
            "innermost range is the path (layer_summary); MAC/s = analytic MACs / GPU time where layer shapes were "
            "captured. Rows: sql/compare/layer_diff.sql."
        )
    )
    return "".join(parts)
