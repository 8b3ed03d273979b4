-- nvtx_paths: every NVTX range with the chain of ranges enclosing it on its thread.
-- Inputs:  nvtx_ranges (range_id, parent_id, text, kind, depth)
-- Macros:  path_level
-- Output, one row per NVTX range:
--   trace_id    VARCHAR: the trace
--   range_id    BIGINT: the range (nvtx_ranges.range_id)
--   kind        VARCHAR: 'push_pop' | 'start_end' (and GPU-side annotations)
--   domain      VARCHAR: its NVTX domain; NULL = the default one
--   text        VARCHAR: its text
--   depth       INTEGER: 0 = outermost
--   path        VARCHAR: the texts of the ranges enclosing it on its thread and its own, outermost -> innermost joined
--                 by '/' (a '/' inside a text written '∕': path_level); past depth 64, the path at depth 64, '/…/',
--                 its own text
--   start_ns    BIGINT ns, CPU clock: the range's start
--   end_ns      BIGINT ns, CPU clock: its end
--   duration_ns BIGINT ns: end_ns - start_ns
--   pid         BIGINT: its process
--   tid         BIGINT: the CPU thread that pushed it
-- Push/pop ranges chain through parent_id (computed at normalize time); start/end ranges and GPU-side
-- annotations are their own path.  The recursion runs once per nesting level, not per range.
-- A range deeper than 64 (depth > 64) shows the path of its ancestor at depth 64, '/…/' and its own text: paths
-- grow with the square of the nesting, and a real export whose 1,956 pushes were never popped (closed at the
-- capture's end) nested 1,407 deep with texts of ~270 characters: its paths took GBs and analyze ran out of memory.
-- That ancestor is found by time, not by recursion (a step per level: a run over 3,000 levels 8.8 s, now 2.6): by
-- the nesting rule it is the latest-starting range at depth 64 of the range's thread and domain that starts at or
-- before it.
-- Normalize warns of such ranges (pipeline/normalize/checks.py, PATH_LEVELS).
WITH RECURSIVE chain AS (
    SELECT trace_id, range_id, path_level(text) AS path
    FROM nvtx_ranges
    WHERE parent_id IS NULL
    UNION ALL
    SELECT c.trace_id, c.range_id, chain.path || '/' || path_level(c.text)
    FROM nvtx_ranges c
    JOIN chain ON c.trace_id = chain.trace_id AND c.parent_id = chain.range_id
    WHERE c.depth <= 64
),
cut AS (   -- the kept levels' last ranges (depth 64): where deeper paths continue after '/…/'
    SELECT n.trace_id, n.pid, n.tid, n.domain, n.start_ns, chain.path
    FROM nvtx_ranges n JOIN chain USING (trace_id, range_id)
    WHERE n.depth = 64
),
deep AS (
    SELECT r.trace_id, r.range_id, coalesce(cut.path, '') || '/…/' || path_level(r.text) AS path
    FROM (SELECT * FROM nvtx_ranges WHERE depth > 64) r
    ASOF LEFT JOIN cut
      ON cut.trace_id = r.trace_id AND cut.pid IS NOT DISTINCT FROM r.pid AND cut.tid IS NOT DISTINCT FROM r.tid
     AND cut.domain IS NOT DISTINCT FROM r.domain AND r.start_ns >= cut.start_ns
),
paths AS (SELECT * FROM chain UNION ALL SELECT * FROM deep)
SELECT r.trace_id, r.range_id, r.kind, r.domain, r.text, r.depth, p.path,
       r.start_ns, r.end_ns, r.duration_ns, r.pid, r.tid
FROM nvtx_ranges r
JOIN paths p USING (trace_id, range_id)
