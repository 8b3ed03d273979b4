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
th { background: #f5f5f7; position: sticky; top: 0; white-space: normal; vertical-align: bottom; max-width: 7em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.name { max-width: 26em; overflow: hidden; text-overflow: ellipsis; } /* the cell's title has the whole text */
.scroll { overflow-x: auto; }
tr.group td { border-top: 2px solid #ccc; } .kpi { display: inline-block; margin-right: 28px; }
.kpi b { font-size: 18px; display: block; }
nav { display: flex; flex-wrap: wrap; gap: 4px 14px; }
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


def table(df: pl.DataFrame, cols: Sequence[Col], group: str | None = None, max_rows: int = 200) -> str:
    """An HTML table of ``df``'s ``cols`` that exist; ``group`` draws a rule where that column changes."""
    cols = [c for c in cols if c.name in df.columns]
    head = "".join(f"<th>{html.escape(c.header)}</th>" for c in cols)
    rows: list[str] = []
    prev: object = None
    for i, r in enumerate(df.head(max_rows).iter_rows(named=True)):
        cls = ' class="group"' if group and i > 0 and r[group] != prev else ""
        prev = r[group] if group else None
        cells = []
        for c in cols:
            v = r[c.name]
            kind = "num" if c.numeric else "name"
            title = f' title="{html.escape(str(v))}"' if kind == "name" and v is not None else ""
            cells.append(f'<td class="{kind}"{title}>{html.escape(c.fmt(v))}</td>')
        rows.append(f"<tr{cls}>{''.join(cells)}</tr>")
    more = (
        f'<p class="note">{df.height - max_rows} more rows in the analysis Parquet.</p>' if df.height > max_rows else ""
    )
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>{more}'
    )


def image(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


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
