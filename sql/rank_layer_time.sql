-- rank_layer_time: GPU time per layer path per trace, i.e. per rank of a multi-GPU job; input of the cross-rank views.
-- Inputs:  layer_summary, trace_meta
-- Output:  trace_id, rank (trace_meta.rank, NULL when unknown), local_rank, host, device_id,
--          path (NULL = kernels launched outside every range), layer, depth, calls, kernels,
--          gpu_time_ns (sum of the durations of kernels attributed to the path as innermost, ns),
--          share_pct (of the trace's total kernel time, %)
-- Every trace of the normalized folder counts as one rank of one job: normalize one job per folder (an nsys
-- and a chrome trace of the same rank would count twice). Traces without kernels (ncu only) have no rows.
SELECT s.trace_id, m.rank, m.local_rank, m.host, m.device_id,
       s.path, s.layer, s.depth, s.calls, s.kernels, s.gpu_time_ns, s.share_pct
FROM layer_summary s
JOIN trace_meta m USING (trace_id)
ORDER BY s.path, m.rank, s.trace_id
