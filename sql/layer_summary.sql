-- layer_summary: per-layer GPU rollup, one row per trace and range path (plus one for kernels outside any range).
-- Inputs:  kernel_layers, nvtx_paths
-- Output:  trace_id, path, layer (innermost range text; NULL = launched outside every range), depth,
--          calls (range instances with this path), kernels (attributed to the path as innermost),
--          launches_per_call, gpu_time_ns, mean_ns, min_ns, max_ns (kernel durations, ns),
--          share_pct (of the trace's total kernel time, %), first_start_ns, last_start_ns (GPU clock, ns),
--          distinct_kernels, kernel_names (distinct short names, by total time)
-- Kernels count under their innermost range only, so the rows of a trace add up to its total kernel time.
WITH per_path AS (
    SELECT trace_id, path, any_value(layer) AS layer, any_value(depth) AS depth,
           count(*) AS kernels, CAST(sum(duration_ns) AS BIGINT) AS gpu_time_ns,
           avg(duration_ns) AS mean_ns, min(duration_ns) AS min_ns, max(duration_ns) AS max_ns,
           min(start_ns) AS first_start_ns, max(start_ns) AS last_start_ns,
           count(DISTINCT name) AS distinct_kernels
    FROM kernel_layers
    GROUP BY trace_id, path
),
names AS (
    SELECT trace_id, path, string_agg(short_name, ', ' ORDER BY t DESC, short_name) AS kernel_names
    FROM (SELECT trace_id, path, coalesce(short_name, name) AS short_name, sum(duration_ns) AS t
          FROM kernel_layers GROUP BY ALL)
    GROUP BY trace_id, path
),
calls AS (
    SELECT trace_id, path, count(*) AS calls FROM nvtx_paths GROUP BY trace_id, path
)
SELECT p.trace_id, p.path, p.layer, p.depth, c.calls, p.kernels,
       p.kernels / c.calls AS launches_per_call,
       p.gpu_time_ns, p.mean_ns, p.min_ns, p.max_ns,
       100.0 * p.gpu_time_ns / sum(p.gpu_time_ns) OVER (PARTITION BY p.trace_id) AS share_pct,
       p.first_start_ns, p.last_start_ns, p.distinct_kernels, n.kernel_names
FROM per_path p
LEFT JOIN calls c ON c.trace_id = p.trace_id AND c.path IS NOT DISTINCT FROM p.path
LEFT JOIN names n ON n.trace_id = p.trace_id AND n.path IS NOT DISTINCT FROM p.path
ORDER BY p.trace_id, p.gpu_time_ns DESC
