-- outermost_intervals: the intervals of each lane that lie inside no earlier one: the outermost of nested
-- intervals (a backward op around the ops it runs, a range around its sub-ranges).
-- Inputs:  (none: the intervals come as a parameter)
-- Parameters:
--   intervals  a table or CTE: trace_id, lane, sublane (the timeline the intervals nest on: a thread is lane =
--              pid, sublane = tid), start_ns, end_ns, tie (orders intervals of equal start and end: an id, or a
--              constant where none is needed), and any other columns
--   touching   BOOLEAN: false, an interval is inside an earlier one that ends at or after its end; true, inside
--              one that ends at or after its start (any overlap, a shared instant included)
-- Output: the rows of intervals that are inside no earlier one of their lane, their columns as they were.
-- Rule: the intervals of a lane in start order, the longer first among equal starts (an outer range before the
-- inner one starting with it), then by tie; the latest end among those before an interval tells whether one of
-- them holds it.  One window pass per lane, never a self-join of the intervals.
CREATE OR REPLACE MACRO outermost_intervals(intervals, touching) AS TABLE
SELECT * EXCLUDE (prev_end)
FROM (
    SELECT *, max(end_ns) OVER (PARTITION BY trace_id, lane, sublane ORDER BY start_ns, end_ns DESC, tie
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM query_table(intervals)
)
WHERE prev_end IS NULL OR prev_end < CASE WHEN touching THEN start_ns ELSE end_ns END
