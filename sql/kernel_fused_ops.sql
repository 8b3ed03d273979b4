-- kernel_fused_ops: for each kernel Inductor generated (torch.compile), the ops its name says it fuses: a user sees
-- `triton_poi_fused_add_mul_silu_0` as add, mul, silu.
-- Inputs:  kernels, aten_op_names, inductor_kernel_kinds
-- Output, one row per trace and kernel name of Inductor's form:
--   trace_id    VARCHAR: the trace
--   name        VARCHAR: the kernel's name
--   backend     VARCHAR: 'triton' | 'cpp'
--   kind        VARCHAR: Triton's kernel kind ('pointwise', 'reduction', 'persistent reduction', 'template', 'foreach'
--                 ...); NULL for C++ kernels
--   fused_ops   VARCHAR[]: the ops, in the order the name gives them (Inductor sorts them by name)
--   instances   BIGINT: the kernel's launches
--   gpu_time_ns BIGINT ns: their summed duration
-- Rule: Inductor names a kernel `triton_<kind>_fused_<op>_<op>..._<n>` (`cpp_fused_<ops>_<n>` on the CPU), joining
-- the aten ops it fuses with '_', though op names hold underscores themselves (`_to_copy`, `nll_loss_backward`):
-- the ops are read off the name left to right, each the longest op name (aten_op_names) that the rest of the
-- name equals or starts with before a '_'; a part no op name matches is read up to its next '_'.
WITH RECURSIVE named AS (
    SELECT trace_id, name, count(*) AS instances, CAST(sum(duration_ns) AS BIGINT) AS gpu_time_ns,
           regexp_extract(name, '^(triton|cpp)_(?:([a-z]+)_)?fused_?(.*?)_\d+$', ['backend', 'code', 'ops']) AS m
    FROM kernels
    WHERE regexp_matches(name, '^(triton|cpp)_([a-z]+_)?fused')
    GROUP BY trace_id, name
),
names AS (SELECT DISTINCT m.ops AS ops FROM named),
walk AS (   -- one op a step; a name has at most a few dozen
    SELECT ops AS joined, ops AS rest, []::VARCHAR[] AS fused, 0 AS step FROM names
    UNION ALL
    SELECT joined, CASE WHEN length(tok) >= length(rest) THEN '' ELSE substr(rest, length(tok) + 2) END,
           list_append(fused, tok), step + 1
    FROM (
        SELECT w.*,
               coalesce((SELECT max_by(v.name, length(v.name)) FROM aten_op_names v
                         WHERE w.rest = v.name OR starts_with(w.rest, v.name || '_')),
                        nullif(split_part(w.rest, '_', 1), ''), split_part(w.rest, '_', 2)) AS tok
        FROM walk w WHERE w.rest <> '' AND w.step < 256
    )
),
read_back AS (SELECT joined, fused FROM walk WHERE rest = '')
SELECT n.trace_id, n.name, n.m.backend AS backend, k.kind, r.fused AS fused_ops, n.instances, n.gpu_time_ns
FROM named n
LEFT JOIN read_back r ON r.joined = n.m.ops
LEFT JOIN inductor_kernel_kinds k ON k.code = n.m.code
