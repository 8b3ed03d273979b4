-- interval_at: each point with the interval of its lane that holds it, found by an equality join on time buckets:
-- a range join's answer at a hash join's cost.
-- Inputs:  (none: the points and intervals come as parameters)
-- Parameters:
--   points     a table or CTE: trace_id, lane, sublane (the timeline the point lies on: a thread is lane = pid,
--              sublane = tid; a process or a device, sublane NULL), t (the instant), and any other columns
--   intervals  a table or CTE: trace_id, lane, sublane, lo, hi (the interval: [lo, hi), or [lo, hi] when closed),
--              and any other columns (the payload; no name of the points' columns but trace_id, lane, sublane);
--              the intervals of a lane are disjoint
--   buckets_per_interval  INTEGER: how many buckets the intervals of a lane meet on average (1 or more)
--   closed     BOOLEAN: whether an interval holds its end instant hi
-- Output, one row per point: the point's columns, then the holding interval's lo, hi and payload (NULL when no
-- interval of its lane holds it).
-- Rule: a lane's intervals, sorted, span [min lo, max hi]; cut into buckets of width span / (buckets_per_interval x
-- count) (computed wider than BIGINT: a lane may span more than it), each interval is listed once per bucket it
-- meets, and a point looks up the intervals listed in its own bucket, keeping the one holding it.  Disjoint
-- intervals meet buckets_per_interval + 2 buckets each at most on average, however long one of them is, so the
-- join costs about one lookup per point, where a range join (or an ASOF join, which sorts every point) costs a
-- sort of all points (docs/benchmarks.md).  Lanes compare as IS NOT DISTINCT FROM (a NULL lane is a lane); a caller whose NULL lanes
-- hold nothing leaves their intervals out.  The join to the widths comes first and is LEFT, as the one after it:
-- an inner join could be reordered after the bucket join, which would then have no bucket key.
CREATE OR REPLACE MACRO interval_at(points, intervals, buckets_per_interval, closed) AS TABLE
WITH spans AS (
    SELECT * FROM query_table(intervals)
),
widths AS (   -- one width per lane
    SELECT trace_id, lane, sublane,
           greatest(1, (max(hi)::HUGEINT - min(lo)) // (buckets_per_interval * count(*)))::BIGINT AS width
    FROM spans GROUP BY trace_id, lane, sublane
),
listed AS (   -- each interval once per bucket it meets
    SELECT s.*, unnest(generate_series(s.lo // w.width, (s.hi - CASE WHEN closed THEN 0 ELSE 1 END) // w.width))
               AS bucket
    FROM spans s
    JOIN widths w
      ON w.trace_id = s.trace_id AND w.lane IS NOT DISTINCT FROM s.lane AND w.sublane IS NOT DISTINCT FROM s.sublane
)
SELECT p.*, i.* EXCLUDE (trace_id, lane, sublane, bucket)
FROM query_table(points) p
LEFT JOIN widths w
  ON w.trace_id = p.trace_id AND w.lane IS NOT DISTINCT FROM p.lane AND w.sublane IS NOT DISTINCT FROM p.sublane
LEFT JOIN listed i
  ON i.trace_id = p.trace_id AND i.lane IS NOT DISTINCT FROM p.lane AND i.sublane IS NOT DISTINCT FROM p.sublane
 AND i.bucket = p.t // w.width AND p.t >= i.lo AND (p.t < i.hi OR closed AND p.t = i.hi)
