-- layer_name_summary: the per-layer rollup folded over paths: one row per trace and layer name
-- (e.g. every `relu` call, wherever it sits in the model).
-- Inputs:  layer_summary, kernel_layers
-- Output, one row per trace and layer name:
--   trace_id              VARCHAR: the trace
--   layer                 VARCHAR: the innermost range's text; NULL = outside every range
--   paths                 BIGINT: distinct paths with this layer
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
--   forward_kernels       BIGINT: kernels of the forward pass
--   backward_kernels      BIGINT: kernels of the backward pass
--   optimizer_kernels     BIGINT: kernels of optimizer steps
--   no_pass_kernels       BIGINT: kernels of none of the three: the four counts add up to `kernels`
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
       CAST(sum(s.no_pass_kernels) AS BIGINT) AS no_pass_kernels,
       CAST(sum(s.forward_gpu_time_ns) AS BIGINT) AS forward_gpu_time_ns,
       CAST(sum(s.backward_gpu_time_ns) AS BIGINT) AS backward_gpu_time_ns,
       CAST(sum(s.optimizer_gpu_time_ns) AS BIGINT) AS optimizer_gpu_time_ns,
       CAST(sum(s.no_pass_gpu_time_ns) AS BIGINT) AS no_pass_gpu_time_ns,
       CAST(sum(s.memcpy_count) AS BIGINT) AS memcpy_count, CAST(sum(s.memcpy_bytes) AS BIGINT) AS memcpy_bytes,
       CAST(sum(s.memcpy_ns) AS BIGINT) AS memcpy_ns, CAST(sum(s.memset_count) AS BIGINT) AS memset_count,
       CAST(sum(s.memset_bytes) AS BIGINT) AS memset_bytes, CAST(sum(s.memset_ns) AS BIGINT) AS memset_ns,
       CAST(sum(s.gpu_ops) AS BIGINT) AS gpu_ops
FROM layer_summary s
LEFT JOIN names n ON n.trace_id = s.trace_id AND n.layer IS NOT DISTINCT FROM s.layer
GROUP BY s.trace_id, s.layer
ORDER BY s.trace_id, gpu_time_ns DESC
