-- _autotuning_spans: per CPU thread, the spans of Inductor's autotuning, whose GPU work is no step's.
-- analyze: inline (a few rows a compiled trace, none elsewhere: computed again in each reader costs less than a file)
-- Inputs:  ops (Inductor's CachingAutotuner ops)
-- Output, one row per span:
--   trace_id  VARCHAR: the trace
--   pid_key   BIGINT: the process (ops.pid; -1 when the trace has none), to join on launch_pid with coalesce
--   tid       BIGINT: the CPU thread
--   start_ns  BIGINT ns, CPU clock: the span's start
--   end_ns    BIGINT ns, CPU clock: its end
-- Rule: a compiled region's first call benchmarks each Triton kernel's configs inside `CachingAutotuner.*` ops (and
-- flushes the cache between runs); GPU work launched inside one on its thread (launch_start_ns within a span) is
-- autotuning's. The ops nest, so overlapping ones are merged: an operation is inside one span at most, and a join
-- on the spans doubles no row. Read by analysis_warnings (how much of a trace it is) and findings (no rule reads it).
SELECT trace_id, pid_key, tid, min(start_ns) AS start_ns, max(end_ns) AS end_ns
FROM (SELECT *, count(*) FILTER (WHERE new) OVER (thread ORDER BY start_ns, end_ns DESC) AS span
      FROM (SELECT *, start_ns > max(end_ns) OVER (thread ORDER BY start_ns, end_ns DESC
                                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                      IS NOT FALSE AS new   -- past every span before it on the thread: a new span
            FROM (SELECT trace_id, coalesce(pid, -1) AS pid_key, tid, start_ns, end_ns
                  FROM ops WHERE name LIKE 'CachingAutotuner.%')
            WINDOW thread AS (PARTITION BY trace_id, pid_key, tid))
      WINDOW thread AS (PARTITION BY trace_id, pid_key, tid))
GROUP BY trace_id, pid_key, tid, span
