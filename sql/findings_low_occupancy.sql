-- findings_low_occupancy: kernels long enough to matter whose theoretical occupancy is low, with the resource that
-- limits it (registers, shared memory, block size, blocks per SM).
-- analyze: on request (findings has its rows; write it with `tracepipe analyze --view findings_low_occupancy`)
-- Inputs:  kernel_layers, kernel_occupancy, finding_thresholds (occupancy_max_pct, occupancy_min_mean_ns),
--          finding_kernel_classes (library_tiled, communication)
-- Output, one row per trace, layer path (a leading `ProfilerStep#N` folded to `ProfilerStep#*`), kernel (short
-- name) and limiter:
--   trace_id, rule ('low_occupancy'), path, layer, pass, kernel, launches, gpu_time_ns (ns), at_stake_ns (ns,
--   below), measure ('theoretical_occupancy_pct'), value (mean over the launches, %), threshold
--   (occupancy_max_pct, %), evidence, fix (by limiter), limiter (kernel_occupancy's: warps = the block size,
--   registers, shared_mem, blocks = the blocks-per-SM cap), resident_blocks_per_sm, threads_per_block,
--   registers_per_thread, smem_per_block_allocated_bytes (B), mean_ns (ns)
-- Rule: launches with theoretical_occupancy_pct < occupancy_max_pct (kernel_occupancy: the cuda_occupancy.h
-- model), grouped per layer, kernel and limiter; the group fires when its mean duration is at least
-- occupancy_min_mean_ns.  Left out: library GEMM / convolution / attention kernels (class library_tiled: their
-- tile in registers and shared memory is their occupancy, chosen on purpose) and collectives (class
-- communication: they wait on the interconnect).  At stake, an upper bound: a latency-bound kernel runs about in
-- proportion to its resident warps, so one at occupancy o below the threshold t could save duration * (1 - o / t).
WITH th AS (
    SELECT max(value) FILTER (name = 'occupancy_max_pct') AS max_pct,
           max(value) FILTER (name = 'occupancy_min_mean_ns') AS min_mean_ns
    FROM finding_thresholds
),
cls AS (
    SELECT max(pattern) FILTER (class = 'library_tiled') AS tiled,
           max(pattern) FILTER (class = 'communication') AS comm
    FROM finding_kernel_classes
),
names AS (
    SELECT n.name, regexp_matches(n.name, cls.tiled) OR regexp_matches(n.name, cls.comm) AS left_out
    FROM (SELECT DISTINCT name FROM kernel_occupancy) n, cls
),
low AS (
    SELECT k.trace_id, regexp_replace(k.path, '^(ProfilerStep#|step#|step_)[0-9]+(/|$)', '\1*\2') AS path,
           regexp_replace(k.layer, '^(ProfilerStep#|step#|step_)[0-9]+$', '\1*') AS layer,
           k.pass, coalesce(k.short_name, k.name) AS kernel, k.duration_ns, o.limiter,
           o.theoretical_occupancy_pct AS occ, o.resident_blocks_per_sm, o.threads_per_block, o.registers_per_thread,
           o.smem_per_block_allocated_bytes,
           -- as a DECIMAL per launch: the sum is the same in any order and thread split
           k.duration_ns * (1 - o.theoretical_occupancy_pct / th.max_pct)::DECIMAL(38, 9) AS at_stake
    FROM kernel_occupancy o
    JOIN names n USING (name)
    JOIN kernel_layers k USING (trace_id, kernel_id)
    CROSS JOIN th
    WHERE NOT n.left_out AND o.theoretical_occupancy_pct < th.max_pct
),
grouped AS (
    SELECT trace_id, path, any_value(layer) AS layer,
           CASE WHEN count(DISTINCT pass) = 1 THEN any_value(pass) END AS pass,
           kernel, limiter, count(*) AS launches, sum(duration_ns)::BIGINT AS gpu_time_ns,
           avg(duration_ns) AS mean_ns, avg(occ::DECIMAL(38, 9))::DOUBLE AS occ,
           sum(at_stake) AS at_stake,
           max(resident_blocks_per_sm) AS resident_blocks_per_sm, max(threads_per_block) AS threads_per_block,
           max(registers_per_thread) AS registers_per_thread,
           max(smem_per_block_allocated_bytes) AS smem_per_block_allocated_bytes
    FROM low
    GROUP BY trace_id, path, kernel, limiter
)
SELECT g.trace_id, 'low_occupancy' AS rule, g.path, g.layer, g.pass, g.kernel, g.launches, g.gpu_time_ns,
       round(g.at_stake)::BIGINT AS at_stake_ns,
       'theoretical_occupancy_pct' AS measure, g.occ AS value, th.max_pct AS threshold,
       printf('occupancy %.1f %% (%d blocks of %d threads an SM), limited by %s: %d registers/thread, '
              '%d B shared/block; '
              '%d launch(es), mean %s µs',
              g.occ, g.resident_blocks_per_sm, g.threads_per_block, coalesce(g.limiter, '?'), g.registers_per_thread,
              g.smem_per_block_allocated_bytes, g.launches, format('{:,.1f}', g.mean_ns / 1e3)) AS evidence,
       CASE g.limiter
           WHEN 'registers' THEN 'Fewer registers: __launch_bounds__ or -maxrregcount; Triton: a smaller BLOCK or more '
                                 'num_warps'
           WHEN 'shared_mem' THEN 'Less shared memory per block: smaller tiles or fewer pipeline stages'
           WHEN 'warps' THEN 'A block size whose warps divide the SM''s slots: 128 or 256 threads'
           WHEN 'blocks' THEN 'Bigger blocks (128+ threads): the per-SM block cap leaves warp slots empty'
           ELSE 'Check the launch in Nsight Compute''s occupancy section'
       END AS fix,
       g.limiter, g.resident_blocks_per_sm, g.threads_per_block, g.registers_per_thread,
       g.smem_per_block_allocated_bytes, g.mean_ns
FROM grouped g
CROSS JOIN th
WHERE g.mean_ns >= th.min_mean_ns
ORDER BY at_stake_ns DESC, g.trace_id, g.path, g.kernel
