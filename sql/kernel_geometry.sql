-- kernel_geometry: the launch shape of every kernel, from gridDim/blockDim.
-- Inputs:  kernels, device_limits (warp size of the kernel's device; 32 when the device is unknown)
-- Output, one row per kernel:
--   trace_id             VARCHAR: the trace
--   kernel_id            BIGINT: the kernel (kernels.kernel_id)
--   device_id            INTEGER: the GPU (CUDA device ordinal)
--   name                 VARCHAR: the demangled kernel name
--   short_name           VARCHAR: the name without template arguments and parameters (nsys shortName)
--   start_ns             BIGINT ns, GPU clock: start of the GPU execution
--   duration_ns          BIGINT ns: the kernel's GPU time
--   grid_x               INTEGER blocks: gridDim.x
--   grid_y               INTEGER blocks: gridDim.y
--   grid_z               INTEGER blocks: gridDim.z
--   block_x              INTEGER threads: blockDim.x
--   block_y              INTEGER threads: blockDim.y
--   block_z              INTEGER threads: blockDim.z
--   blocks               BIGINT blocks: gridDim product
--   threads_per_block    BIGINT threads: blockDim product
--   warp_size            INTEGER threads: of the kernel's device; 32 when the device is unknown
--   warps_per_block      BIGINT warps: ceil(threads_per_block / warp_size): a partial warp occupies a whole warp slot
--   total_threads        HUGEINT threads: blocks * threads_per_block (HUGEINT: past BIGINT for the largest grids;
--                          DOUBLE in Parquet)
--   total_warps          HUGEINT warps: blocks * warps_per_block (HUGEINT likewise)
--   registers_per_thread INTEGER registers: registers per thread
--   static_smem_bytes    BIGINT bytes: static shared memory per block
--   dynamic_smem_bytes   BIGINT bytes: dynamic shared memory per block
--   smem_per_block_bytes BIGINT bytes: static + dynamic: what the kernel asked for (the driver's per-block reserve is
--                          added in kernel_occupancy)
--   launch_issue         VARCHAR: why the derived columns are NULL; NULL for a possible launch
-- Rule: a NULL dimension makes the products NULL (unknown), never 1.  A shape no GPU can launch -- a dimension
-- below 1 (0 threads), beyond CUDA's limits (gridDim.y/z <= 65535, blockDim <= (1024, 1024, 64), 1024 threads
-- per block; HIP has the same) -- gives NULL derived columns and a launch_issue
-- (counted by analysis_warnings), never an error or a guess.  The largest legal grid (2^31-1 x 65535 x 65535
-- blocks, 9.22e18) fits BIGINT; products with threads or warps do not, so total_threads / total_warps are
-- HUGEINT (exact in SQL; DOUBLE in the Parquet file, which has no 128-bit integer); a shared-memory sum past
-- BIGINT is NULL (kernel_occupancy then names the impossible request).
WITH k AS (
    SELECT k.*, coalesce(d.warp_size, 32) AS ws,
           CASE WHEN least(k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z) < 1
                    THEN 'empty launch: a grid or block dimension is ' || least(k.grid_x, k.grid_y, k.grid_z,
                                                                                 k.block_x, k.block_y, k.block_z)
                WHEN k.grid_y > 65535 OR k.grid_z > 65535
                    THEN 'gridDim beyond CUDA''s limit (y, z <= 65535)'
                WHEN k.block_x > 1024 OR k.block_y > 1024 OR k.block_z > 64
                  OR k.block_x::BIGINT * k.block_y * k.block_z > 1024
                    THEN 'blockDim beyond the 1024 threads per block of every GPU'
           END AS launch_issue
    FROM kernels k
    LEFT JOIN device_limits d ON d.trace_id = k.trace_id AND d.device_id = k.device_id
),
g AS (
    SELECT *,
           CASE WHEN launch_issue IS NULL THEN grid_x::BIGINT * grid_y * grid_z END AS blocks,
           CASE WHEN launch_issue IS NULL THEN block_x::BIGINT * block_y * block_z END AS threads_per_block
    FROM k
)
SELECT trace_id, kernel_id, device_id, name, short_name, start_ns, duration_ns,
       grid_x, grid_y, grid_z, block_x, block_y, block_z,
       blocks, threads_per_block, ws AS warp_size,
       (threads_per_block + ws - 1) // ws AS warps_per_block,
       blocks::HUGEINT * threads_per_block AS total_threads,
       blocks::HUGEINT * ((threads_per_block + ws - 1) // ws) AS total_warps,
       registers_per_thread, static_smem_bytes, dynamic_smem_bytes,
       try_cast(coalesce(static_smem_bytes, 0)::HUGEINT + coalesce(dynamic_smem_bytes, 0) AS BIGINT)
           AS smem_per_block_bytes,
       launch_issue
FROM g
