-- layer_sm_load: per NVTX layer, the estimated work each SM did, summed over the layer's kernels.
-- Inputs:  kernel_layers (path, layer of each kernel), kernel_waves (closed-form per-SM split)
-- Output, one row per trace, device, layer path and SM:
--   trace_id  VARCHAR: the trace
--   device_id INTEGER: the GPU (CUDA device ordinal)
--   path      VARCHAR: the layer path ('step/conv1'); NULL = kernels launched outside every range
--   layer     VARCHAR: the innermost range's text
--   sm_count  INTEGER SMs: the device's
--   sm_id     BIGINT: 0 .. sm_count-1, in dispatch order (not a physical SM id)
--   kernels   BIGINT: kernels of the layer
--   blocks    BIGINT blocks: assigned to that SM, summed over the layer's kernels
--   threads   BIGINT threads: assigned to that SM; NULL past 2^63
--   warps     BIGINT warps: assigned to that SM; NULL past 2^63
--   thread_ns DOUBLE ns: sum over kernels of threads on the SM * block_time_ns: thread-resident time
--   busy_ns   DOUBLE ns: sum over kernels of the time the SM held at least one of its blocks
-- Model (see kernel_sm_load): SM i runs blocks // sm_count blocks of each kernel plus one more if
-- i < blocks % sm_count; each round of resident blocks lasts block_time_ns = duration / rounds of the busiest SM.
-- Scalable: kernels are first reduced per layer to one "every SM" sum plus, for each distinct remainder r,
-- the sum of the extra block on SMs 0..r-1; a suffix sum over SM ids then expands to sm_count rows per layer,
-- so the cost is kernels + layers * sm_count, never kernels * sm_count.
-- Sums are HUGEINT inside; a per-SM count past 2^63 (several grids near the largest legal one in one layer)
-- is NULL rather than an error.  Kernels without a legal shape are not in kernel_waves, so not here.
-- Because every kernel's remainder is laid on the lowest SM ids, low ids look busier than real hardware
-- (which starts each kernel's dispatch wherever SMs are free): the per-layer spread is an upper bound.
WITH k AS (
    SELECT w.*, l.path, l.layer,
           (w.full_blocks_per_sm::HUGEINT + w.dispatch_resident_blocks - 1) // w.dispatch_resident_blocks AS base_rounds,
           (w.full_blocks_per_sm::HUGEINT + w.dispatch_resident_blocks) // w.dispatch_resident_blocks AS extra_rounds
    FROM kernel_waves w
    JOIN kernel_layers l USING (trace_id, kernel_id)
),
base AS (   -- what every SM of the device gets from the layer's kernels
    SELECT trace_id, device_id, path, any_value(layer) AS layer, sm_count, count(*) AS kernels,
           sum(full_blocks_per_sm) AS blocks,
           sum(full_blocks_per_sm::HUGEINT * threads_per_block) AS threads,
           sum(full_blocks_per_sm::HUGEINT * warps_per_block) AS warps,
           sum(full_blocks_per_sm::DOUBLE * threads_per_block * block_time_ns) AS thread_ns,
           sum(base_rounds * block_time_ns) AS busy_ns
    FROM k GROUP BY trace_id, device_id, path, sm_count
),
extra AS (  -- the one extra block of each kernel with blocks % sm_count = r, on SMs 0 .. r-1
    SELECT trace_id, device_id, path, sm_count, extra_block_sms - 1 AS last_sm,
           count(*) AS blocks, sum(threads_per_block) AS threads, sum(warps_per_block) AS warps,
           sum(threads_per_block * block_time_ns) AS thread_ns,
           sum((extra_rounds - base_rounds) * block_time_ns) AS busy_ns
    FROM k WHERE extra_block_sms > 0
    GROUP BY trace_id, device_id, path, sm_count, extra_block_sms
),
sms AS (
    SELECT b.*, unnest(range(b.sm_count::BIGINT)) AS sm_id FROM base b
),
per_sm AS (
    SELECT s.trace_id, s.device_id, s.path, s.layer, s.sm_count, s.sm_id, s.kernels,
           s.blocks AS b_blocks, s.threads AS b_threads, s.warps AS b_warps, s.thread_ns AS b_thread_ns,
           s.busy_ns AS b_busy_ns,
           -- suffix sum: SM i gets the extra block of every kernel whose last extra SM is >= i
           sum(coalesce(e.blocks, 0)) OVER suffix AS e_blocks,
           sum(coalesce(e.threads, 0)) OVER suffix AS e_threads,
           sum(coalesce(e.warps, 0)) OVER suffix AS e_warps,
           sum(coalesce(e.thread_ns, 0)) OVER suffix AS e_thread_ns,
           sum(coalesce(e.busy_ns, 0)) OVER suffix AS e_busy_ns
    FROM sms s
    LEFT JOIN extra e
      ON e.trace_id = s.trace_id AND e.device_id IS NOT DISTINCT FROM s.device_id
     AND e.path IS NOT DISTINCT FROM s.path AND e.sm_count = s.sm_count AND e.last_sm = s.sm_id
    WINDOW suffix AS (PARTITION BY s.trace_id, s.device_id, s.path, s.sm_count ORDER BY s.sm_id DESC
                      ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT trace_id, device_id, path, layer, sm_count, sm_id, kernels,
       try_cast(b_blocks + e_blocks AS BIGINT) AS blocks, try_cast(b_threads + e_threads AS BIGINT) AS threads,
       try_cast(b_warps + e_warps AS BIGINT) AS warps, b_thread_ns + e_thread_ns AS thread_ns, b_busy_ns + e_busy_ns AS busy_ns
FROM per_sm
