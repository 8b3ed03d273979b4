-- launch_point_layers: per launch point (a CPU thread and instant at which GPU work was launched), the layer range
-- and pass of the work launched there: the attribution rules of gpu_op_attribution, over distinct launch points.
-- analyze: on request (an intermediate of gpu_op_attribution, which has all its columns: write it with
--          `tracepipe analyze --view launch_point_layers`)
-- analyze: staged (computed into a file of its own on big inputs although one view reads it, so that its joins and
--          its reader's do not hold DuckDB's memory at once: docs/benchmarks.md, gpu_op_attribution_staged.txt)
-- Inputs:  _point_ranges, _backward_links, _optimizer_steps, _backward_threads, nvtx_ranges (push/pop ranges),
--          compiled_statements
-- Macros:  interval_at, outermost_intervals
-- Output, one row per distinct (trace_id, launch_pid, launch_tid, launch_start_ns) of gpu_op_launches:
--   trace_id         VARCHAR: the trace
--   pid              BIGINT: the launching thread's process (gpu_op_launches.launch_pid)
--   tid              BIGINT: the launching CPU thread (gpu_op_launches.launch_tid)
--   launch_start_ns  BIGINT ns, CPU clock: the launch instant (gpu_op_launches.launch_start_ns)
--   range_id         BIGINT: the layer range (nvtx_ranges.range_id); NULL when none applies
--   pass             VARCHAR: 'forward' | 'backward' | 'optimizer' | NULL (outside every range, and neither
--                    backward nor optimizer work)
--   bwd_op_id        BIGINT: the autograd backward op (ops.op_id) enclosing the launch; NULL outside one
--   fwd_op_id        BIGINT: the forward op that backward op is linked to by sequence number (ops.op_id)
--   module_chain     VARCHAR: for a launch inside a statement of a compiled graph that the capture recorded
--                    (compiled_statements), that statement's module chain (JSON list, outermost first); else NULL
--   fused_modules    VARCHAR: for such a launch, every module the statement computes (JSON list); else NULL
--   compiled_root    VARCHAR: for such a launch, the capture's root range text; else NULL
-- Rules, each in a stage of its own (a private view with its golden test):
-- (1) Forward / everything else, as nsys's NVTX projection: a range lives on the CPU thread that pushed it, and
--     an op belongs to the ranges enclosing its *launching* call on that thread (gpu_op_launches: matched by
--     correlation id; a replayed CUDA graph node where the node was made, so it gets the module that made it), not
--     to those overlapping its GPU time.  Ranges are whatever normalize made layers: NVTX and record_function
--     ranges, the module frames of a PyTorch trace recorded with stacks (nesting with ProfilerStep#N and
--     record_function ranges by time on their thread), nsys --pytorch's module ranges; only those of the trace's
--     layer domain (a CUB `CCCL` range never breaks the model's path).  The innermost range open at the launch
--     (_range_segments: each thread's timeline; _point_ranges: the range at each launch point).
-- (2) Backward: a launch inside an autograd backward op takes the layer of the forward op linked to it by sequence
--     number (_backward_links), its layer being found by rule (1) at the forward op's start.  A range opened
--     inside the backward op (from its start instant on: a recomputed forward that our capture annotates) wins
--     over the link.  Recomputed forward work therefore counts as `backward`.  Gradient accumulation (a backward
--     op linked to no forward op) is `backward`, in the range open at the launch if any (PyTorch 1.9's resnet50
--     sample: 966 kernels that had no pass).
-- (3) Optimizer: a launch inside an optimizer step (_optimizer_steps) is `optimizer`, on the path of tracepipe's
--     `optimizer` range when one is open (the capture's global optimizer hooks open it inside PyTorch's own
--     range), else of the outermost such range.
-- (4) Backward threads: a launch on a thread of autograd's engine (_backward_threads) that no rule above gives a
--     pass is `backward` (in the range open at the launch, if any).
-- Precedence: optimizer (3), then a backward op (2), then a backward thread (4), then forward (1).
-- (5) Compiled regions: a launch inside a statement op of a recorded compiled graph (compiled_statements) also
--     gets that statement's module chain, which gpu_op_attribution appends below the range's path.
WITH attributed AS MATERIALIZED (   -- rule (1) at every launch point and linked forward op
    SELECT * FROM _point_ranges
),
lp AS (SELECT trace_id, pid, tid, t FROM attributed WHERE is_launch),
in_bwd AS (   -- launch points inside a backward op (none in an inference trace: the joins below stay small)
    SELECT q.trace_id, q.pid, q.tid, q.t, b.bwd_op_id, b.start_ns AS bwd_start_ns, b.fwd_op_id,
           b.fwd_pid, b.fwd_tid, b.fwd_start_ns
    FROM (SELECT * FROM lp WHERE (trace_id, tid) IN (SELECT trace_id, tid FROM _backward_links)) q  -- no sort otherwise
    ASOF JOIN _backward_links b
      ON b.trace_id = q.trace_id AND b.pid IS NOT DISTINCT FROM q.pid AND b.tid = q.tid AND q.t >= b.start_ns
    WHERE b.end_ns >= q.t
),
bwd_decided AS (   -- the linked forward op's layer, unless a range opened inside the backward op encloses the launch
    SELECT c.trace_id, c.pid, c.tid, c.t, c.bwd_op_id, c.fwd_op_id,
           CASE WHEN fr.range_id IS NOT NULL AND NOT coalesce(own_r.start_ns >= c.bwd_start_ns, false)
                THEN fr.range_id ELSE own.range_id END AS range_id
    FROM in_bwd c
    LEFT JOIN attributed own USING (trace_id, pid, tid, t)
    LEFT JOIN nvtx_ranges own_r
      ON own_r.trace_id = own.trace_id AND own_r.range_id = own.range_id AND own_r.kind = 'push_pop'
    LEFT JOIN attributed fr
      ON fr.trace_id = c.trace_id AND fr.pid IS NOT DISTINCT FROM c.fwd_pid AND fr.tid = c.fwd_tid
     AND fr.t = c.fwd_start_ns
),
opt_points AS (   -- launch points on a thread with optimizer steps, on interval_at's lanes
    SELECT trace_id, pid AS lane, tid AS sublane, t
    FROM lp WHERE (trace_id, tid) IN (SELECT trace_id, tid FROM _optimizer_steps)
),
opt_steps AS (   -- the steps as interval_at's intervals [lo, hi] (a launch at a step's end is inside it)
    SELECT trace_id, pid AS lane, tid AS sublane, start_ns, end_ns, start_ns AS lo, end_ns AS hi, range_id, ours,
           NULL AS tie
    FROM _optimizer_steps WHERE tid IS NOT NULL
),
ours_steps AS (SELECT * EXCLUDE (start_ns, end_ns, tie) FROM opt_steps WHERE ours),
range_steps AS (SELECT * EXCLUDE (start_ns, end_ns, tie) FROM opt_steps WHERE NOT ours AND range_id IS NOT NULL),
op_candidates AS (SELECT * FROM opt_steps WHERE range_id IS NULL),
op_steps AS (   -- PyTorch's step ops may nest: their outermost ones tell the same (they carry no range)
    SELECT * EXCLUDE (start_ns, end_ns, tie) FROM outermost_intervals(op_candidates, false)
),
opt_ctx AS (   -- tracepipe's own `optimizer` range wins: its global step hooks open it inside PyTorch's
               -- Optimizer.step# range, which a PyTorch trace records and nsys (an op under emit_nvtx) does not.
               -- Each kind of step is disjoint on a thread (_optimizer_steps keeps the outermost of a kind), so
               -- each is found by time buckets; a range join compared every launch of the thread with every step:
               -- 3,000 steps, 2.3M kernels 8.7 -> 4.2 CPU-s (benchmarks/results/optimizer_steps_44.txt).
    SELECT trace_id, lane AS pid, sublane AS tid, t,
           coalesce(max(range_id) FILTER (WHERE ours), max(range_id)) AS opt_range_id
    FROM (SELECT * FROM interval_at(opt_points, ours_steps, 1, true)
          UNION ALL SELECT * FROM interval_at(opt_points, range_steps, 1, true)
          UNION ALL SELECT * FROM interval_at(opt_points, op_steps, 1, true))
    WHERE lo IS NOT NULL
    GROUP BY trace_id, lane, sublane, t
),
statement_points AS (   -- launch points on a thread with compiled statement ops, on interval_at's lanes
    SELECT trace_id, pid AS lane, tid AS sublane, t
    FROM lp WHERE (trace_id, tid) IN (SELECT trace_id, tid FROM compiled_statements)
),
statement_spans AS (   -- the statement ops as intervals [lo, hi]: the outermost of a graph call, disjoint on a thread
    SELECT trace_id, pid AS lane, tid AS sublane, start_ns AS lo, end_ns AS hi, module_chain,
           modules AS fused_modules, root_name AS compiled_root
    FROM compiled_statements WHERE tid IS NOT NULL
),
in_statement AS (   -- rule (5): launch points inside a compiled graph's statement op (none on other threads), found
                    -- by time buckets: a graph call's statements are about as many as its launches, so a join on
                    -- the thread compared every launch with every statement of the trace (20 copies of the compiled
                    -- sample: 4.7 -> 2.1 CPU-s, benchmarks/results/compiled_statements_44.txt)
    SELECT trace_id, lane AS pid, sublane AS tid, t, module_chain, fused_modules, compiled_root
    FROM interval_at(statement_points, statement_spans, 1, true)
    WHERE lo IS NOT NULL
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
    LEFT JOIN _backward_threads bt ON bt.trace_id = a.trace_id AND bt.pid IS NOT DISTINCT FROM a.pid AND bt.tid = a.tid
)
SELECT d.trace_id, d.pid, d.tid, d.t AS launch_start_ns, d.range_id, d.pass, d.bwd_op_id, d.fwd_op_id,
       c.module_chain, c.fused_modules, c.compiled_root
FROM decided d
LEFT JOIN in_statement c USING (trace_id, pid, tid, t)
