-- kernel_geometry: the launch shape of every kernel, from gridDim/blockDim.
-- Inputs:  kernels, device_limits (warp size of the kernel's device; 32 when the device is unknown)
-- Output:  trace_id, kernel_id, device_id, name, short_name, start_ns, duration_ns (ns),
--          grid_x..grid_z, block_x..block_z (as recorded), blocks (gridDim product), threads_per_block (blockDim
--          product), warp_size (threads), warps_per_block (ceil(threads_per_block / warp_size): a partial warp
--          occupies a whole warp slot), total_threads (blocks * threads_per_block), total_warps
--          (blocks * warps_per_block), registers_per_thread, static_smem_bytes, dynamic_smem_bytes,
--          smem_per_block_bytes (static + dynamic, what the kernel asked for; the driver's per-block reserve is
--          added in kernel_occupancy), launch_issue (why the derived columns are NULL; NULL for a possible launch)
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
