-- kernel_layers: every kernel with the NVTX layer range that launched it and its pass.
-- Inputs:  gpu_op_layers
-- Output:  all columns of `kernels`, plus
--          launch_call_id, launch_start_ns (ns, CPU clock), launch_pid, launch_tid: the API call that launched it
--          range_id   the layer range (NULL when launched outside every range)
--          layer      that range's text; path: enclosing texts outermost -> innermost joined by '/' (work of a
--                     compiled region the capture recorded: on down the module chain, gpu_op_attribution)
--          depth      0 = outermost; range_kind 'push_pop' | 'start_end'; domain (NULL: default)
--          pass       'forward' | 'backward' | 'optimizer' | NULL
--          bwd_op_id, fwd_op_id: the backward op around the launch and the forward op it was linked to
--          op_id, op_name: the PyTorch CPU op that launched it (chrome traces: by External id; else NULL)
--          fused_modules: the modules a compiled kernel computes (JSON list; NULL outside compiled regions)
-- Rule: the kernel rows of gpu_op_layers (whose header gives the rules: nsys's NVTX projection for forward
-- work, backward ops linked to their forward op by autograd sequence number, optimizer steps).
SELECT * EXCLUDE (op_kind, op_row_id, bytes, copy_kind)
FROM gpu_op_layers
WHERE op_kind = 'kernel'
