-- kernel_name_summary: GPU time per kernel name, the numbers of `nsys stats --report cuda_gpu_kern_sum`.
-- Inputs:  kernel_layers
-- Output, one row per trace and kernel name (the full demangled name, as nsys groups):
--   trace_id   VARCHAR: the trace
--   name       VARCHAR: the demangled kernel name
--   short_name VARCHAR: the name without template arguments and parameters (nsys shortName)
--   time_pct   DOUBLE %: share of the trace's summed kernel time
--   total_ns   BIGINT ns: summed duration
--   instances  BIGINT: launches
--   avg_ns     DOUBLE ns: mean duration
--   med_ns     DOUBLE ns: median duration (the mean of the two middle ones for an even count)
--   min_ns     BIGINT ns: shortest duration
--   max_ns     BIGINT ns: longest duration
--   stddev_ns  DOUBLE ns: sample standard deviation (n - 1); NULL for one instance, where nsys prints 0.0
--   layers     BIGINT: distinct innermost layer paths that launched it
--   top_path   VARCHAR: the path with the most of its time (of tied paths the first in text order)
-- Rule, as nsys's report defines them: Med is the median of the durations (the mean of the two middle ones
-- for an even count), StdDev the *sample* standard deviation (n - 1; NULL for one instance, where nsys
-- prints 0.0), computed from exact integer sums (n*sum(d^2) - sum(d)^2) so that every run gives the same
-- bits (stddev_samp's floating-point merge depends on how DuckDB's threads split the rows).
-- Durations are end - start of each kernel execution (CUPTI_ACTIVITY_KIND_KERNEL).
SELECT trace_id, name, any_value(coalesce(short_name, name)) AS short_name,
       100.0 * sum(duration_ns) / nullif(sum(sum(duration_ns)) OVER (PARTITION BY trace_id), 0) AS time_pct,
       CAST(sum(duration_ns) AS BIGINT) AS total_ns, count(*) AS instances,
       avg(duration_ns) AS avg_ns, median(duration_ns) AS med_ns, min(duration_ns) AS min_ns,
       max(duration_ns) AS max_ns, sqrt((count(duration_ns)::HUGEINT * sum(duration_ns::HUGEINT * duration_ns) - sum(duration_ns::HUGEINT) * sum(duration_ns))::DOUBLE
            / nullif(count(duration_ns) * (count(duration_ns) - 1), 0)) AS stddev_ns,
       count(DISTINCT path) AS layers, first(path ORDER BY path_ns DESC, path) AS top_path
FROM (SELECT *, sum(duration_ns) OVER (PARTITION BY trace_id, name, path) AS path_ns FROM kernel_layers)
GROUP BY trace_id, name
ORDER BY trace_id, total_ns DESC, name
