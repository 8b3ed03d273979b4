-- layer_stragglers: per job and layer path, the slowest rank and how far it is behind the typical (median) rank.
-- Inputs:  rank_layer_time, rank_jobs (which traces are ranks of one job: ranks of unrelated runs are never compared)
-- Output, one row per job and layer path:
--   job                 VARCHAR: the job (rank_jobs.job)
--   path                VARCHAR: the layer path; NULL = outside every range
--   layer               VARCHAR: the innermost range's text
--   depth               BIGINT: 0 = outermost
--   ranks               BIGINT: traces of the job that ran the path
--   slowest_trace_id    VARCHAR: the slowest rank's trace (ties: the lower rank, then trace id)
--   slowest_rank        INTEGER: its rank (trace_meta.rank)
--   slowest_host        VARCHAR: its host
--   slowest_gpu_time_ns BIGINT ns: its GPU time on the path
--   median_gpu_time_ns  DOUBLE ns: the median over the job's ranks that ran it
--   excess_ns           DOUBLE ns: slowest - median: roughly what every other rank waits at the next collective
--   slowdown            DOUBLE: slowest / median; NULL when the median is 0
-- Ties go to the lower rank, then trace id. Sorted by excess_ns, the layers worth looking at first.
WITH ranked AS (
    SELECT t.*, j.job,
           row_number() OVER (PARTITION BY j.job, t.path ORDER BY t.gpu_time_ns DESC, t.rank NULLS LAST, t.trace_id)
               AS pos,
           count(*) OVER (PARTITION BY j.job, t.path) AS ranks,
           median(t.gpu_time_ns) OVER (PARTITION BY j.job, t.path) AS median_gpu_time_ns
    FROM rank_layer_time t
    JOIN (SELECT trace_id, job FROM rank_jobs) j USING (trace_id)
)
SELECT job, path, layer, depth, ranks,
       trace_id AS slowest_trace_id, rank AS slowest_rank, host AS slowest_host,
       gpu_time_ns AS slowest_gpu_time_ns, median_gpu_time_ns,
       gpu_time_ns - median_gpu_time_ns AS excess_ns,
       gpu_time_ns / nullif(median_gpu_time_ns, 0) AS slowdown
FROM ranked
WHERE pos = 1
ORDER BY excess_ns DESC, job, path
