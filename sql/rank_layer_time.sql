-- rank_layer_time: GPU time per layer path per trace, i.e. per rank of a multi-GPU job; input of the cross-rank views.
-- Inputs:  layer_summary, trace_meta
-- Output, one row per trace and layer path:
--   trace_id    VARCHAR: the trace
--   rank        INTEGER: trace_meta.rank; NULL when unknown
--   local_rank  INTEGER: trace_meta.local_rank
--   host        VARCHAR: trace_meta.host
--   device_id   INTEGER: trace_meta.device_id: the rank's GPU
--   path        VARCHAR: the layer path; NULL = kernels launched outside every range
--   layer       VARCHAR: the innermost range's text
--   depth       BIGINT: 0 = outermost
--   calls       BIGINT: range instances with this path
--   kernels     BIGINT: kernels attributed to the path as innermost
--   gpu_time_ns BIGINT ns: their summed duration
--   share_pct   DOUBLE %: of the trace's total kernel time
-- One row set per trace; which traces are ranks of one job (and so compared by layer_rank_spread and
-- layer_stragglers) is rank_jobs' rule. Traces without kernels (ncu only) have no rows.
SELECT s.trace_id, m.rank, m.local_rank, m.host, m.device_id,
       s.path, s.layer, s.depth, s.calls, s.kernels, s.gpu_time_ns, s.share_pct
FROM layer_summary s
JOIN trace_meta m USING (trace_id)
ORDER BY s.path, m.rank, s.trace_id
