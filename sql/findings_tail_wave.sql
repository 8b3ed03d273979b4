-- findings_tail_wave: kernels whose grid needs two or more waves of resident blocks and whose last wave is under
-- half full: for one wave's time most of the GPU's block slots sit idle.
-- analyze: on request (findings has its rows; write it with `tracepipe analyze --view findings_tail_wave`)
-- Inputs:  kernel_layers, kernel_waves, finding_thresholds (tail_min_waves, tail_max_fill)
-- Output, one row per trace, layer path (a leading `ProfilerStep#N` folded to `ProfilerStep#*`) and kernel (short
-- name) with such launches:
--   trace_id, rule ('tail_wave'), path (NULL = outside every range), layer, pass (when its launches share one),
--   kernel, launches (those with a tail), gpu_time_ns (their time, ns), at_stake_ns (ns, below), measure
--   ('tail_fill'), value (the last wave's fill, slots used / slots, of the launch with the most at stake),
--   threshold (tail_max_fill), evidence, fix,
--   blocks, sm_count, resident_blocks_per_sm, slots (sm_count * resident: blocks one wave runs), waves,
--   waves_per_sm (blocks / slots), tail_wave_blocks (all of that launch), projected_device (kernel_waves': NULL
--   = the traced device)
-- Rule: a launch with waves >= tail_min_waves and tail_wave_utilization < tail_max_fill (kernel_waves: the
-- occupancy model's resident blocks per SM).  At stake per launch: duration * (waves - waves_per_sm) / waves,
-- the share of the launch's slot-time that its last wave leaves empty (every wave taking the same time, the
-- model of kernel_waves): what a grid of whole waves would not spend.  The fix is a grid of whole waves: the
-- batch or the tile so that blocks are a multiple of the slots, or fewer, larger blocks.
WITH th AS (
    SELECT max(value) FILTER (name = 'tail_min_waves') AS min_waves,
           max(value) FILTER (name = 'tail_max_fill') AS max_fill
    FROM finding_thresholds
),
tails AS (
    SELECT k.trace_id, regexp_replace(k.path, '^(ProfilerStep#|step#|step_)[0-9]+(/|$)', '\1*\2') AS path,
           regexp_replace(k.layer, '^(ProfilerStep#|step#|step_)[0-9]+$', '\1*') AS layer,
           k.pass,
           coalesce(k.short_name, k.name) AS kernel, w.kernel_id, w.duration_ns, w.blocks, w.sm_count,
           w.resident_blocks_per_sm, w.sm_count * w.resident_blocks_per_sm AS slots, w.waves, w.waves_per_sm,
           w.tail_wave_blocks, w.tail_wave_utilization, w.projected_device,
           -- d * (waves - blocks / slots) / waves = d * (waves * slots - blocks) / (waves * slots), as a DECIMAL per
           -- launch: the sum is the same in any order and thread split
           (w.duration_ns::HUGEINT * (w.waves * w.sm_count * w.resident_blocks_per_sm - w.blocks))::DECIMAL(38, 6)
               / (w.waves * w.sm_count * w.resident_blocks_per_sm) AS at_stake
    FROM kernel_waves w
    JOIN kernel_layers k USING (trace_id, kernel_id)
    CROSS JOIN th
    WHERE w.waves >= th.min_waves AND w.tail_wave_utilization < th.max_fill AND w.resident_blocks_per_sm > 0
),
ranked AS (  -- the launch the evidence quotes: the most at stake, ties to the first launched
    SELECT *, row_number() OVER (PARTITION BY trace_id, path, kernel ORDER BY at_stake DESC, kernel_id) = 1 AS shown
    FROM tails
)
SELECT trace_id, 'tail_wave' AS rule, path, any_value(layer) AS layer,
       CASE WHEN count(DISTINCT pass) = 1 THEN any_value(pass) END AS pass,
       kernel, count(*) AS launches, sum(duration_ns)::BIGINT AS gpu_time_ns,
       round(sum(at_stake))::BIGINT AS at_stake_ns,
       'tail_fill' AS measure, any_value(tail_wave_utilization) FILTER (shown) AS value,
       any_value(th.max_fill) AS threshold,
       printf('%d blocks, %d slots (%d SMs x %d): %d waves, the last %.1f %% full; %d launch(es), %s µs',
              any_value(blocks) FILTER (shown), any_value(slots) FILTER (shown), any_value(sm_count) FILTER (shown),
              any_value(resident_blocks_per_sm) FILTER (shown), any_value(waves) FILTER (shown),
              100.0 * any_value(tail_wave_utilization) FILTER (shown), count(*),
              format('{:,.1f}', sum(duration_ns) / 1e3)) AS evidence,
       printf('Whole waves: a multiple of %d blocks (batch size or tile), or fewer, larger blocks; '
              'cudnn.benchmark tries other tiles', any_value(slots) FILTER (shown)) AS fix,
       any_value(blocks) FILTER (shown) AS blocks, any_value(sm_count) FILTER (shown) AS sm_count,
       any_value(resident_blocks_per_sm) FILTER (shown) AS resident_blocks_per_sm,
       any_value(slots) FILTER (shown) AS slots, any_value(waves) FILTER (shown) AS waves,
       any_value(waves_per_sm) FILTER (shown) AS waves_per_sm,
       any_value(tail_wave_blocks) FILTER (shown) AS tail_wave_blocks, any_value(projected_device) AS projected_device
FROM ranked
CROSS JOIN th
GROUP BY trace_id, path, kernel
ORDER BY at_stake_ns DESC, trace_id, path, kernel
