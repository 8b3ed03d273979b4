-- kernel_sm_load: the estimated blocks, threads and warps each SM of the device runs for every kernel.
-- analyze: on request (one row per kernel and SM: write it with `tracepipe analyze --view kernel_sm_load`)
-- Inputs:  kernel_waves
-- Output, one row per kernel and SM:
--   trace_id  VARCHAR: the trace
--   kernel_id BIGINT: the kernel (kernels.kernel_id)
--   device_id INTEGER: the GPU (CUDA device ordinal)
--   sm_id     BIGINT: 0 .. sm_count-1, in dispatch order (not a physical SM id)
--   blocks    BIGINT blocks: assigned to that SM over the whole kernel
--   threads   BIGINT threads: assigned to that SM; NULL past 2^63
--   warps     BIGINT warps: assigned to that SM; NULL past 2^63
--   thread_ns DOUBLE ns: threads * block_time_ns: thread-resident time
--   busy_ns   DOUBLE ns: ceil(blocks / resident) * block_time_ns: time the SM holds at least one of the kernel's blocks
-- Model: round-robin dispatch, so SM i gets blocks // sm_count blocks plus one if i < blocks % sm_count
-- (1024 blocks on 132 SMs: SMs 0..99 run 8, SMs 100..131 run 7).  Closed form per SM, not per block.
-- threads / warps past 2^63 on one SM (only a grid near the largest legal one does that) are NULL, not an error.
-- This view has kernels x sm_count rows: query it for a few kernels; layer_sm_load aggregates without it.
SELECT w.trace_id, w.kernel_id, w.device_id, s.sm_id,
       w.full_blocks_per_sm + (s.sm_id < w.extra_block_sms)::BIGINT AS blocks,
       try_cast((w.full_blocks_per_sm + (s.sm_id < w.extra_block_sms)::BIGINT)::HUGEINT * w.threads_per_block
                AS BIGINT) AS threads,
       try_cast((w.full_blocks_per_sm + (s.sm_id < w.extra_block_sms)::BIGINT)::HUGEINT * w.warps_per_block
                AS BIGINT) AS warps,
       (w.full_blocks_per_sm + (s.sm_id < w.extra_block_sms)::BIGINT)::DOUBLE * w.threads_per_block * w.block_time_ns
           AS thread_ns,
       ((w.full_blocks_per_sm::HUGEINT + (s.sm_id < w.extra_block_sms)::BIGINT + w.dispatch_resident_blocks - 1)
        // w.dispatch_resident_blocks) * w.block_time_ns AS busy_ns
FROM kernel_waves w
CROSS JOIN LATERAL (SELECT unnest(range(w.sm_count::BIGINT)) AS sm_id) s
