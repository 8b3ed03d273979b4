-- layer_timeline: one row per range instance: its CPU span and the GPU span of the kernels it launched.
-- Inputs:  nvtx_paths, nvtx_ranges (parent_id), kernel_layers
-- Output, one row per range instance:
--   trace_id               VARCHAR: the trace
--   range_id               BIGINT: the range (nvtx_ranges.range_id)
--   path                   VARCHAR: its path: range texts outermost -> innermost joined by '/' (a '/' inside a text
--                            written '∕': path_level)
--   layer                  VARCHAR: its text
--   depth                  INTEGER: 0 = outermost
--   pid                    BIGINT: the range's process
--   tid                    BIGINT: the range's CPU thread
--   cpu_start_ns           BIGINT ns, CPU clock: the range's start
--   cpu_end_ns             BIGINT ns, CPU clock: its end
--   cpu_duration_ns        BIGINT ns: cpu_end_ns - cpu_start_ns
--   kernels                BIGINT: kernels launched inside it, its sub-ranges included
--   gpu_start_ns           BIGINT ns, GPU clock: the first of them's start
--   gpu_end_ns             BIGINT ns, GPU clock: the last end
--   gpu_span_ns            BIGINT ns: gpu_end_ns - gpu_start_ns
--   gpu_busy_ns            BIGINT ns: summed kernel durations
--   launch_latency_mean_ns DOUBLE ns: mean of kernel start minus launching call start
--   launch_latency_max_ns  BIGINT ns: largest of them
-- A range's kernels include those of the ranges nested in it (a `step` spans all its layers), found by
-- walking each innermost range that launched kernels up its parents once per nesting level.
WITH RECURSIVE up AS (   -- from the ranges kernels were launched in only: from every range the walk is quadratic
                          -- in the nesting (20,000 pushes never popped: ~200M rows, 69 s; from the 25 ranges that
                          -- hold launches, 22 s: the walk still takes a step per level, real_trace_sweep_s56.txt)
    SELECT DISTINCT trace_id, range_id AS ancestor_id, range_id FROM kernel_layers WHERE range_id IS NOT NULL
    UNION ALL
    SELECT up.trace_id, r.parent_id, up.range_id
    FROM up JOIN nvtx_ranges r ON r.trace_id = up.trace_id AND r.range_id = up.ancestor_id
    WHERE r.parent_id IS NOT NULL
),
per_range AS (
    SELECT up.trace_id, up.ancestor_id AS range_id, count(*) AS kernels,
           min(k.start_ns) AS gpu_start_ns, max(k.end_ns) AS gpu_end_ns,
           CAST(sum(k.duration_ns) AS BIGINT) AS gpu_busy_ns,
           avg(k.start_ns - k.launch_start_ns) AS launch_latency_mean_ns,
           max(k.start_ns - k.launch_start_ns) AS launch_latency_max_ns
    FROM kernel_layers k
    JOIN up ON up.trace_id = k.trace_id AND up.range_id = k.range_id
    GROUP BY ALL
)
SELECT p.trace_id, p.range_id, p.path, p.text AS layer, p.depth, p.pid, p.tid,
       p.start_ns AS cpu_start_ns, p.end_ns AS cpu_end_ns, p.duration_ns AS cpu_duration_ns,
       coalesce(r.kernels, 0) AS kernels, r.gpu_start_ns, r.gpu_end_ns,
       r.gpu_end_ns - r.gpu_start_ns AS gpu_span_ns, r.gpu_busy_ns,
       r.launch_latency_mean_ns, r.launch_latency_max_ns
FROM nvtx_paths p
LEFT JOIN per_range r USING (trace_id, range_id)
ORDER BY p.trace_id, p.start_ns, p.depth
