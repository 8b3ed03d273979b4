-- layer_summary: per-layer GPU rollup, one row per trace and range path (plus one for work outside any range).
-- Inputs:  gpu_op_layers, kernel_layers, nvtx_paths, api_calls
-- Output, one row per trace and range path (plus one for work outside every range):
--   trace_id              VARCHAR: the trace
--   path                  VARCHAR: the range texts outermost -> innermost joined by '/' (a '/' inside a text written
--                           '∕': path_level); NULL = launched outside every range
--   layer                 VARCHAR: the innermost range's text; NULL = outside every range
--   depth                 BIGINT: 0 = outermost
--   calls                 BIGINT: range instances with this path, not counting those made while a CUDA graph was being
--                           captured
--   kernels               BIGINT: kernels attributed to the path as innermost
--   launches_per_call     DOUBLE: kernels / calls
--   gpu_time_ns           BIGINT ns: their summed duration
--   mean_ns               DOUBLE ns: mean kernel duration
--   min_ns                BIGINT ns: shortest kernel
--   max_ns                BIGINT ns: longest kernel
--   share_pct             DOUBLE %: of the trace's total kernel time
--   first_start_ns        BIGINT ns, GPU clock: the first kernel's start
--   last_start_ns         BIGINT ns, GPU clock: the last kernel's start
--   distinct_kernels      BIGINT: distinct kernel short names
--   kernel_names          VARCHAR: the distinct short names, by total time
--   forward_kernels       BIGINT: kernels of the forward pass
--   backward_kernels      BIGINT: kernels of the backward pass
--   optimizer_kernels     BIGINT: kernels of optimizer steps
--   no_pass_kernels       BIGINT: kernels of none of the three (launched outside every range, neither backward nor
--                           optimizer): the four counts add up to `kernels`
--   forward_gpu_time_ns   BIGINT ns: their summed duration
--   backward_gpu_time_ns  BIGINT ns: their summed duration
--   optimizer_gpu_time_ns BIGINT ns: their summed duration
--   no_pass_gpu_time_ns   BIGINT ns: their summed duration: the four add up to `gpu_time_ns`
--   memcpy_count          BIGINT: copies attributed by the same rule as kernels
--   memcpy_bytes          BIGINT bytes: copied
--   memcpy_ns             BIGINT ns: their GPU time
--   memset_count          BIGINT: memsets
--   memset_bytes          BIGINT bytes: set
--   memset_ns             BIGINT ns: their GPU time
--   gpu_ops               BIGINT: kernels + memcpy + memset: what nsys's nvtx_gpu_proj_sum counts per range
-- Pass is a column split, not a row split: one row per path keeps `calls` and `launches_per_call` per module.
-- Kernels count under their innermost range only, so the rows of a trace add up to its total kernel time.
WITH per_path AS (
    SELECT trace_id, path, any_value(layer) AS layer, any_value(depth) AS depth,
           count(*) FILTER (k) AS kernels, CAST(coalesce(sum(duration_ns) FILTER (k), 0) AS BIGINT) AS gpu_time_ns,
           avg(duration_ns) FILTER (k) AS mean_ns, min(duration_ns) FILTER (k) AS min_ns,
           max(duration_ns) FILTER (k) AS max_ns,
           min(start_ns) FILTER (k) AS first_start_ns, max(start_ns) FILTER (k) AS last_start_ns,
           count(DISTINCT name) FILTER (k) AS distinct_kernels,
           count(*) FILTER (k AND pass = 'forward') AS forward_kernels,
           count(*) FILTER (k AND pass = 'backward') AS backward_kernels,
           count(*) FILTER (k AND pass = 'optimizer') AS optimizer_kernels,
           count(*) FILTER (k AND pass IS NULL) AS no_pass_kernels,
           CAST(coalesce(sum(duration_ns) FILTER (k AND pass = 'forward'), 0) AS BIGINT) AS forward_gpu_time_ns,
           CAST(coalesce(sum(duration_ns) FILTER (k AND pass = 'backward'), 0) AS BIGINT) AS backward_gpu_time_ns,
           CAST(coalesce(sum(duration_ns) FILTER (k AND pass = 'optimizer'), 0) AS BIGINT) AS optimizer_gpu_time_ns,
           CAST(coalesce(sum(duration_ns) FILTER (k AND pass IS NULL), 0) AS BIGINT) AS no_pass_gpu_time_ns,
           count(*) FILTER (op_kind = 'memcpy') AS memcpy_count,
           CAST(coalesce(sum(bytes) FILTER (op_kind = 'memcpy'), 0) AS BIGINT) AS memcpy_bytes,
           CAST(coalesce(sum(duration_ns) FILTER (op_kind = 'memcpy'), 0) AS BIGINT) AS memcpy_ns,
           count(*) FILTER (op_kind = 'memset') AS memset_count,
           CAST(coalesce(sum(bytes) FILTER (op_kind = 'memset'), 0) AS BIGINT) AS memset_bytes,
           CAST(coalesce(sum(duration_ns) FILTER (op_kind = 'memset'), 0) AS BIGINT) AS memset_ns,
           count(*) AS gpu_ops
    FROM (SELECT *, op_kind = 'kernel' AS k FROM gpu_op_layers)
    GROUP BY trace_id, path
),
names AS (
    SELECT trace_id, path, string_agg(short_name, ', ' ORDER BY t DESC, short_name) AS kernel_names
    FROM (SELECT trace_id, path, coalesce(short_name, name) AS short_name, sum(duration_ns) AS t
          FROM kernel_layers GROUP BY ALL)
    GROUP BY trace_id, path
),
capture_windows AS (   -- cudaStreamBeginCapture .. the next cudaStreamEndCapture on the same thread
    SELECT trace_id, pid, tid, start_ns, end_ns
    FROM (
        SELECT trace_id, pid, tid, name, start_ns,
               lead(end_ns) OVER (PARTITION BY trace_id, pid, tid ORDER BY start_ns) AS end_ns
        FROM api_calls
        WHERE name LIKE 'cudaStreamBeginCapture%' OR name LIKE 'cudaStreamEndCapture%'
    )
    WHERE name LIKE 'cudaStreamBeginCapture%'
),
calls AS (
    SELECT n.trace_id, n.path, count(*) FILTER (w.start_ns IS NULL) AS calls
    FROM nvtx_paths n
    LEFT JOIN capture_windows w
      ON w.trace_id = n.trace_id AND w.pid IS NOT DISTINCT FROM n.pid AND w.tid = n.tid
     AND w.start_ns <= n.start_ns AND n.end_ns <= w.end_ns
    GROUP BY n.trace_id, n.path
)
SELECT p.trace_id, p.path, p.layer, p.depth, c.calls, p.kernels,
       p.kernels / nullif(c.calls, 0) AS launches_per_call,
       p.gpu_time_ns, p.mean_ns, p.min_ns, p.max_ns,
       100.0 * p.gpu_time_ns / nullif(sum(p.gpu_time_ns) OVER (PARTITION BY p.trace_id), 0) AS share_pct,
       p.first_start_ns, p.last_start_ns, p.distinct_kernels, n.kernel_names,
       p.forward_kernels, p.backward_kernels, p.optimizer_kernels, p.no_pass_kernels,
       p.forward_gpu_time_ns, p.backward_gpu_time_ns, p.optimizer_gpu_time_ns, p.no_pass_gpu_time_ns,
       p.memcpy_count, p.memcpy_bytes, p.memcpy_ns, p.memset_count, p.memset_bytes, p.memset_ns, p.gpu_ops
FROM per_path p
LEFT JOIN calls c ON c.trace_id = p.trace_id AND c.path IS NOT DISTINCT FROM p.path
LEFT JOIN names n ON n.trace_id = p.trace_id AND n.path IS NOT DISTINCT FROM p.path
ORDER BY p.trace_id, p.gpu_time_ns DESC
