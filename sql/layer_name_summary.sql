-- layer_name_summary: the per-layer rollup folded over paths: one row per trace and layer name
-- (e.g. every `relu` call, wherever it sits in the model).
-- Inputs:  layer_summary, kernel_layers
-- Output:  trace_id, layer (NULL = outside every range), paths (distinct paths), calls, kernels,
--          launches_per_call, gpu_time_ns, mean_ns, min_ns, max_ns (ns), share_pct (%),
--          first_start_ns, last_start_ns (ns), distinct_kernels
WITH names AS (
    SELECT trace_id, layer, count(DISTINCT name) AS distinct_kernels FROM kernel_layers GROUP BY ALL
)
SELECT s.trace_id, s.layer, count(*) AS paths,
       CAST(sum(s.calls) AS BIGINT) AS calls, CAST(sum(s.kernels) AS BIGINT) AS kernels,
       sum(s.kernels) / sum(s.calls) AS launches_per_call, CAST(sum(s.gpu_time_ns) AS BIGINT) AS gpu_time_ns,
       sum(s.gpu_time_ns) / sum(s.kernels) AS mean_ns, min(s.min_ns) AS min_ns, max(s.max_ns) AS max_ns,
       sum(s.share_pct) AS share_pct, min(s.first_start_ns) AS first_start_ns,
       max(s.last_start_ns) AS last_start_ns, any_value(n.distinct_kernels) AS distinct_kernels
FROM layer_summary s
LEFT JOIN names n ON n.trace_id = s.trace_id AND n.layer IS NOT DISTINCT FROM s.layer
GROUP BY s.trace_id, s.layer
ORDER BY s.trace_id, gpu_time_ns DESC
