-- ncu_kernel_match: each Nsight Compute launch paired with the trace kernel it measured.
-- Inputs:  ncu_kernels (ncu CSV traces), kernels (nsys / chrome traces of the same program)
-- Output, one row per matched pair:
--   ncu_trace_id VARCHAR: the ncu trace
--   trace_id     VARCHAR: the timeline (nsys / chrome) trace
--   launch_id    BIGINT: ncu's ID of the launch
--   kernel_id    BIGINT: the kernels row it measured
--   name         VARCHAR: ncu's demangled name
--   func         VARCHAR: the matching key: the function name alone
--   grid         VARCHAR blocks: 'x,y,z'
--   block        VARCHAR threads: 'x,y,z'
--   launch_order BIGINT: 0-based position among the launches with the same key
-- Rule: an ncu capture and a timeline capture are separate runs, so they share no ids or timestamps; a launch is
-- matched by what both record: the kernel's function name, its grid and block, and its position among the
-- launches with that same (function, grid, block) in launch order (ncu ID; kernels: correlation id, then
-- start). Full names cannot be compared: ncu and nsys demangle templates differently ("1024" vs "(int)1024",
-- "at::<unnamed>::" vs "at::native::<unnamed>::"), so the key is the function name alone: the last
-- identifier before the template/argument list, namespaces and a leading "void " dropped.
-- Every (ncu trace, kernels trace) pair is tried; filter on ncu_trace_id/trace_id for the pair you mean.
WITH ncu AS (
    SELECT trace_id AS ncu_trace_id, launch_id, name,
           regexp_extract(regexp_replace(name, '^void\s+', ''),
                          '^(?:(?:[A-Za-z_][A-Za-z0-9_]*|<unnamed>|\(anonymous namespace\))::)*([A-Za-z_][A-Za-z0-9_]*)', 1) AS func,
           concat_ws(',', grid_x, grid_y, grid_z) AS grid, concat_ws(',', block_x, block_y, block_z) AS block
    FROM ncu_kernels
), ncu_ordered AS (
    SELECT *, row_number() OVER (PARTITION BY ncu_trace_id, func, grid, block ORDER BY launch_id) - 1 AS launch_order
    FROM ncu
), names AS (   -- the key once per distinct name (names repeat), and only when there are ncu launches to match
    SELECT name,
           regexp_extract(regexp_replace(name, '^void\s+', ''),
                          '^(?:(?:[A-Za-z_][A-Za-z0-9_]*|<unnamed>|\(anonymous namespace\))::)*([A-Za-z_][A-Za-z0-9_]*)', 1) AS func
    FROM (SELECT DISTINCT name FROM kernels WHERE EXISTS (SELECT 1 FROM ncu_kernels))
), trace AS (   -- only launches whose (func, grid, block) ncu has: their order among same-key launches is unchanged
    SELECT k.trace_id, k.kernel_id, n.func,
           concat_ws(',', k.grid_x, k.grid_y, k.grid_z) AS grid, concat_ws(',', k.block_x, k.block_y, k.block_z) AS block,
           k.correlation_id, k.start_ns
    FROM kernels k
    JOIN names n ON n.name = k.name
    SEMI JOIN (SELECT DISTINCT func, grid, block FROM ncu) c
      ON c.func = n.func AND c.grid = concat_ws(',', k.grid_x, k.grid_y, k.grid_z)
     AND c.block = concat_ws(',', k.block_x, k.block_y, k.block_z)
), trace_ordered AS (
    SELECT *, row_number() OVER (PARTITION BY trace_id, func, grid, block
                                 ORDER BY correlation_id, start_ns, kernel_id) - 1 AS launch_order
    FROM trace
)
SELECT n.ncu_trace_id, t.trace_id, n.launch_id, t.kernel_id, n.name, n.func, n.grid, n.block, n.launch_order
FROM ncu_ordered n
JOIN trace_ordered t USING (func, grid, block, launch_order)
ORDER BY n.ncu_trace_id, t.trace_id, n.launch_id
