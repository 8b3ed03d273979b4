-- findings_straggler_rank: per layer, a rank of a distributed job that is much slower than the job's median rank:
-- every other rank waits for it at the next collective.
-- analyze: on request (findings has its rows; write it with `tracepipe analyze --view findings_straggler_rank`)
-- Inputs:  rank_layer_time (GPU time per trace and path), rank_jobs (which traces are ranks of one job),
--          finding_thresholds (straggler_min_slowdown)
-- Output, one row per job and layer path (a leading `ProfilerStep#N` folded to `ProfilerStep#*`, each rank's
-- steps summed) that fires:
--   trace_id (the slowest rank's trace), rule ('straggler_rank'), path, layer, pass (NULL: all passes), kernel
--   (NULL: a whole layer), launches (the slowest rank's kernels on the path), gpu_time_ns (the slowest rank's GPU
--   time on the path, ns), at_stake_ns (slowest - median, ns: about what each other rank waits), measure
--   ('slowdown'), value (slowest / median), threshold (straggler_min_slowdown), evidence, fix, job, ranks,
--   slowest_rank, median_gpu_time_ns (ns)
-- Rule: as layer_stragglers (only ranks of one job, rank_jobs' rule; the median over the job's ranks that ran the
-- path, the mean of the two middle ones for an even count; ties to the lower rank), with the steps folded: a
-- path fires when its slowest rank takes at least straggler_min_slowdown times that median.
WITH th AS (
    SELECT max(value) FILTER (name = 'straggler_min_slowdown') AS min_slowdown FROM finding_thresholds
),
per_rank AS (
    SELECT j.job, t.trace_id, t.rank,
           regexp_replace(t.path, '^(ProfilerStep#|step#|step_)[0-9]+(/|$)', '\1*\2') AS path,
           any_value(regexp_replace(t.layer, '^(ProfilerStep#|step#|step_)[0-9]+$', '\1*')) AS layer,
           sum(t.kernels) AS kernels, sum(t.gpu_time_ns) AS gpu_time_ns
    FROM rank_layer_time t
    JOIN (SELECT trace_id, job FROM rank_jobs) j USING (trace_id)
    WHERE t.path IS NOT NULL
    GROUP BY ALL
),
ranked AS (
    SELECT *, row_number() OVER (PARTITION BY job, path ORDER BY gpu_time_ns DESC, rank, trace_id) AS pos,
           count(*) OVER (PARTITION BY job, path) AS ranks,
           median(gpu_time_ns) OVER (PARTITION BY job, path) AS median_ns
    FROM per_rank
)
SELECT r.trace_id, 'straggler_rank' AS rule, r.path, r.layer, NULL::VARCHAR AS pass, NULL::VARCHAR AS kernel,
       r.kernels::BIGINT AS launches, r.gpu_time_ns::BIGINT AS gpu_time_ns,
       round(r.gpu_time_ns - r.median_ns)::BIGINT AS at_stake_ns, 'slowdown' AS measure,
       r.gpu_time_ns / r.median_ns AS value, th.min_slowdown AS threshold,
       printf('rank %d takes %s µs, %.2fx the median %s µs of the job''s %d ranks', r.rank,
              format('{:,.1f}', r.gpu_time_ns / 1e3), r.gpu_time_ns / r.median_ns, format('{:,.1f}', r.median_ns / 1e3),
              r.ranks) AS evidence,
       printf('Rank %d lags here: compare its inputs (shard sizes, sequence lengths) and its GPU (clocks, '
              'temperature)', r.rank) AS fix,
       r.job, r.ranks, r.rank AS slowest_rank, r.median_ns AS median_gpu_time_ns
FROM ranked r
CROSS JOIN th
WHERE r.pos = 1 AND r.ranks >= 2 AND r.median_ns > 0 AND r.gpu_time_ns >= th.min_slowdown * r.median_ns
ORDER BY at_stake_ns DESC, r.job, r.path
