-- step_gpu_idle: GPU busy, idle and launch-gap time per training/inference step, as HTA's temporal and idle-time
-- breakdowns give them, one row per trace, step and device.
-- Inputs:  gpu_op_layers, nvtx_ranges, api_calls
-- Output:  trace_id, step (1, 2, ... in CPU start order; 0 = the whole trace), step_name (range text, or
--          '(whole trace)'), range_id, device_id, cpu_start_ns, cpu_end_ns (the step range, CPU clock, ns; NULL
--          for step 0),
--          window_start_ns, window_end_ns, wall_ns (the step's window on the GPU timeline, ns), ops, kernels
--          (GPU operations / kernels the step launched), kernel_ns, memop_ns (summed kernel / memcpy+memset time
--          inside the window, ns), busy_ns (union of every GPU operation's interval in the window, ns), idle_ns
--          (wall_ns - busy_ns), idle_pct (% of wall_ns), launch_gap_ns, host_wait_ns (idle_ns split, below; they
--          add up to idle_ns), launch_gaps, host_waits (how many idle intervals of each kind).
-- Rules.
-- Step: the outermost push/pop ranges named `ProfilerStep#N` (PyTorch profiler) or `step`, `step#N`, `step_N`
--   (tracepipe capture's --step-name default); a trace without one is a single step 0 spanning the whole trace.
--   A GPU operation belongs to the step whose CPU range (any thread of the same process: backward kernels are
--   launched from autograd's thread) encloses its launching API call (for a replayed graph node: the graph launch).
-- Window: from the step range's CPU start to the later of its CPU end and the end of the last GPU operation it
--   launched (CPU and GPU timestamps share one clock in nsys and PyTorch traces); the whole trace: first GPU
--   operation's start to the last one's end.  Busy is the union of *every* GPU operation on the device clipped
--   to the window (work of an earlier step still running counts as busy: the GPU was not idle).
-- Idle intervals: the gaps between busy islands, plus the window's leading and trailing gaps.  A gap before an
--   operation whose launching call started before the gap opened is a launch gap (the work was queued; the GPU
--   spent the time launching it: HTA's "kernel wait"); every other gap, the leading and trailing ones and gaps
--   before an operation without a launching call included, is host wait (the CPU had not issued the work yet).
WITH ops AS (   -- launch_start_ns is the launching call's start except for a graph node made elsewhere
    SELECT trace_id, device_id, op_kind, start_ns, end_ns, launch_pid AS pid, launch_start_ns AS call_ns
    FROM gpu_op_layers WHERE graph_node_id IS NULL
    UNION ALL
    SELECT g.trace_id, g.device_id, g.op_kind, g.start_ns, g.end_ns, g.launch_pid AS pid, a.start_ns AS call_ns
    FROM (SELECT * FROM gpu_op_layers WHERE graph_node_id IS NOT NULL) g
    LEFT JOIN api_calls a ON a.trace_id = g.trace_id AND a.call_id = g.launch_call_id
),
cand AS (
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
flagged AS (   -- a step starting inside an earlier step of its process is found by the range join below; the
               -- others never start inside one another: disjoint, a call lies in one of them at most (alone)
    SELECT *,
           coalesce(max(end_ns) OVER (PARTITION BY trace_id, pid ORDER BY start_ns, range_id
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) >= start_ns, false) AS shared
    FROM steps
    WHERE end_ns >= start_ns   -- a step ending before it starts encloses no call (and must not make one
                               -- starting at the same instant shared)
),
alone_width AS (   -- the step of a call among those not shared is found by an equality join on a time bucket
                  -- (an ASOF join sorts every operation: 4 of the view's 12 CPU-s on 10M kernels at 1.7 GB,
                  -- 4.3 CPU-s in all now; analyze_10m_memory_s33.txt). The width gives a process's steps ~4
                  -- buckets each on average, so at most 6 each in all, however long one of them is.
    SELECT trace_id, pid, greatest(1, (max(end_ns)::HUGEINT - min(start_ns)) // (4 * count(*)))::BIGINT AS width
    FROM flagged WHERE NOT shared GROUP BY trace_id, pid
),
alone AS (   -- each such step once per bucket its [start, end] meets
    SELECT s.*, unnest(generate_series(s.start_ns // w.width, s.end_ns // w.width)) AS bucket
    FROM flagged s JOIN alone_width w ON w.trace_id = s.trace_id AND w.pid IS NOT DISTINCT FROM s.pid
    WHERE NOT s.shared
),
step_ops AS (
    SELECT s.trace_id, s.step, s.text AS step_name, s.range_id, s.start_ns AS cpu_start_ns, s.end_ns AS cpu_end_ns,
           o.device_id, o.op_kind, o.start_ns, o.end_ns
    FROM ops o
    LEFT JOIN alone_width w   -- LEFT: joined before `alone` (an inner join could be reordered after it, leaving
      ON w.trace_id = o.trace_id AND w.pid IS NOT DISTINCT FROM o.pid   -- the bucket no key: 40x the CPU)
    JOIN alone s ON s.trace_id = o.trace_id AND s.pid IS NOT DISTINCT FROM o.pid AND s.bucket = o.call_ns // w.width
    WHERE o.call_ns BETWEEN s.start_ns AND s.end_ns
    UNION ALL
    SELECT s.trace_id, s.step, s.text AS step_name, s.range_id, s.start_ns AS cpu_start_ns, s.end_ns AS cpu_end_ns,
           o.device_id, o.op_kind, o.start_ns, o.end_ns
    FROM (SELECT * FROM flagged WHERE shared) s
    JOIN ops o ON o.trace_id = s.trace_id AND o.pid IS NOT DISTINCT FROM s.pid
     AND o.call_ns BETWEEN s.start_ns AND s.end_ns
    UNION ALL
    SELECT trace_id, 0, '(whole trace)', NULL, NULL, NULL, device_id, op_kind, start_ns, end_ns
    FROM ops
    WHERE trace_id NOT IN (SELECT trace_id FROM steps)
),
windows AS (
    SELECT trace_id, step, step_name, range_id, device_id,
           any_value(cpu_start_ns) AS cpu_start_ns, any_value(cpu_end_ns) AS cpu_end_ns,
           coalesce(any_value(cpu_start_ns), min(start_ns)) AS window_start_ns,
           greatest(any_value(cpu_end_ns), max(end_ns)) AS window_end_ns,
           count(*) AS ops, count(*) FILTER (op_kind = 'kernel') AS kernels
    FROM step_ops GROUP BY trace_id, step, step_name, range_id, device_id
),
wnum AS (   -- each device's windows numbered by start
    SELECT *, row_number() OVER (PARTITION BY trace_id, device_id ORDER BY window_start_ns, step) AS wi
    FROM windows WHERE window_start_ns IS NOT NULL AND window_end_ns IS NOT NULL
),
wb AS (   -- both boundaries of every window
    SELECT trace_id, device_id, wi, unnest([window_start_ns, window_end_ns]) AS p, unnest([1, 0]) AS is_start
    FROM wnum
),
wbr AS (
    SELECT *, dense_rank() OVER (PARTITION BY trace_id, device_id ORDER BY p) AS pi,
           sum(is_start) OVER (PARTITION BY trace_id, device_id ORDER BY p RANGE UNBOUNDED PRECEDING) AS starts_le
    FROM wb
),
wpts AS (   -- every window boundary of a device, numbered: segment pi is [p, next p); starts_le: windows
            -- starting at or before p (= the wi of the last of them)
    SELECT *, lead(p) OVER (PARTITION BY trace_id, device_id ORDER BY p) AS next_p
    FROM (SELECT DISTINCT trace_id, device_id, p, pi, CAST(starts_le AS BIGINT) AS starts_le FROM wbr)
),
seg_win AS (   -- each segment with the windows covering it (start <= p < end)
    SELECT trace_id, device_id, wi, unnest(range(start_pi, end_pi)) AS pi
    FROM (SELECT trace_id, device_id, wi, max(CASE WHEN is_start = 1 THEN pi END) AS start_pi,
                 max(CASE WHEN is_start = 0 THEN pi END) AS end_pi
          FROM wbr GROUP BY trace_id, device_id, wi)
),
seg_width AS (   -- segments before a device's last boundary, disjoint: bucketed as the steps are (alone_width)
    SELECT trace_id, device_id, greatest(1, (max(next_p)::HUGEINT - min(p)) // (4 * count(*)))::BIGINT AS width
    FROM wpts WHERE next_p IS NOT NULL GROUP BY trace_id, device_id
),
seg_buckets AS (
    SELECT a.*, unnest(generate_series(a.p // w.width, (a.next_p - 1) // w.width)) AS bucket
    FROM wpts a JOIN seg_width w ON w.trace_id = a.trace_id AND w.device_id IS NOT DISTINCT FROM a.device_id
    WHERE a.next_p IS NOT NULL
),
op_start AS (   -- each operation with the segment holding its start: a bounded one [p, next_p), or the last one
                -- (from the device's last boundary on), or none (before the first)
    SELECT o.*, coalesce(a.pi, z.pi) AS start_pi, coalesce(a.starts_le, z.starts_le) AS starts_le,
           coalesce(o.end_ns < a.next_p, false) OR z.p IS NOT NULL AS ends_in_segment
    FROM ops o
    LEFT JOIN seg_width w ON w.trace_id = o.trace_id AND w.device_id IS NOT DISTINCT FROM o.device_id
    LEFT JOIN seg_buckets a
      ON a.trace_id = o.trace_id AND a.device_id IS NOT DISTINCT FROM o.device_id AND a.bucket = o.start_ns // w.width
     AND o.start_ns >= a.p AND o.start_ns < a.next_p
    LEFT JOIN (SELECT * FROM wpts WHERE next_p IS NULL) z
      ON z.trace_id = o.trace_id AND z.device_id IS NOT DISTINCT FROM o.device_id AND o.start_ns >= z.p
),
op_at AS (   -- and the windows starting inside it: none past its start segment for most operations, so only
             -- those ending past it look up the segment of their end
    SELECT * EXCLUDE (starts_le, ends_in_segment), coalesce(starts_le, 0) + 1 AS first_wi,
           coalesce(starts_le, 0) AS last_wi   -- (one starting at its end instant is dropped in clipped)
    FROM op_start WHERE ends_in_segment
    UNION ALL
    SELECT o.* EXCLUDE (starts_le, ends_in_segment), coalesce(o.starts_le, 0) + 1 AS first_wi,
           coalesce(b.starts_le, 0) AS last_wi
    FROM (SELECT * FROM op_start WHERE NOT ends_in_segment) o
    ASOF LEFT JOIN wpts b
      ON b.trace_id = o.trace_id AND b.device_id IS NOT DISTINCT FROM o.device_id AND o.end_ns >= b.p
),
pairs AS (   -- a window overlapping an operation either holds its start or starts inside it (the two never meet):
             -- found by equality joins, never by comparing every operation with every window
    SELECT o.trace_id, o.device_id, sw.wi, o.op_kind, o.call_ns, o.start_ns, o.end_ns
    FROM op_at o
    JOIN seg_win sw ON sw.trace_id = o.trace_id AND sw.device_id IS NOT DISTINCT FROM o.device_id AND sw.pi = o.start_pi
    UNION ALL
    SELECT trace_id, device_id, unnest(range(first_wi, last_wi + 1)) AS wi, op_kind, call_ns, start_ns, end_ns
    FROM op_at WHERE last_wi >= first_wi
),
clipped AS (
    SELECT w.trace_id, w.step, w.device_id, w.window_start_ns, p.op_kind, p.call_ns,
           greatest(p.start_ns, w.window_start_ns) AS s, least(p.end_ns, w.window_end_ns) AS e
    FROM pairs p
    JOIN wnum w ON w.trace_id = p.trace_id AND w.device_id IS NOT DISTINCT FROM p.device_id AND w.wi = p.wi
    WHERE p.start_ns < w.window_end_ns AND p.end_ns > w.window_start_ns
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
FROM windows w
LEFT JOIN per_window p USING (trace_id, step, device_id)
LEFT JOIN per_gaps g USING (trace_id, step, device_id)
ORDER BY w.trace_id, w.step, w.device_id
