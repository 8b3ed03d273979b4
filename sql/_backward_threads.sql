-- _backward_threads: the CPU threads of autograd's engine, whose launches are `backward` work when no other rule
-- gives them a pass (rule (4) of launch_point_layers).
-- Inputs:  threads (nsys ThreadNames), ops
-- Output, one row per thread:
--   trace_id   VARCHAR: the trace
--   pid        BIGINT: the thread's process
--   tid        BIGINT: the thread
-- Rule: a thread named `pt_autograd_<N>`, or one whose every op with a sequence number is a backward node
-- (`Fwd thread id` > 0).  The main thread runs backward nodes too (while torch.compile traces the joint graph, or
-- on CPU tensors), but it runs forward ops as well.  A plain `nsys profile` of a training script has no op to link
-- backward work by, yet its autograd thread says what the work is.
SELECT DISTINCT trace_id, pid, tid FROM threads WHERE name LIKE 'pt\_autograd\_%' ESCAPE '\'
UNION
SELECT trace_id, pid, tid FROM ops WHERE sequence_number IS NOT NULL
GROUP BY ALL HAVING bool_and(fwd_thread_id > 0)
