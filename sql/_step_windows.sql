-- _step_windows: per step and device, the GPU operations the step launched and the window they span on the GPU
-- timeline: what step_gpu_idle measures busy and idle time in.
-- Inputs:  _gpu_op_calls, _steps
-- Macros:  interval_at
-- Output, one row per trace, step and device the step launched work on:
--   trace_id         VARCHAR: the trace
--   step             BIGINT: the step's number (_steps.step); 0 = the whole trace, for a trace without steps
--   step_name        VARCHAR: the step range's text; '(whole trace)' for step 0
--   range_id         BIGINT: the step's range (nvtx_ranges.range_id); NULL for step 0
--   device_id        INTEGER: the GPU
--   cpu_start_ns     BIGINT ns, CPU clock: the step range's start; NULL for step 0
--   cpu_end_ns       BIGINT ns, CPU clock: the step range's end; NULL for step 0
--   window_start_ns  BIGINT ns: the window's start: the step range's CPU start (the first operation's start for
--                    step 0)
--   window_end_ns    BIGINT ns: the window's end: the later of the range's CPU end and the end of the last
--                    operation the step launched on the device
--   ops              BIGINT: GPU operations the step launched on the device
--   kernels          BIGINT: kernels among them
-- Rule: a GPU operation belongs to the step whose CPU range (any thread of the same process) encloses its
-- launching API call (_gpu_op_calls.call_ns), found for the steps that never start inside another by an equality
-- join on time buckets (interval_at: about 4 buckets a step), for the others (_steps.shared) by a range join.  A
-- trace without steps is one step 0 holding every operation.  The window runs from the step range's CPU start
-- (CPU and GPU timestamps share one clock in nsys and PyTorch traces) to the later of its CPU end and the end of
-- the last operation it launched.
WITH steps AS MATERIALIZED (SELECT * FROM _steps),
ops AS MATERIALIZED (SELECT * FROM _gpu_op_calls),
calls AS (SELECT *, pid AS lane, CAST(NULL AS BIGINT) AS sublane, call_ns AS t FROM ops),
alone AS (   -- the steps that never start inside another: a process's steps, one lane (closed intervals)
    SELECT trace_id, pid AS lane, CAST(NULL AS BIGINT) AS sublane, start_ns AS lo, end_ns AS hi, step, step_name,
           range_id
    FROM steps WHERE NOT shared
),
step_ops AS (
    SELECT trace_id, step, step_name, range_id, lo AS cpu_start_ns, hi AS cpu_end_ns, device_id, op_kind, start_ns,
           end_ns
    FROM interval_at(calls, alone, 4, true)
    WHERE step IS NOT NULL
    UNION ALL
    SELECT s.trace_id, s.step, s.step_name, s.range_id, s.start_ns AS cpu_start_ns, s.end_ns AS cpu_end_ns,
           o.device_id, o.op_kind, o.start_ns, o.end_ns
    FROM (SELECT * FROM steps WHERE shared) s
    JOIN ops o ON o.trace_id = s.trace_id AND o.pid IS NOT DISTINCT FROM s.pid
     AND o.call_ns BETWEEN s.start_ns AND s.end_ns
    UNION ALL
    SELECT trace_id, 0, '(whole trace)', NULL, NULL, NULL, device_id, op_kind, start_ns, end_ns
    FROM ops
    WHERE trace_id NOT IN (SELECT trace_id FROM steps)
)
SELECT trace_id, step, step_name, range_id, device_id,
       any_value(cpu_start_ns) AS cpu_start_ns, any_value(cpu_end_ns) AS cpu_end_ns,
       coalesce(any_value(cpu_start_ns), min(start_ns)) AS window_start_ns,
       greatest(any_value(cpu_end_ns), max(end_ns)) AS window_end_ns,
       count(*) AS ops, count(*) FILTER (op_kind = 'kernel') AS kernels
FROM step_ops GROUP BY trace_id, step, step_name, range_id, device_id
