-- layer_work_map: per layer and kernel, the module call's outputs and MACs divided over blocks, threads and SMs.
-- Inputs:  kernel_layers (each kernel's innermost range = the module call), kernel_waves (blocks, SMs, resident
--          blocks, the round-robin split), layer_call_shapes (output elements and analytic MACs of one call),
--          kernel_tiles (tile of compute kernels), device_limits (projected_device)
-- Output, one row per timeline kernel:
--   trace_id               VARCHAR: the trace
--   kernel_id              BIGINT: the kernel (kernels.kernel_id)
--   device_id              INTEGER: the GPU (CUDA device ordinal)
--   projected_device       VARCHAR: NULL = the traced device; else the device whose limits the SM columns assume
--   path                   VARCHAR: the layer path
--   layer                  VARCHAR: the innermost range's text: the module call
--   module_type            VARCHAR: the module's class
--   name                   VARCHAR: the demangled kernel name
--   output_elements        BIGINT elements: of one call's first output
--   analytic_macs          BIGINT MACs: of one call
--   blocks                 BIGINT blocks: gridDim product
--   threads_per_block      BIGINT threads: blockDim product
--   total_threads          BIGINT threads: blocks * threads_per_block
--   outputs_per_block      DOUBLE elements: output_elements / blocks: an even split of the call's output over the
--                            blocks
--   outputs_per_thread     DOUBLE elements: output_elements / total_threads
--   is_mac_kernel          BOOLEAN: the name matches kernel_tile_patterns (a GEMM / conv / attention kernel)
--   mac_kernels_in_call    BIGINT: such kernels launched by the same call
--   macs_per_block         DOUBLE MACs: the call's MACs over this kernel's blocks when it is the call's only MAC
--                            kernel; 0 for the call's other kernels; NULL with a reason when several share the MACs
--   macs_per_thread        DOUBLE MACs: likewise over its threads
--   tile_m                 BIGINT elements: output tile rows per block (kernel_tiles)
--   tile_n                 BIGINT elements: output tile columns per block
--   tile_outputs_per_block DOUBLE elements: tile_m * tile_n * tiles_per_block: padded outputs a block computes
--   output_coverage        DOUBLE: kernel_tiles'
--   predicted_macs_ratio   DOUBLE: kernel_tiles'
--   sm_count               INTEGER SMs: the device's
--   resident_blocks_per_sm BIGINT blocks: kernel_occupancy's
--   waves                  BIGINT waves: kernel_waves'
--   max_blocks_per_sm      BIGINT blocks: round-robin dispatch: sms_at_max SMs run this many
--   min_blocks_per_sm      BIGINT blocks: the other SMs this many
--   sms_at_max             BIGINT SMs: SMs running max_blocks_per_sm
--   idle_sms               BIGINT SMs: SMs without a block
--   outputs_per_sm_max     DOUBLE elements: max_blocks_per_sm * outputs_per_block
--   outputs_per_sm_min     DOUBLE elements: min_blocks_per_sm * outputs_per_block
--   macs_per_sm_max        DOUBLE MACs: max_blocks_per_sm * macs_per_block
--   macs_per_sm_min        DOUBLE MACs: min_blocks_per_sm * macs_per_block
--   reason                 VARCHAR: why shape-derived columns are NULL; NULL when all are known
-- Per-SM figures are the dispatch model of kernel_sm_load (estimated, not measured): kernel_sm_spread compares
-- it with ncu's per-SM counters.
WITH k AS (   -- name and device from kernel_layers, not kernel_waves: the join's hash table (on kernel_waves) then
             -- holds no kernel name (docs/benchmarks.md, analyze_10m_memory_s33.txt)
    SELECT l.trace_id, l.kernel_id, l.range_id, l.path, l.layer, l.device_id, l.name, w.blocks,
           w.threads_per_block, try_cast(w.blocks::HUGEINT * w.threads_per_block AS BIGINT) AS total_threads, w.sm_count,
           w.resident_blocks_per_sm, w.waves, w.full_blocks_per_sm, w.extra_block_sms,
           regexp_replace(l.trace_id, '\.[^.]*$', '') AS capture_id,
           t.kernel_id IS NOT NULL AS is_mac_kernel, t.tile_m, t.tile_n, t.tiles_per_block, t.output_coverage,
           t.predicted_macs_ratio
    FROM kernel_layers l
    JOIN kernel_waves w USING (trace_id, kernel_id)
    LEFT JOIN kernel_tiles t ON t.source = 'kernels' AND t.trace_id = l.trace_id AND t.kernel_id = l.kernel_id
), calls AS (   -- MAC kernels per module call (range) among k's kernels (those with a dispatch), counted from the
                -- MAC kernels and joined back: reading k twice would hold its wide rows for the second read
                -- (docs/benchmarks.md, analyze_10m_memory_s33.txt)
    SELECT l.trace_id, l.range_id, count(*) AS mac_kernels_in_call
    FROM kernel_tiles t
    JOIN kernel_layers l ON l.trace_id = t.trace_id AND l.kernel_id = t.kernel_id
    JOIN kernel_waves w ON w.trace_id = t.trace_id AND w.kernel_id = t.kernel_id
    WHERE t.source = 'kernels'
    GROUP BY ALL
), c AS (
    SELECT k.*, coalesce(n.mac_kernels_in_call, 0) AS mac_kernels_in_call,
           s.module_type, s.output_elements, s.analytic_macs, s.same_calls, s.capture_id IS NOT NULL AS has_shape
    FROM k
    LEFT JOIN calls n ON n.trace_id = k.trace_id AND n.range_id IS NOT DISTINCT FROM k.range_id
    LEFT JOIN layer_call_shapes s ON s.capture_id = k.capture_id AND s.layer = k.layer
), m AS (
    SELECT c.*,
           c.output_elements / c.blocks AS outputs_per_block,
           c.output_elements / c.total_threads AS outputs_per_thread,  -- NULL past BIGINT (see kernel_waves)
           CASE WHEN c.analytic_macs = 0 OR NOT c.is_mac_kernel THEN 0.0
                WHEN c.mac_kernels_in_call = 1 THEN c.analytic_macs / c.blocks END AS macs_per_block,
           c.full_blocks_per_sm + (c.extra_block_sms > 0)::BIGINT AS max_blocks_per_sm,
           c.full_blocks_per_sm AS min_blocks_per_sm,
           CASE WHEN c.extra_block_sms > 0 THEN c.extra_block_sms ELSE c.sm_count END AS sms_at_max,
           greatest(c.sm_count - c.blocks, 0) AS idle_sms
    FROM c
)
SELECT m.trace_id, m.kernel_id, m.device_id, d.projected_device, m.path, m.layer, m.module_type, m.name,
       m.output_elements, m.analytic_macs, m.blocks, m.threads_per_block, m.total_threads,
       m.outputs_per_block, m.outputs_per_thread, m.is_mac_kernel, m.mac_kernels_in_call,
       m.macs_per_block, m.macs_per_block / m.threads_per_block AS macs_per_thread,
       m.tile_m, m.tile_n, m.tile_m * m.tile_n * m.tiles_per_block AS tile_outputs_per_block,
       m.output_coverage, m.predicted_macs_ratio,
       m.sm_count, m.resident_blocks_per_sm, m.waves, m.max_blocks_per_sm, m.min_blocks_per_sm, m.sms_at_max,
       m.idle_sms,
       m.max_blocks_per_sm * m.outputs_per_block AS outputs_per_sm_max,
       m.min_blocks_per_sm * m.outputs_per_block AS outputs_per_sm_min,
       m.max_blocks_per_sm * m.macs_per_block AS macs_per_sm_max,
       m.min_blocks_per_sm * m.macs_per_block AS macs_per_sm_min,
       CASE WHEN m.layer IS NULL THEN 'kernel outside every annotated module'
            WHEN NOT m.has_shape THEN 'layer not in layer_shapes (capture without shapes, or not a module range)'
            WHEN NOT m.same_calls THEN 'calls of this layer differ in shape: not mapped'
            WHEN m.analytic_macs IS NULL THEN 'module type ' || m.module_type || ' not analysed: MACs unknown'
            WHEN m.macs_per_block IS NULL
                THEN m.mac_kernels_in_call || ' MAC kernels in one call: the MACs are not split among them'
       END AS reason
FROM m
LEFT JOIN device_limits d ON d.trace_id = m.trace_id AND d.device_id IS NOT DISTINCT FROM m.device_id
