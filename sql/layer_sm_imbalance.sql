-- layer_sm_imbalance: how evenly each layer's estimated work spreads over the SMs.
-- Inputs:  layer_sm_load
-- Output, one row per trace, device and layer path:
--   trace_id            VARCHAR: the trace
--   device_id           INTEGER: the GPU (CUDA device ordinal)
--   path                VARCHAR: the layer path ('step/conv1'); NULL = kernels launched outside every range
--   layer               VARCHAR: the innermost range's text
--   sm_count            INTEGER SMs: the device's
--   kernels             BIGINT: kernels of the layer
--   blocks              BIGINT blocks: total
--   thread_ns           DOUBLE ns: total thread-resident time
--   min_sm_blocks       BIGINT blocks: on the least loaded SM
--   max_sm_blocks       BIGINT blocks: on the most loaded SM
--   mean_sm_blocks      DOUBLE blocks: mean over SMs
--   min_sm_thread_ns    DOUBLE ns: thread-resident time of the least loaded SM
--   max_sm_thread_ns    DOUBLE ns: of the most loaded SM
--   mean_sm_thread_ns   DOUBLE ns: mean over SMs
--   min_sm_busy_ns      DOUBLE ns: busy time of the least busy SM
--   max_sm_busy_ns      DOUBLE ns: of the busiest SM
--   mean_sm_busy_ns     DOUBLE ns: mean over SMs
--   blocks_imbalance    DOUBLE: max / mean over SMs of blocks: 1.0 = perfectly even (sm_count / blocks for one kernel
--                         of fewer blocks than SMs)
--   thread_ns_imbalance DOUBLE: max / mean over SMs of thread_ns
--   busy_imbalance      DOUBLE: max / mean over SMs of busy_ns
--   idle_sms            BIGINT SMs: SMs with no block
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
