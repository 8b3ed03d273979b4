-- _point_ranges: the innermost layer range at every point launch_point_layers looks one up at: each launch point,
-- and each backward-linked forward op's start (rule (1) of launch_point_layers, nsys's NVTX projection).
-- Inputs:  gpu_op_launches, _backward_links, _range_segments, nvtx_ranges (start/end ranges)
-- Macros:  interval_at
-- Output, one row per distinct point (trace_id, pid, tid, t):
--   trace_id   VARCHAR: the trace
--   pid        BIGINT: the point's process
--   tid        BIGINT: the point's CPU thread
--   t          BIGINT ns, CPU clock: the instant (a launch point's launch_start_ns, or a forward op's start)
--   is_launch  BOOLEAN: a launch point (false: only a linked forward op's start)
--   range_id   BIGINT: the innermost layer range open on the thread at t; NULL: none
-- Rule: a range lives on the CPU thread that pushed it, and GPU work belongs to the ranges enclosing its launching
-- call on that thread (gpu_op_launches), not to those overlapping its GPU time.  The innermost push/pop range at
-- an instant is the thread's timeline segment holding it (_range_segments: [p, next p), or the last one, from p
-- on), found by an equality join on time buckets (interval_at).  Start/end ranges may overlap, so they are a
-- fallback, found by a range join on the (few) of them: the latest started that holds the instant, its end
-- included.  A start/end range ended on another thread is no thread's (nsys's nvtx_kern_sum and nvtx_gpu_proj_sum
-- keep only start/end ranges without an endGlobalTid): no GPU work is attributed to it.
WITH lp AS MATERIALIZED (   -- distinct launch points
    SELECT DISTINCT trace_id, launch_pid AS pid, launch_tid AS tid, launch_start_ns AS t
    FROM gpu_op_launches WHERE launch_start_ns IS NOT NULL
),
q AS (   -- every (thread, time) whose innermost layer range is wanted: launches and linked forward ops
    SELECT *, true AS is_launch FROM lp
    UNION ALL
    SELECT DISTINCT trace_id, fwd_pid, fwd_tid, fwd_start_ns, false FROM _backward_links f
    WHERE fwd_start_ns IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM lp WHERE lp.trace_id = f.trace_id AND lp.pid IS NOT DISTINCT FROM f.fwd_pid
                      AND lp.tid = f.fwd_tid AND lp.t = f.fwd_start_ns)
),
segments AS MATERIALIZED (   -- (read twice below: computed once)
    SELECT * FROM _range_segments
),
points AS (SELECT *, pid AS lane, tid AS sublane FROM q),
bounded AS (   -- the segments that end: a thread's lane is (pid, tid), and a thread without one holds no launch
    SELECT trace_id, pid AS lane, tid AS sublane, p AS lo, next_p AS hi, range_id AS segment_range_id
    FROM segments WHERE next_p IS NOT NULL AND pid IS NOT NULL AND tid IS NOT NULL
),
innermost AS (   -- (a) and (b) of rule (1): the segment holding the instant, a bounded one or the thread's last
                 -- (at most one of the two holds it)
    SELECT i.trace_id, i.pid, i.tid, i.t, i.is_launch, coalesce(i.segment_range_id, z.range_id) AS range_id
    FROM interval_at(points, bounded, 1, false) i
    LEFT JOIN (SELECT * FROM segments WHERE next_p IS NULL) z
      ON z.trace_id = i.trace_id AND z.pid = i.pid AND z.tid = i.tid AND i.t >= z.p
),
start_end AS (
    SELECT q.trace_id, q.pid, q.tid, q.t, arg_max(r.range_id, r.start_ns) AS range_id
    FROM q JOIN nvtx_ranges r
      ON r.trace_id = q.trace_id AND r.pid = q.pid AND r.tid = q.tid
     AND r.kind = 'start_end' AND r.end_tid = r.tid AND r.start_ns <= q.t AND q.t <= r.end_ns
    GROUP BY ALL
)
SELECT i.trace_id, i.pid, i.tid, i.t, i.is_launch, coalesce(i.range_id, se.range_id) AS range_id
FROM innermost i
LEFT JOIN start_end se USING (trace_id, pid, tid, t)
