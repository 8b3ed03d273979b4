-- layer_memory_ops: memory operations (memcpy by direction, memset) per layer path.
-- Inputs:  gpu_op_layers
-- Output, one row per trace, path and operation kind:
--   trace_id             VARCHAR: the trace
--   path                 VARCHAR: the layer path; NULL = launched outside every range
--   layer                VARCHAR: the innermost range's text
--   op_kind              VARCHAR: 'memcpy' | 'memset'
--   copy_kind            VARCHAR: the copy's direction (HtoD, DtoH, DtoD ...); NULL for memset
--   count                BIGINT: operations
--   bytes                BIGINT bytes: moved or set
--   duration_ns          BIGINT ns: summed GPU time
--   mean_ns              DOUBLE ns: mean GPU time
--   gb_per_s             DOUBLE GB/s: bytes / duration_ns (1e9 bytes a second)
--   share_of_path_gpu_ns DOUBLE %: of the path's GPU time, kernels and memory operations
-- Rule: the same attribution as kernels (gpu_op_layers: the range enclosing the launching API call), so the
-- rows add up to the trace's memcpy/memset totals and to layer_summary's memcpy_*/memset_* columns.
SELECT trace_id, path, any_value(layer) AS layer, op_kind, copy_kind, count(*) AS count,
       CAST(sum(bytes) AS BIGINT) AS bytes, CAST(sum(duration_ns) AS BIGINT) AS duration_ns,
       avg(duration_ns) AS mean_ns, sum(bytes) / nullif(sum(duration_ns), 0) AS gb_per_s,
       100.0 * sum(duration_ns) / nullif(any_value(path_ns), 0) AS share_of_path_gpu_ns
FROM (SELECT *, sum(duration_ns) OVER (PARTITION BY trace_id, path) AS path_ns FROM gpu_op_layers)
WHERE op_kind IN ('memcpy', 'memset')
GROUP BY trace_id, path, op_kind, copy_kind
ORDER BY trace_id, duration_ns DESC, path, op_kind, copy_kind
