-- kernel_sm_spread: per ncu launch, the round-robin dispatch model's spread of blocks over SMs beside the spread
-- ncu measured per SM (blocks launched, active cycles, warp instructions: .min/.max/.avg over the SMs).
-- Inputs:  ncu_kernels (grid, block, NVTX stack), ncu_kernel_metrics (occupancy limits, duration, launch__sm_count
--          and the per-SM .min/.max/.avg counters of `tracepipe capture ncu --sm-counters`, pivoted there once)
-- Output, one row per ncu launch:
--   trace_id                 VARCHAR: the ncu trace
--   launch_id                BIGINT: ncu's ID of the launch
--   layer                    VARCHAR: the innermost NVTX range ncu recorded (--nvtx)
--   name                     VARCHAR: ncu's demangled kernel name
--   blocks                   BIGINT blocks: gridDim product
--   threads_per_block        BIGINT threads: blockDim product
--   sm_count                 BIGINT SMs: launch__sm_count
--   resident_blocks_per_sm   BIGINT blocks: ncu's own limit: the least of launch__occupancy_limit_*
--   duration_ns              DOUBLE ns: gpu__time_duration.sum
--   model_max_blocks         BIGINT blocks: ceil(blocks / sm_count): the busiest SM's under round-robin dispatch
--   model_min_blocks         BIGINT blocks: blocks // sm_count
--   model_mean_blocks        DOUBLE blocks: blocks / sm_count
--   model_block_imbalance    DOUBLE: model_max_blocks / model_mean_blocks
--   model_idle_sms           BIGINT SMs: SMs without a block
--   model_max_rounds         BIGINT: ceil(model_max_blocks / resident): rounds of resident blocks the busiest SM runs
--   model_mean_rounds        DOUBLE: mean over SMs of ceil(blocks on it / resident)
--   model_round_imbalance    DOUBLE: model_max_rounds / model_mean_rounds: what the model predicts for active cycles
--                              when every block takes the same time
--   ctas_min                 DOUBLE blocks: sm__ctas_launched.min: blocks the least loaded SM ran
--   ctas_max                 DOUBLE blocks: sm__ctas_launched.max: blocks the most loaded SM ran
--   ctas_avg                 DOUBLE blocks: sm__ctas_launched.avg: mean over SMs
--   cycles_min               DOUBLE cycles: sm__cycles_active.min: cycles the least busy SM had a block resident
--   cycles_max               DOUBLE cycles: sm__cycles_active.max
--   cycles_avg               DOUBLE cycles: sm__cycles_active.avg
--   inst_min                 DOUBLE warp instructions: sm__inst_executed.min per SM
--   inst_max                 DOUBLE warp instructions: sm__inst_executed.max per SM
--   inst_avg                 DOUBLE warp instructions: sm__inst_executed.avg per SM
--   measured_block_imbalance DOUBLE: ctas_max / ctas_avg
--   measured_cycle_imbalance DOUBLE: cycles_max / cycles_avg
--   measured_inst_imbalance  DOUBLE: inst_max / inst_avg
--   blocks_as_modelled       BOOLEAN: ncu's per-SM block min and max equal the model's: dispatch was round-robin-even
--   cycle_vs_model           DOUBLE: measured_cycle_imbalance / model_round_imbalance: 1 = the model's time spread
--                              holds; > 1 = SMs differ more than block counts explain (a block's time depends on where
--                              its tile lies)
-- Columns are NULL where a counter was not collected (captures without --sm-counters lack sm__ctas_launched and
-- sm__inst_executed; ncu's WorkloadDistribution section already gives sm__cycles_active).
WITH k AS (
    SELECT k.trace_id, k.launch_id, regexp_extract(k.nvtx_push_pop, '[^/]+$') AS layer, k.name,
           try_cast(k.grid_x::HUGEINT * k.grid_y * k.grid_z AS BIGINT) AS blocks,
           try_cast(k.block_x::HUGEINT * k.block_y * k.block_z AS BIGINT) AS threads_per_block,
           x.sm_count::BIGINT AS sm_count,
           least(x.limit_blocks, x.limit_registers, x.limit_shared_mem, x.limit_warps, x.limit_barriers)::BIGINT
               AS resident_blocks_per_sm,
           x.duration_ns, x.ctas_min, x.ctas_max, x.ctas_avg, x.cycles_min, x.cycles_max, x.cycles_avg,
           x.inst_min, x.inst_max, x.inst_avg
    FROM ncu_kernels k
    LEFT JOIN ncu_kernel_metrics x USING (trace_id, launch_id)
), model AS (
    SELECT *,
           ((blocks::HUGEINT + sm_count - 1) // sm_count)::BIGINT AS model_max_blocks,
           blocks // sm_count AS model_min_blocks,
           blocks / sm_count AS model_mean_blocks,
           greatest(sm_count - blocks, 0) AS model_idle_sms,
           greatest(resident_blocks_per_sm, 1) AS r
    FROM k
), rounds AS (
    SELECT *,
           (model_max_blocks + r - 1) // r AS model_max_rounds,
           ((blocks % sm_count) * ((model_min_blocks + 1 + r - 1) // r)
            + (sm_count - blocks % sm_count) * ((model_min_blocks + r - 1) // r)) / sm_count AS model_mean_rounds
    FROM model
)
SELECT trace_id, launch_id, layer, name, blocks, threads_per_block, sm_count, resident_blocks_per_sm, duration_ns,
       model_max_blocks, model_min_blocks, model_mean_blocks, model_max_blocks / model_mean_blocks AS model_block_imbalance,
       model_idle_sms, model_max_rounds, model_mean_rounds,
       model_max_rounds / nullif(model_mean_rounds, 0) AS model_round_imbalance,
       ctas_min, ctas_max, ctas_avg, cycles_min, cycles_max, cycles_avg, inst_min, inst_max, inst_avg,
       ctas_max / nullif(ctas_avg, 0) AS measured_block_imbalance,
       cycles_max / nullif(cycles_avg, 0) AS measured_cycle_imbalance,
       inst_max / nullif(inst_avg, 0) AS measured_inst_imbalance,
       ctas_min = model_min_blocks AND ctas_max = model_max_blocks AS blocks_as_modelled,
       cycles_max / nullif(cycles_avg, 0) / nullif(model_max_rounds / nullif(model_mean_rounds, 0), 0) AS cycle_vs_model
FROM rounds
ORDER BY trace_id, launch_id
