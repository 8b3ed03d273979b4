-- layer_diff_side: one side of `tracepipe diff`: per trace, layer path and pass, the figures two runs compare.
-- Inputs:  layer_summary, layer_macs
-- Macros:  step_folded
-- Output, one row per trace, layer path and pass:
--   trace_id    VARCHAR: the trace
--   path        VARCHAR: the layer path, its leading numbered step written `*` (step_folded: `ProfilerStep#*/model/fc`
--                 sums every step's fc); NULL = kernels launched outside every range
--   layer       VARCHAR: the innermost range's text (a step's, folded the same way)
--   pass        VARCHAR: 'all' (every GPU op of the path) | 'forward' | 'backward' | 'optimizer' (training traces only,
--                 each where it has kernels)
--   calls       BIGINT: range instances
--   kernels     BIGINT: kernels of the row
--   gpu_time_ns BIGINT ns: their summed duration
--   macs        BIGINT MACs: analytic MACs of the row's kernels: the module's MACs per call x calls; NULL = not
--                 analysed or no layer shapes (on the 'all' row of an inference trace and the 'forward' row of a
--                 training trace only)
-- Rule: layer_summary's per-pass columns unpivoted, so two runs compare pass by pass where both trained; a layer's
-- rows of every numbered step summed (two runs of one model record different steps: `ProfilerStep#1..3` against
-- `#11..13` compared nothing, 30 paths only in A and 30 only in B).
-- Run per side by pipeline/report/diff.py over a normalized folder or an analysis folder's Parquet.
WITH training AS (
    SELECT trace_id FROM layer_summary
    GROUP BY trace_id HAVING sum(backward_kernels) + sum(optimizer_kernels) > 0
), macs AS (       -- layer_macs has one row per ncu trace of the capture: the analytic count is the same in each
    SELECT trace_id, layer, any_value(analytic_macs / calls_per_forward) AS macs_per_call
    FROM layer_macs WHERE analytic_macs > 0 AND calls_per_forward > 0 GROUP BY trace_id, layer
), passes AS (
    SELECT s.trace_id, s.path, s.layer, 'all' AS pass, s.calls, s.kernels, s.gpu_time_ns,
           t.trace_id IS NOT NULL AS is_training
    FROM layer_summary s LEFT JOIN training t USING (trace_id)
    UNION ALL
    SELECT s.trace_id, s.path, s.layer, p.pass, s.calls,
           CASE p.pass WHEN 'forward' THEN s.forward_kernels WHEN 'backward' THEN s.backward_kernels
                       ELSE s.optimizer_kernels END,
           CASE p.pass WHEN 'forward' THEN s.forward_gpu_time_ns WHEN 'backward' THEN s.backward_gpu_time_ns
                       ELSE s.optimizer_gpu_time_ns END,
           TRUE
    FROM layer_summary s
    JOIN training t USING (trace_id)
    CROSS JOIN (VALUES ('forward'), ('backward'), ('optimizer')) p(pass)
)
SELECT r.trace_id, step_folded(r.path) AS path, step_folded(r.layer) AS layer, r.pass,
       CAST(sum(r.calls) AS BIGINT) AS calls, CAST(sum(r.kernels) AS BIGINT) AS kernels,
       CAST(sum(r.gpu_time_ns) AS BIGINT) AS gpu_time_ns,
       CAST(sum(CASE WHEN r.pass = (CASE WHEN r.is_training THEN 'forward' ELSE 'all' END)
                     THEN round(m.macs_per_call * r.calls) END) AS BIGINT) AS macs
FROM passes r
LEFT JOIN macs m ON m.trace_id = r.trace_id AND m.layer = r.layer
WHERE r.pass = 'all' OR r.kernels > 0
GROUP BY r.trace_id, step_folded(r.path), step_folded(r.layer), r.pass
ORDER BY r.trace_id, path, r.pass
