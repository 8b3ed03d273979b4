-- kernel_waves: how many waves of resident blocks each kernel needs, how full its last wave is, and the
-- closed-form per-SM block split that kernel_sm_load / layer_sm_load expand.
-- Inputs:  kernel_occupancy, kernel_geometry (duration), device_limits (max_threads_per_sm)
-- Output, one row per kernel with blocks and SMs:
--   trace_id                   VARCHAR: the trace
--   kernel_id                  BIGINT: the kernel (kernels.kernel_id)
--   device_id                  INTEGER: the GPU (CUDA device ordinal)
--   projected_device           VARCHAR: NULL = the traced device; else a `--device` projection (the durations stay the
--                                traced device's)
--   name                       VARCHAR: the demangled kernel name
--   duration_ns                BIGINT ns: the kernel's GPU time
--   blocks                     BIGINT blocks: gridDim product
--   threads_per_block          BIGINT threads: blockDim product
--   warps_per_block            BIGINT warps: whole warps a block takes
--   sm_count                   INTEGER SMs: the device's
--   resident_blocks_per_sm     BIGINT blocks: kernel_occupancy's
--   waves_per_sm               DOUBLE waves: blocks / (sm_count * resident_blocks_per_sm) (= ncu
--                                launch__waves_per_multiprocessor)
--   waves                      BIGINT waves: ceil of that: dispatch rounds of a full GPU
--   tail_wave_blocks           BIGINT blocks: blocks in the last wave
--   tail_wave_utilization      DOUBLE: tail_wave_blocks / (sm_count * resident)
--   wave_efficiency            DOUBLE: blocks / (waves * sm_count * resident): mean fill of the slots over all waves
--   blocks_per_sm              DOUBLE blocks: blocks / sm_count (= PyTorch profiler `blocks per SM`)
--   warps_per_sm               DOUBLE warps: blocks_per_sm * threads_per_block / warp_size (= profiler `warps per SM`)
--   est_achieved_occupancy_pct DOUBLE %: 100 * min(blocks_per_sm, resident) * threads_per_block / max_threads_per_sm (=
--                                profiler `est. achieved occupancy %`, which rounds it; except a kernel with more
--                                shared memory a block than the 48 KiB default, which Kineto's occupancy query prints
--                                as 0 %: it ignores the opt-in limit the kernel ran with)
--   full_blocks_per_sm         BIGINT blocks: blocks // sm_count
--   extra_block_sms            BIGINT SMs: blocks % sm_count: under round-robin dispatch SMs 0 .. extra_block_sms-1 get
--                                one block more
--   max_blocks_on_sm           BIGINT blocks: ceil(blocks / sm_count)
--   sm_waves_max               BIGINT: ceil(max_blocks_on_sm / resident): rounds the busiest SM runs
--   block_time_ns              DOUBLE ns: duration_ns / sm_waves_max: the model's time of one round of resident blocks
--   dispatch_resident_blocks   BIGINT blocks: resident_blocks_per_sm for the per-SM time split: 1 where it is 0 or NULL
-- Estimated, not measured: the dispatch order and equal block times. A resident count of 0 or NULL (the model
-- says the launch cannot fit, or a limit is unknown) counts as 1 for the per-SM time split.
-- Sums that can pass 2^63 (blocks + slots for the largest legal grid) are HUGEINT inside; every output fits
-- BIGINT or is a DOUBLE.  Kernels without blocks (kernel_geometry.launch_issue) or SMs are left out.
WITH w AS (
    SELECT o.trace_id, o.kernel_id, o.device_id, o.projected_device, o.name, g.duration_ns, o.blocks,
           o.threads_per_block,
           o.warps_per_block, o.sm_count, o.resident_blocks_per_sm, g.warp_size, d.max_threads_per_sm,
           o.sm_count::HUGEINT * o.resident_blocks_per_sm AS slots, o.blocks::HUGEINT AS hb,
           greatest(coalesce(o.resident_blocks_per_sm, 1), 1) AS r
    FROM kernel_occupancy o
    JOIN kernel_geometry g USING (trace_id, kernel_id)
    LEFT JOIN device_limits d ON d.trace_id = o.trace_id AND d.device_id = o.device_id
)
SELECT trace_id, kernel_id, device_id, projected_device, name, duration_ns, blocks, threads_per_block, warps_per_block,
       sm_count,
       resident_blocks_per_sm,
       blocks / nullif(slots, 0) AS waves_per_sm,
       ((hb + slots - 1) // nullif(slots, 0))::BIGINT AS waves,
       (hb - ((hb + slots - 1) // nullif(slots, 0) - 1) * slots)::BIGINT AS tail_wave_blocks,
       (hb - ((hb + slots - 1) // nullif(slots, 0) - 1) * slots) / nullif(slots, 0) AS tail_wave_utilization,
       blocks / nullif(((hb + slots - 1) // nullif(slots, 0)) * slots, 0) AS wave_efficiency,
       blocks / sm_count AS blocks_per_sm,
       blocks / sm_count * threads_per_block / warp_size AS warps_per_sm,
       100.0 * CASE WHEN resident_blocks_per_sm IS NOT NULL THEN least(blocks / sm_count, resident_blocks_per_sm) END
           * threads_per_block / max_threads_per_sm AS est_achieved_occupancy_pct,
       blocks // sm_count AS full_blocks_per_sm,
       blocks % sm_count AS extra_block_sms,
       ((hb + sm_count - 1) // sm_count)::BIGINT AS max_blocks_on_sm,
       (((hb + sm_count - 1) // sm_count + r - 1) // r)::BIGINT AS sm_waves_max,
       duration_ns / nullif(((hb + sm_count - 1) // sm_count + r - 1) // r, 0) AS block_time_ns,
       r AS dispatch_resident_blocks
FROM w
WHERE blocks > 0 AND sm_count > 0
