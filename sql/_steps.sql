-- _steps: the training/inference steps of each trace, numbered: the ranges step_gpu_idle splits a trace by.
-- Inputs:  nvtx_ranges
-- Output, one row per step range:
--   trace_id   VARCHAR: the trace
--   step       BIGINT: 1, 2, ... in CPU start order (then range id)
--   range_id   BIGINT: the step's range (nvtx_ranges.range_id)
--   pid        BIGINT: the process whose threads' calls it encloses
--   step_name  VARCHAR: the range's text
--   start_ns   BIGINT ns, CPU clock: its start
--   end_ns     BIGINT ns, CPU clock: its end
--   shared     BOOLEAN: it starts inside an earlier step of its process (the two may enclose one call); NULL when it
--              ends before it starts (it encloses no call)
-- Rule: steps are the outermost push/pop ranges named `ProfilerStep#N` (PyTorch profiler) or `step`, `step#N`,
-- `step_N` (tracepipe capture's --step-name default): those of the least depth in the trace.  A step's range
-- encloses the calls of any thread of its process (backward kernels are launched from autograd's thread).  Steps
-- that never start inside one another are disjoint: a call lies in one of them at most.
WITH cand AS (
    SELECT trace_id, range_id, pid, text, start_ns, end_ns, depth
    FROM nvtx_ranges
    WHERE kind = 'push_pop' AND (text LIKE 'ProfilerStep#%' OR regexp_matches(text, '^step([#_ ]?[0-9]+)?$'))
),
steps AS (
    SELECT trace_id, range_id, pid, text, start_ns, end_ns,
           row_number() OVER (PARTITION BY trace_id ORDER BY start_ns, range_id) AS step
    FROM (SELECT *, min(depth) OVER (PARTITION BY trace_id) AS top FROM cand)
    WHERE depth = top
),
flagged AS (   -- a step ending before it starts encloses no call (and must not make one starting at the same
               -- instant shared)
    SELECT *,
           coalesce(max(end_ns) OVER (PARTITION BY trace_id, pid ORDER BY start_ns, range_id
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) >= start_ns, false) AS shared
    FROM steps
    WHERE end_ns >= start_ns
)
SELECT s.trace_id, s.step, s.range_id, s.pid, s.text AS step_name, s.start_ns, s.end_ns, f.shared
FROM steps s
LEFT JOIN flagged f ON f.trace_id = s.trace_id AND f.range_id = s.range_id
