"""The findings of a folder (the ``findings`` view of sql/), for the terminal, the report and the Python API.

The rules and their thresholds are SQL and data (``sql/findings.sql``, ``pipeline/analyze/finding_rules.py``);
this module only reads their result -- ``findings.parquet`` of an analysis folder, or the view computed over a
normalized folder -- and lays it out: a terminal table that fits one screen, CSV / JSON Lines / Markdown, and the
report's opening table.  docs/findings.md describes every rule.
"""

from __future__ import annotations

import difflib
import os
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa

from pipeline.errors import BadInputError
from pipeline.outputs import wrong_folder
from pipeline.report.data import read_view_file

#: Lines the terminal table may take when the terminal's height is unknown (output piped to a file).
DEFAULT_SCREEN_LINES = 40
#: Rows a table never shows fewer of, however small the screen.
MIN_ROWS = 3

RULE_TITLES = {
    "layout_conversion": "layout transforms",
    "tail_wave": "tail wave",
    "low_occupancy": "low occupancy",
    "launch_bound": "launch-bound",
    "fp32_no_tensor_cores": "FP32, no tensor cores",
    "pageable_h2d_copy": "pageable H2D copy",
    "slow_backward": "slow backward",
    "straggler_rank": "straggler rank",
}


def load(folder: Path, trace_id: str | None = None, rule: str | None = None) -> pl.DataFrame:
    """The findings of ``folder``: an analysis folder's ``findings.parquet``, or the view computed over a normalized
    folder (each view it needs computed once). Ranked by time at stake; ``trace_id`` / ``rule`` filter them."""
    parquet = folder / "findings.parquet"
    if parquet.is_file():
        df = read_view_file(parquet)
    elif (folder / "trace_meta").is_dir():
        df = compute(folder)
    else:
        raise BadInputError(
            folder,
            wrong_folder(folder, "either")
            or "neither an analysis folder with findings.parquet nor a normalized folder: give the --out folder of "
            "`tracepipe analyze` or of `tracepipe normalize`",
        )
    if rule is not None and rule not in RULE_TITLES:  # a typo would read as "no findings"
        close = difflib.get_close_matches(rule, list(RULE_TITLES), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise BadInputError(folder, f"no rule {rule!r}{hint}: --rule is one of {', '.join(RULE_TITLES)}")
    if trace_id is not None:
        known = _trace_ids(folder, df)
        if trace_id not in known:
            listed = ", ".join(known[:6]) + (" ..." if len(known) > 6 else "")
            raise BadInputError(folder, f"no trace {trace_id!r} here: --trace-id is one of {listed}")
        df = df.filter(pl.col("trace_id") == trace_id)
    if rule is not None:
        df = df.filter(pl.col("rule") == rule)
    return df.sort(["at_stake_ns", "trace_id", "rule", "path", "kernel"], descending=[True, False, False, False, False])


def _trace_ids(folder: Path, findings: pl.DataFrame) -> list[str]:
    """The traces of ``folder``, with findings or not: a normalized folder's, or those an analysis folder's
    ``layer_coverage`` (one row per trace with GPU work) and findings name."""
    from pipeline.store import trace_ids

    ids = set(findings["trace_id"].to_list())
    if (folder / "trace_meta").is_dir():
        ids |= set(trace_ids(folder))
    elif (coverage := folder / "layer_coverage.parquet").is_file():
        ids |= set(read_view_file(coverage, ["trace_id"])["trace_id"].to_list())
    return sorted(ids)


def compute(normalized: Path) -> pl.DataFrame:
    """The findings view over a normalized folder: every view it reads computed once into a table of a private
    connection (as views each rule would recompute its inputs: 8 rules over kernel_layers)."""
    from pipeline.analyze import connect

    con = connect(normalized, views=["findings"], materialize=True)
    try:
        return con.sql("SELECT * FROM findings").pl()
    finally:
        con.close()


def us(ns: float | None) -> str:
    if ns is None:
        return ""
    v = float(ns) / 1e3
    return f"{v / 1e3:,.2f} ms" if abs(v) >= 10_000 else f"{v:,.1f} µs"


def where(row: dict, with_trace: bool) -> str:
    """trace (when several), layer path and kernel of one finding, as one text."""
    parts = [row["trace_id"]] if with_trace else []
    parts.append(row["path"] or "(outside every range)")
    if row["kernel"]:
        parts.append(row["kernel"])
    return " · ".join(parts)


#: What an empty findings table says: the rules found nothing, or there was no GPU work to judge.
NO_FINDINGS = "No findings: no rule found GPU time worth a look (thresholds: pipeline/analyze/finding_rules.py).\n"
NO_GPU_WORK = (
    "No findings: no trace here has GPU work (kernels, copies, memsets) to judge; normalize's warnings say why "
    "(a CPU-only profile, or GPU activity not recorded).\n"
)


def has_gpu_work(folder: Path) -> bool:
    """Whether any trace of an analysis folder has GPU work: layer_coverage has a row per trace with GPU operations
    (True where that view was not written: nothing says otherwise)."""
    coverage = folder / "layer_coverage.parquet"
    return not coverage.is_file() or read_view_file(coverage, ["trace_id"]).height > 0


def terminal_text(
    df: pl.DataFrame, width: int, max_lines: int | None = None, title: str | None = None, gpu_work: bool = True
) -> str:
    """The findings, most at stake first, each as a head line (rank, time at stake, its share of the GPU wall time,
    rule, trace when several, layer path, kernel) and its evidence and fix below, every line wrapped at ``width``
    (never cut). With ``max_lines``, the top findings that fit, then one line saying how many more there are.
    ``gpu_work`` False: no trace had GPU work, which an empty table says instead of the rules' verdict."""
    import textwrap

    if df.height == 0:
        return NO_FINDINGS if gpu_work else NO_GPU_WORK
    with_trace = df["trace_id"].n_unique() > 1

    def wrap(text: str, indent: str, more: str | None = None) -> list[str]:
        return textwrap.wrap(
            text,
            width=max(width, 40),
            initial_indent=indent,
            subsequent_indent=indent + "  " if more is None else more,
            break_on_hyphens=False,
            break_long_words=True,
        )

    blocks = []
    for i, r in enumerate(df.iter_rows(named=True), 1):
        share = r.get("share_pct")
        stake = us(r["at_stake_ns"]) + (f" ({share:.1f} % of GPU wall)" if share is not None else "")
        head = f"{i:>3}. {stake}  {RULE_TITLES.get(r['rule'], r['rule'])}: {where(r, with_trace)}"
        blocks.append(wrap(head, "", "     ") + wrap(r["evidence"], "     ") + wrap("→ " + r["fix"], "     "))
    lines = wrap(title, "") if title else []
    shown = 0
    for block in blocks:
        room = None if max_lines is None else max_lines - len(lines) - (1 if shown + 1 < len(blocks) else 0)
        if room is not None and len(block) > room and shown >= MIN_ROWS:
            break
        lines += block
        shown += 1
    if shown < len(blocks):
        lines.append(f"… {len(blocks) - shown} more: --all, or --format csv / -o FILE for every finding")
    return "\n".join(lines) + "\n"


def screen_lines() -> int:
    """Lines of the terminal (LINES honoured), or DEFAULT_SCREEN_LINES when stdout is no terminal."""
    if not os.isatty(1) and not os.environ.get("LINES"):
        return DEFAULT_SCREEN_LINES
    return shutil.get_terminal_size((120, DEFAULT_SCREEN_LINES)).lines


def as_arrow(df: pl.DataFrame) -> pa.Table:
    return df.to_arrow()


def _cell(text: str, cls: str = "name") -> str:
    import html

    return f"<td>{html.escape(text)}</td>" if cls == "num" else f'<td class="{cls}">{html.escape(text)}</td>'


def html_table(df: pl.DataFrame, top: int = 10, max_rows: int = 40, with_trace: bool = True) -> str:
    """The findings as the report's table: the ``top`` open, the rest up to ``max_rows`` folded in a <details>;
    evidence and fix wrap in their cells (nothing is cut)."""
    import html

    heads = ["#", *(["trace"] if with_trace else []), "at stake", "% of GPU wall", "rule", "layer path", "kernel"]
    heads += ["evidence", "fix"]
    head = "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in heads) + "</tr></thead>"

    def rows(part: pl.DataFrame, start: int) -> str:
        out = []
        for i, r in enumerate(part.iter_rows(named=True), start):
            share = r.get("share_pct")
            cells = [_cell(str(i), "num")]
            if with_trace:
                cells.append(_cell(r["trace_id"]))
            cells += [
                _cell(us(r["at_stake_ns"]), "num"),
                _cell("" if share is None else f"{share:.1f}", "num"),
                _cell(RULE_TITLES.get(r["rule"], r["rule"])),
                _cell(r["path"] or "(outside every range)"),
                _cell(r["kernel"] or ""),
                _cell(r["evidence"]),
                _cell(r["fix"]),
            ]
            out.append(f"<tr>{''.join(cells)}</tr>")
        return "".join(out)

    def tbl(part: pl.DataFrame, start: int) -> str:
        return f'<div class="scroll"><table class="finding">{head}<tbody>{rows(part, start)}</tbody></table></div>'

    kept = df.head(max_rows)
    out = tbl(kept.head(top), 1)
    if kept.height > top:
        out += f"<details><summary>{kept.height - top} more findings</summary>{tbl(kept.slice(top), top + 1)}</details>"
    if df.height > max_rows:
        out += f'<p class="note">{df.height - max_rows} more findings in findings.parquet (tracepipe findings).</p>'
    return out


#: lines `tracepipe run` gives its top findings after the views are written
RUN_SUMMARY_LINES = 16


def print_top(analysis: Path, max_lines: int = RUN_SUMMARY_LINES) -> None:
    """The top findings of an analysis folder on stdout (nothing when it has no findings.parquet: `run --view X`)."""
    import sys

    from pipeline import console

    if not (analysis / "findings.parquet").is_file():
        return
    df = load(analysis)
    title = f"Top findings of {df.height} (every one: tracepipe findings {analysis})"
    sys.stdout.write(terminal_text(df, console.out.width, max_lines, title, has_gpu_work(analysis)))


MARKDOWN_COLUMNS = ("trace_id", "at_stake_ns", "share_pct", "rule", "path", "kernel", "evidence", "fix")


def markdown(df: pl.DataFrame) -> str:
    """Every finding as a Markdown table (for an issue or a PR): rank, trace, at stake, share of the GPU wall time,
    rule, layer path, kernel, evidence, fix; no cell cut or wrapped."""

    def cell(v: object) -> str:
        return "" if v is None else str(v).replace("|", "\\|").replace("\n", " ")

    head = ["#", "trace", "at stake", "% of GPU wall", "rule", "layer path", "kernel", "evidence", "fix"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---:", "---", "---:", "---:"] + ["---"] * 5) + "|"]
    for i, r in enumerate(df.iter_rows(named=True), 1):
        share = "" if r["share_pct"] is None else f"{r['share_pct']:.1f}"
        values = [str(i), r["trace_id"], us(r["at_stake_ns"]), share, r["rule"], r["path"], r["kernel"]]
        values += [r["evidence"], r["fix"]]
        lines.append("| " + " | ".join(cell(v) for v in values) + " |")
    return "\n".join(lines) + "\n"
