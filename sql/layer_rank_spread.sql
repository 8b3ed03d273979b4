-- layer_rank_spread: per job and layer path, how unevenly its GPU time is spread across the job's ranks.
-- Inputs:  rank_layer_time, rank_jobs (which traces are ranks of one job)
-- Output, one row per job and layer path:
--   job                VARCHAR: the job (rank_jobs.job)
--   path               VARCHAR: the layer path; NULL = outside every range
--   layer              VARCHAR: the innermost range's text
--   depth              BIGINT: 0 = outermost
--   ranks              BIGINT: traces of the job that ran the path
--   min_gpu_time_ns    BIGINT ns: the least GPU time of a rank
--   median_gpu_time_ns DOUBLE ns: the median over ranks (the mean of the two middle ones for an even count)
--   max_gpu_time_ns    BIGINT ns: the most GPU time of a rank
--   mean_gpu_time_ns   DOUBLE ns: the mean over ranks
--   stddev_gpu_time_ns DOUBLE ns: the population standard deviation over ranks
--   max_over_median    DOUBLE: max / median: 1.0 = perfectly balanced; NULL when the median is 0
--   max_minus_min_ns   BIGINT ns: max - min
--   fastest_rank       INTEGER: the rank with the least GPU time (trace_meta.rank; NULL when unknown)
--   slowest_rank       INTEGER: the rank with the most
-- A path a rank never ran is left out of that path's statistics (see ranks), not counted as 0.  Traces of no
-- job (rank_jobs: unrelated traces that happen to carry rank numbers) are never compared.
SELECT j.job, path, any_value(layer) AS layer, any_value(depth) AS depth, count(*) AS ranks,
       min(gpu_time_ns) AS min_gpu_time_ns, median(gpu_time_ns) AS median_gpu_time_ns,
       max(gpu_time_ns) AS max_gpu_time_ns, avg(gpu_time_ns) AS mean_gpu_time_ns,
       stddev_pop(gpu_time_ns) AS stddev_gpu_time_ns,
       max(gpu_time_ns) / nullif(median(gpu_time_ns), 0) AS max_over_median,
       max(gpu_time_ns) - min(gpu_time_ns) AS max_minus_min_ns,
       arg_min(rank, gpu_time_ns) AS fastest_rank, arg_max(rank, gpu_time_ns) AS slowest_rank
FROM rank_layer_time
JOIN (SELECT trace_id, job FROM rank_jobs) j USING (trace_id)
GROUP BY j.job, path
ORDER BY max_minus_min_ns DESC, j.job, path
