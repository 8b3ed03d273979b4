-- gpu_op_layers: every GPU operation (kernel, memcpy, memset) with the layer range that launched it and its pass.
-- Inputs:  kernels, memcpy, memset (through gpu_ops), gpu_op_attribution, nvtx_paths
-- Macros:  gpu_ops
-- Output:  all columns of `kernels` (memcpy/memset rows: the columns they share, name `[CUDA memcpy <kind>]` /
--          `[CUDA memset]`), plus
--          op_kind    'kernel' | 'memcpy' | 'memset'; op_row_id: kernel_id / copy_id / set_id
--          bytes, copy_kind  bytes moved or set and the copy direction (NULL for kernels)
--          and gpu_op_attribution's columns (launch_call_id, launch_start_ns, launch_pid, launch_tid, range_id,
--          layer, path, depth, range_kind, domain, pass, bwd_op_id, fwd_op_id, op_id, op_name, fused_modules; see
--          its header)
-- Rule: gpu_op_attribution's rules (forward by the launching call's NVTX ranges, backward by the autograd link,
-- optimizer steps); this view puts each operation's own columns beside them.
-- Memory (10M kernels, benchmarks/results/analyze_10m_memory_s33.txt and _s34.txt): the 10M-row join's hash table holds
-- no more than the join needs. The range's texts (layer, path, depth, range_kind, domain) are looked up in nvtx_paths (one
-- row per range) after it, and each kind of operation is joined to its own rows of gpu_op_attribution, so op_kind
-- is no key either: 10M kernels stream into the Parquet writer without spilling down to a 1.5 GB limit (texts carried:
-- 1.9 GB; op_kind as a key: 1.7 GB). Below that the join's partition rounds re-read ~85 GB of spilled rows.
WITH attribution AS NOT MATERIALIZED (   -- read once per kind of operation below, never held whole
    SELECT * EXCLUDE (layer, path, depth, range_kind, domain) FROM gpu_op_attribution
),
ops AS (   -- each kind of operation joined to its own kind's rows
    SELECT g.*, a.* EXCLUDE (trace_id, op_row_id)
    FROM gpu_ops(kinds := ['kernel']) g
    LEFT JOIN (SELECT * EXCLUDE (op_kind) FROM attribution WHERE op_kind = 'kernel') a
      ON a.trace_id = g.trace_id AND a.op_row_id = g.op_row_id
    UNION ALL BY NAME
    SELECT g.*, a.* EXCLUDE (trace_id, op_row_id)
    FROM gpu_ops(kinds := ['memcpy']) g
    LEFT JOIN (SELECT * EXCLUDE (op_kind) FROM attribution WHERE op_kind = 'memcpy') a
      ON a.trace_id = g.trace_id AND a.op_row_id = g.op_row_id
    UNION ALL BY NAME
    SELECT g.*, a.* EXCLUDE (trace_id, op_row_id)
    FROM gpu_ops(kinds := ['memset']) g
    LEFT JOIN (SELECT * EXCLUDE (op_kind) FROM attribution WHERE op_kind = 'memset') a
      ON a.trace_id = g.trace_id AND a.op_row_id = g.op_row_id
)
SELECT o.* EXCLUDE (launch_call_id, launch_start_ns, launch_pid, launch_tid, range_id, pass, bwd_op_id, fwd_op_id,
                    op_id, op_name, fused_modules, module_chain),
       o.launch_call_id, o.launch_start_ns, o.launch_pid, o.launch_tid, o.range_id,
       -- a compiled region's work goes on down its module chain (gpu_op_attribution's rule, same expressions)
       CASE WHEN len(o.module_chain) > 0 THEN o.module_chain[-1] ELSE p.text END AS layer,
       CASE WHEN len(o.module_chain) > 0 THEN concat_ws('/', p.path, array_to_string(o.module_chain, '/'))
            ELSE p.path END AS path,
       CASE WHEN len(o.module_chain) > 0 THEN coalesce(p.depth + 1, 0) + len(o.module_chain) - 1 ELSE p.depth END
           AS depth,
       p.kind AS range_kind, p.domain, o.pass, o.bwd_op_id, o.fwd_op_id, o.op_id, o.op_name, o.fused_modules
FROM ops o
LEFT JOIN nvtx_paths p ON p.trace_id = o.trace_id AND p.range_id = o.range_id
