-- step_gpu_idle: GPU busy, idle and launch-gap time per training/inference step, as HTA's temporal and idle-time
-- breakdowns give them, one row per trace, step and device.
-- analyze: spills (its memory goes to the window over every operation: on big inputs it runs under 3/4 of
--          DuckDB's limit; 10M kernels: 1.7 -> 2.4 s, 1,988 -> 1,568 MB: docs/benchmarks.md, spill_share_44.txt)
-- Inputs:  _step_windows, _window_ops
-- Output, one row per trace, step and device the step launched work on:
--   trace_id         VARCHAR: the trace
--   step             BIGINT: 1, 2, ... in CPU start order; 0 = the whole trace (a trace without step ranges)
--   step_name        VARCHAR: the step range's text, or '(whole trace)'
--   range_id         BIGINT: the step's range (nvtx_ranges.range_id); NULL for step 0
--   device_id        INTEGER: the GPU
--   cpu_start_ns     BIGINT ns, CPU clock: the step range's start; NULL for step 0
--   cpu_end_ns       BIGINT ns, CPU clock: the step range's end; NULL for step 0
--   window_start_ns  BIGINT ns: the step's window on the GPU timeline: the range's CPU start (step 0: the first
--                    GPU operation's start)
--   window_end_ns    BIGINT ns: the later of the range's CPU end and the end of the last GPU operation it launched
--                    (step 0: the last one's end)
--   wall_ns          BIGINT ns: window_end_ns - window_start_ns
--   ops              BIGINT: GPU operations the step launched on the device
--   kernels          BIGINT: kernels among them
--   kernel_ns        BIGINT ns: summed kernel time inside the window (every kernel of the device, clipped)
--   memop_ns         BIGINT ns: summed memcpy and memset time inside the window (clipped)
--   busy_ns          BIGINT ns: the union of every GPU operation's interval in the window
--   idle_ns          BIGINT ns: wall_ns - busy_ns
--   idle_pct         DOUBLE %: idle_ns of wall_ns
--   launch_gap_ns    BIGINT ns: idle time before queued work (the GPU waited on the launch)
--   host_wait_ns     BIGINT ns: the rest of idle_ns (the CPU had not issued the work yet)
--   launch_gaps      BIGINT: idle intervals that are launch gaps
--   host_waits       BIGINT: idle intervals that are host waits
-- Rules, each in a stage of its own (a private view with its golden test):
-- Step (_steps): the outermost push/pop ranges named `ProfilerStep#N` (PyTorch profiler) or `step`, `step#N`,
--   `step_N` (tracepipe capture's --step-name default); a trace without one is a single step 0 spanning the whole
--   trace.  A GPU operation belongs to the step whose CPU range (any thread of the same process: backward kernels
--   are launched from autograd's thread) encloses its launching API call (for a replayed graph node: the graph
--   launch; _gpu_op_calls).
-- Window (_step_windows): from the step range's CPU start to the later of its CPU end and the end of the last GPU
--   operation it launched (CPU and GPU timestamps share one clock in nsys and PyTorch traces); the whole trace:
--   first GPU operation's start to the last one's end.  Busy is the union of *every* GPU operation on the device
--   clipped to the window (_window_ops: work of an earlier step still running counts as busy: the GPU was not
--   idle).
-- Idle intervals: the gaps between busy islands, plus the window's leading and trailing gaps.  A gap before an
--   operation whose launching call started before the gap opened is a launch gap (the work was queued; the GPU
--   spent the time launching it: HTA's "kernel wait"); every other gap, the leading and trailing ones and gaps
--   before an operation without a launching call included, is host wait (the CPU had not issued the work yet).
WITH clipped AS MATERIALIZED (   -- (read twice below: computed once)
    SELECT * FROM _window_ops
),
ordered AS (
    SELECT *, max(e) OVER (PARTITION BY trace_id, step, device_id ORDER BY s, e
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM clipped
),
gaps AS (   -- one row per busy island: the idle gap before its first operation, and who made it wait
    SELECT trace_id, step, device_id, s - coalesce(prev_end, window_start_ns) AS gap_ns,
           coalesce(prev_end IS NOT NULL AND call_ns <= prev_end, false) AS queued  -- no launching call: host wait
    FROM ordered
    WHERE prev_end IS NULL OR s > prev_end
),
per_window AS (
    SELECT c.trace_id, c.step, c.device_id,
           sum(e - s) FILTER (op_kind = 'kernel') AS kernel_ns, sum(e - s) FILTER (op_kind <> 'kernel') AS memop_ns,
           max(e) AS last_end_ns
    FROM clipped c GROUP BY ALL
),
per_gaps AS (
    SELECT trace_id, step, device_id,
           sum(gap_ns) FILTER (queued) AS launch_gap_ns, sum(gap_ns) FILTER (NOT queued) AS lead_host_ns,
           count(*) FILTER (queued AND gap_ns > 0) AS launch_gaps,
           count(*) FILTER (NOT queued AND gap_ns > 0) AS host_waits
    FROM gaps GROUP BY ALL
)
SELECT w.trace_id, w.step, w.step_name, w.range_id, w.device_id, w.cpu_start_ns, w.cpu_end_ns,
       w.window_start_ns, w.window_end_ns, w.window_end_ns - w.window_start_ns AS wall_ns, w.ops, w.kernels,
       CAST(coalesce(p.kernel_ns, 0) AS BIGINT) AS kernel_ns, CAST(coalesce(p.memop_ns, 0) AS BIGINT) AS memop_ns,
       CAST(w.window_end_ns - w.window_start_ns - coalesce(g.launch_gap_ns, 0) - coalesce(g.lead_host_ns, 0)
            - (w.window_end_ns - coalesce(p.last_end_ns, w.window_end_ns)) AS BIGINT) AS busy_ns,
       CAST(coalesce(g.launch_gap_ns, 0) + coalesce(g.lead_host_ns, 0)
            + (w.window_end_ns - coalesce(p.last_end_ns, w.window_end_ns)) AS BIGINT) AS idle_ns,
       100.0 * (coalesce(g.launch_gap_ns, 0) + coalesce(g.lead_host_ns, 0)
                + (w.window_end_ns - coalesce(p.last_end_ns, w.window_end_ns)))
             / nullif(w.window_end_ns - w.window_start_ns, 0) AS idle_pct,
       CAST(coalesce(g.launch_gap_ns, 0) AS BIGINT) AS launch_gap_ns,
       CAST(coalesce(g.lead_host_ns, 0) + (w.window_end_ns - coalesce(p.last_end_ns, w.window_end_ns)) AS BIGINT)
           AS host_wait_ns,
       coalesce(g.launch_gaps, 0) AS launch_gaps,
       coalesce(g.host_waits, 0) + CASE WHEN p.last_end_ns < w.window_end_ns THEN 1 ELSE 0 END AS host_waits
FROM _step_windows w
LEFT JOIN per_window p USING (trace_id, step, device_id)
LEFT JOIN per_gaps g USING (trace_id, step, device_id)
ORDER BY w.trace_id, w.step, w.device_id
