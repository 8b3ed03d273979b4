"""PyTorch profiler chrome traces (Kineto JSON, ``trace.json`` / ``trace.json.gz``) -> normalized tables.

How it stays fast and lean on a multi-GB trace:

* A plain file is memory-mapped, not read (no copy).  The events array is cut at event boundaries into
  ~4 MB pieces (``_split``; every guess is checked by decoding, with a layout-independent fallback).
* Pieces are decoded in forked worker processes, one per core (msgspec holds the GIL), which inherit the
  map and send back small Arrow tables.  Per piece, one msgspec call decodes each event into its
  category's Struct (a tagged union on ``cat``), ``args`` included, holding only the keys that category's
  columns use (most events are python_function: two ints); keys nothing uses are skipped, not built.  A
  piece that does not validate that way (unknown category, metadata events, a wrongly typed value) is
  decoded the general way: shared fields first, ``args`` raw, then per category.  Columns come from
  C-level passes (``np.fromiter(map(attrgetter))``), never per-event Python branching.  Peak memory is the tables plus
  one piece of Structs per worker, not every event as Python objects at once.
* Joins, ids and ordering are DuckDB SQL or numpy over those arrays, never per-event dicts or pandas.

Timestamps are float microseconds in the file.  ``round(ts * 1000)`` in float64 is off by 1 ns for about 0.3%
of 3-decimal values at trace magnitudes (e.g. 4452023376189.811 -> ...810: ts needs 16 significant digits and
the multiply adds its own rounding), so ``_us_to_ns`` splits each value into its integer and fractional parts
(both exact in float64) and rounds only ``fraction * 1000``, whose error stays below 0.5.  That is exact for
every value that has at most 3 decimals (Kineto writes integer ns as ``us.nnn``) and ``|ts| < 2**43`` us
(about 101.8 days on the trace clock): below that bound float64 spacing is finer than 1 ns, so the double
nearest to the written decimal identifies it uniquely.
A trace with larger values is decoded again with ``decimal.Decimal`` fields (exact at any magnitude, slower).
"""

from __future__ import annotations

import mmap
import re
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from decimal import ROUND_HALF_EVEN, Decimal
from functools import lru_cache
from itertools import repeat
from operator import attrgetter, eq, index, itemgetter
from pathlib import Path
from typing import Annotated, ClassVar, Literal, Union

import duckdb
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.errors import BadInputError
from pipeline.normalize import forked
from pipeline.normalize.nesting import with_nesting
from pipeline.normalize.source import is_gzip, read_all
from pipeline.store import TraceWriter

#: Below this magnitude (in us) a float64 resolves 0.001 us, so 3-decimal values convert exactly.
EXACT_FLOAT_LIMIT_US = float(2**43)


# --- typed views of the JSON -------------------------------------------------------------------------

_F = msgspec.field
#: ``default=`` for Raw fields (a shared constant: a default_factory would be a Python call per event).
_NO_RAW = msgspec.Raw()


#: Integers as Arrow stores them: a JSON integer past int64 is a decode error naming the event, not an overflow later.
_I64Json = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _Event(msgspec.Struct, gc=False):
    """The fields every event shares; ``args`` stays raw JSON, decoded later per category (see ``_ArgsOf``)."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: _I64Json | str | None = None
    tid: _I64Json | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: msgspec.Raw = _F(default=_NO_RAW)


class _ExactEvent(_Event, gc=False):
    """Same fields, but ``ts``/``dur`` as Decimal: exact whatever their magnitude."""

    ts: Decimal | None = None  # type: ignore[assignment]
    dur: Decimal | None = None  # type: ignore[assignment]


# One ``args`` Struct per category, with only the keys that category's columns use: a python_function
# event (most of a trace) then costs two int fields, not a 20-field Struct (unknown keys are skipped).
class _KernelArgs(msgspec.Struct, gc=False):
    external_id: _I64Json | None = _F(default=None, name="External id")
    correlation: _I64Json | None = None
    device: _I64Json | None = None
    context: _I64Json | None = None
    stream: _I64Json | None = None
    registers: _I64Json | None = _F(default=None, name="registers per thread")
    shared_memory: _I64Json | None = _F(default=None, name="shared memory")
    blocks_per_sm: float | None = _F(default=None, name="blocks per SM")
    warps_per_sm: float | None = _F(default=None, name="warps per SM")
    occupancy: float | None = _F(default=None, name="est. achieved occupancy %")
    grid: list[int] | None = None
    block: list[int] | None = None


class _CallArgs(msgspec.Struct, gc=False):
    external_id: _I64Json | None = _F(default=None, name="External id")
    correlation: _I64Json | None = None


class _OpArgs(msgspec.Struct, gc=False):
    external_id: _I64Json | None = _F(default=None, name="External id")
    sequence_number: _I64Json | None = _F(default=None, name="Sequence number")
    fwd_thread_id: _I64Json | None = _F(default=None, name="Fwd thread id")
    # Kept as the original JSON text: the ops table stores them as JSON strings.
    input_dims: msgspec.Raw = _F(default=_NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = _F(default=_NO_RAW, name="Input type")


class _PyArgs(msgspec.Struct, gc=False):
    python_id: _I64Json | None = _F(default=None, name="Python id")
    python_parent_id: _I64Json | None = _F(default=None, name="Python parent id")


class _GpuRangeArgs(msgspec.Struct, gc=False):
    external_id: _I64Json | None = _F(default=None, name="External id")
    device: _I64Json | None = None
    stream: _I64Json | None = None


class _CopyArgs(msgspec.Struct, gc=False):
    external_id: _I64Json | None = _F(default=None, name="External id")
    correlation: _I64Json | None = None
    device: _I64Json | None = None
    context: _I64Json | None = None
    stream: _I64Json | None = None
    bytes: _I64Json | None = None


class _Device(msgspec.Struct, gc=False):
    id: _I64Json | None = None
    name: str | None = None
    totalGlobalMem: _I64Json | None = None
    computeMajor: _I64Json | None = None
    computeMinor: _I64Json | None = None
    maxThreadsPerBlock: _I64Json | None = None
    maxThreadsPerMultiprocessor: _I64Json | None = None
    regsPerBlock: _I64Json | None = None
    regsPerMultiprocessor: _I64Json | None = None
    warpSize: _I64Json | None = None
    sharedMemPerBlock: _I64Json | None = None
    sharedMemPerBlockOptin: _I64Json | None = None
    sharedMemPerMultiprocessor: _I64Json | None = None
    numSms: _I64Json | None = None


class _Distributed(msgspec.Struct, gc=False):
    rank: _I64Json | None = None


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[msgspec.Raw] | None = None
    schemaVersion: _I64Json | str | None = None
    deviceProperties: list[_Device] | None = None
    distributedInfo: _Distributed | None = None
    with_stack: int | bool | None = None
    cupti_version: _I64Json | None = None
    cuda_runtime_version: _I64Json | None = None
    cuda_driver_version: _I64Json | None = None
    baseTimeNanoseconds: _I64Json | None = None


# --- categories --------------------------------------------------------------------------------------

#: chrome-trace ``cat`` -> the columns taken from each of its events (besides name/pid/tid/ts/dur).
_ARG_COLUMNS: dict[str, dict[str, str]] = {
    "kernel": {
        "device_id": "device",
        "context_id": "context",
        "stream_id": "stream",
        "correlation_id": "correlation",
        "external_id": "external_id",
        "registers_per_thread": "registers",
        "static_smem_bytes": "shared_memory",
        "profiler_blocks_per_sm": "blocks_per_sm",
        "profiler_warps_per_sm": "warps_per_sm",
        "profiler_est_achieved_occupancy_pct": "occupancy",
    },
    "cuda_runtime": {"correlation_id": "correlation", "external_id": "external_id"},
    "cuda_driver": {"correlation_id": "correlation", "external_id": "external_id"},
    "cpu_op": {
        "external_id": "external_id",
        "sequence_number": "sequence_number",
        "fwd_thread_id": "fwd_thread_id",
    },
    "python_function": {"python_id": "python_id", "python_parent_id": "python_parent_id"},
    "user_annotation": {},
    "gpu_user_annotation": {"device_id": "device", "stream_id": "stream", "external_id": "external_id"},
    "gpu_memcpy": {
        "device_id": "device",
        "context_id": "context",
        "stream_id": "stream",
        "correlation_id": "correlation",
        "external_id": "external_id",
        "bytes": "bytes",
    },
    "gpu_memset": {
        "device_id": "device",
        "context_id": "context",
        "stream_id": "stream",
        "correlation_id": "correlation",
        "external_id": "external_id",
        "bytes": "bytes",
    },
}
#: The Struct each category's ``args`` decode into (None: its args are not used, never decoded).
_ARGS_OF: dict[str, type[msgspec.Struct] | None] = {
    "kernel": _KernelArgs,
    "cuda_runtime": _CallArgs,
    "cuda_driver": _CallArgs,
    "cpu_op": _OpArgs,
    "python_function": _PyArgs,
    "user_annotation": None,
    "gpu_user_annotation": _GpuRangeArgs,
    "gpu_memcpy": _CopyArgs,
    "gpu_memset": _CopyArgs,
}
_ARGS_DECODER = {cat: msgspec.json.Decoder(list[t | None]) for cat, t in _ARGS_OF.items() if t is not None}
_NO_ARGS = {cat: t() for cat, t in _ARGS_OF.items() if t is not None}
_CATS = list(_ARG_COLUMNS)
_CAT_CODE = {cat: i for i, cat in enumerate(_CATS)}


# --- one-pass decode (the usual case) ----------------------------------------------------------------


class _Tagged(msgspec.Struct, gc=False, tag_field="cat"):
    """An event decoded by its ``cat``: each category has its own Struct, with its ``args`` Struct inline.

    One msgspec call then decodes a piece completely (no raw ``args`` kept, no second pass per category),
    and an event's category is its type.  A piece holding anything else (an unknown or missing ``cat``, a
    used category's event that is not ``ph: "X"``, a wrongly typed value) fails validation and is decoded
    again the general way (``_Event``), whose errors also name the event.
    """

    code: ClassVar[int] = -1  # index into _CATS; -1: not used by any table


class _Complete(_Tagged, gc=False):
    ph: Literal["X"]
    name: str | None = None
    pid: _I64Json | str | None = None
    tid: _I64Json | str | None = None
    ts: float | None = None
    dur: float | None = None


#: Categories Kineto writes that no table uses: their events decode to empty Structs (every key skipped).
_UNUSED_CATS = ("ac2g", "overhead", "Trace", "cpu_instant_event", "external_correlation", "cuda_sync", "fwdbwd")


def _tagged_decoder() -> msgspec.json.Decoder:
    used = [
        msgspec.defstruct(
            f"_{cat}_event",
            [] if args is None else [("args", args, _F(default_factory=args))],
            bases=(_Complete,),
            tag=cat,
            namespace={"code": _CAT_CODE[cat]},
            gc=False,
        )
        for cat, args in _ARGS_OF.items()
    ]
    unused = [msgspec.defstruct(f"_{cat}_event", [], bases=(_Tagged,), tag=cat, gc=False) for cat in _UNUSED_CATS]
    return msgspec.json.Decoder(list[Union[tuple(used + unused)]])  # noqa: UP007 (a runtime-built union)


_TAGGED = _tagged_decoder()
_CODE = attrgetter("code")
_FLOAT_COLUMNS = {"profiler_blocks_per_sm", "profiler_warps_per_sm", "profiler_est_achieved_occupancy_pct"}
_GET = {field: attrgetter(field) for cols in _ARG_COLUMNS.values() for field in cols.values()}
_NAME, _PID, _TID, _TS, _DUR, _ARGS, _CAT, _PH = (
    attrgetter(a) for a in ("name", "pid", "tid", "ts", "dur", "args", "cat", "ph")
)


_INPUT_DIMS, _INPUT_TYPE = attrgetter("input_dims"), attrgetter("input_type")
_I64 = pa.int64()


def _ints(values: list, type_: pa.DataType = _I64) -> pa.Array:
    """Integers; a non-integer id (chrome traces allow string pids/tids) becomes null."""
    try:
        return pa.array(values, type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([v if isinstance(v, int) and not isinstance(v, bool) else None for v in values], type_)


def _ints_of(objs: list, get: attrgetter) -> pa.Array:
    """``get`` of every object as int64, without an intermediate list when all are ints (the usual case).

    ``index`` lets only true ints through (``np.fromiter`` alone would parse ``"12"`` and truncate 2.5).
    """
    try:
        return pa.array(np.fromiter(map(index, map(get, objs)), np.int64, len(objs)))
    except (TypeError, ValueError, OverflowError):  # None, a string id, or beyond int64
        return _ints(list(map(get, objs)))


def _floats_ns(objs: list, get: attrgetter) -> pa.Array:
    """ns of the float us ``get`` of every object; TypeError if one is missing."""
    us = np.fromiter(map(get, objs), np.float64, len(objs))
    if np.isnan(us).any():  # fromiter reads None as NaN; JSON itself has no NaN
        raise TypeError("missing value")
    if us.size and np.abs(us).max() >= EXACT_FLOAT_LIMIT_US:
        raise _NeedExact
    return pa.array(_us_to_ns(us))


def _raw_json(values: list[msgspec.Raw]) -> pa.Array:
    """The JSON texts as strings, null where the key was missing: one join and the lengths, no per-value
    ``bytes`` copies (measured 3x faster than ``pa.array`` over them)."""
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    valid = lengths > 0
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    data = pa.py_buffer(b"".join(values))
    return pa.Array.from_buffers(pa.large_binary(), len(values), [bitmap, pa.py_buffer(offsets), data]).cast(
        pa.string()
    )


def _us_to_ns(us: np.ndarray) -> np.ndarray:
    """Exact ns of float us values with <= 3 decimals and |us| < 2**43 (see the module docstring)."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


class _NeedExact(Exception):
    """A timestamp beyond the float64 exactness bound: decode again with Decimal."""


class _LayoutMiss(Exception):
    """The fast splitter's guess about the file's layout did not hold; use the general path."""


class _BadArgs(Exception):
    """An event's ``args`` has a wrongly typed value: (index of the event in its piece, msgspec's message)."""


def _float_ns(values: list) -> pa.Array:
    us = np.asarray(values, dtype=np.float64)
    if us.size and np.abs(us).max() >= EXACT_FLOAT_LIMIT_US:
        raise _NeedExact
    return pa.array(_us_to_ns(us))


def _decimal_ns(values: list) -> pa.Array:
    return pa.array([int((v * 1000).to_integral_value(ROUND_HALF_EVEN)) for v in values], pa.int64())


class _Piece:
    """One decoded run of events: an Arrow table per category, plus what had to be skipped.

    ``events`` are ``_Tagged`` (args already decoded, category from the type) or ``_Event`` (raw args).
    Picklable (Arrow tables pickle as their buffers), so a worker process can hand it back.
    """

    def __init__(self, events: list[_Event] | list[_Tagged], exact: bool, tagged: bool = False) -> None:
        self.exact = exact
        self.tagged = tagged
        self.to_ns = _decimal_ns if exact else _float_ns
        self.tables: dict[str, pa.Table] = {}
        self.skipped: dict[str, int] = {}
        self.events = len(events)
        if events:
            self._split(events)
        del self.to_ns, self.exact, self.tagged

    def _codes(self, events: list) -> np.ndarray:
        """Each event's index into ``_CATS``, -1 for events no table takes."""
        n = len(events)
        if self.tagged:
            return np.fromiter(map(_CODE, events), np.int8, n)
        codes = np.fromiter(map(_CAT_CODE.get, map(_CAT, events), repeat(-1)), np.int8, n)
        complete = np.fromiter(map(eq, map(_PH, events), repeat("X")), np.bool_, n)
        return np.where(complete, codes, np.int8(-1))

    def _split(self, events: list) -> None:
        """Split by category with numpy (no per-event Python branching), then take columns.

        ``np.fromiter(map(...))`` runs the per-event lookups in C without building a list; it measured
        several times faster here than ``pa.array`` over a list of freshly decoded strings.
        """
        codes = self._codes(events)
        for code in np.unique(codes).tolist():
            if code < 0:
                continue
            cat = _CATS[code]
            idx = np.flatnonzero(codes == code)
            group = [events[idx[0]]] if idx.size == 1 else list(itemgetter(*idx.tolist())(events))
            try:
                self._add(cat, group)
            except _BadArgs as e:
                i, msg = e.args
                raise _BadArgs(int(idx[i]), msg) from None

    def _args(self, cat: str, group: list) -> list:
        """The group's ``args`` as ``_ARGS_OF[cat]`` Structs (none for a category whose args are unused)."""
        if _ARGS_OF[cat] is None:
            return []
        return list(map(_ARGS, group)) if self.tagged else self._decode_args(cat, group)

    def _decode_args(self, cat: str, group: list[_Event]) -> list:
        """Raw ``args`` decoded as ``_ARGS_OF[cat]`` Structs: all of the group's in one msgspec call."""
        raws = list(map(_ARGS, group))
        if not all(raws):  # events without args: null there (decoded as the category's defaults)
            raws = [r or b"null" for r in raws]
        try:
            args = _ARGS_DECODER[cat].decode(b"".join((b"[", b",".join(raws), b"]")))
        except msgspec.MsgspecError as e:
            m = re.search(r"\$\[(\d+)\]", str(e))
            i = int(m.group(1)) if m else 0
            raise _BadArgs(i, str(e)) from None
        if None in args:
            args = [a or _NO_ARGS[cat] for a in args]
        return args

    def _add(self, cat: str, group: list) -> None:
        keep = None
        try:
            if self.exact:
                raise TypeError  # Decimal values: the list path
            start, duration = _floats_ns(group, _TS), _floats_ns(group, _DUR)
        except TypeError:  # a missing ts/dur (or Decimal values): filter, then convert from lists
            ts, dur = list(map(_TS, group)), list(map(_DUR, group))
            if None in ts or None in dur:
                keep = [i for i, (t, d) in enumerate(zip(ts, dur, strict=True)) if t is not None and d is not None]
                self.skipped[cat] = self.skipped.get(cat, 0) + len(group) - len(keep)
                if not keep:
                    return
                group = [group[i] for i in keep]
                ts, dur = [ts[i] for i in keep], [dur[i] for i in keep]
            start, duration = self.to_ns(ts), self.to_ns(dur)
        # Names repeat (the same functions run again and again): dictionary-encoded they cost a worker's pipe
        # a fraction of the bytes; end_ns is start + duration, added after the pieces are merged.
        arrays = {
            "name": pc.dictionary_encode(pa.array(list(map(_NAME, group)), pa.string())),
            "pid": _ints_of(group, _PID),
            "tid": _ints_of(group, _TID),
            "start_ns": start,
            "duration_ns": duration,
        }
        try:
            args = self._args(cat, group)
        except _BadArgs as e:
            i, msg = e.args
            raise _BadArgs(keep[i] if keep is not None else i, msg) from None
        for column, field in _ARG_COLUMNS[cat].items():
            if column in _FLOAT_COLUMNS:
                arrays[column] = pa.array(list(map(_GET[field], args)), pa.float64())
            else:
                arrays[column] = _ints_of(args, _GET[field])
        if cat == "kernel":
            for key, prefix in (("grid", "grid_"), ("block", "block_")):
                dims = [getattr(a, key) or (None, None, None) for a in args]
                for i, axis in enumerate("xyz"):
                    arrays[prefix + axis] = _ints([d[i] if len(d) > i else None for d in dims], pa.int32())
        elif cat == "cpu_op":
            arrays["input_dims"] = _raw_json(list(map(_INPUT_DIMS, args)))
            arrays["input_types"] = _raw_json(list(map(_INPUT_TYPE, args)))
        self.tables[cat] = pa.table(arrays)


class _Collector:
    """Pieces in file order, merged per category."""

    def __init__(self) -> None:
        self.parts: dict[str, list[pa.Table]] = {c: [] for c in _ARG_COLUMNS}
        self.skipped: dict[str, int] = {}
        self.events = 0

    def add(self, piece: _Piece) -> None:
        self.events += piece.events
        for cat, n in piece.skipped.items():
            self.skipped[cat] = self.skipped.get(cat, 0) + n
        for cat, table in piece.tables.items():
            self.parts[cat].append(table)

    def table(self, cat: str) -> pa.Table | None:
        parts = self.parts[cat]
        if not parts:
            return None
        table = pa.concat_tables(parts)
        if cat == "python_function":
            # Never written out, only looked up for call stacks: the names stay dictionary-encoded (one
            # shared dictionary), sparing the materialized strings (fresh memory is slow to touch in VMs).
            names = table["name"].unify_dictionaries()
        else:
            # Decode piece by piece: the same takes on the concatenated table's chunks ran much slower.
            names = pa.chunked_array(
                [c.dictionary.take(c.indices) for p in parts for c in p["name"].chunks], pa.string()
            )
        table = table.set_column(0, "name", names)
        return table.add_column(5, "end_ns", pc.add(table["start_ns"], table["duration_ns"]))


# --- reading -----------------------------------------------------------------------------------------


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
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # an empty file cannot be mapped; read_all reports the rest
            pass
    return read_all(path)


def _read(path: Path) -> tuple[bytes | mmap.mmap, _Trace, list[tuple[int, int]] | None]:
    """The file's content, its metadata, and event byte ranges (None: use ``traceEvents`` Raw slices)."""
    data = _load(path)
    split = None
    if _first_char(data) == b"{":
        split = _split(data)
    if split is not None:
        try:
            return data, msgspec.json.decode(split[0], type=_Trace), split[1]
        except msgspec.MsgspecError:
            pass
    return data, _read_slow(path, data), None


def _read_slow(path: Path, data: bytes | mmap.mmap) -> _Trace:
    """Layout-independent: one skip-scan of the file yields a Raw slice per event."""
    try:
        if _first_char(data) == b"[":
            # The chrome trace "JSON array format": a bare list of events, no metadata.
            return _Trace(traceEvents=msgspec.json.decode(data, type=list[msgspec.Raw]))
        trace = msgspec.json.decode(data, type=_Trace)
    except msgspec.MsgspecError as e:
        raise _decode_error(path, e) from e
    if trace.traceEvents is None:
        raise BadInputError(path, "JSON is not a chrome trace: the top-level object has no traceEvents array")
    return trace


def _decoder(exact: bool) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(list[_ExactEvent] if exact else list[_Event])


#: What forked workers read: (file bytes, event byte ranges, exact).  Inherited through fork, never pickled.
_WORK: tuple[bytes | mmap.mmap, list[tuple[int, int]], bool] | None = None
#: At most this many worker processes (each holds one piece's events, ~150 MB at peak).
MAX_WORKERS = 8


def _piece_at(i: int) -> _Piece:
    """Decode ``ranges[i]`` of ``_WORK``; any failure means the splitter's layout guess was wrong."""
    assert _WORK is not None
    data, ranges, exact = _WORK
    a, b = ranges[i]
    chunk = b"".join((b"[", memoryview(data)[a:b], b"]"))
    try:
        return _decode_piece(chunk, exact)
    except (msgspec.MsgspecError, _BadArgs):
        raise _LayoutMiss from None


def _decode_piece(chunk: bytes, exact: bool) -> _Piece:
    """The events of a JSON array: in one pass (``_Tagged``) where that validates, else the general way.

    Only a validation failure retries: a syntax error would fail the same way again.  Exact (Decimal)
    timestamps always go the general way (rare: values beyond 2**43 us).
    """
    if not exact:
        try:
            return _Piece(_TAGGED.decode(chunk), exact, tagged=True)
        except msgspec.ValidationError:
            pass
    return _Piece(_decoder(exact).decode(chunk), exact)


def _workers(pieces: int) -> int:
    """Worker processes to fork: one per core, none where fork is missing or not allowed (daemon children)."""
    return max(1, min(MAX_WORKERS, forked.cores(), pieces)) if forked.available() else 1


def _collect_fast(data: bytes | mmap.mmap, ranges: list[tuple[int, int]], exact: bool) -> _Collector:
    """Decode the pieces in forked worker processes, one per core: msgspec holds the GIL, so threads would
    not help.  Workers inherit ``data`` (copy-on-write, never written) and send back Arrow tables."""
    global _WORK
    out = _Collector()
    n = _workers(len(ranges))
    _WORK = (data, ranges, exact)
    warm = None
    try:
        if n == 1:
            pieces: Iterator[_Piece] = map(_piece_at, range(len(ranges)))
        else:
            pieces = forked.imap(_piece_at, len(ranges), n, init=_without_pandas)
        for piece in pieces:  # in file order: ties keep their order
            if warm is None and n > 1:  # the workers are forked: a thread is safe now (see _warm_pyarrow)
                warm = _warm_pyarrow()
            out.add(piece)
        return out
    finally:
        _WORK = None
        if warm is not None:
            warm.join()  # before anything forks again: a fork must not copy a half-done import


class _NoPandas:
    """A meta path finder that makes pandas look absent (pyarrow then never imports it)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not used in chrome-trace decode workers")


def _without_pandas() -> None:
    """In a decode worker (a forked child that only decodes and exits): pyarrow imports pandas, when
    installed, on its first conversion of a list or numpy array; that is ~0.35 s of CPU per process for
    nothing a worker uses, and it would delay every worker's start (or the fork, if done before it)."""
    sys.meta_path.insert(0, _NoPandas())


def _warm_pyarrow() -> threading.Thread:
    """Have pyarrow import pandas (when installed) in a thread while the workers decode, so that the merge
    and table steps after the decode do not wait for it."""
    warm = threading.Thread(target=lambda: pc.add(pa.array(np.zeros(1, np.int64)), 0), daemon=True)
    warm.start()
    return warm


def _collect_slow(path: Path, trace: _Trace, exact: bool) -> _Collector:
    """Pieces of ``traceEvents`` Raw slices, in this process; errors name the event's index in the file."""
    raws = trace.traceEvents or []
    n = max(1, CHUNK_BYTES // 256)
    out = _Collector()
    for first in range(0, len(raws), n):
        chunk = b"".join((b"[", b",".join(raws[first : first + n]), b"]"))
        try:
            out.add(_decode_piece(chunk, exact))
        except msgspec.MsgspecError as e:
            msg = re.sub(r"\$\[(\d+)\]", lambda m, first=first: f"$.traceEvents[{int(m.group(1)) + first}]", str(e))
            raise BadInputError(path, f"unexpected value in the trace: {msg}") from e
        except _BadArgs as e:
            i, msg = e.args
            msg = re.sub(r"\$\[\d+\]", lambda _, at=i + first: f"$.traceEvents[{at}].args", msg)
            raise BadInputError(path, f"unexpected value in the trace: {msg}") from None
    return out


def _events(path: Path) -> tuple[_Trace, _Collector]:
    """Decode every event: fast split first, exact Decimal timestamps only if the values need them."""
    data, trace, ranges = _read(path)
    for exact in (False, True):
        try:
            if ranges is not None:
                try:
                    return trace, _collect_fast(data, ranges, exact)
                except _LayoutMiss:
                    trace, ranges = _read_slow(path, data), None
            return trace, _collect_slow(path, trace, exact)
        except _NeedExact:
            continue
    raise AssertionError("unreachable")


# --- kernel short names ------------------------------------------------------------------------------

_OPEN, _CLOSE = "<([{", ">)]}"


def _top_level(name: str) -> list[tuple[int, str]]:
    """(index, char) of the characters outside any bracket pair."""
    depth, out = 0, []
    for i, ch in enumerate(name):
        if ch in _OPEN:
            if depth == 0:
                out.append((i, ch))
            depth += 1
        elif ch in _CLOSE:
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append((i, ch))
    return out


@lru_cache(maxsize=65536)
def short_name(name: str) -> str:
    """The bare function name of a demangled kernel name, like nsys's ``shortName``.

    ``void at::native::elementwise_kernel<128, 4, ...>(int, ...)`` -> ``elementwise_kernel``: drop the
    argument list, the template arguments, the namespaces/enclosing classes and the return type, all
    counted at bracket depth 0 so that ``(anonymous namespace)`` or templates inside templates do not
    confuse it.  A name without any of these (``sm80_xmma_...``) is its own short name.
    """
    text = name.replace("(anonymous namespace)", "anonymous_namespace").strip()
    top = _top_level(text)
    # The argument list is the last top-level "(...)"; a name may end in " const" after it.
    cut = len(text)
    opens = [i for i, ch in top if ch == "("]
    if opens:
        cut = opens[-1]
    text = text[:cut].rstrip()
    top = [(i, ch) for i, ch in _top_level(text)]
    opens = [i for i, ch in top if ch == "<"]
    if opens and text.endswith(">"):
        text = text[: opens[-1]].rstrip()
    top = _top_level(text)
    chars = "".join(ch for _, ch in top)
    idx = [i for i, _ in top]
    # Namespaces/classes: keep what follows the last top-level "::"; return type: the last top-level space.
    cut = max(chars.rfind("::") + 2 if "::" in chars else 0, chars.rfind(" ") + 1)
    start = idx[cut] if cut < len(idx) else 0
    return text[start:].strip() or name


def _short_names(names: pa.ChunkedArray) -> pa.Array:
    """short_name for every kernel, computed once per distinct name."""
    encoded = pc.dictionary_encode(names).combine_chunks()
    shorts = pa.array([short_name(n) if n is not None else None for n in encoded.dictionary.to_pylist()])
    return shorts.take(encoded.indices)


# --- tables ------------------------------------------------------------------------------------------


def _sql(con: duckdb.DuckDBPyConnection, query: str) -> pa.Table:
    return con.sql(query).to_arrow_table()


def _launches(con: duckdb.DuckDBPyConnection, has_calls: bool) -> str:
    """The launching CPU thread per correlation id (the first call that has it, as in nsys)."""
    if not has_calls:
        return "launches AS (SELECT NULL::BIGINT AS correlation_id, NULL::BIGINT AS pid, NULL::BIGINT AS tid)"
    return (
        "launches AS (SELECT correlation_id, arg_min(pid, start_ns) AS pid, arg_min(tid, start_ns) AS tid "
        "FROM api_calls WHERE correlation_id IS NOT NULL GROUP BY correlation_id)"
    )


def _kernels(con: duckdb.DuckDBPyConnection, kernels: pa.Table, has_calls: bool) -> pa.Table:
    kernels = kernels.append_column("short_name", _short_names(kernels["name"]))
    con.register("k_raw", kernels)
    cols = [c for c in kernels.column_names if c not in ("pid", "tid")]
    return _sql(
        con,
        f"""WITH {_launches(con, has_calls)}
        SELECT row_number() OVER (ORDER BY k.start_ns, k.correlation_id) - 1 AS kernel_id,
               {", ".join(f"k.{c}" for c in cols)}, l.pid, l.tid
        FROM k_raw k LEFT JOIN launches l USING (correlation_id)
        ORDER BY k.start_ns, k.correlation_id""",
    )


def _copies(con: duckdb.DuckDBPyConnection, raw: pa.Table, table: str, has_calls: bool) -> pa.Table:
    """memcpy/memset rows; the kind columns come from Kineto's names ``Memcpy HtoD (Pageable -> Device)``."""
    con.register("c_raw", raw)
    id_col = "copy_id" if table == "memcpy" else "set_id"
    if table == "memcpy":
        kinds = ", ".join(f"('{k}', '{v}')" for k, v in _MEMCPY_KINDS.items())
        extra = f"""
               (SELECT label FROM (VALUES {kinds}) m(code, label)
                WHERE code = regexp_extract(c.name, '^Memcpy (\\w+)', 1)) AS kind,
               nullif(regexp_extract(c.name, '\\((.+) -> ', 1), '') AS src_kind,
               nullif(regexp_extract(c.name, ' -> (.+)\\)$', 1), '') AS dst_kind"""
    else:
        extra = "nullif(regexp_extract(c.name, '^Memset \\((.+)\\)$', 1), '') AS mem_kind"
    return _sql(
        con,
        f"""WITH {_launches(con, has_calls)}
        SELECT row_number() OVER (ORDER BY c.start_ns, c.correlation_id) - 1 AS {id_col},
               c.device_id, c.context_id, c.stream_id, c.correlation_id, c.external_id,
               c.start_ns, c.end_ns, c.duration_ns, c.bytes, {extra}, l.pid
        FROM c_raw c LEFT JOIN launches l USING (correlation_id)
        ORDER BY c.start_ns, c.correlation_id""",
    )


#: Kineto's memcpyKindString -> the CUPTI enum labels nsys exports (ENUM_CUDA_MEMCPY_OPER).
_MEMCPY_KINDS = {
    "HtoD": "Host-to-Device",
    "DtoH": "Device-to-Host",
    "HtoA": "Host-to-Array",
    "AtoH": "Array-to-Host",
    "AtoA": "Array-to-Array",
    "AtoD": "Array-to-Device",
    "DtoA": "Device-to-Array",
    "DtoD": "Device-to-Device",
    "HtoH": "Host-to-Host",
    "PtoP": "Peer-to-Peer",
}


def _api_calls(runtime: pa.Table | None, driver: pa.Table | None) -> pa.Table | None:
    parts = [
        t.append_column("kind", pa.repeat(pa.scalar(kind), t.num_rows))
        for t, kind in ((runtime, "runtime"), (driver, "driver"))
        if t is not None
    ]
    if not parts:
        return None
    calls = pa.concat_tables(parts).sort_by([("start_ns", "ascending"), ("correlation_id", "ascending")])
    return calls.append_column("call_id", pa.array(np.arange(calls.num_rows, dtype=np.int64)))


def _np(col: pa.ChunkedArray, fill: int = -1) -> np.ndarray:
    return pc.fill_null(col.combine_chunks(), fill).to_numpy()


def _call_stacks(ops: pa.Table, py: pa.Table) -> pa.Array:
    """For each op (in ``ops`` order): the python_function frames enclosing it, outermost first, ';'-joined.

    Vectorized over all ops (numpy; a DuckDB ASOF formulation took 4 s on 1.4M python events, this takes a
    fraction of that): per thread, the python event that started last at or before the op is found by
    binary search; while it had already ended, its ``Python parent id`` is followed instead (its caller
    encloses it, so the walk ends at the innermost frame still open).  Stacks are then built once per
    distinct innermost frame by walking parent links one level per step for all of them at once.
    """
    with ThreadPoolExecutor(1, thread_name_prefix="chrome-parents") as pool:
        # Independent of the search below and mostly numpy (GIL released): the two overlap on 2 cores.
        parents = pool.submit(_parent_rows, py)
        py_thread, op_thread = _thread_keys(py, ops)
        py_start, py_end = _np(py["start_ns"]), _np(py["end_ns"])
        op_start = _np(ops["start_ns"])
        leaf = _latest_started(py_thread, py_start, op_thread, op_start)
        parent = parents.result()
    for _ in range(py.num_rows):  # bounded: a parent chain is never longer than the number of events
        ended = np.flatnonzero(leaf >= 0)
        ended = ended[py_end[leaf[ended]] <= op_start[ended]]
        if not ended.size:
            break
        leaf[ended] = parent[leaf[ended]]

    has = leaf >= 0
    leaves, which = np.unique(leaf[has], return_inverse=True)
    levels = [leaves]
    cur = leaves
    for _ in range(py.num_rows):
        cur = np.where(cur >= 0, parent[np.maximum(cur, 0)], -1)
        if not (cur >= 0).any():
            break
        levels.append(cur)
    chain = np.stack(levels, axis=1)  # row i: leaf, its caller, ..., then -1s
    depth = (chain >= 0).sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(depth)])
    row_of = np.repeat(np.arange(len(depth)), depth)
    within = np.arange(offsets[-1]) - np.repeat(offsets[:-1], depth)
    frames = chain[row_of, depth[row_of] - 1 - within]  # outermost first
    names = py["name"].combine_chunks().take(pa.array(frames)).dictionary_decode()
    stacks = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), names), ";")
    # Ops outside any python frame get null; the rest take their innermost frame's stack.
    slot = np.full(ops.num_rows, len(stacks), dtype=np.int64)
    slot[has] = which
    return pa.concat_arrays([stacks, pa.nulls(1, pa.string())]).take(pa.array(slot))


def _latest_started(
    py_thread: np.ndarray, py_start: np.ndarray, op_thread: np.ndarray, op_start: np.ndarray
) -> np.ndarray:
    """Per op: the row of the python event on its thread that started last at or before it (-1: none)."""
    leaf = np.full(len(op_start), -1, dtype=np.int64)
    order = np.lexsort((py_start, py_thread))
    sorted_thread, sorted_start = py_thread[order], py_start[order]
    for t in np.unique(op_thread):
        lo, hi = np.searchsorted(sorted_thread, [t, t + 1])
        if lo == hi:
            continue
        mine = np.flatnonzero(op_thread == t)
        pos = np.searchsorted(sorted_start[lo:hi], op_start[mine], side="right") - 1
        leaf[mine] = np.where(pos >= 0, order[lo + np.maximum(pos, 0)], -1)
    return leaf


def _thread_keys(py: pa.Table, ops: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """One int64 per (pid, tid), the same for python events and ops (Linux ids fit in 31 bits)."""

    def key(t: pa.Table) -> np.ndarray:
        return (_np(t["pid"]) << 32) ^ (_np(t["tid"]) & 0xFFFFFFFF)

    return key(py), key(ops)


def _parent_rows(py: pa.Table) -> np.ndarray:
    """Row of each python event's caller (by ``Python parent id`` within its process), -1 if none."""
    pid, ids, parents = _np(py["pid"]), _np(py["python_id"]), _np(py["python_parent_id"])
    out = np.full(py.num_rows, -1, dtype=np.int64)
    for p in pc.unique(pid).to_numpy():  # a hash, not np.unique's sort of every row
        rows = np.flatnonzero(pid == p)
        have = rows[ids[rows] >= 0]
        if not have.size:
            continue
        want = parents[rows]
        lo, hi = int(ids[have].min()), int(ids[have].max())
        if hi - lo < 4 * have.size + 1024:
            # Kineto numbers python events 1, 2, 3...: a dense id -> row table beats sorting 1M+ ids.
            table = np.full(hi - lo + 1, -1, dtype=np.int64)
            table[ids[have] - lo] = have
            if (table[ids[have] - lo] == have).all():  # no id seen twice (else: the sort below)
                inside = (want >= lo) & (want <= hi)
                out[rows[inside]] = table[want[inside] - lo]
                continue
        by_id = have[np.argsort(ids[have], kind="stable")]
        sorted_ids = ids[by_id]
        pos = np.minimum(np.searchsorted(sorted_ids, want), len(by_id) - 1)
        found = (want >= 0) & (sorted_ids[pos] == want)
        out[rows[found]] = by_id[pos[found]]
    return out


def _ops(ops: pa.Table, py: pa.Table | None) -> pa.Table:
    ops = ops.sort_by([("start_ns", "ascending"), ("end_ns", "descending"), ("external_id", "ascending")])
    ops = ops.append_column("op_id", pa.array(np.arange(ops.num_rows, dtype=np.int64)))
    if py is not None and py.num_rows:
        ops = ops.append_column("call_stack", _call_stacks(ops, py))
    return ops


def _ranges(user: pa.Table | None, gpu: pa.Table | None) -> pa.Table | None:
    parts = []
    if user is not None:
        n = user.num_rows
        parts.append(
            user.select(["name", "pid", "tid", "start_ns", "end_ns", "duration_ns"])
            .append_column("kind", pa.repeat(pa.scalar("push_pop"), n))
            .append_column("source", pa.repeat(pa.scalar("user_annotation"), n))
            .append_column("end_tid", user["tid"])
        )
    if gpu is not None:
        # GPU-side copies of record_function ranges live on a device/stream, not a CPU thread: pid/tid hold
        # device and stream (as the trace itself does), and they do not nest by thread.
        n = gpu.num_rows
        parts.append(
            gpu.select(["name", "start_ns", "end_ns", "duration_ns"])
            .append_column("pid", pc.coalesce(gpu["device_id"], gpu["pid"]))
            .append_column("tid", pc.coalesce(gpu["stream_id"], gpu["tid"]))
            .append_column("kind", pa.repeat(pa.scalar("gpu"), n))
            .append_column("source", pa.repeat(pa.scalar("gpu_user_annotation"), n))
            .append_column("end_tid", pc.coalesce(gpu["stream_id"], gpu["tid"]))
        )
    if not parts:
        return None
    ranges = pa.concat_tables(parts, promote_options="default").rename_columns(
        ["text" if c == "name" else c for c in parts[0].column_names]
    )
    ranges = ranges.sort_by([("start_ns", "ascending"), ("end_ns", "descending")])
    ranges = ranges.append_column("range_id", pa.array(np.arange(ranges.num_rows, dtype=np.int64)))
    return with_nesting(ranges)


def _devices(trace: _Trace) -> pa.Table | None:
    if not trace.deviceProperties:
        return None
    rows = []
    for d in trace.deviceProperties:
        threads, warp = d.maxThreadsPerMultiprocessor, d.warpSize
        rows.append(
            {
                "device_id": d.id,
                "name": d.name,
                "compute_major": d.computeMajor,
                "compute_minor": d.computeMinor,
                "sm_count": d.numSms,
                "warp_size": warp,
                "max_threads_per_sm": threads,
                "max_warps_per_sm": threads // warp if threads is not None and warp else None,
                # max_blocks_per_sm: the trace does not record it; left null rather than guessed.
                "max_registers_per_sm": d.regsPerMultiprocessor,
                "max_registers_per_block": d.regsPerBlock,
                "max_shared_mem_per_sm_bytes": d.sharedMemPerMultiprocessor,
                "max_shared_mem_per_block_bytes": d.sharedMemPerBlock,
                "max_shared_mem_per_block_optin_bytes": d.sharedMemPerBlockOptin,
                "max_threads_per_block": d.maxThreadsPerBlock,
                "total_memory_bytes": d.totalGlobalMem,
            }
        )
    return pa.Table.from_pylist(rows)


def _meta(trace: _Trace) -> dict[str, object]:
    parts = [f"chrome trace schema {trace.schemaVersion}" if trace.schemaVersion is not None else "chrome trace"]
    for label, value in (
        ("cupti", trace.cupti_version),
        ("cuda runtime", trace.cuda_runtime_version),
        ("cuda driver", trace.cuda_driver_version),
    ):
        if value is not None:
            parts.append(f"{label} {value}")
    meta: dict[str, object] = {
        "source_format": "chrome-trace",
        "source_version": "; ".join(parts),
        "epoch_offset_ns": trace.baseTimeNanoseconds,
    }
    if trace.distributedInfo is not None and trace.distributedInfo.rank is not None:
        meta["rank"] = trace.distributedInfo.rank
    return meta


_WARN_NAMES = {"kernel": "kernel", "cuda_runtime": "cuda_runtime", "cpu_op": "cpu_op"}


@contextmanager
def _arrow_pool() -> Iterator[None]:
    """jemalloc as Arrow's allocator while a trace is normalized, where this pyarrow has it.

    Measured on a 500 MB trace: the default mimalloc made the merge and call-stack steps (big fresh
    buffers, freed and allocated again) about 0.5 s slower in CPU time than jemalloc or the system
    allocator.  The previous pool is restored afterwards; buffers remember the pool they came from.
    """
    before = pa.default_memory_pool()
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except (NotImplementedError, pa.ArrowNotImplementedError):
        yield
        return
    try:
        yield
    finally:
        pa.set_memory_pool(before)


def normalize_chrome(path: Path, writer: TraceWriter) -> dict[str, object]:
    with _arrow_pool():
        return _normalize_chrome(Path(path), writer)


def _write_tables(
    con: duckdb.DuckDBPyConnection, tables: dict[str, pa.Table | None], writer: TraceWriter, ops: Future | None
) -> None:
    calls = _api_calls(tables["cuda_runtime"], tables["cuda_driver"])
    if calls is not None:
        con.register("api_calls", calls)
        writer.write("api_calls", calls)
    if tables["kernel"] is not None:
        writer.write("kernels", _kernels(con, tables["kernel"], calls is not None))
    for cat, table in (("gpu_memcpy", "memcpy"), ("gpu_memset", "memset")):
        if tables[cat] is not None:
            writer.write(table, _copies(con, tables[cat], table, calls is not None))
    if ops is not None:
        writer.write("ops", ops.result())


def _normalize_chrome(path: Path, writer: TraceWriter) -> dict[str, object]:
    trace, got = _events(path)
    trace.traceEvents = None
    if got.events == 0:
        raise BadInputError(path, "traceEvents is empty: the profiler recorded no events")

    tables = {cat: got.table(cat) for cat in _ARG_COLUMNS}
    if all(tables[c] is None for c in ("kernel", "cpu_op", "cuda_runtime", "cuda_driver", "user_annotation")):
        raise BadInputError(
            path, f"no profiler activity in traceEvents ({got.events} events, none a kernel, cpu_op or CUDA API call)"
        )
    warnings = [f"skipped {n} {cat} events without ts or dur" for cat, n in sorted(got.skipped.items()) if n]
    if tables["kernel"] is None:
        warnings.append("no GPU kernel events in the trace (CPU-only profile, or CUDA activity not recorded)")

    con = duckdb.connect()
    # Ops and their call stacks (the longest step: numpy and Arrow, which release the GIL) are built in a
    # thread while this one does the other tables and their Parquet writes: on 2 cores they overlap.
    with ThreadPoolExecutor(1, thread_name_prefix="chrome-ops") as pool:
        ops = pool.submit(_ops, tables["cpu_op"], tables["python_function"]) if tables["cpu_op"] is not None else None
        try:
            _write_tables(con, tables, writer, ops)
        finally:
            con.close()
    ranges = _ranges(tables["user_annotation"], tables["gpu_user_annotation"])
    if ranges is not None:
        writer.write("nvtx_ranges", ranges)
    devices = _devices(trace)
    if devices is not None:
        writer.write("devices", devices)
    return {**_meta(trace), "warnings": warnings}
