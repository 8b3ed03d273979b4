-- _range_segments: per CPU thread, the timeline of its innermost open layer range: from each instant p where it
-- changes until the next (rule (1) of launch_point_layers, for every instant of the thread at once).
-- Inputs:  nvtx_ranges (push/pop ranges, with normalize's parent_id), _layer_domains
-- Output, one row per thread and instant at which its innermost open range changes:
--   trace_id     VARCHAR: the trace
--   pid          BIGINT: the thread's process
--   tid          BIGINT: the thread
--   p            BIGINT ns, CPU clock: the segment's first instant
--   range_id     BIGINT: the innermost range open from p on (nvtx_ranges.range_id); NULL: none
--   next_p       BIGINT ns, CPU clock: the next segment's first instant, where this one ends (exclusive); NULL for
--                the thread's last segment, open to the end
-- Rule: only ranges of the trace's layer domain count (_layer_domains: the default domain when it has push/pop ranges,
-- else the domain with the most): a CUB `CCCL` or user-library range never becomes a layer nor breaks the model's
-- path.
-- Push/pop ranges nest, and normalize computed each one's parent once, per thread and domain
-- (pipeline/normalize/nesting.py, the one nesting engine): the innermost range at an instant is (a) the latest range
-- started at or before it (the deepest of equal starts) while it is open, its end instant included, (b) else its
-- first ancestor still open.  The timeline is walked once per range start, never per instant asked for
-- (docs/benchmarks.md): from each start instant to the next, the instants where the innermost open range changes,
-- found by stepping up parent links (a closed ancestor is stepped over; a range of unknown end is never open).
WITH RECURSIVE pp_all AS (
    SELECT trace_id, pid, tid, range_id, start_ns, end_ns, depth, parent_id, coalesce(domain, '') AS dkey
    FROM nvtx_ranges WHERE kind = 'push_pop'
),
pp AS (
    SELECT p.* FROM pp_all p JOIN _layer_domains d ON d.trace_id = p.trace_id AND d.dkey = p.dkey
),
starts AS (   -- one row per thread and start instant; among equal starts the deepest (innermost) wins
    SELECT trace_id, pid, tid, start_ns, arg_max(range_id, depth) AS range_id, arg_max(end_ns, depth) AS end_ns
    FROM pp GROUP BY trace_id, pid, tid, start_ns
),
hop AS (   -- each range's parent (nvtx_ranges.parent_id, from normalize's nesting) and when it ends
    SELECT c.trace_id, c.range_id, c.parent_id, p.end_ns AS parent_end_ns
    FROM pp c JOIN pp p ON p.trace_id = c.trace_id AND p.range_id = c.parent_id
),
walk AS (   -- from each start instant until the thread's next one: the innermost range open from instant p on.
            -- The range started there while it is open; once it has ended, its first ancestor still open (a
            -- closed one is stepped over); NULL once no ancestor is left. One walk per start, never per launch.
            -- p is HUGEINT: the instant after a range ending at the last BIGINT instant is past every launch.
    SELECT trace_id, pid, tid, start_ns::HUGEINT AS p, range_id, end_ns,
           lead(start_ns) OVER (PARTITION BY trace_id, pid, tid ORDER BY start_ns) AS next_start_ns
    FROM starts
    UNION ALL
    SELECT w.trace_id, w.pid, w.tid, CASE WHEN w.end_ns >= w.p THEN w.end_ns::HUGEINT + 1 ELSE w.p END,
           h.parent_id, h.parent_end_ns, w.next_start_ns
    FROM walk w LEFT JOIN hop h ON h.trace_id = w.trace_id AND h.range_id = w.range_id
    WHERE w.range_id IS NOT NULL AND w.end_ns IS NOT NULL
      AND (w.next_start_ns IS NULL
           OR CASE WHEN w.end_ns >= w.p THEN w.end_ns::HUGEINT + 1 ELSE w.p END < w.next_start_ns)
),
segments AS (   -- the innermost range of [p, next p) of the thread (a range of unknown end: none, as it is not open)
    SELECT trace_id, pid, tid, p::BIGINT AS p, CASE WHEN end_ns IS NOT NULL THEN range_id END AS range_id
    FROM walk
    WHERE (range_id IS NULL OR end_ns IS NULL OR end_ns >= p) AND p <= 9223372036854775807
)
SELECT *, lead(p) OVER (PARTITION BY trace_id, pid, tid ORDER BY p) AS next_p FROM segments
