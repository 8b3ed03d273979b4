-- layer_name_summary: the per-layer rollup folded over paths: one row per trace and layer name
-- (e.g. every `relu` call, wherever it sits in the model).
-- Inputs:  layer_summary, kernel_layers
-- Output:  trace_id, layer (NULL = outside every range), paths (distinct paths), calls, kernels,
--          launches_per_call, gpu_time_ns, mean_ns, min_ns, max_ns (ns), share_pct (%),
--          first_start_ns, last_start_ns (ns), distinct_kernels, and layer_summary's split by pass and memory
--          operations summed: forward_kernels, backward_kernels, optimizer_kernels, forward_gpu_time_ns,
--          backward_gpu_time_ns, optimizer_gpu_time_ns (ns), memcpy_count, memcpy_bytes, memcpy_ns,
--          memset_count, memset_bytes, memset_ns, gpu_ops
WITH names AS (
    SELECT trace_id, layer, count(DISTINCT name) AS distinct_kernels FROM kernel_layers GROUP BY ALL
)
SELECT s.trace_id, s.layer, count(*) AS paths,
       CAST(sum(s.calls) AS BIGINT) AS calls, CAST(sum(s.kernels) AS BIGINT) AS kernels,
       sum(s.kernels) / nullif(sum(s.calls), 0) AS launches_per_call, CAST(sum(s.gpu_time_ns) AS BIGINT) AS gpu_time_ns,
       sum(s.gpu_time_ns) / nullif(sum(s.kernels), 0) AS mean_ns, min(s.min_ns) AS min_ns, max(s.max_ns) AS max_ns,
       sum(s.share_pct) AS share_pct, min(s.first_start_ns) AS first_start_ns,
       max(s.last_start_ns) AS last_start_ns, any_value(n.distinct_kernels) AS distinct_kernels,
       CAST(sum(s.forward_kernels) AS BIGINT) AS forward_kernels,
       CAST(sum(s.backward_kernels) AS BIGINT) AS backward_kernels,
       CAST(sum(s.optimizer_kernels) AS BIGINT) AS optimizer_kernels,
       CAST(sum(s.forward_gpu_time_ns) AS BIGINT) AS forward_gpu_time_ns,
       CAST(sum(s.backward_gpu_time_ns) AS BIGINT) AS backward_gpu_time_ns,
       CAST(sum(s.optimizer_gpu_time_ns) AS BIGINT) AS optimizer_gpu_time_ns,
       CAST(sum(s.memcpy_count) AS BIGINT) AS memcpy_count, CAST(sum(s.memcpy_bytes) AS BIGINT) AS memcpy_bytes,
       CAST(sum(s.memcpy_ns) AS BIGINT) AS memcpy_ns, CAST(sum(s.memset_count) AS BIGINT) AS memset_count,
       CAST(sum(s.memset_bytes) AS BIGINT) AS memset_bytes, CAST(sum(s.memset_ns) AS BIGINT) AS memset_ns,
       CAST(sum(s.gpu_ops) AS BIGINT) AS gpu_ops
FROM layer_summary s
LEFT JOIN names n ON n.trace_id = s.trace_id AND n.layer IS NOT DISTINCT FROM s.layer
GROUP BY s.trace_id, s.layer
ORDER BY s.trace_id, gpu_time_ns DESC
