-- layer_sm_spread: ncu's measured per-SM spread rolled up per layer and kernel, beside the round-robin model's.
-- Inputs:  kernel_sm_spread
-- Output, one row per ncu trace, layer and kernel with a measured per-SM counter:
--   capture_id               VARCHAR: the ncu trace id without its last '.'-part: the capture its timeline traces share
--   trace_id                 VARCHAR: the ncu trace
--   layer                    VARCHAR: the innermost NVTX range; NULL without --nvtx
--   name                     VARCHAR: ncu's demangled kernel name
--   launches                 BIGINT: ncu launches
--   blocks                   DOUBLE blocks: per launch, mean
--   sm_count                 BIGINT SMs: launch__sm_count
--   ctas_min                 DOUBLE blocks: blocks one SM ran: the least over SMs and launches
--   ctas_avg                 DOUBLE blocks: the mean over SMs and launches
--   ctas_max                 DOUBLE blocks: the most over SMs and launches
--   cycles_min               DOUBLE cycles: sm__cycles_active per SM: the least over SMs and launches
--   cycles_avg               DOUBLE cycles: the mean
--   cycles_max               DOUBLE cycles: the most
--   inst_min                 DOUBLE warp instructions: sm__inst_executed per SM: the least over SMs and launches
--   inst_avg                 DOUBLE warp instructions: the mean
--   inst_max                 DOUBLE warp instructions: the most
--   block_max_over_avg       DOUBLE: the per-launch max / avg of blocks per SM, mean over launches: 1 = every SM did
--                              the same
--   cycle_max_over_avg       DOUBLE: likewise for active cycles
--   inst_max_over_avg        DOUBLE: likewise for warp instructions
--   model_round_max_over_avg DOUBLE: the model's predicted ratio for cycles, mean over launches
--   cycle_vs_model           DOUBLE: measured / modelled cycle ratio, mean over launches
--   first_launch_id          BIGINT: the lowest ncu ID among the launches (the rows' order)
-- min over launches of each launch's per-SM min, max of the per-SM max, mean of the per-SM means: with one
-- launch per row (ncu measures one forward) these are ncu's own .min/.max/.avg.
SELECT regexp_replace(trace_id, '\.[^.]*$', '') AS capture_id, trace_id, layer, name, count(*) AS launches,
       avg(blocks) AS blocks, max(sm_count) AS sm_count,
       min(ctas_min) AS ctas_min, avg(ctas_avg) AS ctas_avg, max(ctas_max) AS ctas_max,
       min(cycles_min) AS cycles_min, avg(cycles_avg) AS cycles_avg, max(cycles_max) AS cycles_max,
       min(inst_min) AS inst_min, avg(inst_avg) AS inst_avg, max(inst_max) AS inst_max,
       avg(measured_block_imbalance) AS block_max_over_avg, avg(measured_cycle_imbalance) AS cycle_max_over_avg,
       avg(measured_inst_imbalance) AS inst_max_over_avg, avg(model_round_imbalance) AS model_round_max_over_avg,
       avg(cycle_vs_model) AS cycle_vs_model, min(launch_id) AS first_launch_id
FROM kernel_sm_spread
WHERE coalesce(ctas_max, cycles_max, inst_max) IS NOT NULL
GROUP BY trace_id, layer, name
ORDER BY trace_id, first_launch_id
