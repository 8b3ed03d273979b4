-- kernel_layers: every kernel with the NVTX layer range that launched it.
-- Inputs:  kernels, api_calls, nvtx_ranges, nvtx_paths, ops (chrome traces' CPU ops, by External id)
-- Output:  all columns of `kernels`, plus
--          launch_call_id, launch_start_ns (ns, CPU clock), launch_pid, launch_tid: the API call that launched it
--          range_id   innermost enclosing range (NULL when launched outside every range)
--          layer      that range's text; path: enclosing texts outermost -> innermost joined by '/'
--          depth      0 = outermost; range_kind 'push_pop' | 'start_end'
--          op_id, op_name: the PyTorch CPU op that launched it (chrome traces: by External id; else NULL)
-- Rule (the one nsys's NVTX projection uses): a range lives on the CPU thread that pushed it, and a kernel
-- belongs to the ranges that enclose its *launching* call on that thread (start <= launch.start <= end),
-- matched by correlation id -- not to ranges that overlap the kernel's GPU time. A CUDA graph launch gives
-- all its kernels the one launch.  Push/pop ranges nest, so the innermost one is found with three ASOF
-- lookups (sorts, n log n): (1) the latest range started at or before the launch: if it is still open, it is
-- the answer; (2) else the number D of open ranges = starts <= t minus ends < t, and (3) the answer is the
-- latest range started at depth D-1.  Start/end ranges may overlap, so they are a fallback found by a
-- range join on the (few) of them.
WITH launch AS (
    SELECT trace_id, pid, correlation_id,
           arg_min(call_id, start_ns) AS call_id, min(start_ns) AS start_ns, arg_min(tid, start_ns) AS tid
    FROM api_calls
    WHERE correlation_id IS NOT NULL
    GROUP BY trace_id, pid, correlation_id
),
kl AS (
    SELECT k.*, l.call_id AS launch_call_id, l.start_ns AS launch_start_ns,
           coalesce(l.pid, k.pid) AS launch_pid, coalesce(l.tid, k.tid) AS launch_tid
    FROM kernels k
    LEFT JOIN launch l
      ON l.trace_id = k.trace_id AND l.correlation_id = k.correlation_id AND l.pid IS NOT DISTINCT FROM k.pid
),
q AS (
    SELECT DISTINCT trace_id, launch_pid AS pid, launch_tid AS tid, launch_start_ns AS t
    FROM kl WHERE launch_start_ns IS NOT NULL
),
pp AS (
    SELECT trace_id, pid, tid, range_id, start_ns, end_ns, depth
    FROM nvtx_ranges WHERE kind = 'push_pop'
),
starts AS (   -- one row per thread and start time; among equal starts the deepest range wins
    SELECT trace_id, pid, tid, start_ns,
           arg_max(range_id, depth) AS range_id, arg_max(end_ns, depth) AS end_ns,
           sum(count(*)) OVER (PARTITION BY trace_id, pid, tid ORDER BY start_ns) AS n_started
    FROM pp GROUP BY trace_id, pid, tid, start_ns
),
ends AS (
    SELECT trace_id, pid, tid, end_ns,
           sum(count(*)) OVER (PARTITION BY trace_id, pid, tid ORDER BY end_ns) AS n_ended
    FROM pp GROUP BY trace_id, pid, tid, end_ns
),
last_started AS (
    SELECT q.*, s.range_id AS last_id, s.end_ns AS last_end, s.n_started
    FROM q ASOF LEFT JOIN starts s
      ON s.trace_id = q.trace_id AND s.pid = q.pid AND s.tid = q.tid AND q.t >= s.start_ns
),
open_depth AS (
    SELECT ls.*, ls.n_started - coalesce(e.n_ended, 0) AS n_open
    FROM last_started ls ASOF LEFT JOIN ends e
      ON e.trace_id = ls.trace_id AND e.pid = ls.pid AND e.tid = ls.tid AND ls.t > e.end_ns
),
innermost AS (
    SELECT od.trace_id, od.pid, od.tid, od.t,
           CASE WHEN od.last_end >= od.t THEN od.last_id WHEN od.n_open > 0 THEN p.range_id END AS range_id
    FROM open_depth od ASOF LEFT JOIN pp p
      ON p.trace_id = od.trace_id AND p.pid = od.pid AND p.tid = od.tid AND p.depth = od.n_open - 1
         AND od.t >= p.start_ns
),
start_end AS (
    SELECT q.trace_id, q.pid, q.tid, q.t, arg_max(r.range_id, r.start_ns) AS range_id
    FROM q JOIN nvtx_ranges r
      ON r.trace_id = q.trace_id AND r.pid = q.pid AND r.tid = q.tid
     AND r.kind = 'start_end' AND r.start_ns <= q.t AND q.t <= r.end_ns
    GROUP BY ALL
),
attributed AS (
    SELECT q.trace_id, q.pid, q.tid, q.t, coalesce(i.range_id, se.range_id) AS range_id
    FROM q
    LEFT JOIN innermost i USING (trace_id, pid, tid, t)
    LEFT JOIN start_end se USING (trace_id, pid, tid, t)
)
SELECT kl.*, a.range_id, p.text AS layer, p.path, p.depth, p.kind AS range_kind,
       o.op_id, o.name AS op_name
FROM kl
LEFT JOIN attributed a
  ON a.trace_id = kl.trace_id AND a.pid IS NOT DISTINCT FROM kl.launch_pid
 AND a.tid IS NOT DISTINCT FROM kl.launch_tid AND a.t = kl.launch_start_ns
LEFT JOIN nvtx_paths p ON p.trace_id = a.trace_id AND p.range_id = a.range_id
LEFT JOIN (SELECT trace_id, external_id, min(op_id) AS op_id, arg_min(name, op_id) AS name
           FROM ops WHERE external_id IS NOT NULL GROUP BY ALL) o
  ON o.trace_id = kl.trace_id AND o.external_id = kl.external_id
