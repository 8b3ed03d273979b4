-- gpu_op_layers: every GPU operation (kernel, memcpy, memset) with the layer range that launched it and its pass.
-- Inputs:  kernels, memcpy, memset, gpu_op_attribution, nvtx_paths
-- Output:  all columns of `kernels` (memcpy/memset rows: the columns they share, name `[CUDA memcpy <kind>]` /
--          `[CUDA memset]`), plus
--          op_kind    'kernel' | 'memcpy' | 'memset'; op_row_id: kernel_id / copy_id / set_id
--          bytes, copy_kind  bytes moved or set and the copy direction (NULL for kernels)
--          and gpu_op_attribution's columns (launch_call_id, launch_start_ns, launch_pid, launch_tid, range_id,
--          layer, path, depth, range_kind, domain, pass, bwd_op_id, fwd_op_id, op_id, op_name; see its header)
-- Rule: gpu_op_attribution's rules (forward by the launching call's NVTX ranges, backward by the autograd link,
-- optimizer steps); this view puts each operation's own columns beside them.
-- The range's texts (layer, path, depth, range_kind, domain) are looked up again in nvtx_paths (one row per range)
-- rather than carried through the 10M-row join: its build side then holds ids and numbers only, and 10M kernels
-- fit DuckDB's 1.7 GB without spilling (before: 1.9 GB needed; at 1.7 GB 93 GB spilled and 9x the CPU;
-- benchmarks/results/analyze_10m_memory_s33.txt).
WITH gpu_ops AS (
    SELECT *, 'kernel' AS op_kind, kernel_id AS op_row_id, CAST(NULL AS BIGINT) AS bytes,
           CAST(NULL AS VARCHAR) AS copy_kind
    FROM kernels
    UNION ALL BY NAME
    SELECT trace_id, 'memcpy' AS op_kind, copy_id AS op_row_id, device_id, context_id, stream_id, correlation_id,
           external_id, start_ns, end_ns, duration_ns, bytes, kind AS copy_kind, pid, graph_node_id,
           '[CUDA memcpy ' || coalesce(kind, 'unknown') || ']' AS name,
           '[CUDA memcpy ' || coalesce(kind, 'unknown') || ']' AS short_name
    FROM memcpy
    UNION ALL BY NAME
    SELECT trace_id, 'memset' AS op_kind, set_id AS op_row_id, device_id, context_id, stream_id, correlation_id,
           external_id, start_ns, end_ns, duration_ns, bytes, NULL AS copy_kind, pid, graph_node_id,
           '[CUDA memset]' AS name, '[CUDA memset]' AS short_name
    FROM memset
)
SELECT g.*, a.launch_call_id, a.launch_start_ns, a.launch_pid, a.launch_tid, a.range_id, p.text AS layer, p.path,
       p.depth, p.kind AS range_kind, p.domain, a.pass, a.bwd_op_id, a.fwd_op_id, a.op_id, a.op_name
FROM gpu_ops g
LEFT JOIN (SELECT * EXCLUDE (layer, path, depth, range_kind, domain) FROM gpu_op_attribution) a
  ON a.trace_id = g.trace_id AND a.op_kind = g.op_kind AND a.op_row_id = g.op_row_id
LEFT JOIN nvtx_paths p ON p.trace_id = a.trace_id AND p.range_id = a.range_id
