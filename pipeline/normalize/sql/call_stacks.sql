-- Python call stacks of chrome-trace ops: the python_function frames open on an op's thread at its start.
-- The rule's reference: normalize computes it with numpy (nesting.call_stacks, ~3x less CPU on the 100 MB
-- bench trace); tests/test_call_stacks.py holds the two equal on random frame tables built to hit each tie.
-- Inputs:  frames(frame, thread, pid, start_ns, end_ns, python_id, python_parent_id)   frame: row number in
--                 the file; thread: one key per (pid, tid); pid: -1 where the trace has none; times in ns
--          points(op, thread, t)   each op (its row), its thread's key and the instant (ns) of its start
-- Output:  table call_stacks(op, stack) per op that has a frame open; table stack_frames(stack, frames):
--          frames of each distinct stack, outermost first (normalize turns them into names joined by ';')
-- Rule: the innermost-open rule of sql/launch_point_layers.sql, over the trace's own caller links.  The frame open
-- at t is (a) the latest started at or before t on the thread (among equal starts the deepest: the one that
-- ends first, then the later in the file) if it is still open: end > t (a frame that ends at t has
-- returned); (b) else its first caller still open, stepping up the caller links.  The stack is that frame
-- and its callers.  A frame's caller is the frame whose `Python id` is its `Python parent id`, in the same
-- process (the first in the file if an id repeats).  Kineto's links are not interval nesting, so they are
-- taken from the trace, not computed as nvtx_nesting.sql does for NVTX ranges: a frame of the autograd
-- thread links to the main thread's run_backward that caused it, a hook called from C++ to the Python frame
-- that called into C++ (tests/test_call_stacks.py counts both on real traces).
-- Cost: one ASOF lookup and one hash join of the links over all frames, then one join per level of the
-- latest frames' depth (the recursion runs once per level, not per op).
CREATE TEMP TABLE latest AS   -- per op: the frame started last at or before it on its thread
WITH last_start AS MATERIALIZED (
    SELECT p.op, p.thread, p.t, f.start_ns
    FROM points p ASOF JOIN frames f ON f.thread = p.thread AND p.t >= f.start_ns
)
SELECT l.op, l.t, arg_min(f.frame, (f.end_ns, -f.frame)) AS frame, min(f.end_ns) AS end_ns   -- the deepest
FROM last_start l JOIN frames f ON f.thread = l.thread AND f.start_ns = l.start_ns
GROUP BY l.op, l.t;

CREATE TEMP TABLE chains AS
WITH RECURSIVE
up AS MATERIALIZED (   -- frame -> every frame with its Python parent id in the process
    SELECT f.frame, c.frame AS parent, c.end_ns AS parent_end_ns
    FROM frames f JOIN frames c ON c.pid = f.pid AND c.python_id = f.python_parent_id
    WHERE c.python_id >= 0
),
chain AS (   -- each latest frame and its callers, level 0 = the frame itself
    SELECT frame AS leaf, frame, end_ns, 0 AS level FROM (SELECT DISTINCT frame, end_ns FROM latest)
    UNION ALL
    SELECT c.leaf, min(u.parent), arg_min(u.parent_end_ns, u.parent), c.level + 1   -- an id seen twice: the first
    FROM chain c JOIN up u ON u.frame = c.frame
    WHERE c.level < (SELECT count(*) FROM frames)   -- bounded: a cycle of links ends here
    GROUP BY c.leaf, c.level
)
SELECT * FROM chain;

CREATE TEMP TABLE call_stacks AS
WITH innermost AS (   -- (a) the latest frame if open, (b) else its first caller still open
    SELECT op, frame AS leaf, 0 AS level FROM latest WHERE end_ns > t
    UNION ALL
    SELECT l.op, l.frame, min(c.level)
    FROM latest l JOIN chains c ON c.leaf = l.frame AND c.end_ns > l.t
    WHERE l.end_ns <= l.t
    GROUP BY l.op, l.frame
)
SELECT i.op, dense_rank() OVER (ORDER BY i.leaf, i.level) - 1 AS stack, i.leaf, i.level FROM innermost i;

CREATE TEMP TABLE stack_frames AS
SELECT s.stack, list(c.frame ORDER BY c.level DESC) AS frames
FROM (SELECT DISTINCT stack, leaf, level FROM call_stacks) s
JOIN chains c ON c.leaf = s.leaf AND c.level >= s.level
GROUP BY s.stack;
