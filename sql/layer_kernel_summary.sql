-- layer_kernel_summary: per layer path and kernel launch shape, what the report's kernel table shows: duration
-- statistics, waves and tail, estimated occupancy and, where ncu ran, ncu's measured achieved occupancy.
-- Inputs:  kernel_layers, kernel_occupancy, kernel_waves, ncu_kernel_match, ncu_kernel_metrics
-- Output, one row per trace_id, path (NULL = outside every range), short_name, grid, block ('x×y×z'):
--   layer, launches, gpu_time_ns, share_pct (of the trace's kernel time, %), mean_ns, med_ns, min_ns, max_ns,
--   stddev_ns (sample standard deviation, n - 1, as nsys; NULL for one launch; from exact integer sums, so
--   runs agree to the bit) (ns), first_start_ns,
--   threads (threads per launch), regs (registers per thread), theoretical_occupancy_pct (kernel_occupancy's
--   occupancy-calculator estimate, %), limiter (most common), est_achieved_occupancy_pct (kernel_waves: the
--   estimate capped by the blocks a launch has per SM, %), waves_per_sm (mean of blocks / (SMs x resident blocks)),
--   waves (most dispatch rounds of a launch), tail_fill_pct (mean over launches of the last wave's fill,
--   tail_wave_blocks / (SMs x resident), %; 100 = no partial last wave),
--   ncu_launches (launches with an ncu measurement), ncu_achieved_occupancy_pct (mean of ncu's
--   sm__warps_active.avg.pct_of_peak_sustained_active over them, %), ncu_theoretical_occupancy_pct (ncu's own
--   theoretical occupancy, %).
-- ncu rule: a timeline kernel's measurement is the ncu launch ncu_kernel_match pairs it with, from an ncu trace of
-- the same capture (trace id without its last '.'-part, as layer_macs pairs them); several ncu traces of one
-- capture (raw and details pages) are averaged.  No ncu run of the capture: the ncu columns are NULL.
-- Means of DOUBLE columns are exact sums over DECIMAL(38, 18) (each value rounded once, at 1e-18), divided once:
-- the same trace gives the same bits in any folder and any thread split, with no per-group list or sort (the
-- list of 10M launches' values that an ordered float sum needed ran analyze of 10M kernels out of a 3 GB limit).
WITH ncu AS (
    SELECT m.trace_id, m.kernel_id, avg(x.achieved_occupancy_pct ORDER BY m.ncu_trace_id) AS achieved_pct,
           avg(x.theoretical_occupancy_pct ORDER BY m.ncu_trace_id) AS theoretical_pct
    FROM ncu_kernel_match m
    JOIN ncu_kernel_metrics x ON x.trace_id = m.ncu_trace_id AND x.launch_id = m.launch_id
    WHERE regexp_replace(m.ncu_trace_id, '\.[^.]*$', '') = regexp_replace(m.trace_id, '\.[^.]*$', '')
      AND x.achieved_occupancy_pct IS NOT NULL
    GROUP BY ALL
),
k AS (
    SELECT k.trace_id, k.kernel_id, k.path, k.layer, coalesce(k.short_name, k.name) AS short_name,
           concat_ws('×', k.grid_x, k.grid_y, k.grid_z) AS grid, concat_ws('×', k.block_x, k.block_y, k.block_z) AS block,
           k.duration_ns, k.start_ns, k.grid_x::HUGEINT * k.grid_y * k.grid_z * k.block_x * k.block_y * k.block_z AS threads,
           k.registers_per_thread, o.theoretical_occupancy_pct, o.limiter, w.est_achieved_occupancy_pct,
           w.waves_per_sm, w.waves, w.tail_wave_utilization, n.achieved_pct, n.theoretical_pct
    FROM kernel_layers k
    LEFT JOIN kernel_occupancy o USING (trace_id, kernel_id)
    LEFT JOIN kernel_waves w USING (trace_id, kernel_id)
    LEFT JOIN ncu n USING (trace_id, kernel_id)
)
SELECT trace_id, path, layer, short_name, grid, block, launches, gpu_time_ns,
       100.0 * gpu_time_ns / nullif(sum(gpu_time_ns) OVER (PARTITION BY trace_id), 0) AS share_pct,
       mean_ns, med_ns, min_ns, max_ns, stddev_ns, first_start_ns, threads, regs,
       theoretical_occupancy_pct, limiter, est_achieved_occupancy_pct, waves_per_sm, waves,
       100.0 * tail_fill AS tail_fill_pct, ncu_launches, ncu_achieved_occupancy_pct, ncu_theoretical_occupancy_pct
FROM (
    SELECT trace_id, path, any_value(layer) AS layer, short_name, grid, block, count(*) AS launches,
           CAST(sum(duration_ns) AS BIGINT) AS gpu_time_ns,
           avg(duration_ns) AS mean_ns, median(duration_ns) AS med_ns, min(duration_ns) AS min_ns,
           max(duration_ns) AS max_ns, sqrt((count(duration_ns)::HUGEINT * sum(duration_ns::HUGEINT * duration_ns) - sum(duration_ns::HUGEINT) * sum(duration_ns))::DOUBLE
                / nullif(count(duration_ns) * (count(duration_ns) - 1), 0)) AS stddev_ns, min(start_ns) AS first_start_ns,
           avg(threads)::DOUBLE AS threads, max(registers_per_thread) AS regs,
           mode(limiter) AS limiter, max(waves) AS waves, count(achieved_pct) AS ncu_launches,
           sum(theoretical_occupancy_pct::DECIMAL(38, 18))::DOUBLE / nullif(count(theoretical_occupancy_pct), 0) AS theoretical_occupancy_pct,
           sum(est_achieved_occupancy_pct::DECIMAL(38, 18))::DOUBLE / nullif(count(est_achieved_occupancy_pct), 0) AS est_achieved_occupancy_pct,
           sum(waves_per_sm::DECIMAL(38, 18))::DOUBLE / nullif(count(waves_per_sm), 0) AS waves_per_sm,
           sum(tail_wave_utilization::DECIMAL(38, 18))::DOUBLE / nullif(count(tail_wave_utilization), 0) AS tail_fill,
           sum(achieved_pct::DECIMAL(38, 18))::DOUBLE / nullif(count(achieved_pct), 0) AS ncu_achieved_occupancy_pct,
           sum(theoretical_pct::DECIMAL(38, 18))::DOUBLE / nullif(count(theoretical_pct), 0) AS ncu_theoretical_occupancy_pct
    FROM k
    GROUP BY trace_id, path, short_name, grid, block
)
ORDER BY trace_id, sum(gpu_time_ns) OVER (PARTITION BY trace_id, path) DESC, path, gpu_time_ns DESC
