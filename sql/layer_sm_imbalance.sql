-- layer_sm_imbalance: how evenly each layer's estimated work spreads over the SMs.
-- Inputs:  layer_sm_load
-- Output:  trace_id, device_id, path, layer, sm_count, kernels, blocks (total), thread_ns (total, ns),
--          min/max/mean_sm_blocks, min/max/mean_sm_thread_ns (ns), min/max/mean_sm_busy_ns (ns),
--          blocks_imbalance, thread_ns_imbalance, busy_imbalance (max over SMs / mean over SMs: 1.0 = perfectly
--          even; sm_count / blocks for a single kernel with fewer blocks than SMs), idle_sms (SMs with no block)
-- Estimated from the round-robin model of layer_sm_load (an upper bound on the spread; see there).
SELECT trace_id, device_id, path, any_value(layer) AS layer, sm_count, any_value(kernels) AS kernels,
       try_cast(sum(blocks) AS BIGINT) AS blocks, sum(thread_ns) AS thread_ns,
       min(blocks) AS min_sm_blocks, max(blocks) AS max_sm_blocks, avg(blocks) AS mean_sm_blocks,
       min(thread_ns) AS min_sm_thread_ns, max(thread_ns) AS max_sm_thread_ns, avg(thread_ns) AS mean_sm_thread_ns,
       min(busy_ns) AS min_sm_busy_ns, max(busy_ns) AS max_sm_busy_ns, avg(busy_ns) AS mean_sm_busy_ns,
       max(blocks) / nullif(avg(blocks), 0) AS blocks_imbalance,
       max(thread_ns) / nullif(avg(thread_ns), 0) AS thread_ns_imbalance,
       max(busy_ns) / nullif(avg(busy_ns), 0) AS busy_imbalance,
       count(*) FILTER (WHERE blocks = 0) AS idle_sms
FROM layer_sm_load
GROUP BY trace_id, device_id, path, sm_count
