-- launch_point_layers: per launch point (a CPU thread and instant at which GPU work was launched), the layer range
-- and pass of the work launched there: the attribution rules of gpu_op_attribution, over distinct launch points.
-- analyze: on request (an intermediate of gpu_op_attribution, which has all its columns: write it with
--          `tracepipe analyze --view launch_point_layers`)
-- analyze: staged (inputs analyzed through Parquet: computed into a file of its own although one view reads it,
--          so that its joins and its reader's do not hold DuckDB's memory at once; 10M kernels: gpu_op_attribution
--          53-65 -> 31 CPU-s, 14.9 GB spilled -> 1 GB, benchmarks/results/gpu_op_attribution_staged.txt)
-- Inputs:  gpu_op_launches, ops, nvtx_ranges, threads, compiled_statements
-- Output, one row per distinct (trace_id, pid, tid, launch_start_ns) of gpu_op_launches:
--          trace_id, pid, tid, launch_start_ns (ns, CPU clock): the launch point (launch_pid / launch_tid of
--                     gpu_op_launches)
--          range_id   the layer range (NULL when none applies)
--          pass       'forward' | 'backward' | 'optimizer' | NULL (outside every range, not backward/optimizer)
--          bwd_op_id  the autograd backward op (ops.op_id) enclosing the launch; fwd_op_id: the forward op it
--                     was linked to by sequence number
--          module_chain, fused_modules, compiled_root: for a launch inside a statement of a compiled graph that
--                     the capture recorded (compiled_statements), that statement's module chain and modules (JSON
--                     lists) and the capture's root range text; else NULL
-- Rules.
-- (1) Forward / everything else, as nsys's NVTX projection: a range lives on the CPU thread that pushed it, and
--     an op belongs to the ranges enclosing its *launching* call on that thread (gpu_op_launches: matched by
--     correlation id; a replayed CUDA graph node where the node was made, so it gets the module that made it), not
--     to those overlapping its GPU time.  Ranges are whatever normalize made layers: NVTX and record_function
--     ranges, the module frames of a PyTorch trace recorded with stacks (nesting with ProfilerStep#N and
--     record_function ranges by time on their thread), nsys --pytorch's module ranges.  Only ranges of the trace's layer domain count (the default domain
--     when it has push/pop ranges, else the domain with the most): a CUB `CCCL` or user-library range never
--     becomes a layer nor breaks the model's path.  Push/pop ranges nest, and normalize computed each one's
--     parent once, per thread and domain
--     (pipeline/normalize/nesting.py, the one nesting engine): the innermost range is (a) the latest range started
--     at or before the launch (the deepest of equal starts) if it is still open, (b) else its first ancestor still
--     open.  Both are read off a per-thread timeline (`walk`): from each start instant to the next, the instants
--     where the innermost open range changes, found by stepping up parent links once per start (ranges, not
--     launches: 10M launches 12.4 -> 8.6 CPU-s against a climb per launch,
--     benchmarks/results/launch_point_walk_10m.txt); each launch then takes the timeline segment holding it (an
--     equality join on a time bucket, see seg_width).  Start/end ranges may overlap, so they are a fallback found
--     by a range join on the (few) of them.
-- (2) Backward: a launch inside an autograd backward op (ops with a sequence number that are backward nodes:
--     `Fwd thread id` > 0, `autograd::engine::evaluate_function: ...` or `XBackward0`) takes the layer of the
--     forward op with the same sequence number: the latest one started before the backward op that is not
--     itself inside a backward op (recomputation under activation checkpointing is), its layer being found by
--     rule (1) at its start.  A range opened inside the backward op (a recomputed forward that our capture
--     annotates) wins over the link.  Recomputed forward work therefore counts as `backward`.  Gradient
--     accumulation (`torch::autograd::AccumulateGrad`, evaluated by the engine without a sequence number) is a
--     backward op linked to no forward op: `backward`, in the range open at the launch if any (PyTorch 1.9's
--     resnet50 sample: 966 kernels that had no pass).
-- (3) Optimizer: a launch inside an optimizer step (`optimizer` range of tracepipe capture, PyTorch's own
--     `Optimizer.step#<Class>.step` range or op, nsys --pytorch=functions-trace's `torch.optim.<Class>.step` op) is
--     `optimizer`, on the path of tracepipe's `optimizer` range when one is open (the capture's global optimizer
--     hooks open it inside PyTorch's own range), else of the outermost such range.
-- (4) Backward threads: a launch on a thread of autograd's engine that no rule above gives a pass is `backward`
--     (in the range open at the launch, if any): a thread named `pt_autograd_<N>` (threads: nsys ThreadNames) or
--     one whose every op with a sequence number is a backward node (`Fwd thread id` > 0: the main thread runs
--     backward nodes too, while torch.compile traces the joint graph or on CPU tensors, but it runs forward ops as
--     well).  A plain `nsys profile` of a training script has no op to link backward work by, yet its autograd
--     thread says what the work is.
-- Precedence: optimizer (3), then a backward op (2), then a backward thread (4), then forward (1).
-- (5) Compiled regions: a launch inside a statement op of a recorded compiled graph (compiled_statements) also
--     gets that statement's module chain, which gpu_op_attribution appends below the range's path.
WITH RECURSIVE seq_ops AS (   -- autograd-visible CPU ops; backward ones are the nodes the engine evaluates.
                              -- Gradient accumulation into .grad (AccumulateGrad) is a node of the engine
                              -- with no sequence number: backward, linked to no forward op
    SELECT trace_id, op_id, pid, tid, start_ns, end_ns, sequence_number,
           (coalesce(fwd_thread_id, 0) > 0 OR name LIKE 'autograd::engine::evaluate_function:%'
            OR regexp_matches(name, '^[A-Za-z0-9_:]+Backward[0-9]*$') OR sequence_number IS NULL) AS is_backward
    FROM ops
    WHERE (sequence_number IS NOT NULL AND sequence_number >= 0)
       OR name IN ('torch::autograd::AccumulateGrad', 'autograd::engine::evaluate_function: torch::autograd::AccumulateGrad')
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
    FROM gpu_op_launches WHERE launch_start_ns IS NOT NULL
),
q AS (   -- every (thread, time) whose innermost layer range is wanted: launches and linked forward ops
    SELECT *, true AS is_launch FROM lp
    UNION ALL
    SELECT DISTINCT trace_id, fwd_pid, fwd_tid, fwd_start_ns, false FROM bwd_link f
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
),
seg AS (   -- each segment until the thread's next one (NULL: the last, open to the end)
    SELECT *, lead(p) OVER (PARTITION BY trace_id, pid, tid ORDER BY p) AS next_p FROM segments
),
seg_width AS (   -- a thread's segments are disjoint: the one holding an instant is found by an equality join on a
                 -- time bucket (an ASOF join sorts every launch point: 10M of them at a 1.7 GB limit, the view
                 -- 9.5 -> 7.7 CPU-s; analyze_10m_memory_s33.txt). The width gives the bounded segments one bucket
                 -- each on average, so at most 3 each in all, however long one of them is.
    SELECT trace_id, pid, tid, greatest(1, (max(next_p)::HUGEINT - min(p)) // count(*))::BIGINT AS width
    FROM seg WHERE next_p IS NOT NULL GROUP BY trace_id, pid, tid
),
seg_buckets AS (   -- each bounded segment [p, next p) once per bucket it meets
    SELECT s.*, unnest(generate_series(s.p // w.width, (s.next_p - 1) // w.width)) AS bucket
    FROM seg s JOIN seg_width w ON w.trace_id = s.trace_id AND w.pid = s.pid AND w.tid = s.tid
    WHERE s.next_p IS NOT NULL
),
innermost AS (   -- (a) and (b) of rule (1): the segment holding the instant, a bounded one or the thread's last
                 -- (at most one of the two holds it)
    SELECT q.trace_id, q.pid, q.tid, q.t, q.is_launch, coalesce(a.range_id, z.range_id) AS range_id
    FROM q
    LEFT JOIN seg_width w   -- LEFT, as the joins after it: joined first, so that the bucket below is a join key
      ON w.trace_id = q.trace_id AND w.pid = q.pid AND w.tid = q.tid
    LEFT JOIN seg_buckets a
      ON a.trace_id = q.trace_id AND a.pid = q.pid AND a.tid = q.tid AND a.bucket = q.t // w.width
     AND q.t >= a.p AND q.t < a.next_p
    LEFT JOIN (SELECT * FROM seg WHERE next_p IS NULL) z
      ON z.trace_id = q.trace_id AND z.pid = q.pid AND z.tid = q.tid AND q.t >= z.p
),
start_end AS (
    SELECT q.trace_id, q.pid, q.tid, q.t, arg_max(r.range_id, r.start_ns) AS range_id
    FROM q JOIN nvtx_ranges r
      ON r.trace_id = q.trace_id AND r.pid = q.pid AND r.tid = q.tid
     AND r.kind = 'start_end' AND r.start_ns <= q.t AND q.t <= r.end_ns
    GROUP BY ALL
),
attributed AS MATERIALIZED (
    SELECT i.trace_id, i.pid, i.tid, i.t, i.is_launch, coalesce(i.range_id, se.range_id) AS range_id
    FROM innermost i
    LEFT JOIN start_end se USING (trace_id, pid, tid, t)
),
opt_ranges AS (   -- optimizer steps: ranges (outermost of nested ones, tracepipe's and PyTorch's apart) and
                  -- PyTorch's ops of the same name
    SELECT trace_id, pid, tid, start_ns, end_ns, range_id, ours
    FROM (
        SELECT *, text = 'optimizer' AS ours,
               max(end_ns) OVER (PARTITION BY trace_id, pid, tid, text = 'optimizer' ORDER BY start_ns, end_ns DESC
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
        FROM pp_all WHERE text = 'optimizer' OR text LIKE 'Optimizer.step#%'
    )
    WHERE prev_end IS NULL OR prev_end < end_ns
    UNION ALL
    SELECT trace_id, pid, tid, start_ns, end_ns, NULL AS range_id, false AS ours FROM ops
    WHERE name LIKE 'Optimizer.step#%' OR regexp_matches(name, '^torch\.optim\.\w+\.step$')
),
bwd_threads AS (   -- rule (4): threads of autograd's engine
    SELECT DISTINCT trace_id, pid, tid FROM threads WHERE name LIKE 'pt\_autograd\_%' ESCAPE '\'
    UNION
    SELECT trace_id, pid, tid FROM ops WHERE sequence_number IS NOT NULL
    GROUP BY ALL HAVING bool_and(fwd_thread_id > 0)
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
opt_ctx AS (   -- tracepipe's own `optimizer` range wins: its global step hooks open it inside PyTorch's
               -- Optimizer.step# range, which a PyTorch trace records and nsys (an op under emit_nvtx) does not
    SELECT q.trace_id, q.pid, q.tid, q.t, coalesce(max(o.range_id) FILTER (WHERE o.ours), max(o.range_id))
                                              AS opt_range_id
    FROM (SELECT * FROM lp WHERE (trace_id, tid) IN (SELECT trace_id, tid FROM opt_ranges)) q
    JOIN opt_ranges o
      ON o.trace_id = q.trace_id AND o.pid IS NOT DISTINCT FROM q.pid AND o.tid = q.tid
     AND o.start_ns <= q.t AND q.t <= o.end_ns
    GROUP BY ALL
),
in_statement AS (   -- rule (5): launch points inside a compiled graph's statement op (none on other threads)
    SELECT q.trace_id, q.pid, q.tid, q.t, s.module_chain, s.modules AS fused_modules, s.root_name AS compiled_root
    FROM (SELECT * FROM lp WHERE (trace_id, tid) IN (SELECT trace_id, tid FROM compiled_statements)) q
    JOIN compiled_statements s
      ON s.trace_id = q.trace_id AND s.pid IS NOT DISTINCT FROM q.pid AND s.tid = q.tid
     AND s.start_ns <= q.t AND q.t <= s.end_ns
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
               WHEN bt.tid IS NOT NULL THEN 'backward'
               WHEN a.range_id IS NOT NULL THEN 'forward'
           END AS pass
    FROM (SELECT * FROM attributed WHERE is_launch) a   -- (a linked forward op's instant is no launch point)
    LEFT JOIN bwd_decided bd USING (trace_id, pid, tid, t)
    LEFT JOIN opt_ctx oc USING (trace_id, pid, tid, t)
    LEFT JOIN bwd_threads bt ON bt.trace_id = a.trace_id AND bt.pid IS NOT DISTINCT FROM a.pid AND bt.tid = a.tid
)
SELECT d.trace_id, d.pid, d.tid, d.t AS launch_start_ns, d.range_id, d.pass, d.bwd_op_id, d.fwd_op_id,
       c.module_chain, c.fused_modules, c.compiled_root
FROM decided d
LEFT JOIN in_statement c USING (trace_id, pid, tid, t)
