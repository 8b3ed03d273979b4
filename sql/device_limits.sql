-- device_limits: every traced GPU with the SM limits the occupancy model needs, gaps filled by architecture.
-- Inputs:  devices (what the trace recorded), arch_limits (pipeline/analyze/arch.py, by compute capability),
--          device_override (`tracepipe analyze --device NAME`: no row, or the part every device is projected to)
-- Output:  trace_id, device_id, name, compute_major, compute_minor, compute_capability ('9.0'), arch_name,
--          sm_count, sm_count_source ('trace' | 'arch_table:<reference part>' |
--          'projection:<device>'), warp_size (threads),
--          max_threads_per_sm, max_warps_per_sm, max_blocks_per_sm, max_threads_per_block,
--          max_registers_per_sm, max_registers_per_block, max_registers_per_thread (32-bit registers),
--          register_alloc_unit (registers per warp allocation step), register_alloc_granularity ('warp'),
--          sub_partitions_per_sm, max_shared_mem_per_sm_bytes, max_shared_mem_per_block_bytes,
--          max_shared_mem_per_block_optin_bytes, reserved_shared_mem_per_block_bytes,
--          shared_mem_alloc_unit_bytes, shared_mem_carveouts_bytes (list of bytes), from_arch_table (list of the
--          column names that came from arch_limits rather than the trace), projected_device (NULL: the traced
--          device; else the --device name whose limits replace the trace's: everything downstream is a projection)
-- Rule: a value the trace recorded always wins; arch_limits only fills NULLs (the older nsys layout lacks
-- max_blocks_per_sm / max_warps_per_sm; no trace records allocation granularities).  A compute capability
-- missing from arch_limits keeps the trace's values and NULL elsewhere -- never another GPU's numbers.
WITH dev AS (   -- a projection keeps the trace's ids, takes the part's name, capability and SMs, and lets
                -- arch_limits fill every limit (the traced GPU's own limits must not leak into the projection)
    SELECT d.* REPLACE (
               coalesce(o.name, d.name) AS name, coalesce(o.compute_major, d.compute_major) AS compute_major,
               coalesce(o.compute_minor, d.compute_minor) AS compute_minor, coalesce(o.sm_count, d.sm_count) AS sm_count,
               CASE WHEN o.projected_device IS NULL THEN d.warp_size END AS warp_size,
               CASE WHEN o.projected_device IS NULL THEN d.max_threads_per_sm END AS max_threads_per_sm,
               CASE WHEN o.projected_device IS NULL THEN d.max_warps_per_sm END AS max_warps_per_sm,
               CASE WHEN o.projected_device IS NULL THEN d.max_blocks_per_sm END AS max_blocks_per_sm,
               CASE WHEN o.projected_device IS NULL THEN d.max_threads_per_block END AS max_threads_per_block,
               CASE WHEN o.projected_device IS NULL THEN d.max_registers_per_sm END AS max_registers_per_sm,
               CASE WHEN o.projected_device IS NULL THEN d.max_registers_per_block END AS max_registers_per_block,
               CASE WHEN o.projected_device IS NULL THEN d.max_shared_mem_per_sm_bytes END AS max_shared_mem_per_sm_bytes,
               CASE WHEN o.projected_device IS NULL THEN d.max_shared_mem_per_block_bytes END
                   AS max_shared_mem_per_block_bytes,
               CASE WHEN o.projected_device IS NULL THEN d.max_shared_mem_per_block_optin_bytes END
                   AS max_shared_mem_per_block_optin_bytes),
           o.projected_device
    FROM devices d
    LEFT JOIN device_override o ON true
),
d AS (
    SELECT d.*, a.arch_name, a.ref_part, a.ref_sm_count,
           a.warp_size AS a_warp_size, a.max_threads_per_sm AS a_max_threads_per_sm,
           a.max_warps_per_sm AS a_max_warps_per_sm, a.max_blocks_per_sm AS a_max_blocks_per_sm,
           a.max_threads_per_block AS a_max_threads_per_block, a.max_registers_per_sm AS a_max_registers_per_sm,
           a.max_registers_per_block AS a_max_registers_per_block, a.max_registers_per_thread,
           a.register_alloc_unit, a.register_alloc_granularity, a.sub_partitions_per_sm,
           a.max_shared_mem_per_sm_bytes AS a_max_shared_mem_per_sm_bytes,
           a.max_shared_mem_per_block_bytes AS a_max_shared_mem_per_block_bytes,
           a.max_shared_mem_per_block_optin_bytes AS a_max_shared_mem_per_block_optin_bytes,
           a.reserved_shared_mem_per_block_bytes, a.shared_mem_alloc_unit_bytes, a.shared_mem_carveouts_bytes
    FROM dev d
    LEFT JOIN arch_limits a ON a.compute_major = d.compute_major AND a.compute_minor = d.compute_minor
),
filled AS (
    SELECT trace_id, device_id, name, compute_major, compute_minor,
           compute_major::VARCHAR || '.' || compute_minor::VARCHAR AS compute_capability, arch_name,
           coalesce(sm_count, ref_sm_count) AS sm_count,
           CASE WHEN projected_device IS NOT NULL THEN 'projection:' || projected_device
                WHEN sm_count IS NOT NULL THEN 'trace' WHEN ref_sm_count IS NOT NULL THEN 'arch_table:' || ref_part
           END AS sm_count_source,
           coalesce(warp_size, a_warp_size) AS warp_size,
           coalesce(max_threads_per_sm, max_warps_per_sm * warp_size, a_max_threads_per_sm) AS max_threads_per_sm,
           coalesce(max_warps_per_sm, max_threads_per_sm // warp_size, a_max_warps_per_sm) AS max_warps_per_sm,
           coalesce(max_blocks_per_sm, a_max_blocks_per_sm) AS max_blocks_per_sm,
           coalesce(max_threads_per_block, a_max_threads_per_block) AS max_threads_per_block,
           coalesce(max_registers_per_sm, a_max_registers_per_sm) AS max_registers_per_sm,
           coalesce(max_registers_per_block, a_max_registers_per_block) AS max_registers_per_block,
           max_registers_per_thread, register_alloc_unit, register_alloc_granularity, sub_partitions_per_sm,
           coalesce(max_shared_mem_per_sm_bytes, a_max_shared_mem_per_sm_bytes) AS max_shared_mem_per_sm_bytes,
           coalesce(max_shared_mem_per_block_bytes, a_max_shared_mem_per_block_bytes)
               AS max_shared_mem_per_block_bytes,
           coalesce(max_shared_mem_per_block_optin_bytes, a_max_shared_mem_per_block_optin_bytes)
               AS max_shared_mem_per_block_optin_bytes,
           reserved_shared_mem_per_block_bytes, shared_mem_alloc_unit_bytes, shared_mem_carveouts_bytes,
           list_filter([
               CASE WHEN sm_count IS NULL AND ref_sm_count IS NOT NULL THEN 'sm_count' END,
               CASE WHEN warp_size IS NULL AND a_warp_size IS NOT NULL THEN 'warp_size' END,
               CASE WHEN max_threads_per_sm IS NULL AND max_warps_per_sm IS NULL
                         AND a_max_threads_per_sm IS NOT NULL THEN 'max_threads_per_sm' END,
               CASE WHEN max_warps_per_sm IS NULL AND max_threads_per_sm IS NULL
                         AND a_max_warps_per_sm IS NOT NULL THEN 'max_warps_per_sm' END,
               CASE WHEN max_blocks_per_sm IS NULL AND a_max_blocks_per_sm IS NOT NULL THEN 'max_blocks_per_sm' END,
               CASE WHEN max_threads_per_block IS NULL AND a_max_threads_per_block IS NOT NULL
                    THEN 'max_threads_per_block' END,
               CASE WHEN max_registers_per_sm IS NULL AND a_max_registers_per_sm IS NOT NULL
                    THEN 'max_registers_per_sm' END,
               CASE WHEN max_registers_per_block IS NULL AND a_max_registers_per_block IS NOT NULL
                    THEN 'max_registers_per_block' END,
               CASE WHEN max_shared_mem_per_sm_bytes IS NULL AND a_max_shared_mem_per_sm_bytes IS NOT NULL
                    THEN 'max_shared_mem_per_sm_bytes' END,
               CASE WHEN max_shared_mem_per_block_bytes IS NULL AND a_max_shared_mem_per_block_bytes IS NOT NULL
                    THEN 'max_shared_mem_per_block_bytes' END,
               CASE WHEN max_shared_mem_per_block_optin_bytes IS NULL
                         AND a_max_shared_mem_per_block_optin_bytes IS NOT NULL
                    THEN 'max_shared_mem_per_block_optin_bytes' END
           ], lambda c: c IS NOT NULL) AS from_arch_table,
           projected_device
    FROM d
)
SELECT * FROM filled
