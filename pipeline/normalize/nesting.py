"""Depth and parent of NVTX-style ranges, shared by every normalizer that has ranges."""

from __future__ import annotations

from importlib import resources

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.lean import duckdb_connect

_SQL = resources.files("pipeline.normalize").joinpath("sql/nvtx_nesting.sql").read_text()


def with_nesting(ranges: pa.Table) -> pa.Table:
    """``ranges`` with ``depth`` and ``parent_id`` filled for push/pop ranges.

    Start/end ranges may overlap freely, so they get depth 0 and no parent.
    """
    con = duckdb_connect()
    cols = ["range_id", "kind", "pid", "tid", "start_ns", "end_ns"]
    view = ranges.select(cols)
    domain = (
        ranges.column("domain").cast(pa.string())
        if "domain" in ranges.column_names
        else pa.nulls(ranges.num_rows, pa.string())
    )
    con.register("ranges", view.append_column("domain", domain))
    nest = con.sql(_SQL).to_arrow_table()
    con.close()
    out = ranges.drop_columns([c for c in ("depth", "parent_id") if c in ranges.column_names])
    joined = out.join(nest, "range_id", join_type="left outer")
    depth = pc.if_else(pc.is_null(joined["depth"]), pa.scalar(0, pa.int32()), joined["depth"].cast(pa.int32()))
    joined = joined.set_column(joined.schema.get_field_index("depth"), "depth", depth)
    return joined.sort_by([("start_ns", "ascending"), ("range_id", "ascending")])
