-- layer_macs: analytic MACs of each annotated module beside its measured GPU time and, where ncu ran, its
-- measured FMA + tensor MACs.  One row per (capture, timeline trace, layer).
-- Inputs:  layer_shapes (tracepipe capture's layer_shapes.json), nvtx_ranges (calls), layer_summary (kernels),
--          ncu_kernels, ncu_kernel_metrics (ncu with --nvtx, one forward)
-- Join rule: a capture folder's traces have trace ids `<capture_id>.<file stem>` (pipeline.store.trace_id_for),
--          so a trace's capture is its id without the last '.'-part; `layer` is the exact range text.
-- Output, one row per capture, timeline trace and layer:
--   capture_id              VARCHAR: the capture
--   layer                   VARCHAR: the module's range text
--   module_type             VARCHAR: the module's class
--   calls_per_forward       BIGINT: calls of the module in one forward
--   analytic_macs           BIGINT MACs: own MACs of one forward: the sum over its calls; NULL = type not analysed
--   analytic_macs_inclusive BIGINT MACs: with everything inside it
--   macs_complete           BOOLEAN: false: a lower bound (a module inside it not analysed)
--   trace_id                VARCHAR: the nsys / chrome trace; NULL when the capture has none
--   forwards                DOUBLE: range calls / calls_per_forward
--   kernels                 BIGINT: kernels whose innermost range is this layer, all forwards
--   gpu_time_ns             BIGINT ns: their summed duration
--   gpu_time_per_forward_ns DOUBLE ns: gpu_time_ns / forwards
--   analytic_macs_per_s     DOUBLE MAC/s: analytic_macs * forwards / GPU time
--   ncu_trace_id            VARCHAR: the ncu trace of the capture; NULL without one
--   ncu_launches            BIGINT: its launches in this layer
--   measured_fma_inst       DOUBLE instructions: ncu's FMA thread instructions, per forward
--   measured_tensor_macs    DOUBLE MACs: ncu's tensor-core MACs, per forward
--   measured_macs           DOUBLE MACs: measured_fma_inst + measured_tensor_macs (ncu profiles one forward; a
--                             --launch-count cut short leaves later layers low or NULL)
--   measured_vs_analytic    DOUBLE: measured_macs / analytic_macs: > 1 where kernels do extra work such as padding, < 1
--                             where a kernel's FMAs are not counted (a tensor type whose counter was not collected)
-- Kernels count under their innermost range only, as in layer_summary: a container's own row (layer1.0) holds
-- just the kernels its own forward launched (residual add), matching its own analytic_macs, not the inclusive.
WITH shapes AS (
    SELECT capture_id, layer, any_value(module_type) AS module_type, count(*) AS calls_per_forward,
           CAST(sum(macs) AS BIGINT) AS analytic_macs, CAST(sum(macs_inclusive) AS BIGINT) AS analytic_macs_inclusive,
           bool_and(macs_complete) AS macs_complete
    FROM layer_shapes GROUP BY capture_id, layer
), calls AS (      -- every range call, also of layers that launch no kernel of their own
    SELECT regexp_replace(trace_id, '\.[^.]*$', '') AS capture_id, trace_id, text AS layer, count(*) AS calls
    FROM nvtx_ranges WHERE source IS DISTINCT FROM 'gpu_user_annotation' GROUP BY ALL
), timeline AS (
    SELECT c.capture_id, c.trace_id, c.layer, c.calls, coalesce(k.kernels, 0) AS kernels,
           coalesce(k.gpu_time_ns, 0) AS gpu_time_ns
    FROM calls c
    LEFT JOIN (SELECT trace_id, layer, CAST(sum(kernels) AS BIGINT) AS kernels,
                      CAST(sum(gpu_time_ns) AS BIGINT) AS gpu_time_ns
               FROM layer_summary WHERE layer IS NOT NULL GROUP BY ALL) k USING (trace_id, layer)
), ncu AS (
    SELECT regexp_replace(k.trace_id, '\.[^.]*$', '') AS capture_id, k.trace_id AS ncu_trace_id,
           regexp_extract(k.nvtx_push_pop, '[^/]+$') AS layer, count(*) AS ncu_launches,
           sum(m.fma_inst) AS measured_fma_inst, sum(m.tensor_macs) AS measured_tensor_macs,
           sum(m.macs) AS measured_macs
    FROM ncu_kernels k LEFT JOIN ncu_kernel_metrics m USING (trace_id, launch_id)
    WHERE k.nvtx_push_pop IS NOT NULL GROUP BY ALL
)
SELECT s.capture_id, s.layer, s.module_type, s.calls_per_forward, s.analytic_macs, s.analytic_macs_inclusive,
       s.macs_complete, t.trace_id, t.calls / s.calls_per_forward AS forwards, t.kernels, t.gpu_time_ns,
       t.gpu_time_ns * s.calls_per_forward / t.calls AS gpu_time_per_forward_ns,
       s.analytic_macs * (t.calls / s.calls_per_forward) / nullif(t.gpu_time_ns, 0) * 1e9 AS analytic_macs_per_s,
       n.ncu_trace_id, n.ncu_launches, n.measured_fma_inst, n.measured_tensor_macs, n.measured_macs,
       n.measured_macs / nullif(s.analytic_macs, 0) AS measured_vs_analytic
FROM shapes s
LEFT JOIN timeline t ON t.capture_id = s.capture_id AND t.layer = s.layer
LEFT JOIN ncu n ON n.capture_id = s.capture_id AND n.layer = s.layer
ORDER BY s.capture_id, t.trace_id, s.analytic_macs DESC NULLS LAST, s.layer
