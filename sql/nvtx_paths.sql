-- nvtx_paths: every NVTX range with the chain of ranges enclosing it on its thread.
-- Inputs:  nvtx_ranges (range_id, parent_id, text, kind, depth)
-- Output, one row per NVTX range:
--   trace_id    VARCHAR: the trace
--   range_id    BIGINT: the range (nvtx_ranges.range_id)
--   kind        VARCHAR: 'push_pop' | 'start_end' (and GPU-side annotations)
--   domain      VARCHAR: its NVTX domain; NULL = the default one
--   text        VARCHAR: its text
--   depth       INTEGER: 0 = outermost
--   path        VARCHAR: the texts of the ranges enclosing it on its thread and its own, outermost -> innermost joined
--                 by '/'
--   start_ns    BIGINT ns, CPU clock: the range's start
--   end_ns      BIGINT ns, CPU clock: its end
--   duration_ns BIGINT ns: end_ns - start_ns
--   pid         BIGINT: its process
--   tid         BIGINT: the CPU thread that pushed it
-- Push/pop ranges chain through parent_id (computed at normalize time); start/end ranges and GPU-side
-- annotations are their own path.  The recursion runs once per nesting level, not per range.
WITH RECURSIVE chain AS (
    SELECT trace_id, range_id, text AS path
    FROM nvtx_ranges
    WHERE parent_id IS NULL
    UNION ALL
    SELECT c.trace_id, c.range_id, chain.path || '/' || c.text
    FROM nvtx_ranges c
    JOIN chain ON c.trace_id = chain.trace_id AND c.parent_id = chain.range_id
)
SELECT r.trace_id, r.range_id, r.kind, r.domain, r.text, r.depth, chain.path,
       r.start_ns, r.end_ns, r.duration_ns, r.pid, r.tid
FROM nvtx_ranges r
JOIN chain USING (trace_id, range_id)
