-- Depth and parent of push/pop ranges, per CPU thread and NVTX domain (as nsys nests them), by sorting
-- instead of a self-join: a range of another domain (CUB's CCCL, a user library's) neither nests in nor
-- encloses the model's ranges.
-- Input:  ranges(range_id, kind, domain, pid, tid, start_ns, end_ns)   (times in ns)
-- Output: range_id, depth (0 = outermost), parent_id (NULL at depth 0)
-- Push/pop ranges on one thread nest properly, so a range's depth is the number of
-- ranges started before it (in start order, enclosing ones first) minus those that
-- already ended, and its parent is the latest-started range one level up: both are
-- sort + ASOF lookups (n log n), which a BETWEEN self-join is not.
-- Zero-length ranges: one at instant t has ended by t, yet it sorts after every longer range starting at t
-- (equal starts: the longer encloses), so the zero-length ranges at my start that sort at or after me are
-- counted in `ended` without being in `started_before`: add them back (zero_ended - zero_before; all
-- zero-length ranges of earlier instants sort before me and cancel).  Without this a range that starts with
-- a zero-length mark got depth -1.
WITH pp AS (
    SELECT range_id, pid, coalesce(domain, '') AS dkey, tid, start_ns, end_ns
    FROM ranges
    WHERE kind = 'push_pop' AND end_ns >= start_ns
),
ordered AS (
    SELECT *,
           row_number() OVER w - 1 AS started_before,
           coalesce(sum(CAST(end_ns = start_ns AS INTEGER)) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
               AS zero_before
    FROM pp
    WINDOW w AS (PARTITION BY pid, tid, dkey ORDER BY start_ns, end_ns DESC, range_id)
),
ends AS (
    SELECT pid, tid, dkey, end_ns,
           sum(count(*)) OVER (PARTITION BY pid, tid, dkey ORDER BY end_ns) AS ended,
           sum(count(*) FILTER (WHERE start_ns = end_ns)) OVER (PARTITION BY pid, tid, dkey ORDER BY end_ns) AS zero_ended
    FROM pp
    GROUP BY pid, tid, dkey, end_ns
),
depths AS (
    SELECT o.range_id, o.pid, o.tid, o.dkey, o.start_ns,
           CAST(o.started_before - coalesce(e.ended, 0) + coalesce(e.zero_ended, 0) - o.zero_before AS INTEGER) AS depth
    FROM ordered o
    ASOF LEFT JOIN ends e
      ON o.pid = e.pid AND o.tid = e.tid AND o.dkey = e.dkey AND o.start_ns >= e.end_ns
)
SELECT d.range_id, d.depth, p.range_id AS parent_id
FROM depths d
ASOF LEFT JOIN depths p
  ON d.pid = p.pid AND d.tid = p.tid AND d.dkey = p.dkey AND d.depth - 1 = p.depth AND d.start_ns >= p.start_ns
