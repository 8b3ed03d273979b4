"""Decode engine for chrome traces: JSON bytes -> one Arrow table per event group, nothing else.

This module reads the file and its top-level object, cuts the events into pieces and has worker processes
decode them; a piece's events become Arrow tables in ``chrome_events`` (the fast and general routes, exact
timestamps).

How it stays fast and lean on a multi-GB trace:

* A plain file is memory-mapped, not read (no copy).  The events array is cut at event boundaries into
  ~4 MB pieces (``_split``); every guess is checked by decoding, and a file that cannot be cut that way
  (the chrome "JSON array format", one line, a nested layout) is read as ``traceEvents`` Raw slices.
* Pieces are decoded in forked worker processes, one per core (msgspec holds the GIL), which inherit the
  map and send back small Arrow tables.  Peak memory is the tables plus one piece of Structs per worker,
  not every event as Python objects at once.
"""

from __future__ import annotations

import mmap
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.errors import BadInputError
from pipeline.lean import block_pandas, cores
from pipeline.normalize import forked
from pipeline.normalize.chrome_events import NO_RAW, BadArgs, Collected, I64Json, Piece, decode_piece
from pipeline.normalize.chrome_map import (
    CAPTURE_MARK,
    DEVICE_FIELDS,
    DEVICE_KEYS,
    OTHER_JSON_ARRAYS,
    OTHER_JSON_FILES,
    VERSION_KEYS,
)
from pipeline.normalize.sha256 import sha256_of
from pipeline.normalize.source import UTF16_BOMS, is_gzip, read_all

# --- the trace's top-level object -------------------------------------------------------------------


#: A device object: every key ``chrome_map.DEVICE_FIELDS`` names, each optional (the name a string, the rest ints).
_Device = msgspec.defstruct(
    "_Device",
    [
        (key, (str if column == "name" else I64Json) | None, None)
        for column, keys in DEVICE_FIELDS.items()
        for key in keys
    ],
    gc=False,
)


class _Distributed(msgspec.Struct, gc=False):
    rank: I64Json | None = None


def _trace_struct() -> type[msgspec.Struct]:
    """The trace's top-level object; tool versions (``chrome_map.VERSION_KEYS``) kept as their JSON text."""
    versions = [(key, msgspec.Raw, msgspec.field(default=NO_RAW)) for key in VERSION_KEYS]
    return msgspec.defstruct(
        "Trace",
        [
            ("traceEvents", list[msgspec.Raw] | None, None),
            ("schemaVersion", I64Json | str | None, None),
            *[(key, list[_Device] | None, None) for key in DEVICE_KEYS],
            ("distributedInfo", _Distributed | None, None),
            ("baseTimeNanoseconds", I64Json | None, None),
            (CAPTURE_MARK, msgspec.Raw, msgspec.field(default=NO_RAW)),
            *versions,
        ],
        gc=False,
    )


Trace = _trace_struct()


def versions(trace: msgspec.Struct) -> dict[str, str]:
    """label -> version text of each tool version the trace names (``chrome_map.VERSION_KEYS``)."""
    out = {}
    for key, label in VERSION_KEYS.items():
        raw = getattr(trace, key)
        if raw:
            text = bytes(raw).decode("utf-8", "replace").strip()
            out[label] = text[1:-1] if text.startswith('"') else text
    return out


class _LayoutMiss(Exception):
    """The fast splitter's guess about the file's layout did not hold; read the file the general way."""


# --- reading -----------------------------------------------------------------------------------------


#: A file of one JSON value per line is no chrome trace; Nsight Systems' JSON export is one.
JSON_LINES = (
    "one JSON object per line (JSON Lines), not a chrome trace: an `nsys export --type json` file? Nsight Systems "
    "is read from its SQLite export: nsys export --type sqlite REPORT.nsys-rep (or pass the .nsys-rep itself)"
)


def _is_json_lines(data: bytes | mmap.mmap) -> bool:
    """Whether the first line of ``data`` is a whole JSON value on its own (the rest then trails it)."""
    end = data.find(b"\n")
    try:
        msgspec.json.decode(data[:end] if end > 0 else b"")
    except msgspec.MsgspecError:
        return False
    return True


def _decode_error(path: Path, e: msgspec.MsgspecError) -> BadInputError:
    msg = str(e)
    if "truncated" in msg.lower():
        return BadInputError(path, f"JSON ends early (file truncated?): {msg}")
    return BadInputError(path, f"not a valid chrome trace JSON: {msg}")


#: Where one event ends and the next begins in Kineto's layout (``  },\n  {``) and in compact writers
#: (``},\n{``).  A raw newline never occurs inside a JSON string, so this can only match between values;
#: a match inside an event (a nested list of objects) makes that piece fail to decode, and then the
#: whole file is re-read the slow, layout-independent way.
_BOUNDARY = re.compile(rb"\},[ \t\r]*\n")
#: About this many bytes of events are decoded per msgspec call (~18k events).  Small on purpose: the
#: per-field passes over a piece's Structs then run in cache, twice as fast per MB as 32 MB pieces, and a
#: piece's memory is reused instead of page-faulted in afresh (measured: 5.5 vs 10.4 ms per MB).
CHUNK_BYTES = 4 << 20


def _split(data: bytes | mmap.mmap) -> tuple[bytes, list[tuple[int, int]]] | None:
    """The trace without its events (for the header), and [start, end) byte ranges of event runs.

    Finds the events array by its key and its end by the last ``]`` after which the rest of the object
    still parses, then cuts the array at event boundaries about every ``CHUNK_BYTES``.  Every guess is
    checked by decoding, so a wrong one costs time, never a wrong table.
    """
    key = data.find(b'"traceEvents"')
    if key < 0:
        return None
    m = re.compile(rb"\s*:\s*\[").match(data, key + len(b'"traceEvents"'))
    if m is None:
        return None
    first = m.end()
    end = len(data)
    for _ in range(64):  # the tail after the array is a few keys at most
        end = data.rfind(b"]", first - 1, end)
        if end < 0:
            return None
        rest = data[end + 1 :].lstrip()
        try:
            msgspec.json.decode(b"{" + rest[1:] if rest[:1] == b"," else b"{}" if rest.rstrip() == b"}" else b"!")
        except msgspec.DecodeError:
            continue
        break
    else:
        return None
    header = data[:key] + b'"traceEvents": []' + data[end + 1 :]
    ranges = []
    start = first
    while start < end:
        b = _BOUNDARY.search(data, min(start + CHUNK_BYTES, end), end)
        stop = b.start() + 1 if b else end
        ranges.append((start, stop))
        start = b.end() if b else end
    return header, ranges


#: A UTF-8 byte-order mark, which a trace saved by a Windows editor may start with.
UTF8_BOM = b"\xef\xbb\xbf"
_LEADING = re.compile(rb"[\xef\xbb\xbf \t\r\n]*")


def _first_char(data: bytes | mmap.mmap) -> bytes:
    """The first byte after any BOM/whitespace (works on a memory map without copying it)."""
    at = _LEADING.match(data).end()  # type: ignore[union-attr]
    return data[at : at + 1]


def _load(path: Path) -> bytes | mmap.mmap:
    """The content: a read-only memory map of a plain file, the decompressed bytes of a gzip one.

    The map copies nothing (reading 500 MB into a bytes object took ~0.35 s and as much memory again);
    the workers and msgspec read the page cache through it, and forked workers share it.
    """
    if not is_gzip(path):
        try:
            with open(path, "rb") as f:
                first = f.read(3)
                if first[:2] in UTF16_BOMS:
                    return read_all(path)  # re-encoded as UTF-8 (msgspec reads UTF-8 only)
                if first != UTF8_BOM:
                    return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # an empty file cannot be mapped; read_all reports the rest
            pass
    data = read_all(path)
    # msgspec refuses a UTF-8 byte-order mark (Notepad and PowerShell write one): "malformed ... (byte 0)"
    return data[len(UTF8_BOM) :] if data.startswith(UTF8_BOM) else data


def _read(path: Path) -> tuple[bytes | mmap.mmap, msgspec.Struct, list[tuple[int, int]] | None]:
    """The file's content, its metadata, and event byte ranges (None: use ``traceEvents`` Raw slices)."""
    data = _load(path)
    split = None
    if _first_char(data) == b"{":
        split = _split(data)
    if split is not None:
        try:
            return data, msgspec.json.decode(split[0], type=Trace), split[1]
        except msgspec.MsgspecError:
            pass
    return data, _read_slow(path, data), None


#: A top-level JSON array is the chrome trace's "JSON array format" only when it lists event objects.
NOT_EVENTS = "a top-level array whose items are not event objects (item 0 is not a {...} object)"
#: torch.profiler's ``export_memory_timeline(path)`` writes ``[times, sizes]``: a list of instants (us) and, for
#: each, a list of bytes per memory category (torch/profiler/_memory_profiler.py); a real one was taken for a trace.
MEMORY_TIMELINE = (
    "it is a PyTorch memory timeline (profile.export_memory_timeline: [times, bytes per category]), not a trace: "
    "write the trace with prof.export_chrome_trace(path) or torch.profiler.tensorboard_trace_handler"
)


def _read_slow(path: Path, data: bytes | mmap.mmap) -> msgspec.Struct:
    """Layout-independent: one skip-scan of the file yields a Raw slice per event."""
    try:
        if _first_char(data) == b"[":
            # The chrome trace "JSON array format": a bare list of events, no metadata.
            events = msgspec.json.decode(data, type=list[msgspec.Raw])
            if events and _first_char(bytes(events[0])) != b"{":
                what = MEMORY_TIMELINE if _is_memory_timeline(events) else NOT_EVENTS
                raise BadInputError(path, f"JSON is not a chrome trace: {what}")
            if events and (what := _what_array_it_is(bytes(events[0]))):
                raise BadInputError(path, f"JSON is not a chrome trace: {what}")
            return Trace(traceEvents=events)
        trace = msgspec.json.decode(data, type=Trace)
    except msgspec.MsgspecError as e:
        if "trailing characters" in str(e) and _is_json_lines(data):
            raise BadInputError(path, JSON_LINES) from None
        raise _decode_error(path, e) from e
    if trace.traceEvents is None:
        raise BadInputError(path, f"JSON is not a chrome trace: {_what_json_it_is(data)}")
    return trace


def _is_memory_timeline(items: list[msgspec.Raw]) -> bool:
    """Whether a top-level array is ``[times, sizes]`` (:data:`MEMORY_TIMELINE`): two lists of one length, numbers
    and lists of numbers."""
    if len(items) != 2:
        return False
    try:
        times = msgspec.json.decode(items[0], type=list[float])
        sizes = msgspec.json.decode(items[1], type=list[list[float]])
    except msgspec.MsgspecError:
        return False
    return len(times) == len(sizes)


def _what_array_it_is(item: bytes) -> str | None:
    """What a JSON array is whose first item has the keys of another tool's (``OTHER_JSON_ARRAYS``), else None."""
    try:
        keys = msgspec.json.decode(item, type=dict[str, msgspec.Raw]).keys()
    except msgspec.MsgspecError:
        return None
    return next((what for names, what in OTHER_JSON_ARRAYS.items() if all(n in keys for n in names)), None)


def _what_json_it_is(data: bytes | mmap.mmap) -> str:
    """What a JSON object without ``traceEvents`` is, by its top-level keys (``OTHER_JSON_FILES``); values are
    skipped unparsed."""
    try:
        keys = msgspec.json.decode(data, type=dict[str, msgspec.Raw]).keys()
    except msgspec.MsgspecError:
        keys = set()
    return next(
        (what for names, what in OTHER_JSON_FILES.items() if all(n in keys for n in names)),
        "the top-level object has no traceEvents array",
    )


#: What forked workers read: (file bytes, event byte ranges).  Inherited through fork, never pickled.
_WORK: tuple[bytes | mmap.mmap, list[tuple[int, int]]] | None = None
#: At most this many worker processes (each holds one piece's events, ~150 MB at peak).
MAX_WORKERS = 8


def _piece_at(i: int) -> Piece:
    """Decode ``ranges[i]`` of ``_WORK``; any failure means the splitter's layout guess was wrong."""
    assert _WORK is not None
    data, ranges = _WORK
    a, b = ranges[i]
    chunk = b"".join((b"[", memoryview(data)[a:b], b"]"))
    try:
        return decode_piece(chunk)
    except (msgspec.MsgspecError, BadArgs):
        raise _LayoutMiss from None


def _workers(pieces: int) -> int:
    """Worker processes to fork: one per core; none where fork is missing or not allowed (daemon children),
    or while another Python thread runs (a fork would copy the locks it holds: the child could deadlock)."""
    if not forked.available() or threading.active_count() > 1:
        return 1
    return max(1, min(MAX_WORKERS, cores(), pieces))


def _collect_fast(data: bytes | mmap.mmap, ranges: list[tuple[int, int]], digest: _Digest | None) -> Collected:
    """Decode the pieces in forked worker processes, one per core: msgspec holds the GIL, so threads would
    not help.  Workers inherit ``data`` (copy-on-write, never written) and send back Arrow tables.
    ``digest`` starts hashing the file once no fork is ahead (a thread must not run while one forks)."""
    global _WORK
    out = Collected()
    n = _workers(len(ranges))
    _WORK = (data, ranges)
    warm = None
    try:
        if n == 1:
            if digest is not None:
                digest.start()
            pieces: Iterator[Piece] = map(_piece_at, range(len(ranges)))
        else:
            pieces = forked.imap(_piece_at, len(ranges), n, init=_without_pandas)
        for piece in pieces:  # in file order: ties keep their order
            if warm is None and n > 1:  # the workers are forked: a thread is safe now (see _warm_pyarrow)
                warm = _warm_pyarrow()
                if digest is not None:
                    digest.start()
            out.add(piece)
        return out
    finally:
        _WORK = None
        if warm is not None:
            warm.join()  # before anything forks again: a fork must not copy a half-done import


def _without_pandas() -> None:
    """In a decode worker (a forked child that only decodes and exits): pyarrow imports pandas, when
    installed, on its first conversion of a list or numpy array; that is ~0.35 s of CPU per process for
    nothing a worker uses, and it would delay every worker's start (or the fork, if done before it)."""
    block_pandas()


def _warm_pyarrow() -> threading.Thread:
    """Have pyarrow import pandas (when installed) in a thread while the workers decode, so that the merge
    and table steps after the decode do not wait for it."""
    warm = threading.Thread(target=lambda: pc.add(pa.array(np.zeros(1, np.int64)), 0), daemon=True)
    warm.start()
    return warm


def _collect_slow(path: Path, trace: msgspec.Struct) -> Collected:
    """Pieces of ``traceEvents`` Raw slices, in this process; errors name the event's index in the file."""
    raws = trace.traceEvents or []
    n = max(1, CHUNK_BYTES // 256)
    out = Collected()
    for first in range(0, len(raws), n):
        chunk = b"".join((b"[", b",".join(raws[first : first + n]), b"]"))
        try:
            out.add(decode_piece(chunk))
        except msgspec.MsgspecError as e:
            msg = re.sub(r"\$\[(\d+)\]", lambda m, first=first: f"$.traceEvents[{int(m.group(1)) + first}]", str(e))
            raise BadInputError(path, f"unexpected value in the trace: {msg}") from e
        except BadArgs as e:
            i, msg = e.args
            msg = re.sub(r"\$\[\d+\]", lambda _, at=i + first: f"$.traceEvents[{at}].args", msg)
            raise BadInputError(path, f"unexpected value in the trace: {msg}") from None
    return out


class _Digest:
    """The file's sha256 (``sha256_of``) in a thread of this process, started once no decode worker is
    still to be forked: hashlib releases the GIL on large buffers, so it runs beside the decode.  In
    process, not in a child (``source.Sha256Job``): that child's interpreter start and its own page-cache
    mapping of the file cost ~0.03 CPU-s more on a 100 MB trace (benchmarks/results/bench_chrome_s_chrome.txt)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.digest: str | None = None
        self.error: OSError | None = None
        self.thread = threading.Thread(target=self._hash, name="chrome-sha256", daemon=True)

    def start(self) -> None:
        if self.thread.ident is None:
            self.thread.start()

    def join(self) -> None:
        if self.thread.ident is not None:
            self.thread.join()

    def _hash(self) -> None:
        try:
            self.digest = sha256_of(self.path)
        except OSError as e:
            self.error = e

    def result(self) -> str:
        self.start()
        self.join()
        if self.error is not None:
            raise BadInputError(self.path, f"cannot read to hash it: {self.error}")
        assert self.digest is not None
        return self.digest


def decode(path: Path, sha256: bool = False) -> tuple[msgspec.Struct, Collected]:
    """The trace's top-level object (events dropped) and every event decoded, one table per group; with
    ``sha256``, the file's sha256 too (``Collected.sha256``), hashed while the events decode."""
    data, trace, ranges = _read(path)
    digest = _Digest(path) if sha256 else None
    got = None
    try:
        if ranges is not None:
            try:
                got = _collect_fast(data, ranges, digest)
            except _LayoutMiss:
                trace = _read_slow(path, data)
        if digest is not None:
            digest.start()  # no fork from here on
        if got is None:
            got = _collect_slow(path, trace)
    finally:
        if digest is not None:
            digest.join()  # done before anything may fork again (another trace's decode workers)
    if digest is not None:
        got.sha256 = digest.result()
    trace.traceEvents = None
    return trace, got
