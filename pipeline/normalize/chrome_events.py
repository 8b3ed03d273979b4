"""Chrome trace events -> Arrow: one piece of the ``traceEvents`` array (a JSON list) decoded into one table per
event group (``chrome_map.GROUPS``), and the pieces of a file merged (``Collected``).  Reading the file, cutting
it into pieces and the worker processes that decode them are ``chrome_decode``'s.

What the events mean (categories, arg names, per profiler version and vendor) is data in ``chrome_map``;
the msgspec Structs and column passes here are built from it.  Two decode routes, both reading that table:

* **fast** (tried first for each piece): one msgspec call decodes every event into its category's Struct
  (a tagged union on ``cat``), ``args`` inline, holding only the keys the group's columns use (most
  events are python_function: two ints); keys nothing uses are skipped, not built.
* **general** (any piece the fast route rejects: an unknown or missing ``cat``, metadata events, a used
  category's event that is not ``ph: "X"``, a wrongly typed value): shared fields first, ``args`` raw,
  then one decode per group; its errors name the event.  Timestamps beyond float64's exact range
  (see below) make it decode that piece again with ``Decimal`` fields.

Columns come from C-level passes (``np.fromiter(map(attrgetter))``), never per-event Python branching.

Timestamps are float microseconds in the file.  ``round(ts * 1000)`` in float64 is off by 1 ns for about 0.3%
of 3-decimal values at trace magnitudes (e.g. 4452023376189.811 -> ...810: ts needs 16 significant digits and
the multiply adds its own rounding), so ``_us_to_ns`` splits each value into its integer and fractional parts
(both exact in float64) and rounds only ``fraction * 1000``, whose error stays below 0.5.  That is exact for
every value that has at most 3 decimals (Kineto writes integer ns as ``us.nnn``) and ``|ts| < 2**43`` us
(about 101.8 days on the trace clock): below that bound float64 spacing is finer than 1 ns, so the double
nearest to the written decimal identifies it uniquely.  Larger values that are JSON integers (older
profilers write epoch microseconds, ~1.6e15, as integers) are decoded as ints and multiplied exactly; a
piece with larger values that have fractions is decoded with ``decimal.Decimal`` fields (exact at any
magnitude, slower: the integer route made normalizing a 54 MB epoch-us trace 1.9x cheaper in CPU).
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Iterator
from decimal import ROUND_HALF_EVEN, Decimal
from itertools import repeat
from operator import attrgetter, eq, index, itemgetter
from typing import Annotated, ClassVar, Literal, Union

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.normalize.chrome_map import (
    CATEGORIES,
    COLUMNS,
    GROUPS,
    KNOWN_UNCATEGORIZED,
    KNOWN_UNUSED,
    UNCATEGORIZED_BY_PID,
    Arg,
)

#: Below this magnitude (in us) a float64 resolves 0.001 us, so 3-decimal values convert exactly.
EXACT_FLOAT_LIMIT_US = float(2**43)

_F = msgspec.field
#: The name starts of events that may come without a category (``str.startswith`` takes a tuple).
_UNCATEGORIZED = tuple(KNOWN_UNCATEGORIZED)
#: ``default=`` for Raw fields (a shared constant: a default_factory would be a Python call per event).
NO_RAW = msgspec.Raw()

#: A time in us: a JSON integer stays an int (exact at any magnitude: many writers give epoch us as integers,
#: past the float bound below), anything else a float.
_Us = int | float

#: Integers as Arrow stores them: a JSON integer past int64 is a decode error naming the event, not an overflow later.
I64Json = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


# --- typed views of the JSON, built from chrome_map ------------------------------------------------


class _Event(msgspec.Struct, gc=False):
    """The fields every event shares; ``args`` stays raw JSON, decoded later per group (``_ARGS_OF``)."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: I64Json | str | None = None
    tid: I64Json | str | None = None
    ts: _Us | None = None
    dur: _Us | None = None
    args: msgspec.Raw = _F(default=NO_RAW)


class _ExactEvent(_Event, gc=False):
    """Same fields, but ``ts``/``dur`` as Decimal: exact whatever their magnitude."""

    ts: Decimal | None = None  # type: ignore[assignment]
    dur: Decimal | None = None  # type: ignore[assignment]


#: How each kind of ``chrome_map.Arg`` is typed in a Struct, and its default when the key is missing.
_FIELD_TYPE: dict[str, tuple[object, object]] = {
    "int": (I64Json | None, None),
    "float": (float | None, None),
    "json": (msgspec.Raw, NO_RAW),
    "xyz": (list[int] | None, None),
}


def _field_names(column: str, arg: Arg) -> list[str]:
    """The Struct fields holding ``column``: one per key name the column may have (first found wins)."""
    return [f"{column}__{i}" for i in range(len(arg.names))]


def _args_struct(group: str) -> type[msgspec.Struct] | None:
    """A Struct with exactly the ``args`` keys the group's columns read (None: the group reads none)."""
    fields = []
    for column, arg in COLUMNS[group].items():
        type_, default = _FIELD_TYPE[arg.kind]
        for field, key in zip(_field_names(column, arg), arg.names, strict=True):
            fields.append((field, type_, _F(default=default, name=key)))
    return msgspec.defstruct(f"_{group}_args", fields, gc=False) if fields else None


_ARGS_OF = {group: _args_struct(group) for group in GROUPS}
_ARGS_DECODER = {g: msgspec.json.Decoder(list[t | None]) for g, t in _ARGS_OF.items() if t is not None}
_NO_ARGS = {g: t() for g, t in _ARGS_OF.items() if t is not None}
_GROUP_CODE = {group: i for i, group in enumerate(GROUPS)}
#: ``cat`` -> group code; -2 for known categories no table uses (events without ``cat`` get -1).
_CAT_CODE: dict[str | None, int] = {
    **{cat: -2 for cat in KNOWN_UNUSED},
    **{cat: _GROUP_CODE[group] for cat, group in CATEGORIES.items()},
}


class _Tagged(msgspec.Struct, gc=False, tag_field="cat"):
    """An event decoded by its ``cat``: each category has its own Struct, with its ``args`` Struct inline.

    One msgspec call then decodes a piece completely (no raw ``args`` kept, no second pass per group),
    and an event's group is its type.  A piece holding anything else fails validation and is decoded
    again the general way (``_Event``).
    """

    code: ClassVar[int] = -2  # index into GROUPS; negative: not used by any table


class _Complete(_Tagged, gc=False):
    ph: Literal["X"]
    name: str | None = None
    pid: I64Json | str | None = None
    tid: I64Json | str | None = None
    ts: _Us | None = None
    dur: _Us | None = None


def _tagged_decoder() -> msgspec.json.Decoder:
    used = []
    for i, (cat, group) in enumerate(CATEGORIES.items()):
        args = _ARGS_OF[group]
        fields = [] if args is None else [("args", args, _F(default_factory=args))]
        used.append(
            msgspec.defstruct(
                f"_event{i}", fields, bases=(_Complete,), tag=cat, namespace={"code": _GROUP_CODE[group]}, gc=False
            )
        )
    unused = [
        msgspec.defstruct(f"_unused{i}", [], bases=(_Tagged,), tag=cat, gc=False) for i, cat in enumerate(KNOWN_UNUSED)
    ]
    return msgspec.json.Decoder(list[Union[tuple(used + unused)]])  # noqa: UP007 (a runtime-built union)


_TAGGED = _tagged_decoder()
_CODE = attrgetter("code")
_NAME, _PID, _TID, _TS, _DUR, _ARGS, _CAT, _PH = (
    attrgetter(a) for a in ("name", "pid", "tid", "ts", "dur", "args", "cat", "ph")
)
_GET = {
    field: attrgetter(field)
    for cols in COLUMNS.values()
    for column, arg in cols.items()
    for field in _field_names(column, arg)
}
_I64 = pa.int64()


# --- columns -----------------------------------------------------------------------------------------


def _ints(values: list, type_: pa.DataType = _I64) -> pa.Array:
    """Integers; anything that is not a JSON integer becomes null."""
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


#: Text thread/process ids that are not numbers get ids from here up (a 32-bit hash of the text added):
#: stable across pieces, workers and runs, and far from any OS id.
TEXT_ID_BASE = 1 << 40


def text_id(label: str) -> int:
    """The stable int64 id of a thread/process named by text (``"stream 7"``)."""
    return TEXT_ID_BASE + zlib.crc32(label.encode("utf-8"))


def _ids_of(objs: list, get: attrgetter, labels: dict[int, str]) -> pa.Array:
    """pid/tid as int64: JSON integers as they are, numeric text parsed, other text a stable ``text_id``
    (recorded in ``labels`` so the name stays readable); the rest null."""
    try:
        return pa.array(np.fromiter(map(index, map(get, objs)), np.int64, len(objs)))
    except (TypeError, ValueError, OverflowError):
        pass
    out = []
    for v in map(get, objs):
        if isinstance(v, str):
            text = v.strip()
            try:
                v = int(text)
                if not -(2**63) <= v < 2**63:
                    raise ValueError(text)
            except ValueError:
                v = text_id(text)
                labels[v] = text
        out.append(v)
    return _ints(out)


def _first_of(objs: list, column: str, arg: Arg) -> pa.Array:
    """The column from the first of its key names present in each event (int or float)."""
    fields = _field_names(column, arg)
    out = _values(objs, _GET[fields[0]], arg.kind)
    for field in fields[1:]:  # another version's name for the same key: only where the first is missing
        if out.null_count == 0:
            break
        if any(v is not None for v in map(_GET[field], objs)):
            out = pc.coalesce(out, _values(objs, _GET[field], arg.kind))
    return out


def _values(objs: list, get: attrgetter, kind: str) -> pa.Array:
    return pa.array(list(map(get, objs)), pa.float64()) if kind == "float" else _ints_of(objs, get)


def _floats_ns(objs: list, get: attrgetter) -> pa.Array:
    """ns of the us ``get`` of every object; TypeError if one is missing."""
    us = np.fromiter(map(get, objs), np.float64, len(objs))
    if np.isnan(us).any():  # fromiter reads None as NaN; JSON itself has no NaN
        raise TypeError("missing value")
    if us.size and np.abs(us).max() >= EXACT_FLOAT_LIMIT_US:
        return _whole_us_ns(map(get, objs), len(objs))
    return pa.array(_us_to_ns(us))


#: Whole us values up to this magnitude fit int64 as ns.
_MAX_WHOLE_US = (2**63 - 1) // 1000


def _whole_us_ns(values: Iterator, n: int) -> pa.Array:
    """ns of us values past the float bound when every one was a JSON integer (exact: ``* 1000``);
    otherwise ``_NeedExact`` (a fraction there needs Decimal)."""
    try:
        us = np.fromiter(map(index, values), np.int64, n)  # index: ints only, a float raises TypeError
    except (TypeError, ValueError, OverflowError):
        raise _NeedExact from None
    if us.size and np.abs(us).max() > _MAX_WHOLE_US:
        raise _NeedExact
    return pa.array(us * 1000)


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


def _xyz(args: list, column: str, arg: Arg) -> dict[str, pa.Array]:
    """A 3-element list (grid, block) spread over ``<column>_x/_y/_z``."""
    get = _GET[_field_names(column, arg)[0]]
    dims = [get(a) or (None, None, None) for a in args]
    return {
        f"{column}_{axis}": _ints([d[i] if len(d) > i else None for d in dims], pa.int32())
        for i, axis in enumerate("xyz")
    }


def _us_to_ns(us: np.ndarray) -> np.ndarray:
    """Exact ns of float us values with <= 3 decimals and |us| < 2**43 (see the module docstring)."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


class _NeedExact(Exception):
    """A timestamp beyond the float64 exactness bound: decode the piece again with Decimal."""


class BadArgs(Exception):
    """An event's ``args`` has a wrongly typed value: (index of the event in its piece, msgspec's message)."""


def _float_ns(values: list) -> pa.Array:
    us = np.asarray(values, dtype=np.float64)
    if us.size and np.abs(us).max() >= EXACT_FLOAT_LIMIT_US:
        return _whole_us_ns(iter(values), len(values))
    return pa.array(_us_to_ns(us))


def _decimal_ns(values: list) -> pa.Array:
    return pa.array([int((v * 1000).to_integral_value(ROUND_HALF_EVEN)) for v in values], pa.int64())


# --- pieces ------------------------------------------------------------------------------------------


class Piece:
    """One decoded run of events: an Arrow table per group, plus what was skipped or not modelled.

    ``events`` are ``_Tagged`` (args already decoded, group from the type) or ``_Event`` (raw args).
    Picklable (Arrow tables pickle as their buffers), so a worker process can hand it back.
    """

    def __init__(self, events: list[_Event] | list[_Tagged], exact: bool = False, tagged: bool = False) -> None:
        self.exact = exact
        self.tagged = tagged
        self.to_ns = _decimal_ns if exact else _float_ns
        self.tables: dict[str, pa.Table] = {}
        self.skipped: dict[str, int] = {}
        #: events of a category nothing models (or of none), by category; events not "X" in a used one.
        self.unmodelled: Counter[str] = Counter()
        self.not_complete: Counter[str] = Counter()
        self.labels: dict[int, str] = {}
        self.events = len(events)
        if events:
            self._split(events)
        del self.to_ns, self.exact, self.tagged

    def _codes(self, events: list) -> np.ndarray:
        """Each event's group code; -1 for events of no known category, -2 for known unused ones."""
        n = len(events)
        if self.tagged:
            return np.fromiter(map(_CODE, events), np.int8, n)
        codes = np.fromiter(map(_CAT_CODE.get, map(_CAT, events), repeat(-1)), np.int8, n)
        complete = np.fromiter(map(eq, map(_PH, events), repeat("X")), np.bool_, n)
        for i in np.flatnonzero(~complete & (codes >= 0)).tolist():
            self.not_complete[GROUPS[codes[i]]] += 1
        for i in np.flatnonzero(codes == -1).tolist():
            e = events[i]
            if e.cat is not None:
                self.unmodelled[e.cat] += 1
            elif e.ph != "M" and not (e.name or "").startswith(_UNCATEGORIZED):  # metadata has none by design
                key = UNCATEGORIZED_BY_PID.get(e.pid) if isinstance(e.pid, str) else None
                self.unmodelled[key or f"(no category) {e.name or '(no name)'}"] += 1
        return np.where(complete, codes, np.int8(-2))

    def _split(self, events: list) -> None:
        """Split by group with numpy (no per-event Python branching), then take columns.

        ``np.fromiter(map(...))`` runs the per-event lookups in C without building a list; it measured
        several times faster here than ``pa.array`` over a list of freshly decoded strings.
        """
        codes = self._codes(events)
        for code in np.unique(codes).tolist():
            if code < 0:
                continue
            group = GROUPS[code]
            idx = np.flatnonzero(codes == code)
            members = [events[idx[0]]] if idx.size == 1 else list(itemgetter(*idx.tolist())(events))
            try:
                self._add(group, members)
            except BadArgs as e:
                i, msg = e.args
                raise BadArgs(int(idx[i]), msg) from None

    def _args(self, group: str, members: list) -> list:
        """The members' ``args`` as ``_ARGS_OF[group]`` Structs (none for a group whose args are unused)."""
        if _ARGS_OF[group] is None:
            return []
        return list(map(_ARGS, members)) if self.tagged else self._decode_args(group, members)

    def _decode_args(self, group: str, members: list[_Event]) -> list:
        """Raw ``args`` decoded as ``_ARGS_OF[group]`` Structs: all of the members' in one msgspec call."""
        raws = list(map(_ARGS, members))
        if not all(raws):  # events without args: null there (decoded as the group's defaults)
            raws = [r or b"null" for r in raws]
        try:
            args = _ARGS_DECODER[group].decode(b"".join((b"[", b",".join(raws), b"]")))
        except msgspec.MsgspecError as e:
            m = re.search(r"\$\[(\d+)\]", str(e))
            i = int(m.group(1)) if m else 0
            raise BadArgs(i, str(e)) from None
        if None in args:
            args = [a or _NO_ARGS[group] for a in args]
        return args

    def _add(self, group: str, members: list) -> None:
        keep = None
        try:
            if self.exact:
                raise TypeError  # Decimal values: the list path
            start, duration = _floats_ns(members, _TS), _floats_ns(members, _DUR)
        except TypeError:  # a missing ts/dur (or Decimal values): filter, then convert from lists
            ts, dur = list(map(_TS, members)), list(map(_DUR, members))
            if None in ts or None in dur:
                keep = [i for i, (t, d) in enumerate(zip(ts, dur, strict=True)) if t is not None and d is not None]
                self.skipped[group] = self.skipped.get(group, 0) + len(members) - len(keep)
                if not keep:
                    return
                members = [members[i] for i in keep]
                ts, dur = [ts[i] for i in keep], [dur[i] for i in keep]
            start, duration = self.to_ns(ts), self.to_ns(dur)
        # Names repeat (the same functions run again and again): dictionary-encoded they cost a worker's pipe
        # a fraction of the bytes; end_ns is start + duration, added after the pieces are merged.
        arrays = {
            "name": pc.dictionary_encode(pa.array(list(map(_NAME, members)), pa.string())),
            "pid": _ids_of(members, _PID, self.labels),
            "tid": _ids_of(members, _TID, self.labels),
            "start_ns": start,
            "duration_ns": duration,
        }
        try:
            args = self._args(group, members)
        except BadArgs as e:
            i, msg = e.args
            raise BadArgs(keep[i] if keep is not None else i, msg) from None
        for column, arg in COLUMNS[group].items():
            if arg.kind == "xyz":
                arrays.update(_xyz(args, column, arg))
            elif arg.kind == "json":
                arrays[column] = _raw_json(list(map(_GET[_field_names(column, arg)[0]], args)))
            else:
                arrays[column] = _first_of(args, column, arg)
        self.tables[group] = pa.table(arrays)


def decode_piece(chunk: bytes, exact: bool = False) -> Piece:
    """The events of a JSON array: the fast route where it validates, else the general one.

    Only a validation failure retries: a syntax error would fail the same way again.  A piece whose
    timestamps need more than float64 is decoded with Decimal fields.
    """
    if not exact:
        try:
            return Piece(_TAGGED.decode(chunk), tagged=True)
        except (msgspec.ValidationError, _NeedExact):
            pass
        try:
            return Piece(_GENERAL.decode(chunk))
        except _NeedExact:
            pass
    return Piece(_EXACT.decode(chunk), exact=True)


_GENERAL = msgspec.json.Decoder(list[_Event])
_EXACT = msgspec.json.Decoder(list[_ExactEvent])


class Collected:
    """Pieces in file order, merged per group."""

    def __init__(self) -> None:
        self.parts: dict[str, list[pa.Table]] = {g: [] for g in GROUPS}
        self.skipped: Counter[str] = Counter()
        self.unmodelled: Counter[str] = Counter()
        self.not_complete: Counter[str] = Counter()
        self.labels: dict[int, str] = {}
        self.events = 0
        #: the input file's sha256 when ``decode`` was asked for it
        self.sha256: str | None = None

    def add(self, piece: Piece) -> None:
        self.events += piece.events
        self.skipped.update(piece.skipped)
        self.unmodelled.update(piece.unmodelled)
        self.not_complete.update(piece.not_complete)
        self.labels.update(piece.labels)
        for group, table in piece.tables.items():
            self.parts[group].append(table)

    def table(self, group: str) -> pa.Table | None:
        parts = self.parts[group]
        if not parts:
            return None
        table = pa.concat_tables(parts)
        if group == "python_function":
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
