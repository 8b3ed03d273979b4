"""PyTorch op ranges in NVTX (``torch.autograd.profiler.emit_nvtx``) -> the ``ops`` table, not layer ranges (the ranges
PyTorch itself opens, ``ProfilerStep#N``, ``Optimizer.step#...``, stay ranges, as in PyTorch traces); and the ranges
of ``nsys profile --pytorch=functions-trace`` (domain ``PyTorch``): a module's ``forward`` is a layer named by its
class, any other traced function an op (``nsys_map.PYTORCH_*``).

Under ``emit_nvtx`` every op PyTorch records becomes an NVTX push/pop range in the default domain whose text
is ``<name>[, seq = N][, op_id = M][, sizes = [...]][, input_op_ids = ...]`` (torch's ``getNvtxStr``):
forward ops carry the autograd sequence number of the node they create, backward nodes
(``AddmmBackward0, seq = N``) the number of the node they evaluate.  These are ops, not layers: left among
the ranges they would become the innermost "layer" of every kernel.  So they move to ``ops`` (name without
the suffixes, ``sequence_number``), where the attribution view links backward to forward exactly as for the
PyTorch profiler's ``Sequence number``.  ``autograd::engine::evaluate_function: XBackward0`` carries no
number in NVTX; it takes that of the ``XBackward0`` op it wraps (the first backward op started inside it on
its thread), as the PyTorch profiler records it.
"""

from __future__ import annotations

import pyarrow as pa

from pipeline.lean import duckdb_connect
from pipeline.normalize.chrome_map import RANGES_WRITTEN_AS_OPS
from pipeline.normalize.nsys_map import PYTORCH_DOMAIN, PYTORCH_MODULE_FORWARD, PYTORCH_MODULE_SOURCE

#: Text that marks an op range: a suffix getNvtxStr adds, or a PyTorch op namespace (older torch writes
#: ops without sequence number and op id as the bare name).
_IS_OP = (
    "(kind = 'push_pop' AND domain IS NULL AND ("
    r"regexp_matches(CAST(text AS VARCHAR), ', (seq|op_id) = \d+') OR "
    r"regexp_matches(CAST(text AS VARCHAR), '^(aten|autograd|prim|c10d|profiler)::'))) "
    f"OR coalesce(CAST(domain AS VARCHAR) = '{PYTORCH_DOMAIN}', false)"
)
#: nsys's module ranges: into the default domain, named by class; run before ``_IS_OP`` is tested.
_MODULES = (
    f"coalesce(CAST(domain AS VARCHAR) = '{PYTORCH_DOMAIN}' "
    f"AND regexp_matches(CAST(text AS VARCHAR), '{PYTORCH_MODULE_FORWARD}'), false)"
)
#: The ranges PyTorch itself opens (``ProfilerStep#N``, ``Optimizer.step#AdamW.step``...: chrome_map's table) are
#: ranges in a PyTorch trace; under emit_nvtx they carry an op's suffix (``, op_id = N``), which comes off, so that
#: they stay ranges and both sources give the same paths.
_BARE = r"regexp_replace(CAST(text AS VARCHAR), ', (seq|op_id|sizes|input_op_ids) = .*$', '')"
_TORCH_RANGE = (
    f"coalesce(kind = 'push_pop' AND domain IS NULL AND regexp_matches({_BARE}, "
    f"'{'|'.join(f'(?:{pattern})' for pattern in RANGES_WRITTEN_AS_OPS)}'), false)"
)
_AS_LAYERS = f"""SELECT * REPLACE (
    CASE WHEN {_MODULES} THEN regexp_extract(CAST(text AS VARCHAR), '{PYTORCH_MODULE_FORWARD}', 1)
         WHEN {_TORCH_RANGE} THEN {_BARE}
         ELSE CAST(text AS VARCHAR) END AS text,
    CASE WHEN {_MODULES} THEN NULL ELSE domain END AS domain,
    CASE WHEN {_MODULES} THEN '{PYTORCH_MODULE_SOURCE}' ELSE CAST(source AS VARCHAR) END AS source)
FROM ranges"""
_NAME = r"regexp_replace(CAST(text AS VARCHAR), ', (seq|op_id|sizes|input_op_ids) = .*$', '')"

_SQL = f"""
WITH r AS (SELECT *, {_IS_OP} AS is_op FROM ranges),
o AS (
    SELECT {_NAME} AS name, start_ns, end_ns, duration_ns, pid, tid,
           CAST(nullif(regexp_extract(CAST(text AS VARCHAR), ', seq = (\\d+)', 1), '') AS BIGINT) AS seq
    FROM r WHERE is_op
),
nodes AS (SELECT * FROM o WHERE seq IS NOT NULL AND regexp_matches(name, 'Backward[0-9]*$')),
evals AS (   -- the wrapper takes the number of the first backward node started inside it
    SELECT e.name, e.start_ns, e.end_ns, e.duration_ns, e.pid, e.tid,
           CASE WHEN n.start_ns <= e.end_ns THEN n.seq END AS seq
    FROM (SELECT * FROM o WHERE seq IS NULL AND name LIKE 'autograd::engine::evaluate_function:%') e
    ASOF LEFT JOIN nodes n ON n.pid IS NOT DISTINCT FROM e.pid AND n.tid = e.tid AND n.start_ns >= e.start_ns
),
all_ops AS (
    SELECT * FROM o WHERE NOT (seq IS NULL AND name LIKE 'autograd::engine::evaluate_function:%')
    UNION ALL SELECT * FROM evals
)
SELECT row_number() OVER (ORDER BY start_ns, end_ns DESC, name) - 1 AS op_id, name, start_ns, end_ns, duration_ns,
       pid, tid, seq AS sequence_number
FROM all_ops ORDER BY op_id
"""


def split_op_ranges(ranges: pa.Table) -> tuple[pa.Table, pa.Table | None]:
    """(layer ranges with ids renumbered in start order, ops) -- ops is None when the trace has no op ranges."""
    con = duckdb_connect(rows=ranges.num_rows)
    con.register("raw_ranges", ranges)
    con.execute(f"CREATE TEMP VIEW ranges AS {_AS_LAYERS.replace('FROM ranges', 'FROM raw_ranges')}")
    n_ops = con.execute(f"SELECT count(*) FROM ranges WHERE {_IS_OP}").fetchall()[0][0]
    if not n_ops:  # (then no PyTorch domain either: nothing to rewrite)
        con.close()
        return ranges, None
    ops = con.sql(_SQL).to_arrow_table()
    kept = con.sql(
        f"""SELECT * REPLACE (row_number() OVER (ORDER BY start_ns, end_ns DESC, range_id) - 1 AS range_id)
            FROM ranges WHERE NOT coalesce({_IS_OP}, false) ORDER BY range_id"""
    ).to_arrow_table()
    con.close()
    return kept.cast(ranges.schema), ops
