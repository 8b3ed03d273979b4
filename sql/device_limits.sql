-- device_limits: every traced GPU with the SM limits the occupancy model needs, gaps filled by architecture.
-- Inputs:  devices (what the trace recorded: nsys TARGET_INFO_GPU, chrome deviceProperties, ncu attributes),
--          arch_limits (pipeline/analyze/arch.py: NVIDIA rows by compute capability, AMD rows by gfx_arch),
--          gpu_names (arch.py: device name -> vendor / AMD architecture),
--          device_override (`tracepipe analyze --device NAME`: no row, or the part every device is projected onto)
-- Output, one row per trace and device id:
--   trace_id                             VARCHAR: the trace
--   device_id                            INTEGER: the GPU (CUDA device ordinal)
--   name                                 VARCHAR: the device's name as recorded
--   vendor                               VARCHAR: 'NVIDIA' | 'AMD' | 'render-only' | NULL
--   gfx_arch                             VARCHAR: the AMD LLVM target (gfx942 ...); NULL for NVIDIA
--   compute_major                        INTEGER: compute capability, major (as recorded; HIP's major.minor on AMD)
--   compute_minor                        INTEGER: compute capability, minor
--   compute_capability                   VARCHAR: '9.0'; NULL for AMD, whose Kineto computeMajor is no CUDA capability
--   arch_name                            VARCHAR: the architecture's name (Hopper, CDNA3 ...)
--   sm_count                             INTEGER SMs: streaming multiprocessors (CUs on AMD)
--   sm_count_source                      VARCHAR: 'trace' | 'arch_table:<reference part>' | 'projection:<device>'
--   warp_size                            INTEGER threads: threads per warp (64 on AMD)
--   max_threads_per_sm                   INTEGER threads: resident threads per SM
--   max_warps_per_sm                     INTEGER warps: resident warps per SM
--   max_blocks_per_sm                    INTEGER blocks: resident blocks per SM
--   max_threads_per_block                INTEGER threads: threads per block
--   max_registers_per_sm                 INTEGER registers: 32-bit registers per SM
--   max_registers_per_block              INTEGER registers: 32-bit registers per block
--   max_registers_per_thread             INTEGER registers: 32-bit registers per thread
--   register_alloc_unit                  INTEGER registers: registers per warp allocation step
--   register_alloc_granularity           VARCHAR: 'warp'
--   sub_partitions_per_sm                INTEGER: SM sub-partitions the register file is split over
--   max_shared_mem_per_sm_bytes          BIGINT bytes: shared memory per SM (the full carveout)
--   max_shared_mem_per_block_bytes       BIGINT bytes: shared memory per block without opting in
--   max_shared_mem_per_block_optin_bytes BIGINT bytes: shared memory per block when opted in
--   reserved_shared_mem_per_block_bytes  BIGINT bytes: the driver's reserve per block
--   shared_mem_alloc_unit_bytes          BIGINT bytes: shared memory allocation step
--   shared_mem_carveouts_bytes           BIGINT[] bytes: the configurable shared-memory carveouts
--   from_arch_table                      VARCHAR[]: the columns that came from arch_limits rather than the trace
--   rejected_trace_values                VARCHAR[]: 'column=value' the trace recorded but no GPU can have, replaced
--                                          from arch_limits
--   duplicate_rows                       BIGINT: other devices rows of the same (trace, device id), dropped
--   issue                                VARCHAR: why the device's limits are NULL; NULL when it has them
--   projected_device                     VARCHAR: NULL: the traced device; else the `--device` preset whose limits
--                                          replace the trace's (everything downstream is a projection)
-- Rules, in one place for every source (normalizers copy what the trace says):
--   * One device per (trace, device id): a render-only adapter (WSL's all-zero "Microsoft Basic Render Driver"
--     shares id 0 with the real GPU) and rows without a compute capability lose to a real GPU row.
--   * A value the trace recorded wins when it is possible (> 0; warp size 32 or 64); an impossible one
--     (0 SMs, 0 warps, maxBlocksPerSm = 0 ...) is replaced from arch_limits and listed in
--     rejected_trace_values.  arch_limits also fills NULLs (older nsys layouts lack max_blocks_per_sm).
--   * Vendor from the name (or 64-wide warps): an AMD device takes the AMD row of its gfx_arch (from the name,
--     else HIP's major.minor where it names one: 9.4 = gfx942, 9.0 with 104 or 110 CUs = gfx90a, with 120 =
--     gfx908), never an NVIDIA compute capability; an unknown AMD part keeps the trace's values and NULL
--     elsewhere.  A compute capability
--     missing from arch_limits likewise keeps the trace's values and NULL elsewhere -- never another GPU's.
--   * A device with neither a compute capability nor an AMD architecture (or a render-only adapter) gets
--     NULL limits and an issue: the GPU views leave its kernels' derived columns NULL; analyze warns.
WITH projected AS (   -- --device: the part's name, capability and SMs; every limit left to arch_limits (the
                      -- traced GPU's own limits must not leak into the projection)
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
raw AS (
    SELECT d.*, row_number() OVER () AS row_no FROM projected d
),
named AS (   -- vendor by the first gpu_names pattern the name matches
    SELECT r.*, n.vendor AS name_vendor,
           coalesce(n.gfx_arch, regexp_extract(lower(r.name), '\b(gfx[0-9a-f]+)\b', 1)) AS name_gfx
    FROM raw r
    LEFT JOIN gpu_names n ON regexp_matches(lower(coalesce(r.name, '')), n.pattern)
    QUALIFY row_number() OVER (PARTITION BY r.row_no ORDER BY n.priority NULLS LAST) = 1
),
vendored AS (  -- no NVIDIA GPU has 64-wide warps: an unnamed device with them is AMD (ROCm's wavefront)
    SELECT n.* EXCLUDE (name_vendor, name_gfx),
           coalesce(n.name_vendor, CASE WHEN n.warp_size = 64 THEN 'AMD' WHEN n.compute_major > 0 THEN 'NVIDIA' END)
               AS vendor,
           CASE WHEN coalesce(n.name_vendor, CASE WHEN n.warp_size = 64 THEN 'AMD' END) = 'AMD'
                THEN coalesce(nullif(n.name_gfx, ''), h.gfx_arch) END AS gfx_arch
    FROM named n
    LEFT JOIN arch_limits h   -- (9.0 is gfx908 or gfx90a: the CU count tells them apart, arch.py)
      ON h.hip_compute_capability = n.compute_major || '.' || n.compute_minor
     AND (h.hip_cu_counts IS NULL OR list_contains(h.hip_cu_counts, n.sm_count))
),
ranked AS (  -- one row per (trace, device id): a real compute GPU first, then the row that says the most
    SELECT *,
           count(*) OVER (PARTITION BY trace_id, device_id) - 1 AS duplicate_rows,
           row_number() OVER (
               PARTITION BY trace_id, device_id
               ORDER BY (vendor = 'render-only') NULLS FIRST,
                        (compute_major > 0 OR vendor = 'AMD') DESC NULLS LAST,
                        (sm_count > 0) DESC NULLS LAST,
                        (CASE WHEN sm_count > 0 THEN 1 ELSE 0 END + CASE WHEN warp_size > 0 THEN 1 ELSE 0 END
                         + CASE WHEN max_threads_per_sm > 0 THEN 1 ELSE 0 END
                         + CASE WHEN max_registers_per_sm > 0 THEN 1 ELSE 0 END
                         + CASE WHEN max_shared_mem_per_sm_bytes > 0 THEN 1 ELSE 0 END) DESC,
                        row_no) AS pick
    FROM vendored
),
one AS (     -- impossible trace values become NULL here, so the table fills them below
    SELECT trace_id, device_id, name, vendor, gfx_arch, duplicate_rows, projected_device,
           CASE WHEN vendor = 'AMD' THEN NULL ELSE nullif(compute_major, 0) END AS compute_major,
           CASE WHEN vendor = 'AMD' OR nullif(compute_major, 0) IS NULL THEN NULL ELSE compute_minor END
               AS compute_minor,
           CASE WHEN sm_count > 0 THEN sm_count END AS t_sm_count,
           CASE WHEN warp_size IN (32, 64) THEN warp_size END AS t_warp_size,
           CASE WHEN max_threads_per_sm > 0 THEN max_threads_per_sm END AS t_max_threads_per_sm,
           CASE WHEN max_warps_per_sm > 0 THEN max_warps_per_sm END AS t_max_warps_per_sm,
           CASE WHEN max_blocks_per_sm > 0 THEN max_blocks_per_sm END AS t_max_blocks_per_sm,
           CASE WHEN max_threads_per_block > 0 THEN max_threads_per_block END AS t_max_threads_per_block,
           CASE WHEN max_registers_per_sm > 0 THEN max_registers_per_sm END AS t_max_registers_per_sm,
           CASE WHEN max_registers_per_block > 0 THEN max_registers_per_block END AS t_max_registers_per_block,
           CASE WHEN max_shared_mem_per_sm_bytes > 0 THEN max_shared_mem_per_sm_bytes END
               AS t_max_shared_mem_per_sm_bytes,
           CASE WHEN max_shared_mem_per_block_bytes > 0 THEN max_shared_mem_per_block_bytes END
               AS t_max_shared_mem_per_block_bytes,
           CASE WHEN max_shared_mem_per_block_optin_bytes > 0 THEN max_shared_mem_per_block_optin_bytes END
               AS t_max_shared_mem_per_block_optin_bytes,
           CASE WHEN vendor = 'render-only' THEN [] ELSE list_filter([
               CASE WHEN sm_count <= 0 THEN 'sm_count=' || sm_count END,
               CASE WHEN warp_size NOT IN (32, 64) THEN 'warp_size=' || warp_size END,
               CASE WHEN max_threads_per_sm <= 0 THEN 'max_threads_per_sm=' || max_threads_per_sm END,
               CASE WHEN max_warps_per_sm <= 0 THEN 'max_warps_per_sm=' || max_warps_per_sm END,
               CASE WHEN max_blocks_per_sm <= 0 THEN 'max_blocks_per_sm=' || max_blocks_per_sm END,
               CASE WHEN max_threads_per_block <= 0 THEN 'max_threads_per_block=' || max_threads_per_block END,
               CASE WHEN max_registers_per_sm <= 0 THEN 'max_registers_per_sm=' || max_registers_per_sm END,
               CASE WHEN max_registers_per_block <= 0 THEN 'max_registers_per_block=' || max_registers_per_block END,
               CASE WHEN max_shared_mem_per_sm_bytes <= 0
                    THEN 'max_shared_mem_per_sm_bytes=' || max_shared_mem_per_sm_bytes END,
               CASE WHEN max_shared_mem_per_block_bytes <= 0
                    THEN 'max_shared_mem_per_block_bytes=' || max_shared_mem_per_block_bytes END,
               CASE WHEN max_shared_mem_per_block_optin_bytes <= 0
                    THEN 'max_shared_mem_per_block_optin_bytes=' || max_shared_mem_per_block_optin_bytes END
           ], lambda c: c IS NOT NULL) END AS rejected_trace_values
    FROM ranked WHERE pick = 1
),
d AS (
    SELECT o.*, a.arch_name, a.ref_part, a.ref_sm_count,
           a.warp_size AS a_warp_size, a.max_threads_per_sm AS a_max_threads_per_sm,
           a.max_warps_per_sm AS a_max_warps_per_sm, a.max_blocks_per_sm AS a_max_blocks_per_sm,
           a.max_threads_per_block AS a_max_threads_per_block, a.max_registers_per_sm AS a_max_registers_per_sm,
           a.max_registers_per_block AS a_max_registers_per_block, a.max_registers_per_thread,
           a.register_alloc_unit, a.register_alloc_granularity, a.sub_partitions_per_sm,
           a.max_shared_mem_per_sm_bytes AS a_max_shared_mem_per_sm_bytes,
           a.max_shared_mem_per_block_bytes AS a_max_shared_mem_per_block_bytes,
           a.max_shared_mem_per_block_optin_bytes AS a_max_shared_mem_per_block_optin_bytes,
           a.reserved_shared_mem_per_block_bytes, a.shared_mem_alloc_unit_bytes, a.shared_mem_carveouts_bytes,
           CASE WHEN o.vendor = 'render-only' THEN 'render-only adapter (runs no kernels)'
                WHEN o.vendor = 'AMD' AND a.gfx_arch IS NULL
                    THEN 'AMD device without a known gfx architecture: only the trace''s own limits'
                WHEN o.vendor IS DISTINCT FROM 'AMD' AND o.compute_major IS NULL
                    THEN 'no compute capability recorded: left out of the GPU views'
           END AS issue
    FROM one o
    LEFT JOIN arch_limits a
      ON (o.vendor = 'AMD' AND a.vendor = 'AMD' AND a.gfx_arch = o.gfx_arch)
      OR (o.vendor IS DISTINCT FROM 'AMD' AND a.vendor = 'NVIDIA'
          AND a.compute_major = o.compute_major AND a.compute_minor = o.compute_minor)
),
usable AS (  -- a device with an issue other than "unknown AMD part" keeps no limits at all
    SELECT * REPLACE (
               CASE WHEN issue IS NULL OR vendor = 'AMD' THEN t_sm_count END AS t_sm_count,
               CASE WHEN issue IS NULL OR vendor = 'AMD' THEN t_warp_size END AS t_warp_size,
               CASE WHEN issue IS NULL OR vendor = 'AMD' THEN t_max_threads_per_sm END AS t_max_threads_per_sm,
               CASE WHEN issue IS NULL OR vendor = 'AMD' THEN t_max_warps_per_sm END AS t_max_warps_per_sm,
               CASE WHEN issue IS NULL OR vendor = 'AMD' THEN t_max_blocks_per_sm END AS t_max_blocks_per_sm,
               CASE WHEN issue IS NULL OR vendor = 'AMD' THEN t_max_threads_per_block END AS t_max_threads_per_block,
               CASE WHEN issue IS NULL OR vendor = 'AMD' THEN t_max_registers_per_sm END AS t_max_registers_per_sm,
               CASE WHEN issue IS NULL OR vendor = 'AMD' THEN t_max_registers_per_block END
                   AS t_max_registers_per_block,
               CASE WHEN issue IS NULL OR vendor = 'AMD' THEN t_max_shared_mem_per_sm_bytes END
                   AS t_max_shared_mem_per_sm_bytes,
               CASE WHEN issue IS NULL OR vendor = 'AMD' THEN t_max_shared_mem_per_block_bytes END
                   AS t_max_shared_mem_per_block_bytes,
               CASE WHEN issue IS NULL OR vendor = 'AMD' THEN t_max_shared_mem_per_block_optin_bytes END
                   AS t_max_shared_mem_per_block_optin_bytes)
    FROM d
),
filled AS (
    SELECT trace_id, device_id, name, vendor, gfx_arch, compute_major, compute_minor,
           compute_major::VARCHAR || '.' || compute_minor::VARCHAR AS compute_capability, arch_name,
           coalesce(t_sm_count, ref_sm_count) AS sm_count,
           CASE WHEN projected_device IS NOT NULL THEN 'projection:' || projected_device
                WHEN t_sm_count IS NOT NULL THEN 'trace' WHEN ref_sm_count IS NOT NULL THEN 'arch_table:' || ref_part
           END AS sm_count_source,
           coalesce(t_warp_size, a_warp_size) AS warp_size,
           coalesce(t_max_threads_per_sm, t_max_warps_per_sm * coalesce(t_warp_size, a_warp_size), a_max_threads_per_sm)
               AS max_threads_per_sm,
           coalesce(t_max_warps_per_sm, t_max_threads_per_sm // coalesce(t_warp_size, a_warp_size), a_max_warps_per_sm)
               AS max_warps_per_sm,
           coalesce(t_max_blocks_per_sm, a_max_blocks_per_sm) AS max_blocks_per_sm,
           coalesce(t_max_threads_per_block, a_max_threads_per_block) AS max_threads_per_block,
           coalesce(t_max_registers_per_sm, a_max_registers_per_sm) AS max_registers_per_sm,
           coalesce(t_max_registers_per_block, a_max_registers_per_block) AS max_registers_per_block,
           max_registers_per_thread, register_alloc_unit, register_alloc_granularity, sub_partitions_per_sm,
           coalesce(t_max_shared_mem_per_sm_bytes, a_max_shared_mem_per_sm_bytes) AS max_shared_mem_per_sm_bytes,
           coalesce(t_max_shared_mem_per_block_bytes, a_max_shared_mem_per_block_bytes)
               AS max_shared_mem_per_block_bytes,
           coalesce(t_max_shared_mem_per_block_optin_bytes, a_max_shared_mem_per_block_optin_bytes)
               AS max_shared_mem_per_block_optin_bytes,
           reserved_shared_mem_per_block_bytes, shared_mem_alloc_unit_bytes, shared_mem_carveouts_bytes,
           list_filter([
               CASE WHEN t_sm_count IS NULL AND ref_sm_count IS NOT NULL THEN 'sm_count' END,
               CASE WHEN t_warp_size IS NULL AND a_warp_size IS NOT NULL THEN 'warp_size' END,
               CASE WHEN t_max_threads_per_sm IS NULL AND t_max_warps_per_sm IS NULL
                         AND a_max_threads_per_sm IS NOT NULL THEN 'max_threads_per_sm' END,
               CASE WHEN t_max_warps_per_sm IS NULL AND t_max_threads_per_sm IS NULL
                         AND a_max_warps_per_sm IS NOT NULL THEN 'max_warps_per_sm' END,
               CASE WHEN t_max_blocks_per_sm IS NULL AND a_max_blocks_per_sm IS NOT NULL THEN 'max_blocks_per_sm' END,
               CASE WHEN t_max_threads_per_block IS NULL AND a_max_threads_per_block IS NOT NULL
                    THEN 'max_threads_per_block' END,
               CASE WHEN t_max_registers_per_sm IS NULL AND a_max_registers_per_sm IS NOT NULL
                    THEN 'max_registers_per_sm' END,
               CASE WHEN t_max_registers_per_block IS NULL AND a_max_registers_per_block IS NOT NULL
                    THEN 'max_registers_per_block' END,
               CASE WHEN t_max_shared_mem_per_sm_bytes IS NULL AND a_max_shared_mem_per_sm_bytes IS NOT NULL
                    THEN 'max_shared_mem_per_sm_bytes' END,
               CASE WHEN t_max_shared_mem_per_block_bytes IS NULL AND a_max_shared_mem_per_block_bytes IS NOT NULL
                    THEN 'max_shared_mem_per_block_bytes' END,
               CASE WHEN t_max_shared_mem_per_block_optin_bytes IS NULL
                         AND a_max_shared_mem_per_block_optin_bytes IS NOT NULL
                    THEN 'max_shared_mem_per_block_optin_bytes' END
           ], lambda c: c IS NOT NULL) AS from_arch_table,
           rejected_trace_values, duplicate_rows, issue, projected_device
    FROM usable
)
SELECT * FROM filled
