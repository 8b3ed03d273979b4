-- kernel_geometry: the launch shape of every kernel, from gridDim/blockDim.
-- Inputs:  kernels, device_limits (warp size of the kernel's device; 32 when the device is unknown)
-- Output:  trace_id, kernel_id, device_id, name, short_name, start_ns, duration_ns (ns),
--          grid_x..grid_z, block_x..block_z, blocks (gridDim product), threads_per_block (blockDim product),
--          warp_size (threads), warps_per_block (ceil(threads_per_block / warp_size): a partial warp occupies a
--          whole warp slot), total_threads (blocks * threads_per_block), total_warps (blocks * warps_per_block),
--          registers_per_thread, static_smem_bytes, dynamic_smem_bytes, smem_per_block_bytes (static + dynamic,
--          what the kernel asked for; the driver's per-block reserve is added in kernel_occupancy)
-- A NULL dimension makes the products NULL (unknown), never 1.
SELECT k.trace_id, k.kernel_id, k.device_id, k.name, k.short_name, k.start_ns, k.duration_ns,
       k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z,
       k.grid_x::BIGINT * k.grid_y * k.grid_z AS blocks,
       k.block_x::BIGINT * k.block_y * k.block_z AS threads_per_block,
       coalesce(d.warp_size, 32) AS warp_size,
       (k.block_x::BIGINT * k.block_y * k.block_z + coalesce(d.warp_size, 32) - 1) // coalesce(d.warp_size, 32)
           AS warps_per_block,
       k.grid_x::BIGINT * k.grid_y * k.grid_z * k.block_x * k.block_y * k.block_z AS total_threads,
       k.grid_x::BIGINT * k.grid_y * k.grid_z
           * ((k.block_x::BIGINT * k.block_y * k.block_z + coalesce(d.warp_size, 32) - 1) // coalesce(d.warp_size, 32))
           AS total_warps,
       k.registers_per_thread, k.static_smem_bytes, k.dynamic_smem_bytes,
       coalesce(k.static_smem_bytes, 0) + coalesce(k.dynamic_smem_bytes, 0) AS smem_per_block_bytes
FROM kernels k
LEFT JOIN device_limits d ON d.trace_id = k.trace_id AND d.device_id = k.device_id
