-- gpu_op_attribution: per GPU operation (kernel, memcpy, memset), the layer range that launched it and its pass,
-- without the operation's own columns (gpu_op_layers joins them on): narrow rows, so that the joins below
-- and the Parquet writer do not spill against each other on big traces (benchmarks/results/gpu_op_attribution.txt).
-- Inputs:  kernels, memcpy, memset, api_calls, graph_nodes, nvtx_ranges, nvtx_paths, ops
-- Output, one row per GPU operation:
--          trace_id; op_kind  'kernel' | 'memcpy' | 'memset'; op_row_id: kernel_id / copy_id / set_id
--          launch_call_id, launch_start_ns (ns, CPU clock), launch_pid, launch_tid: the API call that launched it;
--                     for a replayed CUDA graph node whose making the trace recorded (graph_nodes), the call that
--                     made the node during stream capture instead (launch_call_id stays the graph launch)
--          range_id   the layer range (NULL when none applies); layer: its text; path: enclosing texts
--                     outermost -> innermost joined by '/'; depth (0 = outermost); range_kind; domain
--          pass       'forward' | 'backward' | 'optimizer' | NULL (outside every range, not backward/optimizer)
--          bwd_op_id  the autograd backward op (ops.op_id) enclosing the launch; fwd_op_id: the forward op it
--                     was linked to by sequence number
--          op_id, op_name: the PyTorch CPU op that launched it (chrome traces: by External id; else NULL)
-- Rules.
-- (1) Forward / everything else, as nsys's NVTX projection: a range lives on the CPU thread that pushed it, and
--     an op belongs to the ranges enclosing its *launching* call on that thread (matched by correlation id), not
--     to those overlapping its GPU time.  A replayed CUDA graph node counts as launched where the node was made
--     (graph_nodes: a stream-captured node is made inside the launch call that would have run it), so it gets
--     the module that made it; without that table all of a graph launch's kernels get the launch's range.  Only ranges of
--     the trace's layer domain count (the default domain when it has push/pop ranges, else the domain with the
--     most): a CUB `CCCL` or user-library range never becomes a layer nor breaks the model's path.  Push/pop
--     ranges nest, and normalize computed each one's parent once, per thread and domain
--     (pipeline/normalize/nesting.py, the one nesting engine): the innermost range is (a) the latest range
--     started at or before the launch (one ASOF lookup, n log n; the deepest of equal starts) if it is still
--     open, (b) else its first ancestor still open, found by stepping up parent links (one hash join per level
--     climbed, only for launches between sibling ranges).  Start/end ranges may overlap, so they are a
--     fallback found by a range join on the (few) of them.
-- (2) Backward: a launch inside an autograd backward op (ops with a sequence number that are backward nodes:
--     `Fwd thread id` > 0, `autograd::engine::evaluate_function: ...` or `XBackward0`) takes the layer of the
--     forward op with the same sequence number: the latest one started before the backward op that is not
--     itself inside a backward op (recomputation under activation checkpointing is), its layer being found by
--     rule (1) at its start.  A range opened inside the backward op (a recomputed forward that our capture
--     annotates) wins over the link.  Recomputed forward work therefore counts as `backward`.
-- (3) Optimizer: a launch inside an optimizer step (`optimizer` range of tracepipe capture, PyTorch's own
--     `Optimizer.step#<Class>.step` range or op) is `optimizer`, on the outermost such range's path.
WITH RECURSIVE gpu_ops AS (   -- the columns of each GPU operation that place its launch
    SELECT trace_id, 'kernel' AS op_kind, kernel_id AS op_row_id, pid, tid, correlation_id, graph_node_id, external_id
    FROM kernels
    UNION ALL BY NAME
    SELECT trace_id, 'memcpy' AS op_kind, copy_id AS op_row_id, pid, correlation_id, graph_node_id, external_id
    FROM memcpy
    UNION ALL BY NAME
    SELECT trace_id, 'memset' AS op_kind, set_id AS op_row_id, pid, correlation_id, graph_node_id, external_id
    FROM memset
),
launch AS MATERIALIZED (
    SELECT trace_id, pid, correlation_id,
           arg_min(call_id, start_ns) AS call_id, min(start_ns) AS start_ns, arg_min(tid, start_ns) AS tid
    FROM api_calls
    WHERE correlation_id IS NOT NULL
    GROUP BY trace_id, pid, correlation_id
),
nodes AS (   -- one row per node id (nsys may log an instantiated node twice, once with its original)
    SELECT trace_id, graph_node_id, max(original_graph_node_id) AS original_graph_node_id,
           min(created_ns) AS created_ns, arg_min(pid, created_ns) AS pid, arg_min(tid, created_ns) AS tid
    FROM graph_nodes GROUP BY trace_id, graph_node_id
),
made AS (   -- graph node -> where its original (stream-captured) node was made
    SELECT n.trace_id, n.graph_node_id, o.created_ns, o.pid, o.tid
    FROM nodes n
    JOIN nodes o ON o.trace_id = n.trace_id AND o.graph_node_id = coalesce(n.original_graph_node_id, n.graph_node_id)
),
kl AS (
    SELECT k.*, l.call_id AS launch_call_id, coalesce(m.created_ns, l.start_ns) AS launch_start_ns,
           coalesce(m.pid, l.pid, k.pid) AS launch_pid, coalesce(m.tid, l.tid, k.tid) AS launch_tid
    FROM gpu_ops k
    LEFT JOIN launch l
      ON l.trace_id = k.trace_id AND l.correlation_id = k.correlation_id AND l.pid IS NOT DISTINCT FROM k.pid
    LEFT JOIN made m ON m.trace_id = k.trace_id AND m.graph_node_id = k.graph_node_id
),
seq_ops AS (   -- autograd-visible CPU ops; backward ones are the nodes the engine evaluates
    SELECT trace_id, op_id, pid, tid, start_ns, end_ns, sequence_number,
           (coalesce(fwd_thread_id, 0) > 0 OR name LIKE 'autograd::engine::evaluate_function:%'
            OR regexp_matches(name, '^[A-Za-z0-9_:]+Backward[0-9]*$')) AS is_backward
    FROM ops
    WHERE sequence_number IS NOT NULL AND sequence_number >= 0
),
bwd AS (   -- outermost backward ops (evaluate_function wraps XBackward0, and work after it, with one number)
    SELECT * EXCLUDE (prev_end)
    FROM (
        SELECT *, max(end_ns) OVER (PARTITION BY trace_id, pid, tid ORDER BY start_ns, end_ns DESC
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
        FROM seq_ops WHERE is_backward
    )
    WHERE prev_end IS NULL OR prev_end < end_ns
),
fwd AS (   -- forward ops not run inside a backward op (recomputation is)
    SELECT f.trace_id, f.op_id, f.pid, f.tid, f.start_ns, f.sequence_number
    FROM (SELECT * FROM seq_ops WHERE NOT is_backward) f
    ASOF LEFT JOIN bwd b
      ON b.trace_id = f.trace_id AND b.pid IS NOT DISTINCT FROM f.pid AND b.tid = f.tid AND f.start_ns >= b.start_ns
    WHERE b.op_id IS NULL OR b.end_ns < f.start_ns
),
bwd_link AS (
    SELECT b.trace_id, b.op_id AS bwd_op_id, b.pid, b.tid, b.start_ns, b.end_ns,
           f.op_id AS fwd_op_id, f.pid AS fwd_pid, f.tid AS fwd_tid, f.start_ns AS fwd_start_ns
    FROM bwd b
    ASOF LEFT JOIN fwd f
      ON f.trace_id = b.trace_id AND f.sequence_number = b.sequence_number AND b.start_ns >= f.start_ns
),
lp AS MATERIALIZED (   -- distinct launch points
    SELECT DISTINCT trace_id, launch_pid AS pid, launch_tid AS tid, launch_start_ns AS t
    FROM kl WHERE launch_start_ns IS NOT NULL
),
q AS (   -- every (thread, time) whose innermost layer range is wanted: launches and linked forward ops
    SELECT * FROM lp
    UNION ALL
    SELECT DISTINCT trace_id, fwd_pid, fwd_tid, fwd_start_ns FROM bwd_link f
    WHERE fwd_start_ns IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM lp WHERE lp.trace_id = f.trace_id AND lp.pid IS NOT DISTINCT FROM f.fwd_pid
                      AND lp.tid = f.fwd_tid AND lp.t = f.fwd_start_ns)
),
pp_all AS (
    SELECT trace_id, pid, tid, range_id, start_ns, end_ns, depth, parent_id, text, coalesce(domain, '') AS dkey
    FROM nvtx_ranges WHERE kind = 'push_pop'
),
layer_domain AS (   -- the default domain when it has push/pop ranges, else the busiest one
    SELECT trace_id, arg_max(dkey, CAST(dkey = '' AS BIGINT) * 1000000000000 + n) AS dkey
    FROM (SELECT trace_id, dkey, count(*) AS n FROM pp_all GROUP BY ALL)
    GROUP BY trace_id
),
pp AS (
    SELECT p.* FROM pp_all p JOIN layer_domain d ON d.trace_id = p.trace_id AND d.dkey = p.dkey
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
attributed AS MATERIALIZED (
    SELECT q.trace_id, q.pid, q.tid, q.t, coalesce(i.range_id, se.range_id) AS range_id
    FROM q
    LEFT JOIN innermost i USING (trace_id, pid, tid, t)
    LEFT JOIN start_end se USING (trace_id, pid, tid, t)
),
opt_ranges AS (   -- optimizer steps: ranges (outermost of nested ones) and PyTorch's ops of the same name
    SELECT trace_id, pid, tid, start_ns, end_ns, range_id
    FROM (
        SELECT *, max(end_ns) OVER (PARTITION BY trace_id, pid, tid ORDER BY start_ns, end_ns DESC
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
        FROM pp_all WHERE text = 'optimizer' OR text LIKE 'Optimizer.step#%'
    )
    WHERE prev_end IS NULL OR prev_end < end_ns
    UNION ALL
    SELECT trace_id, pid, tid, start_ns, end_ns, NULL AS range_id FROM ops WHERE name LIKE 'Optimizer.step#%'
),
in_bwd AS (   -- launch points inside a backward op (none in an inference trace: the joins below stay small)
    SELECT q.trace_id, q.pid, q.tid, q.t, b.bwd_op_id, b.start_ns AS bwd_start_ns, b.fwd_op_id,
           b.fwd_pid, b.fwd_tid, b.fwd_start_ns
    FROM (SELECT * FROM lp WHERE (trace_id, tid) IN (SELECT trace_id, tid FROM bwd_link)) q  -- no sort otherwise
    ASOF JOIN bwd_link b
      ON b.trace_id = q.trace_id AND b.pid IS NOT DISTINCT FROM q.pid AND b.tid = q.tid AND q.t >= b.start_ns
    WHERE b.end_ns >= q.t
),
bwd_decided AS (   -- the linked forward op's layer, unless a range opened inside the backward op encloses the launch
    SELECT c.trace_id, c.pid, c.tid, c.t, c.bwd_op_id, c.fwd_op_id,
           CASE WHEN fr.range_id IS NOT NULL AND NOT coalesce(own_r.start_ns >= c.bwd_start_ns, false)
                THEN fr.range_id ELSE own.range_id END AS range_id
    FROM in_bwd c
    LEFT JOIN attributed own USING (trace_id, pid, tid, t)
    LEFT JOIN pp_all own_r ON own_r.trace_id = own.trace_id AND own_r.range_id = own.range_id
    LEFT JOIN attributed fr
      ON fr.trace_id = c.trace_id AND fr.pid IS NOT DISTINCT FROM c.fwd_pid AND fr.tid = c.fwd_tid
     AND fr.t = c.fwd_start_ns
),
opt_ctx AS (
    SELECT q.trace_id, q.pid, q.tid, q.t, max(o.range_id) AS opt_range_id
    FROM (SELECT * FROM lp WHERE (trace_id, tid) IN (SELECT trace_id, tid FROM opt_ranges)) q
    JOIN opt_ranges o
      ON o.trace_id = q.trace_id AND o.pid IS NOT DISTINCT FROM q.pid AND o.tid = q.tid
     AND o.start_ns <= q.t AND q.t <= o.end_ns
    GROUP BY ALL
),
decided AS (
    SELECT a.trace_id, a.pid, a.tid, a.t, bd.bwd_op_id, bd.fwd_op_id,
           CASE
               WHEN oc.t IS NOT NULL THEN coalesce(oc.opt_range_id, a.range_id)
               WHEN bd.bwd_op_id IS NOT NULL THEN bd.range_id
               ELSE a.range_id
           END AS range_id,
           CASE
               WHEN oc.t IS NOT NULL THEN 'optimizer'
               WHEN bd.bwd_op_id IS NOT NULL THEN 'backward'
               WHEN a.range_id IS NOT NULL THEN 'forward'
           END AS pass
    FROM attributed a
    LEFT JOIN bwd_decided bd USING (trace_id, pid, tid, t)
    LEFT JOIN opt_ctx oc USING (trace_id, pid, tid, t)
)
SELECT kl.trace_id, kl.op_kind, kl.op_row_id, kl.launch_call_id, kl.launch_start_ns, kl.launch_pid, kl.launch_tid,
       d.range_id, p.text AS layer, p.path, p.depth, p.kind AS range_kind, p.domain, d.pass,
       d.bwd_op_id, d.fwd_op_id, o.op_id, o.name AS op_name
FROM kl
LEFT JOIN decided d
  ON d.trace_id = kl.trace_id AND d.pid IS NOT DISTINCT FROM kl.launch_pid
 AND d.tid IS NOT DISTINCT FROM kl.launch_tid AND d.t = kl.launch_start_ns
LEFT JOIN nvtx_paths p ON p.trace_id = d.trace_id AND p.range_id = d.range_id
LEFT JOIN (SELECT trace_id, external_id, min(op_id) AS op_id, arg_min(name, op_id) AS name
           FROM ops WHERE external_id IS NOT NULL GROUP BY ALL) o
  ON o.trace_id = kl.trace_id AND o.external_id = kl.external_id
