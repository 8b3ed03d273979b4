-- _gpu_op_calls: every GPU operation with its device, its GPU interval and the instant of the API call that
-- launched it: what step_gpu_idle places in steps and lays on each device's timeline.
-- analyze: inline (computed in each of its two readers: a scan and a filter of gpu_op_layers cost less twice than
--          a file of every GPU operation written and read back)
-- Inputs:  gpu_op_layers, api_calls
-- Output, one row per GPU operation:
--   trace_id   VARCHAR: the trace
--   device_id  INTEGER: the GPU it ran on
--   op_kind    VARCHAR: 'kernel' | 'memcpy' | 'memset'
--   start_ns   BIGINT ns, GPU clock: its start
--   end_ns     BIGINT ns, GPU clock: its end
--   pid        BIGINT: the process that launched it (gpu_op_layers.launch_pid)
--   call_ns    BIGINT ns, CPU clock: the start of the API call that launched it; NULL without one
-- Rule: the launching call is gpu_op_layers' launch_call_id, whose start launch_start_ns is, except for a replayed
-- CUDA graph node made elsewhere: there launch_start_ns is where the node was made, and the call is the graph's
-- launch (the CPU and GPU timestamps of nsys and PyTorch traces share one clock).
SELECT trace_id, device_id, op_kind, start_ns, end_ns, launch_pid AS pid, launch_start_ns AS call_ns
FROM gpu_op_layers WHERE graph_node_id IS NULL
UNION ALL
SELECT g.trace_id, g.device_id, g.op_kind, g.start_ns, g.end_ns, g.launch_pid AS pid, a.start_ns AS call_ns
FROM (SELECT * FROM gpu_op_layers WHERE graph_node_id IS NOT NULL) g
LEFT JOIN api_calls a ON a.trace_id = g.trace_id AND a.call_id = g.launch_call_id
