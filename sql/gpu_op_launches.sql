-- gpu_op_launches: per GPU operation (kernel, memcpy, memset), the API call that launched it: the first half of
-- gpu_op_attribution, computed once (launch_point_layers and gpu_op_attribution read it).
-- analyze: on request (an intermediate of gpu_op_attribution, which has all its columns: write it with
--          `tracepipe analyze --view gpu_op_launches`)
-- Inputs:  kernels, memcpy, memset (through gpu_ops), api_calls, graph_nodes
-- Macros:  gpu_ops
-- Output, one row per GPU operation:
--   trace_id        VARCHAR: the trace
--   op_kind         VARCHAR: 'kernel' | 'memcpy' | 'memset'
--   op_row_id       BIGINT: kernel_id / copy_id / set_id
--   external_id     BIGINT: the operation's PyTorch External id (chrome traces); else NULL
--   launch_call_id  BIGINT: the API call that launched it (api_calls.call_id); for a replayed CUDA graph node the graph
--                     launch
--   launch_start_ns BIGINT ns, CPU clock: where it counts as launched: the launching call's start, or for a replayed
--                     CUDA graph node whose making the trace recorded, the instant the node was made
--   launch_pid      BIGINT: the process of that launch point
--   launch_tid      BIGINT: the CPU thread of that launch point
-- Rules.
-- Launch: the API call of the operation's process with its correlation id; of several such calls (a runtime
--   call and the driver call under it) the earliest.  An operation without one keeps its own pid/tid (chrome
--   traces give them) and NULL launch_call_id / launch_start_ns.
-- Graph node: a replayed node counts as launched where the node was made (graph_nodes: a stream-captured node
--   is made inside the launch call that would have run it; an instantiated node points at its original).
WITH launch AS MATERIALIZED (
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
)
SELECT k.trace_id, k.op_kind, k.op_row_id, k.external_id, l.call_id AS launch_call_id,
       coalesce(m.created_ns, l.start_ns) AS launch_start_ns, coalesce(m.pid, l.pid, k.pid) AS launch_pid,
       coalesce(m.tid, l.tid, k.tid) AS launch_tid
FROM gpu_ops() k   -- (its columns that place the launch: a copy or memset has no tid of its own)
LEFT JOIN launch l
  ON l.trace_id = k.trace_id AND l.correlation_id = k.correlation_id AND l.pid IS NOT DISTINCT FROM k.pid
LEFT JOIN made m ON m.trace_id = k.trace_id AND m.graph_node_id = k.graph_node_id
