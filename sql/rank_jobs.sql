-- rank_jobs: the traces that are ranks of one distributed job, so that ranks are compared within a job only.
-- Inputs:  trace_meta, devices
-- Output, one row per trace that belongs to a job (traces of no job have no row):
--   trace_id      VARCHAR: the trace
--   job           VARCHAR: the job's key: the trace's source path with its rank number written '#', or the folder it
--                   sits in
--   rank          INTEGER: trace_meta.rank
--   ranks         BIGINT: traces of the job
--   gpu           VARCHAR: the trace's device name (of several, the first by name)
--   source_format VARCHAR: trace_meta's
-- Rule: traces are ranks of one job when they were recorded the same way -- the same source format and GPU model
-- -- and their source files are named alike but for the rank: the path with every `rank<N>` / `rank_<N>` /
-- `rank-<N>` token (the token trace_meta.rank is read from, pipeline/normalize/ranks.py) written `rank#`
-- (`job/rank3/nsys.sqlite` -> `job/rank#/nsys.sqlite`); a path without such a token (the rank came from the
-- capture's environment or Kineto's distributedInfo) stands for the folder it is in.  Such a group is a job when
-- it holds at least two traces, each with a known rank and no rank twice (an nsys and a PyTorch trace of the
-- same rank differ in format; two files of one rank and format make the group ambiguous: no job).  So unrelated
-- traces that carry rank numbers (a rank-0 sample beside a rank-1 sample of another run, in one folder) are
-- never compared.
WITH traced AS (
    SELECT m.trace_id, m.rank, m.source_format,
           (SELECT min(d.name) FROM devices d WHERE d.trace_id = m.trace_id) AS gpu,
           regexp_replace(lower(replace(m.source_path, '\', '/')), '(^|[^a-z])rank[_-]?[0-9]+', '\1rank#', 'g')
               AS named
    FROM trace_meta m
    WHERE m.rank IS NOT NULL AND m.source_format <> 'ncu-csv' AND m.source_format <> 'layer-shapes'
),
keyed AS (
    SELECT trace_id, rank, source_format, gpu,
           CASE WHEN contains(named, 'rank#') THEN named ELSE regexp_replace(named, '/[^/]*$', '') END AS job
    FROM traced
),
grouped AS (
    SELECT *, count(*) OVER g AS ranks, count(DISTINCT rank) OVER g AS distinct_ranks
    FROM keyed
    WINDOW g AS (PARTITION BY job, source_format, gpu)
)
SELECT trace_id, job, rank, ranks, gpu, source_format
FROM grouped
WHERE ranks >= 2 AND distinct_ranks = ranks
ORDER BY job, rank
