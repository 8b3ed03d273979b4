-- kernel_occupancy: theoretical occupancy of every kernel, computed the way cuda_occupancy.h
-- (cudaOccMaxActiveBlocksPerMultiprocessor) does, from the launch and the device limits.
-- Inputs:  kernel_geometry, device_limits
-- Output, one row per kernel:
--   trace_id                       VARCHAR: the trace
--   kernel_id                      BIGINT: the kernel (kernels.kernel_id)
--   device_id                      INTEGER: the GPU (CUDA device ordinal)
--   projected_device               VARCHAR: NULL = the traced device; else the `--device` preset whose limits are used
--   name                           VARCHAR: the demangled kernel name
--   blocks                         BIGINT blocks: gridDim product
--   threads_per_block              BIGINT threads: blockDim product
--   warps_per_block                BIGINT warps: whole warps a block takes
--   sm_count                       INTEGER SMs: the device's
--   max_warps_per_sm               INTEGER warps: the device's resident warps per SM
--   registers_per_thread           INTEGER registers: registers per thread
--   registers_per_thread_allocated INTEGER registers: rounded up as allocated (= ncu
--                                    launch__registers_per_thread_allocated)
--   regs_per_warp_allocated        INTEGER registers: ceil(regs * warp_size / unit) * unit
--   regs_per_block_allocated       BIGINT registers: regs_per_warp_allocated * warps_per_block
--   smem_per_block_allocated_bytes BIGINT bytes: static + dynamic + driver reserve, rounded up to the allocation unit
--                                    (= ncu launch__shared_mem_per_block_allocated)
--   limit_blocks                   INTEGER blocks: resident blocks per SM the block limit allows
--   limit_warps                    BIGINT blocks: resident blocks per SM the warp limit allows
--   limit_registers                BIGINT blocks: resident blocks per SM the register file allows (2147483647 = no
--                                    limit, cudaOccupancy's INT_MAX: no registers used)
--   limit_shared_mem               BIGINT blocks: resident blocks per SM shared memory allows (2147483647 = no limit:
--                                    no shared memory used)
--   resident_blocks_per_sm         BIGINT blocks: the least of the four limits
--   limiter                        VARCHAR: the first of the tied limits in the order warps, registers, shared_mem,
--                                    blocks
--   limiters                       VARCHAR: every tied limit, comma-separated
--   active_warps_per_sm            BIGINT warps: resident_blocks_per_sm * warps_per_block
--   active_threads_per_sm          BIGINT threads: resident_blocks_per_sm * threads_per_block
--   theoretical_occupancy_pct      DOUBLE %: active_warps_per_sm / max_warps_per_sm * 100
--   est_carveout_bytes             BIGINT bytes: the smallest configurable shared-memory carveout holding the resident
--                                    blocks
--   occupancy_issue                VARCHAR: why resident_blocks_per_sm and what follows from it are NULL; NULL when
--                                    computed
-- Model (per SM):
--   warps:     max_warps_per_sm // warps_per_block   (0 when threads_per_block > max_threads_per_block)
--   registers: regs/warp = ceil(regs * warp_size / 256) * 256; the register file is split over 4 sub-partitions,
--              so warps = (regs_per_sm / 4 // regs/warp) * 4, blocks = warps // warps_per_block; 0 when the block
--              exceeds max_registers_per_block (also rounded to whole sub-partitions, the hardware check) or
--              regs > max_registers_per_thread
--   shared:    alloc = ceil((static + dynamic + reserved) / unit) * unit; blocks = smem_per_sm // alloc, where
--              smem_per_sm is the full carveout (cudaOccupancy's default-preference assumption; traces do not record
--              the carveout the driver picked); 0 when alloc exceeds the per-block limit (opt-in limit once the
--              kernel asks for more than the default: a kernel that ran above 48 KB had opted in)
--   blocks:    max_blocks_per_sm
-- The driver may configure a smaller carveout (ncu launch__shared_mem_config_size), which lowers ncu's
-- launch__occupancy_limit_shared_mem but, by construction, never below the resident blocks: the occupancy and
-- limiter agree with ncu, only limit_shared_mem can read higher than ncu's.  Any unknown input gives NULL.
-- Impossible inputs give NULL and an occupancy_issue (counted by analysis_warnings), never 0 % or an error:
-- a launch_issue of kernel_geometry, a device without limits (device_limits.issue), an AMD device (the
-- model is CUDA's), registers per thread outside 1..max, and a launch that as recorded fits no SM (a limit
-- of 0: the kernel ran, so the recorded shape or the limits are wrong; the limit_* columns show which).
-- Shared-memory sums are HUGEINT inside, so a recorded 2^62 B request is an issue, not an overflow.
WITH x AS (
    SELECT g.trace_id, g.kernel_id, g.device_id, g.name, g.blocks, g.threads_per_block, g.warps_per_block,
           g.registers_per_thread, g.smem_per_block_bytes, g.static_smem_bytes, g.dynamic_smem_bytes,
           g.launch_issue, d.trace_id IS NOT NULL AS has_device, d.issue AS device_issue, d.vendor,
           d.compute_capability, d.projected_device,
           d.sm_count, d.warp_size, d.max_warps_per_sm, d.max_blocks_per_sm, d.max_threads_per_sm,
           d.max_threads_per_block, d.max_registers_per_sm, d.max_registers_per_block, d.max_registers_per_thread,
           d.register_alloc_unit, d.sub_partitions_per_sm, d.max_shared_mem_per_sm_bytes,
           d.max_shared_mem_per_block_bytes, d.max_shared_mem_per_block_optin_bytes,
           d.reserved_shared_mem_per_block_bytes, d.shared_mem_alloc_unit_bytes, d.shared_mem_carveouts_bytes,
           ((g.registers_per_thread * d.warp_size + d.register_alloc_unit - 1) // d.register_alloc_unit)
               * d.register_alloc_unit AS regs_per_warp_allocated,
           ((coalesce(g.static_smem_bytes, 0)::HUGEINT + coalesce(g.dynamic_smem_bytes, 0)
             + d.reserved_shared_mem_per_block_bytes + d.shared_mem_alloc_unit_bytes - 1)
            // d.shared_mem_alloc_unit_bytes) * d.shared_mem_alloc_unit_bytes AS smem_alloc
    FROM kernel_geometry g
    LEFT JOIN device_limits d ON d.trace_id = g.trace_id AND d.device_id = g.device_id
),
lim AS (
    SELECT *,
           regs_per_warp_allocated * warps_per_block AS regs_per_block_allocated,
           max_blocks_per_sm AS limit_blocks,
           CASE WHEN threads_per_block > max_threads_per_block THEN 0
                ELSE max_warps_per_sm // warps_per_block END AS limit_warps,
           CASE WHEN registers_per_thread > max_registers_per_thread
                  OR regs_per_warp_allocated * warps_per_block > max_registers_per_block
                  OR regs_per_warp_allocated
                     * (((warps_per_block + sub_partitions_per_sm - 1) // sub_partitions_per_sm) * sub_partitions_per_sm)
                     > max_registers_per_block THEN 0
                WHEN regs_per_warp_allocated = 0 THEN 2147483647
                ELSE ((max_registers_per_sm // sub_partitions_per_sm) // regs_per_warp_allocated)
                     * sub_partitions_per_sm // warps_per_block END AS limit_registers,
           CASE WHEN smem_alloc
                     > CASE WHEN smem_alloc > max_shared_mem_per_block_bytes + reserved_shared_mem_per_block_bytes
                            THEN max_shared_mem_per_block_optin_bytes
                            ELSE max_shared_mem_per_block_bytes END + reserved_shared_mem_per_block_bytes THEN 0
                WHEN smem_alloc = 0 THEN 2147483647
                ELSE (max_shared_mem_per_sm_bytes // smem_alloc)::BIGINT END AS limit_shared_mem
    FROM x
),
res AS (
    SELECT *,
           CASE WHEN limit_blocks IS NULL OR limit_warps IS NULL OR limit_registers IS NULL
                  OR limit_shared_mem IS NULL THEN NULL
                ELSE least(limit_blocks, limit_warps, limit_registers, limit_shared_mem) END AS fit,
           CASE WHEN launch_issue IS NOT NULL THEN launch_issue
                WHEN NOT has_device THEN 'device ' || coalesce(device_id::VARCHAR, 'NULL') || ' not in the trace''s devices'
                WHEN device_issue IS NOT NULL THEN 'device: ' || device_issue
                WHEN vendor = 'AMD' THEN 'AMD device: the occupancy model is CUDA''s (register and LDS allocation differ)'
                WHEN register_alloc_unit IS NULL
                    THEN 'compute capability ' || coalesce(compute_capability, '?') || ' not in arch_limits'
                WHEN registers_per_thread < 1
                    THEN 'registers per thread = ' || registers_per_thread || ' (every kernel uses at least 1)'
                WHEN least(static_smem_bytes, dynamic_smem_bytes) < 0 THEN 'negative shared memory'
                WHEN least(limit_blocks, limit_warps, limit_registers, limit_shared_mem) = 0
                    THEN 'the launch as recorded fits no SM of this device: ' || concat_ws(', ',
                        CASE WHEN limit_warps = 0 THEN threads_per_block || ' threads per block' END,
                        CASE WHEN limit_registers = 0 THEN registers_per_thread || ' registers per thread' END,
                        CASE WHEN limit_shared_mem = 0 THEN smem_alloc || ' B shared memory per block' END,
                        CASE WHEN limit_blocks = 0 THEN 'max_blocks_per_sm = 0' END)
           END AS occupancy_issue
    FROM lim
),
ok AS (
    SELECT *,
           CASE WHEN occupancy_issue IS NULL THEN fit END AS resident_blocks_per_sm
    FROM res
)
SELECT trace_id, kernel_id, device_id, projected_device, name, blocks, threads_per_block, warps_per_block, sm_count,
       max_warps_per_sm,
       registers_per_thread, regs_per_warp_allocated // warp_size AS registers_per_thread_allocated,
       regs_per_warp_allocated, regs_per_block_allocated, try_cast(smem_alloc AS BIGINT) AS smem_per_block_allocated_bytes,
       limit_blocks, limit_warps, limit_registers, limit_shared_mem, resident_blocks_per_sm,
       split_part(limiters, ',', 1) AS limiter, limiters,
       resident_blocks_per_sm * warps_per_block AS active_warps_per_sm,
       resident_blocks_per_sm * threads_per_block AS active_threads_per_sm,
       100.0 * resident_blocks_per_sm * warps_per_block / max_warps_per_sm AS theoretical_occupancy_pct,
       list_min(list_filter(shared_mem_carveouts_bytes,
                            lambda c: c >= resident_blocks_per_sm * smem_alloc))
           AS est_carveout_bytes,
       occupancy_issue
FROM (
    SELECT *,
           nullif(concat_ws(',',
               CASE WHEN limit_warps = resident_blocks_per_sm THEN 'warps' END,
               CASE WHEN limit_registers = resident_blocks_per_sm THEN 'registers' END,
               CASE WHEN limit_shared_mem = resident_blocks_per_sm THEN 'shared_mem' END,
               CASE WHEN limit_blocks = resident_blocks_per_sm THEN 'blocks' END), '') AS limiters
    FROM ok
)
