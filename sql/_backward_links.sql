-- _backward_links: each outermost autograd backward op with the forward op it is linked to by sequence number
-- (rule (2) of launch_point_layers: the forward op whose layer the backward op's work takes).
-- Inputs:  ops (PyTorch CPU ops: sequence numbers, `Fwd thread id`)
-- Macros:  outermost_intervals
-- Output, one row per outermost backward op:
--   trace_id      VARCHAR: the trace
--   bwd_op_id     BIGINT: the backward op (ops.op_id)
--   pid           BIGINT: its process
--   tid           BIGINT: its thread
--   start_ns      BIGINT ns, CPU clock: its start
--   end_ns        BIGINT ns, CPU clock: its end
--   fwd_op_id     BIGINT: the forward op it is linked to (ops.op_id); NULL when none (gradient accumulation, a
--                 sequence number no forward op has)
--   fwd_pid       BIGINT: the forward op's process
--   fwd_tid       BIGINT: the forward op's thread
--   fwd_start_ns  BIGINT ns, CPU clock: the forward op's start (where its layer is looked up)
-- Rule: a backward op is an op the autograd engine evaluates: one with a sequence number that is a backward node
-- (`Fwd thread id` > 0, `autograd::engine::evaluate_function: ...` or `XBackward0`), or gradient accumulation
-- (`torch::autograd::AccumulateGrad`, evaluated without a sequence number: backward, linked to no forward op).
-- Only the outermost count (evaluate_function wraps XBackward0, and work after it, with one number).  Its forward
-- op is the latest op started at or before it with the same sequence number that is not a backward node and not
-- itself inside a backward op (a forward op recomputed under activation checkpointing runs inside one).
WITH seq_ops AS (   -- autograd-visible CPU ops; backward ones are the nodes the engine evaluates.
                    -- Gradient accumulation into .grad (AccumulateGrad) is a node of the engine
                    -- with no sequence number: backward, linked to no forward op
    SELECT trace_id, op_id, pid, tid, start_ns, end_ns, sequence_number,
           (coalesce(fwd_thread_id, 0) > 0 OR name LIKE 'autograd::engine::evaluate_function:%'
            OR regexp_matches(name, '^[A-Za-z0-9_:]+Backward[0-9]*$') OR sequence_number IS NULL) AS is_backward
    FROM ops
    WHERE (sequence_number IS NOT NULL AND sequence_number >= 0)
       OR name IN ('torch::autograd::AccumulateGrad', 'autograd::engine::evaluate_function: torch::autograd::AccumulateGrad')
),
bwd_ops AS (SELECT *, pid AS lane, tid AS sublane, NULL AS tie FROM seq_ops WHERE is_backward),
bwd AS (   -- outermost backward ops of each thread
    SELECT trace_id, op_id, pid, tid, start_ns, end_ns, sequence_number FROM outermost_intervals(bwd_ops, false)
),
fwd AS (   -- forward ops not run inside a backward op (recomputation is)
    SELECT f.trace_id, f.op_id, f.pid, f.tid, f.start_ns, f.sequence_number
    FROM (SELECT * FROM seq_ops WHERE NOT is_backward) f
    ASOF LEFT JOIN bwd b
      ON b.trace_id = f.trace_id AND b.pid IS NOT DISTINCT FROM f.pid AND b.tid = f.tid AND f.start_ns >= b.start_ns
    WHERE b.op_id IS NULL OR b.end_ns < f.start_ns
)
SELECT b.trace_id, b.op_id AS bwd_op_id, b.pid, b.tid, b.start_ns, b.end_ns,
       f.op_id AS fwd_op_id, f.pid AS fwd_pid, f.tid AS fwd_tid, f.start_ns AS fwd_start_ns
FROM bwd b
ASOF LEFT JOIN fwd f
  ON f.trace_id = b.trace_id AND f.sequence_number = b.sequence_number AND b.start_ns >= f.start_ns
