-- gpu_op_attribution: per GPU operation (kernel, memcpy, memset), the layer range that launched it and its pass,
-- without the operation's own columns (gpu_op_layers joins them on).
-- Plan: narrow rows, so that the joins and the Parquet writer do not spill against each other on big traces; the
-- rules are in its two inputs, each computed once into a file of its own (gpu_op_launches, read by two views;
-- launch_point_layers, staged): docs/benchmarks.md, gpu_op_attribution.txt and gpu_op_attribution_staged.txt.
-- Inputs:  gpu_op_launches, launch_point_layers, nvtx_paths, ops
-- Macros:  path_level
-- Output, one row per GPU operation:
--   trace_id        VARCHAR: the trace
--   op_kind         VARCHAR: 'kernel' | 'memcpy' | 'memset'
--   op_row_id       BIGINT: kernel_id / copy_id / set_id
--   launch_call_id  BIGINT: the API call that launched it (api_calls.call_id); for a replayed CUDA graph node the graph
--                     launch
--   launch_start_ns BIGINT ns, CPU clock: where it counts as launched: the launching call's start, or for a replayed
--                     CUDA graph node whose making the trace recorded, the instant the node was made
--   launch_pid      BIGINT: the process of that launch point
--   launch_tid      BIGINT: the CPU thread of that launch point
--   range_id        BIGINT: the layer range (nvtx_ranges.range_id); NULL when none applies
--   layer           VARCHAR: the range's text (work of a recorded compiled region: the module it is placed on); NULL =
--                     outside every range
--   path            VARCHAR: the enclosing range texts outermost -> innermost joined by '/' (a '/' inside a text
--                     written '∕': path_level; a compiled region's work: on down its module chain)
--   depth           BIGINT: 0 = outermost
--   range_kind      VARCHAR: 'push_pop' | 'start_end'
--   domain          VARCHAR: the range's NVTX domain; NULL = the default one
--   pass            VARCHAR: 'forward' | 'backward' | 'optimizer' | NULL (outside every range, neither backward nor
--                     optimizer work)
--   bwd_op_id       BIGINT: the autograd backward op (ops.op_id) enclosing the launch; NULL outside one
--   fwd_op_id       BIGINT: the forward op that backward op is linked to by sequence number (ops.op_id)
--   op_id           BIGINT: the PyTorch CPU op that launched it (chrome traces: by External id, the lowest op id of it;
--                     else NULL)
--   op_name         VARCHAR: that op's name
--   fused_modules   VARCHAR: for work of a torch.compile'd region the capture recorded, every module the launching
--                     statement computes (JSON list of qualified names); else NULL
--   module_chain    VARCHAR[]: for work of a recorded compiled region, the modules below the range around the region
--                     down to the one it is placed on (qualified names, outermost first: the last is `layer`); else
--                     NULL
-- Rules: the launching call is gpu_op_launches'; the layer range, pass and backward link of a launch point are
-- launch_point_layers' (rules (1)-(4) there); here each operation takes those of its launch point, the range's
-- path (nvtx_paths) and the PyTorch op with its External id (the lowest op id of that id).
-- Compiled regions: no module range opens inside one, so its work sits on the range around the region (the
-- compiled module's); where the capture recorded which module each statement of the graph computes, the path
-- goes on down that module's chain: `model/layers.0/layers.0.mlp` for a kernel of the MLP of a compiled `model`.
-- A fused kernel serving several modules is placed on the module of its output (rule of
-- compiled_kernels) and lists them all in fused_modules.  The chain's names are relative to the compiled
-- module: below the capture's root range they are the qualified names themselves, below another module's range
-- they are prefixed with its name (`layers.0` compiled on its own: `layers.0.mlp`).
WITH placed AS (
    SELECT kl.trace_id, kl.op_kind, kl.op_row_id, kl.launch_call_id, kl.launch_start_ns, kl.launch_pid,
           kl.launch_tid, d.range_id, p.text, p.path, p.depth, p.kind AS range_kind, p.domain, d.pass,
           d.bwd_op_id, d.fwd_op_id, o.op_id, o.name AS op_name,
           -- the chain's qualified names below the range around a compiled region (NULL: not in one)
           list_transform(CAST(from_json(d.module_chain, '["VARCHAR"]') AS VARCHAR[]),
                          lambda x: CASE WHEN p.text IS NULL OR p.text = d.compiled_root THEN x ELSE p.text || '.' || x END)
               AS names,
           d.fused_modules
    FROM gpu_op_launches kl
    LEFT JOIN launch_point_layers d
      ON d.trace_id = kl.trace_id AND d.pid IS NOT DISTINCT FROM kl.launch_pid
     AND d.tid IS NOT DISTINCT FROM kl.launch_tid AND d.launch_start_ns = kl.launch_start_ns
    LEFT JOIN nvtx_paths p ON p.trace_id = d.trace_id AND p.range_id = d.range_id
    LEFT JOIN (SELECT trace_id, external_id, min(op_id) AS op_id, arg_min(name, op_id) AS name
               FROM ops WHERE external_id IS NOT NULL GROUP BY ALL) o
      ON o.trace_id = kl.trace_id AND o.external_id = kl.external_id
)
SELECT trace_id, op_kind, op_row_id, launch_call_id, launch_start_ns, launch_pid, launch_tid, range_id,
       CASE WHEN len(names) > 0 THEN names[-1] ELSE text END AS layer,
       CASE WHEN len(names) > 0
            THEN concat_ws('/', path, array_to_string(list_transform(names, lambda x: path_level(x)), '/'))
            ELSE path END AS path,
       CASE WHEN len(names) > 0 THEN coalesce(depth + 1, 0) + len(names) - 1 ELSE depth END AS depth,
       range_kind, domain, pass, bwd_op_id, fwd_op_id, op_id, op_name, fused_modules, names AS module_chain
FROM placed
