"""A self-contained HTML page: inline CSS, PNGs as base64 data URIs, no script, nothing fetched."""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import polars as pl

CSS = """
body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0 auto; max-width: 1320px;
       padding: 0 24px 48px; color: #1d1d1f; }
h1 { margin: 24px 0 4px; } h2 { margin-top: 40px; border-bottom: 2px solid #ddd; padding-bottom: 4px; }
h3 { margin: 28px 0 8px; } .meta, .note { color: #666; } .na { color: #a15c00; font-style: italic; }
img { max-width: 100%; border: 1px solid #eee; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 12.5px; }
th, td { padding: 3px 6px; border-bottom: 1px solid #eee; text-align: left; white-space: nowrap; }
td { text-align: right; font-variant-numeric: tabular-nums; } /* a number: most cells, so the shortest markup */
th { background: #f5f5f7; position: sticky; top: 0; white-space: normal; vertical-align: bottom; max-width: 7em; }
td.name { text-align: left; max-width: 26em; overflow: hidden; text-overflow: ellipsis; } /* title: whole text */
.scroll { overflow-x: auto; }
tr.group td { border-top: 2px solid #ccc; } .kpi { display: inline-block; margin-right: 28px; }
.kpi b { font-size: 18px; display: block; }
nav { display: flex; flex-wrap: wrap; gap: 4px 14px; }
details { margin: -8px 0 16px; } summary { cursor: pointer; color: #0b57d0; font-size: 12.5px; }
table.finding td.name { white-space: normal; overflow-wrap: anywhere; max-width: 30em; min-width: 6em; }
"""

Fmt = Callable[[object], str]


def us(ns: object) -> str:
    return "" if ns is None else f"{float(ns) / 1e3:,.1f}"


def pct(x: object) -> str:
    return "" if x is None else f"{float(x):.1f}"


def integer(x: object) -> str:
    return "" if x is None else f"{round(float(x)):,}"


def si(x: object) -> str:
    """1.23 G style for MAC counts and rates."""
    if x is None:
        return ""
    v = float(x)
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:,.2f} {unit}"
    return f"{v:,.0f}"


def known(fmt: Fmt) -> Fmt:
    """``fmt``, but "—" for a missing value (not counted), where an empty cell would read as "not shown"."""
    return lambda x: "—" if x is None else fmt(x)


def text(x: object) -> str:
    return "" if x is None else str(x)


def name(x: object, n: int = 40) -> str:
    """Long templated kernel names cut to ``n`` characters (the cell's tooltip has the whole name)."""
    s = text(x)
    return s if len(s) <= n else s[: n - 1] + "…"


@dataclass(frozen=True)
class Col:
    name: str
    header: str
    fmt: Fmt = text
    numeric: bool = False


#: characters of a cell's tooltip at most
TITLE_CHARS = 160
#: rows a table shows open; the next ones (up to a table's ``max_rows`` in all) fold into a <details> below it
TOP_ROWS = 5
#: rows a table holds in the page at most, open and folded (the analysis Parquet has them all) ...
MAX_ROWS = 10
#: ... unless it has no more than this many: a short table is listed whole (a dozen layers, a small model's kernels)
WHOLE_ROWS = 20
#: ... and the per-layer table, the report's main one: a model of a dozen layers is listed whole
MAX_LAYER_ROWS = 15


def _rows_html(df: pl.DataFrame, cols: Sequence[Col], group: str | None, prev: object = None) -> str:
    rows: list[str] = []
    for i, r in enumerate(df.iter_rows(named=True)):
        cls = ' class="group"' if group and (i > 0 or prev is not None) and r[group] != prev else ""
        prev = r[group] if group else None
        cells = []
        for c in cols:
            v = r[c.name]
            shown = c.fmt(v)
            if c.numeric:
                cells.append(f"<td>{html.escape(shown)}</td>")
                continue
            # the whole text in a tooltip where the cell may show less of it (a name cut to 40 characters, or one
            # long enough for the cell's 26em to cut), itself cut at TITLE_CHARS: a mangled template name runs to
            # thousands of characters, which the Parquet keeps
            full = "" if v is None else str(v)
            if shown != full or len(shown) > 30:
                tip = full if len(full) <= TITLE_CHARS else full[: TITLE_CHARS - 1] + "…"
                cells.append(f'<td class="name" title="{html.escape(tip)}">{html.escape(shown)}</td>')
            else:
                cells.append(f'<td class="name">{html.escape(shown)}</td>')
        rows.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return "".join(rows)


def table(
    df: pl.DataFrame,
    cols: Sequence[Col],
    group: str | None = None,
    max_rows: int = MAX_ROWS,
    top: int = TOP_ROWS,
    what: str = "rows",
) -> str:
    """An HTML table of ``df``'s ``cols`` that exist: its first ``top`` rows open, the rest up to ``max_rows``
    folded in a <details> (no script: the browser opens it), then a note on how many more the Parquet holds.
    ``group`` draws a rule where that column changes."""
    cols = [c for c in cols if c.name in df.columns]
    head = "<thead><tr>" + "".join(f"<th>{html.escape(c.header)}</th>" for c in cols) + "</tr></thead>"
    kept = df if df.height <= max(WHOLE_ROWS, max_rows) else df.head(max_rows)
    open_rows, folded = kept.head(top), kept.slice(top)
    out = f'<div class="scroll"><table>{head}<tbody>{_rows_html(open_rows, cols, group)}</tbody></table></div>'
    if folded.height:
        prev = open_rows[group][-1] if group and open_rows.height else None
        out += (
            f"<details><summary>{folded.height} more {what}</summary>"
            f'<div class="scroll"><table>{head}<tbody>{_rows_html(folded, cols, group, prev)}</tbody></table></div>'
            "</details>"
        )
    if df.height > kept.height:
        out += f'<p class="note">{df.height - kept.height} more {what} in the analysis Parquet.</p>'
    return out


def image(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def linked_image(file_name: str, alt: str, why: str) -> str:
    """A figure left out of the page: a link to its PNG file beside the page, and why it is not embedded."""
    name = html.escape(file_name)
    return f'<p class="note">{html.escape(alt)}: <a href="{name}">{name}</a>, beside this page ({html.escape(why)})</p>'


def na(reason: str) -> str:
    return f'<p class="na">{html.escape(reason)}</p>'


def note(text: str) -> str:
    """A grey line saying how to read the table or figure above it (``text`` is plain text)."""
    return f'<p class="note">{html.escape(text)}</p>'


def kpis(pairs: Iterable[tuple[str, str]]) -> str:
    """Headline figures side by side: (label, value) each, the value large above its label."""
    return "".join(
        f'<span class="kpi"><b>{html.escape(value)}</b>{html.escape(label)}</span>' for label, value in pairs
    )


def block(head: str, *body: str, missing: str | None = None) -> str:
    """One block of a report section: its ``head`` (<h3>), then its ``body`` (tables, figures, notes), or, when
    its data is not there, ``missing``: why ("not available (view X missing)")."""
    return f"<h3>{html.escape(head)}</h3>" + (na(missing) if missing is not None else "".join(body))


@dataclass
class Page:
    title: str
    meta: str
    sections: list[tuple[str, str, str]] = field(default_factory=list)  # (anchor, heading, body html)

    def render(self) -> str:
        nav = "\n".join(f'<a href="#{a}">{html.escape(h)}</a>' for a, h, _ in self.sections)
        body = "".join(f'<section id="{a}"><h2>{html.escape(h)}</h2>{b}</section>' for a, h, b in self.sections)
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(self.title)}</title><style>{CSS}</style></head><body>"
            f'<h1>{html.escape(self.title)}</h1><p class="meta">{self.meta}</p><nav>{nav}</nav>{body}'
            "</body></html>\n"
        )
