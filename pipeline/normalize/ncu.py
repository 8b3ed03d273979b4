"""Nsight Compute ``--csv`` output (``--page raw`` or ``--page details``) -> ``ncu_kernels`` + ``ncu_metrics``.

What ncu writes to stdout is not pure CSV: ``==PROF==``/``==WARNING==`` lines and the profiled program's
own output come before the table. Those lines are dropped with one regex pass over the bytes (counted in a
warning) and the rest goes to polars' CSV reader with every column as a string; all later work is polars
expressions over whole columns, never a Python loop over rows.

Two layouts:

* raw page: one row per launch, one column per metric, and a second row with each metric's unit;
* details page: one row per (launch, section, metric) or per rule result, with ``Metric Unit``.

Versions (2019.5 on) differ in the launch columns, so those are a data table (``LAUNCH_ALIASES``): 2019-2020
exports have ``Kernel Time`` and no ``Block Size``/``Grid Size``/``Device``/``CC`` (the launch sizes are only the
products in the "Launch Statistics" rows, kept as metrics; grid and block dims stay NULL, never guessed).
Range replay (``--replay-mode range|app-range``) gives one result per range, Kernel Name ``range``, Stream
``n/a`` and no launch shape: such rows are kept and counted in a warning.  Other pages (``--page session``,
``source``...) carry no per-launch table and are refused with a line naming the page and the export we read.

Values are converted to base units so the two unit modes of ncu compare: ncu's default "auto" mode scales
(``4.32 us``, ``32.77 Kbyte``, ``3.17 Ghz``) while ``--print-units base`` prints ``4,320 ns``. Checked on one
report exported both ways (``sample_traces/h200_ncu_units``): byte prefixes are decimal SI (1 Kbyte = 1e3 byte).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import polars as pl

from pipeline.errors import BadInputError
from pipeline.normalize.ncu_pages import EXPORT_HINT, other_page
from pipeline.normalize.source import read_all
from pipeline.store import TraceWriter

HEADER_START = b'"ID","Process ID"'
ID, NAME = "ID", "Kernel Name"  # the only launch columns every version and replay mode writes
#: Launch columns (describe the launch, not a measurement; both pages) -> the header cells that carry them, per
#: ncu version, first found wins; a column no cell carries is NULL.  2019.5-2020.x: ID, Process ID, Process
#: Name, Host Name, Kernel Name, Kernel Time, Context, Stream (no Block Size, Grid Size, Device, CC); 2021.1 on
#: adds Block Size, Grid Size, Device, CC; 2023 on drops Kernel Time.
LAUNCH_ALIASES: dict[str, tuple[str, ...]] = {
    "launch_id": (ID,),
    "pid": ("Process ID",),
    "process_name": ("Process Name",),
    "host": ("Host Name",),
    "name": (NAME,),
    "kernel_time": ("Kernel Time",),  # a wall-clock timestamp of the profiling pass: not stored
    "context_id": ("Context",),
    "stream_id": ("Stream",),
    "block": ("Block Size",),
    "grid": ("Grid Size",),
    "device_id": ("Device",),
    "compute_capability": ("CC",),
}
REQUIRED = ("launch_id", "name")
NVTX_PUSH_POP = "thread Domain:Push/Pop_Range"  # header cell starts with this (the rest lists the fields)
NVTX_START_END = "Id:Domain:Start/Stop_Range"
LAUNCH_COLUMNS = tuple(cell for cells in LAUNCH_ALIASES.values() for cell in cells)
#: Kernel Name of a range-replay result (one row set per NVTX / profiler range instead of per kernel).
RANGE_NAME = "range"
#: An ncu error line is quoted up to this many characters (ERR_NVGPUCTRPERM's, URL included, is 245).
ERROR_CHARS = 400
DETAILS_COLUMNS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
RULE_COLUMNS = ("Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup")

# Lines that are not CSV rows: anything not starting with a quote (ncu quotes every cell), and blank lines.
_NOT_CSV = re.compile(rb"^[^\"\r\n][^\n]*(?:\n|$)|^\r?\n", re.M)
_TEXT_LINE = re.compile(rb"^[^\"\r\n][^\n]*", re.M)

# SI prefixes as ncu prints them (decimal for bytes too, see the module docstring).
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
# Time units -> factor to ns. New ncu prints "us"/"ms", older versions "usecond"/"msecond".
_TIME_NS = {
    "ns": 1.0,
    "nsecond": 1.0,
    "us": 1e3,
    "usecond": 1e3,
    "ms": 1e6,
    "msecond": 1e6,
    "s": 1e9,
    "second": 1e9,
}
# Counted things that may carry an SI prefix in auto mode ("Kbyte", "Minst"...); "cycle" is kept as cycles.
_COUNTABLE = ("byte", "inst", "cycle", "sector", "request", "warp", "thread", "block", "register", "bit")


def _unit_part(u: str) -> tuple[str, float, str]:
    """One side of a unit ("Kbyte", "usecond", "Ghz") -> (base name, factor to base, kind)."""
    if u in _TIME_NS:
        return "ns", _TIME_NS[u], "time"
    low = u.lower()
    if low.endswith("hz") and u[:-2] in _PREFIX:
        return "Hz", _PREFIX[u[:-2]], "freq"
    for base in _COUNTABLE:
        if u.endswith(base) and u[: -len(base)] in _PREFIX:
            return base, _PREFIX[u[: -len(base)]], "count"
    return u, 1.0, "other"


def convert_unit(raw: str | None) -> tuple[str | None, float]:
    """ncu's printed unit -> (base unit, multiplier). Unknown units pass through with factor 1.

    Rates are per second ("Gbyte/s" -> "byte/s" x1e9; "cycle/nsecond" -> "Hz" x1e9), so auto and
    ``--print-units base`` exports of one report normalize to the same numbers and units.
    """
    if raw is None or raw == "":
        return None, 1.0
    if raw == "%":
        return "%", 1.0
    if "/" not in raw:
        base, factor, _ = _unit_part(raw)
        return base, factor
    num, den = raw.split("/", 1)
    nb, nf, _ = _unit_part(num)
    db, df, dkind = _unit_part(den)
    if dkind == "time":  # x per <time unit>: express per second
        factor = nf * 1e9 / df
        return ("Hz", factor) if nb == "cycle" else (f"{nb}/s", factor)
    # Elsewhere ncu's auto mode scales the printed number and puts the prefix on whichever part has a
    # countable unit: 2,234 "%/byte" prints as 2.234 "%/Kbyte". So the prefix multiplies, wherever it sits.
    return f"{nb}/{db}", nf * df


def _split(path: Path, data: bytes) -> tuple[bytes, list[str]]:
    """The CSV part of ncu's output and the non-CSV lines that were dropped (decoded, stripped)."""
    text_lines = [m.decode("utf-8", "replace").strip() for m in _TEXT_LINE.findall(data)]
    csv_bytes = _NOT_CSV.sub(b"", data)
    if not csv_bytes.startswith(HEADER_START):
        if any("No kernels were profiled" in line for line in text_lines):
            raise BadInputError(
                path, "ncu profiled no kernels ('No kernels were profiled.'): check its -k/--nvtx filters"
            )
        errors = [line for line in text_lines if line.startswith("==ERROR==")]
        if errors:
            # ncu's line names its fix (ERR_NVGPUCTRPERM ends in the URL to follow): kept whole up to a bound
            first = errors[0] if len(errors[0]) <= ERROR_CHARS else errors[0][: ERROR_CHARS - 1] + "…"
            raise BadInputError(path, f"ncu reported an error and wrote no table: {first}")
        if not csv_bytes:
            raise BadInputError(path, "no Nsight Compute CSV table in the file (only ncu log lines)")
        page = other_page(csv_bytes)
        if page:
            raise BadInputError(path, f"this is ncu's {page} export, with no per-launch table: {EXPORT_HINT}")
        first = 'not an Nsight Compute raw or details CSV (the table does not start with "ID","Process ID")'
        raise BadInputError(path, f"{first}: {EXPORT_HINT}")
    return csv_bytes, text_lines


def _check_complete(path: Path, csv_bytes: bytes) -> None:
    """A cut-off last row: an odd number of quotes (cut inside a cell) or no data row at all."""
    body = csv_bytes.rstrip(b"\r\n")
    last = body[body.rfind(b"\n") + 1 :]
    if last.count(b'"') % 2:
        raise BadInputError(path, "last CSV row is cut off inside a quoted cell (file truncated?)")
    if b"\n" not in body:
        raise BadInputError(path, "ncu CSV has a header but no rows (file truncated or no kernels profiled)")


def _read_table(path: Path, csv_bytes: bytes) -> pl.DataFrame:
    try:
        return pl.read_csv(io.BytesIO(csv_bytes), infer_schema=False, has_header=True)
    except pl.exceptions.PolarsError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BadInputError(
            path, f"malformed ncu CSV (row with a wrong number of cells or bad quoting): {first}"
        ) from e


def _number(col: pl.Expr) -> pl.Expr:
    """ncu's printed number -> float: thousands separators only where the text is a number written with them."""
    s = col.str.strip_chars()
    grouped = s.str.contains(r"^[-+]?\d{1,3}(,\d{3})+(\.\d*)?$")
    return pl.when(grouped).then(s.str.replace_all(",", "")).otherwise(s).cast(pl.Float64, strict=False)


def _nvtx(col: pl.Expr, header: str) -> pl.Expr:
    """ncu's NVTX cell (``854  "<default domain>:step:none:..."  "<default domain>:conv1:..."``) -> "step/conv1".

    Each quoted item holds the fields the column's header cell lists, ``:``-separated: today
    ``[Id:]Domain:Name:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg``, in ncu 2020.2 only ``[Id:]Domain:Name:
    PL_Type:PL_Value`` (``thread Domain:Push/Pop_Range:PL_Type:PL_Value``); the name may hold colons itself, so it
    is what lies between the fields before it and those after it, counted in the header (:func:`nvtx_fields`).
    """
    leading_fields, trailing_fields = nvtx_fields(header)
    lead = r"[^:]*:" * leading_fields
    item = rf"^{lead}(.*){':[^:]*' * trailing_fields}$"
    domain = rf"^{r'[^:]*:' * (leading_fields - 1)}([^:]*):"
    names = (
        col.str.extract_all(r'"[^"]*"')
        .list.eval(
            pl.when(pl.element().str.strip_chars('"').str.extract(domain, 1) == "<default domain>")
            .then(pl.element().str.strip_chars('"').str.extract(item, 1))
            .otherwise(
                pl.element().str.strip_chars('"').str.extract(domain, 1)
                + pl.lit(":")
                + pl.element().str.strip_chars('"').str.extract(item, 1)
            )
        )
        .list.join("/")
    )
    return pl.when(names == "").then(None).otherwise(names)


def nvtx_fields(header: str) -> tuple[int, int]:
    """The fields before and after the range name in each item of an NVTX column, as its header cell lists them:
    ``Id:Domain:Start/Stop_Range:PL_Type:PL_Value`` -> (2, 2). The push/pop header's first field, ``thread
    Domain``, is the domain (the thread id stands outside the quoted items)."""
    fields = header.split(":")
    name = next(i for i, f in enumerate(fields) if f.endswith("_Range"))
    return name, len(fields) - name - 1


def launch_columns(df: pl.DataFrame) -> dict[str, str | None]:
    """Our launch column -> the header cell of this CSV that carries it (None when this version has none)."""
    return {ours: next((c for c in cells if c in df.columns), None) for ours, cells in LAUNCH_ALIASES.items()}


def _col(cols: dict[str, str | None], ours: str) -> pl.Expr:
    cell = cols[ours]
    return pl.col(cell) if cell is not None else pl.lit(None, pl.String)


def _dims(cols: dict[str, str | None], ours: str, prefix: str) -> list[pl.Expr]:
    """``"(1024, 1, 1)"`` -> three Int32 columns; anything else (absent, ``n/a`` of a range) -> NULL."""
    cell = _col(cols, ours)
    parts = [cell.str.extract(r"^\(\s*(\d+),\s*(\d+),\s*(\d+)\s*\)$", i).cast(pl.Int32) for i in (1, 2, 3)]
    return [p.alias(f"{prefix}_{axis}") for p, axis in zip(parts, "xyz", strict=True)]


def kernels_frame(df: pl.DataFrame) -> pl.DataFrame:
    """One row per launch (details pages repeat the launch on every metric row: keep the first)."""
    cols = launch_columns(df)
    push_pop = next((c for c in df.columns if c.startswith(NVTX_PUSH_POP)), None)
    start_end = next((c for c in df.columns if c.startswith(NVTX_START_END)), None)
    return (
        df.unique(ID, keep="first", maintain_order=True)
        .select(
            pl.col(ID).cast(pl.Int64).alias("launch_id"),
            _col(cols, "pid").cast(pl.Int64, strict=False).alias("pid"),
            _col(cols, "process_name").alias("process_name"),
            _col(cols, "host").alias("host"),
            pl.col(NAME).alias("name"),
            _col(cols, "context_id").cast(pl.Int64, strict=False).alias("context_id"),
            _col(cols, "stream_id").cast(pl.Int64, strict=False).alias("stream_id"),
            _col(cols, "device_id").cast(pl.Int32, strict=False).alias("device_id"),
            _col(cols, "compute_capability").alias("compute_capability"),
            *_dims(cols, "grid", "grid"),
            *_dims(cols, "block", "block"),
            (_nvtx(pl.col(push_pop), push_pop) if push_pop else pl.lit(None, pl.String)).alias("nvtx_push_pop"),
            (_nvtx(pl.col(start_end), start_end) if start_end else pl.lit(None, pl.String)).alias("nvtx_start_end"),
        )
        .sort("launch_id")
    )


def _with_units(long: pl.DataFrame) -> pl.DataFrame:
    """Add ``unit`` and ``value`` (base units) from ``raw_unit``/``raw_value``."""
    units = long.select(pl.col("raw_unit").unique()).to_series().to_list()
    mapping = {u: convert_unit(u) for u in units}
    lookup = pl.DataFrame(
        {
            "raw_unit": list(mapping),
            "unit": [m[0] for m in mapping.values()],
            "factor": [m[1] for m in mapping.values()],
        },
        schema={"raw_unit": pl.String, "unit": pl.String, "factor": pl.Float64},
    )
    raw_value = pl.col("raw_value")
    na = raw_value.str.strip_chars().str.to_lowercase().is_in(["n/a", ""])
    return (
        long.join(lookup, on="raw_unit", how="left", nulls_equal=True)
        .with_columns(pl.when(na).then(None).otherwise(_number(raw_value) * pl.col("factor")).alias("value"))
        .drop("factor")
    )


def raw_metrics(path: Path, df: pl.DataFrame) -> pl.DataFrame:
    """Raw page: unpivot the metric columns; the units row (first cells empty) gives each column's unit."""
    fixed = [c for c in df.columns if c in LAUNCH_COLUMNS or c.startswith((NVTX_PUSH_POP, NVTX_START_END))]
    metric_cols = [c for c in df.columns if c not in fixed]
    has_units = df.height > 0 and (df[ID][0] or "") == ""
    units_row = df.head(1) if has_units else None
    data = df.slice(1) if has_units else df
    if data.height == 0:
        raise BadInputError(path, "ncu raw page has a header but no launch rows (no kernels profiled?)")
    if data[ID].cast(pl.Int64, strict=False).null_count():
        raise BadInputError(path, "ncu raw page has rows whose ID is not an integer (mixed or damaged CSV)")
    # A row cut short gets nulls in its last cells (ncu quotes every cell, so a real empty one is "").
    last = df.columns[-1]
    if data[last].null_count():
        raise BadInputError(path, "a raw-page row has fewer cells than the header (file truncated?)")
    units = (
        units_row.select(metric_cols).transpose(include_header=True, header_name="metric", column_names=["raw_unit"])
        if units_row is not None
        else pl.DataFrame(
            {"metric": metric_cols, "raw_unit": [None] * len(metric_cols)}, schema_overrides={"raw_unit": pl.String}
        )
    ).with_columns(pl.when(pl.col("raw_unit") == "").then(None).otherwise(pl.col("raw_unit")).alias("raw_unit"))
    long = (
        data.select(pl.col(ID).cast(pl.Int64).alias("launch_id"), *metric_cols)
        .unpivot(index="launch_id", variable_name="metric", value_name="raw_value")
        .join(units, on="metric", how="left")
    )
    return _with_units(long).with_columns(
        pl.lit(None, pl.String).alias("section"),
        pl.lit(None, pl.String).alias("rule"),
        pl.lit(None, pl.String).alias("rule_type"),
        pl.lit(None, pl.String).alias("rule_description"),
    )


def details_metrics(path: Path, df: pl.DataFrame) -> pl.DataFrame:
    """Details page: already long. Rule rows (a ``Rule Name``) carry their estimated speedup as the value."""
    missing = [c for c in DETAILS_COLUMNS if c not in df.columns]
    if missing:
        raise BadInputError(path, f"ncu details page lacks columns {missing}")
    if df[ID].cast(pl.Int64, strict=False).null_count():
        raise BadInputError(path, "ncu details page has rows whose ID is not an integer (mixed or damaged CSV)")
    if df["Metric Value"].null_count():
        raise BadInputError(path, "a details-page row has fewer cells than its metric needs (file truncated?)")
    rule_cols = [c for c in RULE_COLUMNS if c in df.columns]
    df = df.with_columns(pl.lit(None, pl.String).alias(c) for c in RULE_COLUMNS if c not in rule_cols)
    is_rule = pl.col("Rule Name").fill_null("") != ""
    if df.filter(is_rule & pl.col("Estimated Speedup").is_null()).height:
        raise BadInputError(path, "a details-page rule row has fewer cells than the header (file truncated?)")
    speedup_type = pl.col("Estimated Speedup Type").fill_null("")
    long = df.select(
        pl.col(ID).cast(pl.Int64).alias("launch_id"),
        pl.col("Section Name").alias("section"),
        pl.when(is_rule)
        .then(pl.when(speedup_type != "").then(pl.lit("estimated_speedup.") + speedup_type))
        .otherwise(pl.col("Metric Name"))
        .alias("metric"),
        pl.when(is_rule)
        .then(pl.when(speedup_type != "").then(pl.lit("%")))
        .otherwise(pl.when(pl.col("Metric Unit") != "").then(pl.col("Metric Unit")))
        .alias("raw_unit"),
        pl.when(is_rule).then(pl.col("Estimated Speedup")).otherwise(pl.col("Metric Value")).alias("raw_value"),
        pl.when(is_rule).then(pl.col("Rule Name")).alias("rule"),
        pl.when(is_rule).then(pl.col("Rule Type")).alias("rule_type"),
        pl.when(is_rule).then(pl.col("Rule Description")).alias("rule_description"),
    )
    return _with_units(long)


def normalize_ncu(path: Path, writer: TraceWriter) -> dict[str, object]:
    data = read_all(path)
    csv_bytes, dropped = _split(path, data)
    _check_complete(path, csv_bytes)
    df = _read_table(path, csv_bytes)
    cols = launch_columns(df)
    missing = [LAUNCH_ALIASES[c][0] for c in REQUIRED if cols[c] is None]
    if missing:
        raise BadInputError(path, f"ncu CSV lacks launch columns {missing}")
    page = "details" if "Metric Name" in df.columns else "raw"
    metrics = details_metrics(path, df) if page == "details" else raw_metrics(path, df)
    kernels = kernels_frame(df.filter(pl.col(ID) != "") if page == "raw" else df)
    writer.write("ncu_kernels", kernels.to_arrow())
    writer.write("ncu_metrics", metrics.to_arrow())
    warnings = (
        [f"skipped {len(dropped)} non-CSV lines (ncu log / program output), first: {dropped[0][:120]!r}"]
        if dropped
        else []
    )
    warnings += _layout_warnings(cols, kernels)
    hosts = kernels["host"].drop_nulls().unique().to_list()
    return {
        "source_format": "ncu-csv",
        "source_version": f"ncu --csv --page {page}",
        "host": hosts[0] if len(hosts) == 1 else None,
        "warnings": warnings,
    }


def _layout_warnings(cols: dict[str, str | None], kernels: pl.DataFrame) -> list[str]:
    """What this export's layout leaves NULL: launch columns its version lacks, launches of range replay."""
    absent = [LAUNCH_ALIASES[c][0] for c in ("grid", "block", "device_id", "compute_capability") if cols[c] is None]
    ranges = kernels.filter(pl.col("name") == RANGE_NAME).height
    if ranges and ranges == kernels.height:  # range replay writes no Grid/Block Size columns at all (ncu 2025.3)
        absent = [c for c in absent if c not in (LAUNCH_ALIASES["grid"][0], LAUNCH_ALIASES["block"][0])]
    out = []
    if absent:
        out.append(
            f"this ncu version's CSV has no {', '.join(absent)} columns (2019.5-2020.x layout): grid/block dims, "
            "device and CC are NULL; launch sizes are the Launch Statistics products in ncu_metrics"
        )
    if ranges:
        out.append(
            f"{ranges} range-replay result(s) (Kernel Name 'range': one result per NVTX/profiler range, no launch "
            "shape): kept in ncu_kernels/ncu_metrics, never matched to timeline kernels"
        )
    return out
