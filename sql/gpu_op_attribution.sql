-- gpu_op_attribution: per GPU operation (kernel, memcpy, memset), the layer range that launched it and its pass,
-- without the operation's own columns (gpu_op_layers joins them on): narrow rows, so that the joins and the
-- Parquet writer do not spill against each other on big traces (benchmarks/results/gpu_op_attribution.txt).
-- The rules are in its two inputs, each computed once into a file of its own (gpu_op_launches, read by two
-- views; launch_point_layers, staged): 10M kernels 53-65 -> 31 CPU-s (gpu_op_attribution_staged.txt).
-- Inputs:  gpu_op_launches, launch_point_layers, nvtx_paths, ops
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
-- Rules: the launching call is gpu_op_launches'; the layer range, pass and backward link of a launch point are
-- launch_point_layers' (rules (1)-(3) there); here each operation takes those of its launch point, the range's
-- path (nvtx_paths) and the PyTorch op with its External id (the lowest op id of that id).
SELECT kl.trace_id, kl.op_kind, kl.op_row_id, kl.launch_call_id, kl.launch_start_ns, kl.launch_pid, kl.launch_tid,
       d.range_id, p.text AS layer, p.path, p.depth, p.kind AS range_kind, p.domain, d.pass,
       d.bwd_op_id, d.fwd_op_id, o.op_id, o.name AS op_name
FROM gpu_op_launches kl
LEFT JOIN launch_point_layers d
  ON d.trace_id = kl.trace_id AND d.pid IS NOT DISTINCT FROM kl.launch_pid
 AND d.tid IS NOT DISTINCT FROM kl.launch_tid AND d.launch_start_ns = kl.launch_start_ns
LEFT JOIN nvtx_paths p ON p.trace_id = d.trace_id AND p.range_id = d.range_id
LEFT JOIN (SELECT trace_id, external_id, min(op_id) AS op_id, arg_min(name, op_id) AS name
           FROM ops WHERE external_id IS NOT NULL GROUP BY ALL) o
  ON o.trace_id = kl.trace_id AND o.external_id = kl.external_id
