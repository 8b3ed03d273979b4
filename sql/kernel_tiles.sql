-- kernel_tiles: the output tile a GEMM / implicit-GEMM kernel computes per block, read from its name, and how
-- much padding the tiling adds over the module call's output (coverage >= 1).
-- Inputs:  kernel_tile_patterns (pipeline/analyze/tiles.py: one row per library naming scheme), kernel_layers
--          (timeline kernels with their innermost range), ncu_kernels, ncu_kernel_metrics (measured MACs),
--          layer_call_shapes (output shape and analytic MACs of one module call)
-- Output, one row per kernel whose name matches a pattern (timeline kernels and ncu launches):
--   source               VARCHAR: 'kernels' | 'ncu'
--   trace_id             VARCHAR: the trace
--   kernel_id            BIGINT: the kernels row; NULL for ncu
--   launch_id            BIGINT: the ncu ID; NULL for timeline kernels
--   layer                VARCHAR: the innermost range's text
--   module_type          VARCHAR: the module's class (layer_call_shapes)
--   name                 VARCHAR: the kernel's name
--   blocks               BIGINT blocks: gridDim product
--   grid_z               INTEGER blocks: gridDim.z
--   library              VARCHAR: the naming scheme matched (kernel_tile_patterns)
--   tile_m               BIGINT elements: rows of the output tile a block computes
--   tile_n               BIGINT elements: columns of the output tile
--   tile_k               BIGINT elements: the reduction step; NULL when the name lacks it
--   split_k              BOOLEAN: the name says the grid also splits the reduction
--   output_elements      BIGINT elements: of the call's first output
--   out_positions        BIGINT: rows of the output GEMM: N*P*Q of a conv, the leading dims of a Linear
--   out_channels         BIGINT: conv output channels / Linear out_features
--   reduction_length     BIGINT MACs: per output element = analytic MACs / output_elements (C_in/groups*R*S of a conv,
--                          in_features of a Linear)
--   reduction_channels   BIGINT: input channels of one filter tap
--   analytic_macs        BIGINT MACs: of one module call
--   orientation          VARCHAR: 'positions_x_channels' (tile M over positions) | 'channels_x_positions' (transposed)
--   batch_split          INTEGER: grid_z when it splits the positions per image, else 1
--   tiles_needed         BIGINT tiles: batch_split * ceil(rows / (batch_split * tile M)) * ceil(cols / tile N): the
--                          fewest tiles covering the output
--   launched_tiles       DOUBLE tiles: output tiles the grid computes (see the rule)
--   tiles_per_block      DOUBLE tiles: launched_tiles / blocks
--   min_coverage         DOUBLE: tiles_needed * tile_m * tile_n / output_elements
--   output_coverage      DOUBLE: launched_tiles * tile_m * tile_n / output_elements
--   reduction_coverage   DOUBLE: padded reduction / reduction, per the pattern's reduction_padding; 1 when the name
--                          carries no K step
--   predicted_macs_ratio DOUBLE: output_coverage * reduction_coverage: MACs the kernel does / analytic MACs
--   measured_macs        DOUBLE MACs: ncu FMA + tensor MACs of this launch; NULL for timeline kernels
--   measured_vs_analytic DOUBLE: measured_macs / analytic_macs
--   reason               VARCHAR: why tile columns are NULL; NULL when computed
-- Rules: the first pattern by priority wins.  Orientation: implicit-GEMM convolutions put positions on tile M;
-- GEMMs ('either') take the orientation whose tiles_needed is nearest the blocks (cuBLAS transposes).
-- launched_tiles = blocks when the grid has at least tiles_needed blocks (one tile per block: extra blocks
-- round the grid up and pad, e.g. 13 -> 14 position tiles on sm90 xmma), blocks / (blocks // tiles_needed)
-- when the name says split-K (the extra blocks share tiles), and tiles_needed when there are fewer blocks than
-- tiles (a persistent kernel loops over tiles).  Only Conv* and Linear modules are mapped: their call is one
-- GEMM whose output is the module's output; other modules get a reason.
WITH pat AS (
    SELECT * FROM kernel_tile_patterns
), timeline AS (
    SELECT 'kernels' AS source, trace_id, kernel_id, NULL::BIGINT AS launch_id, layer, name,
           try_cast(grid_x::HUGEINT * grid_y * grid_z AS BIGINT) AS blocks, grid_z
    FROM kernel_layers
), ncu AS (
    SELECT 'ncu' AS source, trace_id, NULL::BIGINT AS kernel_id, launch_id,
           regexp_extract(nvtx_push_pop, '[^/]+$') AS layer, name,
           try_cast(grid_x::HUGEINT * grid_y * grid_z AS BIGINT) AS blocks, grid_z
    FROM ncu_kernels
), k AS (
    SELECT *, regexp_replace(trace_id, '\.[^.]*$', '') AS capture_id FROM timeline
    UNION ALL
    SELECT *, regexp_replace(trace_id, '\.[^.]*$', '') AS capture_id FROM ncu
), name_tiles AS (
    -- Per distinct name, not per kernel: a pattern read from a table is compiled for every row it meets
    -- (19k kernels x 8 patterns took 2 s; names repeat, 49 distinct there).
    SELECT n.name, p.library, p.orientation AS pattern_orientation, p.reduction_padding,
           nullif(regexp_extract(n.name, p.pattern, 1), '')::BIGINT AS tile_m,
           nullif(regexp_extract(n.name, p.pattern, 2), '')::BIGINT AS tile_n,
           nullif(regexp_extract(n.name, p.pattern, 3), '')::BIGINT AS tile_k,
           coalesce(regexp_matches(n.name, p.split_k), false) AS split_k
    FROM (SELECT DISTINCT name FROM k) n JOIN pat p ON regexp_matches(n.name, p.pattern)
    QUALIFY row_number() OVER (PARTITION BY n.name ORDER BY p.priority) = 1
), matched AS (
    SELECT k.*, t.library, t.pattern_orientation, t.reduction_padding, t.tile_m, t.tile_n, t.tile_k, t.split_k
    FROM k JOIN name_tiles t ON t.name = k.name
), geo AS (
    SELECT m.*, s.module_type, s.same_calls, s.analytic_macs, s.output_elements, s.out_channels, s.out_positions,
           s.in_channels, s.reduction_length, (s.capture_id IS NOT NULL) AS has_shape,
           CASE WHEN m.grid_z > 1 AND s.out_positions % m.grid_z = 0 THEN m.grid_z ELSE 1 END AS batch_split
    FROM matched m
    LEFT JOIN layer_call_shapes s ON s.capture_id = m.capture_id AND s.layer = m.layer
), orient AS (
    SELECT *,
           batch_split * ((out_positions // batch_split + tile_m - 1) // tile_m) * ((out_channels + tile_n - 1) // tile_n)
               AS tiles_a,
           batch_split * ((out_channels + tile_m - 1) // tile_m) * ((out_positions // batch_split + tile_n - 1) // tile_n)
               AS tiles_b
    FROM geo
), chosen AS (
    SELECT *,
           CASE WHEN tiles_a IS NULL THEN NULL
                WHEN pattern_orientation = 'positions_x_channels' OR abs(blocks - tiles_a) <= abs(blocks - tiles_b)
                THEN 'positions_x_channels' ELSE 'channels_x_positions' END AS orientation,
           CASE WHEN pattern_orientation = 'positions_x_channels' OR abs(blocks - tiles_a) <= abs(blocks - tiles_b)
                THEN tiles_a ELSE tiles_b END AS tiles_needed,
           -- input channels of one filter tap (conv: reduction = C_in/groups * taps; groups = 1 assumed
           -- when the reduction is a whole multiple of C_in)
           CASE WHEN reduction_length % in_channels = 0 THEN in_channels END AS reduction_channels
    FROM orient
), cov AS (
    SELECT *,
           CASE WHEN blocks >= tiles_needed AND split_k THEN blocks / (blocks // tiles_needed)
                WHEN blocks >= tiles_needed THEN blocks
                ELSE tiles_needed END AS launched_tiles,
           CASE WHEN tiles_needed IS NULL THEN NULL
                WHEN tile_k IS NULL THEN 1.0
                WHEN reduction_padding = 'per_tap' AND reduction_channels IS NOT NULL
                    THEN ((reduction_channels + tile_k - 1) // tile_k) * tile_k / reduction_channels
                WHEN reduction_padding = 'flattened' OR module_type LIKE '%Linear%'
                    THEN ((reduction_length + tile_k - 1) // tile_k) * tile_k / reduction_length
                END AS reduction_coverage
    FROM chosen
), ncu_macs AS (
    SELECT trace_id, launch_id, macs AS measured_macs FROM ncu_kernel_metrics
)
SELECT c.source, c.trace_id, c.kernel_id, c.launch_id, c.layer, c.module_type, c.name, c.blocks,
       c.grid_z, c.library, c.tile_m, c.tile_n, c.tile_k, c.split_k,
       c.output_elements, c.out_positions, c.out_channels, c.reduction_length, c.reduction_channels,
       c.analytic_macs, c.orientation, c.batch_split, c.tiles_needed, c.launched_tiles,
       c.launched_tiles / c.blocks AS tiles_per_block,
       c.tiles_needed::DOUBLE * c.tile_m * c.tile_n / c.output_elements AS min_coverage,
       c.launched_tiles::DOUBLE * c.tile_m * c.tile_n / c.output_elements AS output_coverage,
       c.reduction_coverage,
       c.launched_tiles::DOUBLE * c.tile_m * c.tile_n / c.output_elements * c.reduction_coverage AS predicted_macs_ratio,
       n.measured_macs, n.measured_macs / nullif(c.analytic_macs, 0) AS measured_vs_analytic,
       CASE WHEN c.layer IS NULL THEN 'kernel outside every annotated module'
            WHEN NOT c.has_shape THEN 'layer not in layer_shapes (capture without shapes, or not a module range)'
            WHEN NOT c.same_calls THEN 'calls of this layer differ in shape: not mapped'
            WHEN c.out_channels IS NULL THEN 'module ' || c.module_type || ' is not one GEMM (only Conv*/Linear are mapped)'
            WHEN c.tile_m IS NULL THEN 'the name carries no tile size (' || c.library || ')'
       END AS reason
FROM cov c
LEFT JOIN ncu_macs n ON c.source = 'ncu' AND n.trace_id = c.trace_id AND n.launch_id = c.launch_id
