-- gpu_op_layers: every GPU operation (kernel, memcpy, memset) with the layer range that launched it and its pass.
-- Inputs:  kernels, memcpy, memset (through gpu_ops), gpu_op_attribution, nvtx_paths
-- Macros:  gpu_ops, path_level
-- Output, one row per GPU operation (kernel, memcpy, memset):
--   trace_id                            VARCHAR: the trace
--   kernel_id                           BIGINT: the kernel (kernels.kernel_id); for a copy or memset, NULL (op_row_id
--                                         is its id)
--   device_id                           INTEGER: the GPU (CUDA device ordinal)
--   context_id                          BIGINT: the CUDA context
--   stream_id                           BIGINT: the CUDA stream
--   correlation_id                      BIGINT: CUPTI correlation id: equals the launching api_calls.correlation_id
--   external_id                         BIGINT: the PyTorch profiler's External id (links to ops.external_id); NULL for
--                                         nsys
--   start_ns                            BIGINT ns, GPU clock: start of the GPU execution
--   end_ns                              BIGINT ns, GPU clock: its end
--   duration_ns                         BIGINT ns: end_ns - start_ns
--   name                                VARCHAR: the demangled kernel name; `[CUDA memcpy <kind>]` / `[CUDA memset]`
--                                         for a copy / memset
--   short_name                          VARCHAR: the name without template arguments and parameters (nsys shortName)
--   grid_x                              INTEGER blocks: gridDim.x
--   grid_y                              INTEGER blocks: gridDim.y
--   grid_z                              INTEGER blocks: gridDim.z
--   block_x                             INTEGER threads: blockDim.x
--   block_y                             INTEGER threads: blockDim.y
--   block_z                             INTEGER threads: blockDim.z
--   registers_per_thread                INTEGER registers: registers per thread
--   static_smem_bytes                   BIGINT bytes: static shared memory per block
--   dynamic_smem_bytes                  BIGINT bytes: dynamic shared memory per block
--   local_mem_per_thread_bytes          BIGINT bytes: local (spill) memory per thread
--   launch_type                         VARCHAR: Regular, Cooperative ...
--   graph_id                            BIGINT: the CUDA graph it was launched from; NULL outside a graph
--   graph_node_id                       BIGINT: its CUDA graph node; NULL outside a graph
--   pid                                 BIGINT: process of the launching API call (as the trace recorded it)
--   tid                                 BIGINT: CPU thread of the launching API call (as the trace recorded it)
--   profiler_blocks_per_sm              DOUBLE: the PyTorch profiler's own `blocks per SM`
--   profiler_warps_per_sm               DOUBLE: the PyTorch profiler's `warps per SM`
--   profiler_est_achieved_occupancy_pct DOUBLE %: the PyTorch profiler's `est. achieved occupancy %`
--   op_kind                             VARCHAR: 'kernel' | 'memcpy' | 'memset'
--   op_row_id                           BIGINT: kernel_id / copy_id / set_id
--   bytes                               BIGINT bytes: moved or set (NULL for kernels)
--   copy_kind                           VARCHAR: the copy's direction (HtoD, DtoH, DtoD ...; NULL for kernels and
--                                         memsets)
--   launch_call_id                      BIGINT: the API call that launched it (api_calls.call_id); for a replayed CUDA
--                                         graph node the graph launch
--   launch_start_ns                     BIGINT ns, CPU clock: where it counts as launched: the launching call's start,
--                                         or for a replayed CUDA graph node whose making the trace recorded, the
--                                         instant the node was made
--   launch_pid                          BIGINT: the process of that launch point
--   launch_tid                          BIGINT: the CPU thread of that launch point
--   range_id                            BIGINT: the layer range (nvtx_ranges.range_id); NULL when none applies
--   layer                               VARCHAR: the range's text (work of a recorded compiled region: the module it is
--                                         placed on); NULL = outside every range
--   path                                VARCHAR: the enclosing range texts outermost -> innermost joined by '/' (a
--                                         '/' inside a text written '∕': path_level; a compiled region's work: on
--                                         down its module chain)
--   depth                               BIGINT: 0 = outermost
--   range_kind                          VARCHAR: 'push_pop' | 'start_end'
--   domain                              VARCHAR: the range's NVTX domain; NULL = the default one
--   pass                                VARCHAR: 'forward' | 'backward' | 'optimizer' | NULL (outside every range,
--                                         neither backward nor optimizer work)
--   bwd_op_id                           BIGINT: the autograd backward op (ops.op_id) enclosing the launch; NULL outside
--                                         one
--   fwd_op_id                           BIGINT: the forward op that backward op is linked to by sequence number
--                                         (ops.op_id)
--   op_id                               BIGINT: the PyTorch CPU op that launched it (chrome traces: by External id, the
--                                         lowest op id of it; else NULL)
--   op_name                             VARCHAR: that op's name
--   fused_modules                       VARCHAR: for work of a torch.compile'd region the capture recorded, every
--                                         module the launching statement computes (JSON list of qualified names); else
--                                         NULL
-- Rule: gpu_op_attribution's rules (forward by the launching call's NVTX ranges, backward by the autograd link,
-- optimizer steps); this view puts each operation's own columns beside them.
-- Plan: the big join's hash table holds no more than the join needs: the range's texts (layer, path, depth,
-- range_kind, domain) are looked up in nvtx_paths (one row per range) after it, and each kind of operation is joined
-- to its own rows of gpu_op_attribution (gpu_ops one kind at a time), so op_kind is no key either (docs/benchmarks.md,
-- analyze_10m_memory_s34.txt).
WITH attribution AS NOT MATERIALIZED (   -- read once per kind of operation below, never held whole
    SELECT * EXCLUDE (layer, path, depth, range_kind, domain) FROM gpu_op_attribution
),
ops AS (   -- each kind of operation joined to its own kind's rows
    SELECT g.*, a.* EXCLUDE (trace_id, op_row_id)
    FROM gpu_ops(kinds := ['kernel']) g
    LEFT JOIN (SELECT * EXCLUDE (op_kind) FROM attribution WHERE op_kind = 'kernel') a
      ON a.trace_id = g.trace_id AND a.op_row_id = g.op_row_id
    UNION ALL BY NAME
    SELECT g.*, a.* EXCLUDE (trace_id, op_row_id)
    FROM gpu_ops(kinds := ['memcpy']) g
    LEFT JOIN (SELECT * EXCLUDE (op_kind) FROM attribution WHERE op_kind = 'memcpy') a
      ON a.trace_id = g.trace_id AND a.op_row_id = g.op_row_id
    UNION ALL BY NAME
    SELECT g.*, a.* EXCLUDE (trace_id, op_row_id)
    FROM gpu_ops(kinds := ['memset']) g
    LEFT JOIN (SELECT * EXCLUDE (op_kind) FROM attribution WHERE op_kind = 'memset') a
      ON a.trace_id = g.trace_id AND a.op_row_id = g.op_row_id
)
SELECT o.* EXCLUDE (launch_call_id, launch_start_ns, launch_pid, launch_tid, range_id, pass, bwd_op_id, fwd_op_id,
                    op_id, op_name, fused_modules, module_chain),
       o.launch_call_id, o.launch_start_ns, o.launch_pid, o.launch_tid, o.range_id,
       -- a compiled region's work goes on down its module chain (gpu_op_attribution's rule, same expressions)
       CASE WHEN len(o.module_chain) > 0 THEN o.module_chain[-1] ELSE p.text END AS layer,
       CASE WHEN len(o.module_chain) > 0
            THEN concat_ws('/', p.path, array_to_string(list_transform(o.module_chain, lambda x: path_level(x)), '/'))
            ELSE p.path END AS path,
       CASE WHEN len(o.module_chain) > 0 THEN coalesce(p.depth + 1, 0) + len(o.module_chain) - 1 ELSE p.depth END
           AS depth,
       p.kind AS range_kind, p.domain, o.pass, o.bwd_op_id, o.fwd_op_id, o.op_id, o.op_name, o.fused_modules
FROM ops o
LEFT JOIN nvtx_paths p ON p.trace_id = o.trace_id AND p.range_id = o.range_id
