-- _optimizer_steps: the optimizer steps of each CPU thread, inside which launches are `optimizer` work (rule (3) of
-- launch_point_layers).
-- Inputs:  nvtx_ranges, ops
-- Macros:  outermost_intervals
-- Output, one row per optimizer step range or op:
--   trace_id   VARCHAR: the trace
--   pid        BIGINT: the step's process
--   tid        BIGINT: the step's CPU thread
--   start_ns   BIGINT ns, CPU clock: the step's start
--   end_ns     BIGINT ns, CPU clock: its end (a launch at this instant is inside)
--   range_id   BIGINT: the step's range (nvtx_ranges.range_id); NULL for a PyTorch op
--   ours       BOOLEAN: tracepipe capture's own `optimizer` range (it wins over PyTorch's around it)
-- Rule: an optimizer step is tracepipe capture's `optimizer` range, PyTorch's own `Optimizer.step#<Class>.step`
-- range or op, or nsys --pytorch=functions-trace's `torch.optim.<Class>.step` op.  Ranges nested in one of their
-- own kind (tracepipe's, or PyTorch's) are left out: the outermost holds the path; tracepipe's and PyTorch's nest
-- apart, as the capture's global optimizer hooks open tracepipe's inside PyTorch's.
WITH candidates AS (
    SELECT trace_id, pid, tid, start_ns, end_ns, range_id, text = 'optimizer' AS ours,
           pid AS lane, tid AS sublane, NULL AS tie
    FROM nvtx_ranges
    WHERE kind = 'push_pop' AND (text = 'optimizer' OR text LIKE 'Optimizer.step#%')
),
ours AS (SELECT * FROM candidates WHERE ours),
theirs AS (SELECT * FROM candidates WHERE NOT ours)
SELECT trace_id, pid, tid, start_ns, end_ns, range_id, ours FROM outermost_intervals(ours, false)
UNION ALL
SELECT trace_id, pid, tid, start_ns, end_ns, range_id, ours FROM outermost_intervals(theirs, false)
UNION ALL
SELECT trace_id, pid, tid, start_ns, end_ns, NULL AS range_id, false AS ours FROM ops
WHERE name LIKE 'Optimizer.step#%' OR regexp_matches(name, '^torch\.optim\.\w+\.step$')
