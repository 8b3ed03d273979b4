-- layer_kernel_summary: per layer path and kernel launch shape, what the report's kernel table shows: duration
-- statistics, waves and tail, estimated occupancy and, where ncu ran, ncu's measured achieved occupancy.
-- analyze: spills (its memory goes to aggregates and their medians: on big inputs it runs under 3/4 of DuckDB's
--          limit; 10M kernels: 6.8 -> 6.4 s, 1,984 -> 1,593 MB: docs/benchmarks.md, spill_share_44.txt)
-- Inputs:  kernel_layers, kernel_occupancy, kernel_waves, ncu_kernel_match, ncu_kernel_metrics
-- Output, one row per trace, path, short_name, grid and block:
--   trace_id                      VARCHAR: the trace
--   path                          VARCHAR: the layer path; NULL = outside every range
--   layer                         VARCHAR: the innermost range's text
--   short_name                    VARCHAR: the name without template arguments and parameters (nsys shortName)
--   grid                          VARCHAR blocks: 'x×y×z'
--   block                         VARCHAR threads: 'x×y×z'
--   launches                      BIGINT: kernel launches
--   gpu_time_ns                   BIGINT ns: their summed duration
--   share_pct                     DOUBLE %: of the trace's kernel time
--   mean_ns                       DOUBLE ns: mean duration
--   med_ns                        DOUBLE ns: median duration
--   min_ns                        BIGINT ns: shortest
--   max_ns                        BIGINT ns: longest
--   stddev_ns                     DOUBLE ns: sample standard deviation (n - 1, as nsys; NULL for one launch; from exact
--                                   integer sums)
--   first_start_ns                BIGINT ns, GPU clock: the first launch's start
--   threads                       DOUBLE threads: threads per launch (mean)
--   regs                          INTEGER registers: registers per thread
--   theoretical_occupancy_pct     DOUBLE %: kernel_occupancy's occupancy-calculator estimate (mean)
--   limiter                       VARCHAR: the most common known limiter; ties: alphabetically first
--   est_achieved_occupancy_pct    DOUBLE %: kernel_waves' estimate capped by the blocks a launch has per SM (mean)
--   waves_per_sm                  DOUBLE waves: mean of blocks / (SMs x resident blocks)
--   waves                         BIGINT waves: most dispatch rounds of a launch
--   tail_fill_pct                 DOUBLE %: mean over launches of the last wave's fill (100 = no partial last wave)
--   ncu_launches                  BIGINT: launches with an ncu measurement
--   ncu_achieved_occupancy_pct    DOUBLE %: mean of ncu's sm__warps_active.avg.pct_of_peak_sustained_active over them
--   ncu_theoretical_occupancy_pct DOUBLE %: ncu's own theoretical occupancy (mean)
-- ncu rule: a timeline kernel's measurement is the ncu launch ncu_kernel_match pairs it with, from an ncu trace of
-- the same capture (trace id without its last '.'-part, as layer_macs pairs them); several ncu traces of one
-- capture (raw and details pages) are averaged.  No ncu run of the capture: the ncu columns are NULL.
-- Means of DOUBLE columns are exact sums over DECIMAL(38, 18) (each value rounded once, at 1e-18), divided once:
-- the same trace gives the same bits in any folder and any thread split, with no per-group list or sort (the
-- ordered float sum such a list allows does not fit big traces: docs/benchmarks.md).
-- Plan: two aggregates over the kernels, one joining kernel_occupancy, the other kernel_waves, joined per group at
-- the end: one big hash table each rather than both at once, and the limiter counted per group and limiter in the
-- first, not by mode(), which DuckDB computes by reading its input twice (docs/benchmarks.md,
-- analyze_10m_memory_s33.txt).
WITH ncu AS (
    SELECT m.trace_id, m.kernel_id, avg(x.achieved_occupancy_pct ORDER BY m.ncu_trace_id) AS achieved_pct,
           avg(x.theoretical_occupancy_pct ORDER BY m.ncu_trace_id) AS theoretical_pct
    FROM ncu_kernel_match m
    JOIN ncu_kernel_metrics x ON x.trace_id = m.ncu_trace_id AND x.launch_id = m.launch_id
    WHERE regexp_replace(m.ncu_trace_id, '\.[^.]*$', '') = regexp_replace(m.trace_id, '\.[^.]*$', '')
      AND x.achieved_occupancy_pct IS NOT NULL
    GROUP BY ALL
),
k AS NOT MATERIALIZED (   -- each kernel with its group's key, read by the two aggregates below (not held)
    SELECT trace_id, kernel_id, path, layer, coalesce(short_name, name) AS short_name,
           concat_ws('×', grid_x, grid_y, grid_z) AS grid, concat_ws('×', block_x, block_y, block_z) AS block,
           duration_ns, start_ns, grid_x::HUGEINT * grid_y * grid_z * block_x * block_y * block_z AS threads,
           registers_per_thread
    FROM kernel_layers
),
occ AS (   -- per group and limiter: launches and theoretical occupancy sums
    SELECT k.trace_id, k.path, k.short_name, k.grid, k.block, o.limiter, count(*) AS n,
           sum(o.theoretical_occupancy_pct::DECIMAL(38, 18)) AS theoretical_sum,
           count(o.theoretical_occupancy_pct) AS theoretical_n
    FROM k LEFT JOIN kernel_occupancy o USING (trace_id, kernel_id)
    GROUP BY ALL
),
occ_group AS (
    SELECT trace_id, path, short_name, grid, block,
           first(limiter ORDER BY n DESC, limiter) FILTER (limiter IS NOT NULL) AS limiter,
           sum(theoretical_sum)::DOUBLE / nullif(sum(theoretical_n), 0) AS theoretical_occupancy_pct
    FROM occ GROUP BY ALL
),
launches AS (
    SELECT k.trace_id, k.path, any_value(k.layer) AS layer, k.short_name, k.grid, k.block, count(*) AS launches,
           CAST(sum(k.duration_ns) AS BIGINT) AS gpu_time_ns,
           avg(k.duration_ns) AS mean_ns, median(k.duration_ns) AS med_ns, min(k.duration_ns) AS min_ns,
           max(k.duration_ns) AS max_ns,
           sqrt((count(k.duration_ns)::HUGEINT * sum(k.duration_ns::HUGEINT * k.duration_ns)
                 - sum(k.duration_ns::HUGEINT) * sum(k.duration_ns))::DOUBLE
                / nullif(count(k.duration_ns) * (count(k.duration_ns) - 1), 0)) AS stddev_ns,
           min(k.start_ns) AS first_start_ns,
           avg(k.threads)::DOUBLE AS threads, max(k.registers_per_thread) AS regs,
           max(w.waves) AS waves, count(n.achieved_pct) AS ncu_launches,
           sum(w.est_achieved_occupancy_pct::DECIMAL(38, 18))::DOUBLE / nullif(count(w.est_achieved_occupancy_pct), 0) AS est_achieved_occupancy_pct,
           sum(w.waves_per_sm::DECIMAL(38, 18))::DOUBLE / nullif(count(w.waves_per_sm), 0) AS waves_per_sm,
           sum(w.tail_wave_utilization::DECIMAL(38, 18))::DOUBLE / nullif(count(w.tail_wave_utilization), 0) AS tail_fill,
           sum(n.achieved_pct::DECIMAL(38, 18))::DOUBLE / nullif(count(n.achieved_pct), 0) AS ncu_achieved_occupancy_pct,
           sum(n.theoretical_pct::DECIMAL(38, 18))::DOUBLE / nullif(count(n.theoretical_pct), 0) AS ncu_theoretical_occupancy_pct
    FROM k
    LEFT JOIN kernel_waves w USING (trace_id, kernel_id)
    LEFT JOIN ncu n USING (trace_id, kernel_id)
    GROUP BY k.trace_id, k.path, k.short_name, k.grid, k.block
)
SELECT l.trace_id, l.path, l.layer, l.short_name, l.grid, l.block, l.launches, l.gpu_time_ns,
       100.0 * l.gpu_time_ns / nullif(sum(l.gpu_time_ns) OVER (PARTITION BY l.trace_id), 0) AS share_pct,
       l.mean_ns, l.med_ns, l.min_ns, l.max_ns, l.stddev_ns, l.first_start_ns, l.threads, l.regs,
       o.theoretical_occupancy_pct, o.limiter, l.est_achieved_occupancy_pct, l.waves_per_sm, l.waves,
       100.0 * l.tail_fill AS tail_fill_pct, l.ncu_launches, l.ncu_achieved_occupancy_pct, l.ncu_theoretical_occupancy_pct
FROM launches l
JOIN occ_group o
  ON o.trace_id = l.trace_id AND o.path IS NOT DISTINCT FROM l.path AND o.short_name IS NOT DISTINCT FROM l.short_name
 AND o.grid = l.grid AND o.block = l.block
ORDER BY l.trace_id, sum(l.gpu_time_ns) OVER (PARTITION BY l.trace_id, l.path) DESC, l.path, l.gpu_time_ns DESC
