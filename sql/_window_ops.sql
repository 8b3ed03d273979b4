-- _window_ops: every GPU operation of a device clipped to each step window of that device it overlaps: the
-- intervals whose union is a window's busy time in step_gpu_idle.
-- Inputs:  _step_windows, _gpu_op_calls
-- Macros:  interval_at
-- Output, one row per GPU operation and window of its device that it overlaps:
--   trace_id         VARCHAR: the trace
--   step             BIGINT: the window's step (_step_windows.step)
--   device_id        INTEGER: the GPU
--   window_start_ns  BIGINT ns: the window's start
--   op_kind          VARCHAR: 'kernel' | 'memcpy' | 'memset'
--   call_ns          BIGINT ns, CPU clock: the start of the API call that launched the operation; NULL without one
--   s                BIGINT ns: the operation's start, or the window's start when it began before
--   e                BIGINT ns: the operation's end, or the window's end when it ends after
-- Rule: *every* GPU operation on the device counts, whichever step launched it (work of an earlier step still
-- running keeps the GPU busy).  The pairs are found by equality joins, never by comparing every operation with
-- every window: the window boundaries of a device cut its timeline into segments, each with the windows covering
-- it; a window overlapping an operation either covers the segment holding its start (found by an equality join on
-- time buckets: interval_at) or starts inside it (the windows starting after that segment, up to the segment
-- holding its end: none for most operations, so only those ending past their start segment look that one up).
WITH wnum AS (   -- each device's windows numbered by start
    SELECT *, row_number() OVER (PARTITION BY trace_id, device_id ORDER BY window_start_ns, step) AS wi
    FROM _step_windows WHERE window_start_ns IS NOT NULL AND window_end_ns IS NOT NULL
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
starts AS (SELECT *, device_id AS lane, CAST(NULL AS BIGINT) AS sublane, start_ns AS t FROM _gpu_op_calls),
bounded AS (   -- the segments before a device's last boundary, disjoint: a device is a lane
    SELECT trace_id, device_id AS lane, CAST(NULL AS BIGINT) AS sublane, p AS lo, next_p AS hi, pi AS seg_pi,
           starts_le AS seg_starts_le
    FROM wpts WHERE next_p IS NOT NULL
),
op_start AS (   -- each operation with the segment holding its start: a bounded one [p, next_p), or the last one
                -- (from the device's last boundary on), or none (before the first)
    SELECT o.trace_id, o.device_id, o.op_kind, o.start_ns, o.end_ns, o.pid, o.call_ns,
           coalesce(o.seg_pi, z.pi) AS start_pi, coalesce(o.seg_starts_le, z.starts_le) AS starts_le,
           coalesce(o.end_ns < o.hi, false) OR z.p IS NOT NULL AS ends_in_segment
    FROM interval_at(starts, bounded, 4, false) o
    LEFT JOIN (SELECT * FROM wpts WHERE next_p IS NULL) z
      ON z.trace_id = o.trace_id AND z.device_id IS NOT DISTINCT FROM o.device_id AND o.start_ns >= z.p
),
op_at AS (   -- and the windows starting inside it: none past its start segment for most operations, so only
             -- those ending past it look up the segment of their end
    SELECT * EXCLUDE (starts_le, ends_in_segment), coalesce(starts_le, 0) + 1 AS first_wi,
           coalesce(starts_le, 0) AS last_wi   -- (one starting at its end instant is dropped below)
    FROM op_start WHERE ends_in_segment
    UNION ALL
    SELECT o.* EXCLUDE (starts_le, ends_in_segment), coalesce(o.starts_le, 0) + 1 AS first_wi,
           coalesce(b.starts_le, 0) AS last_wi
    FROM (SELECT * FROM op_start WHERE NOT ends_in_segment) o
    ASOF LEFT JOIN wpts b
      ON b.trace_id = o.trace_id AND b.device_id IS NOT DISTINCT FROM o.device_id AND o.end_ns >= b.p
),
pairs AS (   -- a window overlapping an operation either holds its start or starts inside it (the two never meet)
    SELECT o.trace_id, o.device_id, sw.wi, o.op_kind, o.call_ns, o.start_ns, o.end_ns
    FROM op_at o
    JOIN seg_win sw ON sw.trace_id = o.trace_id AND sw.device_id IS NOT DISTINCT FROM o.device_id AND sw.pi = o.start_pi
    UNION ALL
    SELECT trace_id, device_id, unnest(range(first_wi, last_wi + 1)) AS wi, op_kind, call_ns, start_ns, end_ns
    FROM op_at WHERE last_wi >= first_wi
)
SELECT w.trace_id, w.step, w.device_id, w.window_start_ns, p.op_kind, p.call_ns,
       greatest(p.start_ns, w.window_start_ns) AS s, least(p.end_ns, w.window_end_ns) AS e
FROM pairs p
JOIN wnum w ON w.trace_id = p.trace_id AND w.device_id IS NOT DISTINCT FROM p.device_id AND w.wi = p.wi
WHERE p.start_ns < w.window_end_ns AND p.end_ns > w.window_start_ns
