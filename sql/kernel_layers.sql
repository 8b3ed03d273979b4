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
-- all its kernels the one launch.  Push/pop ranges nest, and normalize computed each one's parent once
-- (pipeline/normalize/nesting.py, the one nesting engine): the innermost range is (1) the latest range
-- started at or before the launch (one ASOF lookup, n log n; the deepest of equal starts) if it is still
-- open, (2) else its first ancestor still open, found by stepping up parent links (one hash join per level
-- climbed, only for launches between sibling ranges).  Start/end ranges may overlap, so they are a
-- fallback found by a range join on the (few) of them.
WITH RECURSIVE launch AS (
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
    SELECT trace_id, pid, tid, range_id, start_ns, end_ns, depth, parent_id
    FROM nvtx_ranges WHERE kind = 'push_pop'
),
starts AS (   -- one row per thread and start instant; among equal starts the deepest (innermost) wins
    SELECT trace_id, pid, tid, start_ns, arg_max(range_id, depth) AS range_id, arg_max(end_ns, depth) AS end_ns
    FROM pp GROUP BY trace_id, pid, tid, start_ns
),
last_started AS (
    SELECT q.*, s.range_id, s.end_ns
    FROM q ASOF LEFT JOIN starts s
      ON s.trace_id = q.trace_id AND s.pid = q.pid AND s.tid = q.tid AND q.t >= s.start_ns
),
hop AS (   -- each range's parent (nvtx_ranges.parent_id, from normalize's nesting) and when it ends
    SELECT c.trace_id, c.range_id, c.parent_id, p.end_ns AS parent_end_ns
    FROM pp c JOIN pp p ON p.trace_id = c.trace_id AND p.range_id = c.parent_id
),
climb AS (    -- a range that ended before the launch: its parent encloses it; step up until one is open
    SELECT trace_id, pid, tid, t, range_id, end_ns FROM last_started WHERE end_ns < t
    UNION ALL
    SELECT c.trace_id, c.pid, c.tid, c.t, h.parent_id, h.parent_end_ns
    FROM climb c JOIN hop h ON h.trace_id = c.trace_id AND h.range_id = c.range_id
    WHERE c.end_ns < c.t
),
innermost AS (
    SELECT trace_id, pid, tid, t, range_id FROM last_started WHERE end_ns >= t
    UNION ALL
    SELECT trace_id, pid, tid, t, range_id FROM climb WHERE end_ns >= t
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
