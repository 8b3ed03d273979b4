"""A deliberately simple reference for NVTX attribution: nested loops, no SQL, no cleverness.

Used to check the SQL views on real traces and on random ones (hypothesis). It states nsys's projection
rule directly: a kernel belongs to the ranges on its launching thread that enclose the launch call's start
(closed interval); the innermost is the one that started last (on a tie, the one nested deeper). A start/end range
ended on another thread holds none (nsys's nvtx_kern_sum reads only start/end ranges without an endGlobalTid).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Range:
    range_id: int
    kind: str
    pid: int
    tid: int
    start: int
    end: int
    text: str
    end_tid: int | None = None  # a start/end range ended on another thread: nsys attributes nothing to it


@dataclass(frozen=True)
class Call:
    correlation_id: int
    pid: int
    tid: int
    start: int


@dataclass(frozen=True)
class Kernel:
    kernel_id: int
    correlation_id: int
    pid: int


def _contains(outer: Range, inner: Range) -> bool:
    return outer is not inner and outer.start <= inner.start and inner.end <= outer.end


def innermost(kernels: list[Kernel], calls: list[Call], ranges: list[Range]) -> dict[int, int | None]:
    launch = {}
    for c in sorted(calls, key=lambda c: c.start, reverse=True):
        launch[(c.pid, c.correlation_id)] = c  # the earliest call with that id wins
    out: dict[int, int | None] = {}
    for k in kernels:
        c = launch.get((k.pid, k.correlation_id))
        if c is None:
            out[k.kernel_id] = None
            continue
        enclosing = [r for r in ranges if r.pid == c.pid and r.tid == c.tid and r.start <= c.start <= r.end]
        pushed = [r for r in enclosing if r.kind == "push_pop"]
        pool = pushed or [r for r in enclosing if r.kind == "start_end" and r.end_tid in (None, r.tid)]
        if not pool:
            out[k.kernel_id] = None
            continue
        depth = {r.range_id: sum(_contains(o, r) for o in pushed) for r in pool}
        out[k.kernel_id] = max(pool, key=lambda r: (r.start, depth[r.range_id])).range_id
    return out


def path_of(range_id: int, ranges: list[Range]) -> str:
    """Texts of the push/pop ranges on the same thread that contain the range, outermost first."""
    r = next(x for x in ranges if x.range_id == range_id)
    if r.kind != "push_pop":
        return r.text
    chain = [o for o in ranges if o.kind == "push_pop" and o.pid == r.pid and o.tid == r.tid and _contains(o, r)]
    chain.sort(key=lambda o: (o.start, -o.end))
    return "/".join([o.text for o in chain] + [r.text])


def nsys_path_stats(sqlite: Path) -> dict[str | None, tuple[int, int]]:
    """Independent: (kernels, GPU time ns) per innermost NVTX path, nsys's projection rule applied to the raw
    tables by the nested-loop reference (a kernel belongs to the ranges around its launching call)."""
    raw = sqlite3.connect(sqlite)
    calls = [
        Call(c, (t >> 24) & 0xFFFFFF, t & 0xFFFFFF, s)
        for c, t, s in raw.execute("SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    ]
    ranges = [
        Range(i, "push_pop", (t >> 24) & 0xFFFFFF, t & 0xFFFFFF, s, e, x)
        for i, (t, s, e, x) in enumerate(
            raw.execute(  # newer nsys exports keep the text in StringIds
                'SELECT globalTid, n.start, n."end", coalesce(n.text, s.value) FROM NVTX_EVENTS n '
                "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59"
            )
        )
    ]
    rows = raw.execute('SELECT correlationId, globalPid, "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchall()
    ref = innermost([Kernel(c, c, (p >> 24) & 0xFFFFFF) for c, p, _ in rows], calls, ranges)
    out: dict[str | None, tuple[int, int]] = {}
    for c, _, d in rows:
        path = path_of(ref[c], ranges) if ref[c] is not None else None
        n, t = out.get(path, (0, 0))
        out[path] = (n + 1, t + d)
    return out
