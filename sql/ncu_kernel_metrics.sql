-- ncu_kernel_metrics: one wide row per Nsight Compute launch with the metrics analysis uses most.
-- Inputs:  ncu_metrics (long, base units), ncu_kernels, ncu_display_names (pipeline/analyze/ncu_names.py)
-- Output, one row per Nsight Compute launch:
--   trace_id                  VARCHAR: the ncu trace
--   launch_id                 BIGINT: ncu's ID of the launch
--   name                      VARCHAR: ncu's demangled kernel name
--   duration_ns               DOUBLE ns: gpu__time_duration.sum
--   sm_throughput_pct         DOUBLE %: sm__throughput.avg.pct_of_peak_sustained_elapsed
--   achieved_occupancy_pct    DOUBLE %: sm__warps_active.avg.pct_of_peak_sustained_active
--   theoretical_occupancy_pct DOUBLE %: sm__maximum_warps_per_active_cycle_pct
--   limit_blocks              DOUBLE blocks: resident blocks per SM the block limit allows
--                               (launch__occupancy_limit_blocks)
--   limit_registers           DOUBLE blocks: the register file allows (launch__occupancy_limit_registers)
--   limit_shared_mem          DOUBLE blocks: shared memory allows (launch__occupancy_limit_shared_mem)
--   limit_warps               DOUBLE blocks: the warp limit allows (launch__occupancy_limit_warps)
--   limit_barriers            DOUBLE blocks: barriers allow (launch__occupancy_limit_barriers)
--   occupancy_limiter         VARCHAR: the resource(s) with the smallest limit, ties joined by '+' in the column order
--                               above
--   waves_per_sm              DOUBLE waves: launch__waves_per_multiprocessor
--   registers_per_thread      DOUBLE registers: launch__registers_per_thread
--   ffma_inst                 DOUBLE instructions: FFMA thread instructions executed, predicated on; NULL when not
--                               collected
--   fadd_inst                 DOUBLE instructions: FADD likewise
--   fmul_inst                 DOUBLE instructions: FMUL likewise
--   hfma_inst                 DOUBLE instructions: HFMA likewise (an HFMA2 counts once)
--   dfma_inst                 DOUBLE instructions: DFMA likewise
--   fma_inst                  DOUBLE instructions: ffma + hfma + dfma of those collected
--   tensor_inst               DOUBLE warp instructions: sm__inst_executed_pipe_tensor.sum
--   tensor_macs               DOUBLE MACs: the collected sm__ops_path_tensor_src_* counters / 2 (ncu counts a MAC as
--                               two ops); NULL when none was collected
--   macs                      DOUBLE MACs: fma_inst + tensor_macs; NULL when neither was collected
--   sm_count                  DOUBLE SMs: launch__sm_count
--   ctas_min                  DOUBLE blocks: sm__ctas_launched.min over SMs
--   ctas_max                  DOUBLE blocks: sm__ctas_launched.max
--   ctas_avg                  DOUBLE blocks: sm__ctas_launched.avg
--   cycles_min                DOUBLE cycles: sm__cycles_active.min over SMs
--   cycles_max                DOUBLE cycles: sm__cycles_active.max
--   cycles_avg                DOUBLE cycles: sm__cycles_active.avg
--   inst_min                  DOUBLE warp instructions: sm__inst_executed.min over SMs
--   inst_max                  DOUBLE warp instructions: sm__inst_executed.max
--   inst_avg                  DOUBLE warp instructions: sm__inst_executed.avg
-- Rule: each value is read under its raw-page metric name: a details-page row's (section, display name) is mapped
-- to it through ncu_display_names, whose rows name what each ncu version wrote (2019.5-2020.x "GPU Speed Of
-- Light" / "SM [%]", later "GPU Speed Of Light Throughput" / "Compute (SM) [%]" or "Compute (SM) Throughput").
-- Where a launch has both, the raw-page value wins.
-- The instruction counts are thread instructions executed, predicated on
-- (smsp__sass_thread_inst_executed_op_<op>_pred_on.sum), NULL when not collected (ncu's default sections do not
-- collect them).  tensor_macs sums the collected sm__ops_path_tensor_src_<type>[_dst_<type>].sum counters / 2: ncu
-- counts a MAC as two ops (a 512x256x128 gemm reports 33,554,432; measured in sample_traces/h200_ncu_units); per
-- source type a parent counter (src_fp16) wins over its dst_ split; it is only as complete as the source types
-- collected.  The per-SM counters (.min/.max/.avg) are NULL where not collected: ctas and inst need `tracepipe
-- capture ncu --sm-counters`, ncu's WorkloadDistribution section gives the cycles.
WITH named AS (
    SELECT n.trace_id, n.launch_id, coalesce(d.metric, n.metric) AS metric, n.value, d.metric IS NOT NULL AS shown
    FROM ncu_metrics n
    LEFT JOIN ncu_display_names d ON d.section = n.section AND d.display = n.metric
    WHERE n.value IS NOT NULL AND n.rule IS NULL
), m AS (   -- one value per launch and raw metric: the raw page's where both pages gave one
    SELECT trace_id, launch_id, metric, coalesce(max(value) FILTER (WHERE NOT shown), max(value)) AS value
    FROM named GROUP BY trace_id, launch_id, metric
), wide AS (
    SELECT trace_id, launch_id,
        max(value) FILTER (WHERE metric = 'gpu__time_duration.sum') AS duration_ns,
        max(value) FILTER (WHERE metric = 'sm__throughput.avg.pct_of_peak_sustained_elapsed') AS sm_throughput_pct,
        max(value) FILTER (WHERE metric = 'sm__warps_active.avg.pct_of_peak_sustained_active') AS achieved_occupancy_pct,
        max(value) FILTER (WHERE metric = 'sm__maximum_warps_per_active_cycle_pct') AS theoretical_occupancy_pct,
        max(value) FILTER (WHERE metric = 'launch__occupancy_limit_blocks') AS limit_blocks,
        max(value) FILTER (WHERE metric = 'launch__occupancy_limit_registers') AS limit_registers,
        max(value) FILTER (WHERE metric = 'launch__occupancy_limit_shared_mem') AS limit_shared_mem,
        max(value) FILTER (WHERE metric = 'launch__occupancy_limit_warps') AS limit_warps,
        max(value) FILTER (WHERE metric = 'launch__occupancy_limit_barriers') AS limit_barriers,
        max(value) FILTER (WHERE metric = 'launch__waves_per_multiprocessor') AS waves_per_sm,
        max(value) FILTER (WHERE metric = 'launch__registers_per_thread') AS registers_per_thread,
        max(value) FILTER (WHERE metric = 'smsp__sass_thread_inst_executed_op_ffma_pred_on.sum') AS ffma_inst,
        max(value) FILTER (WHERE metric = 'smsp__sass_thread_inst_executed_op_fadd_pred_on.sum') AS fadd_inst,
        max(value) FILTER (WHERE metric = 'smsp__sass_thread_inst_executed_op_fmul_pred_on.sum') AS fmul_inst,
        max(value) FILTER (WHERE metric = 'smsp__sass_thread_inst_executed_op_hfma_pred_on.sum') AS hfma_inst,
        max(value) FILTER (WHERE metric = 'smsp__sass_thread_inst_executed_op_dfma_pred_on.sum') AS dfma_inst,
        max(value) FILTER (WHERE metric = 'sm__inst_executed_pipe_tensor.sum') AS tensor_inst,
        max(value) FILTER (WHERE metric = 'launch__sm_count') AS sm_count,
        max(value) FILTER (WHERE metric = 'sm__ctas_launched.min') AS ctas_min,
        max(value) FILTER (WHERE metric = 'sm__ctas_launched.max') AS ctas_max,
        max(value) FILTER (WHERE metric = 'sm__ctas_launched.avg') AS ctas_avg,
        max(value) FILTER (WHERE metric = 'sm__cycles_active.min') AS cycles_min,
        max(value) FILTER (WHERE metric = 'sm__cycles_active.max') AS cycles_max,
        max(value) FILTER (WHERE metric = 'sm__cycles_active.avg') AS cycles_avg,
        max(value) FILTER (WHERE metric = 'sm__inst_executed.min') AS inst_min,
        max(value) FILTER (WHERE metric = 'sm__inst_executed.max') AS inst_max,
        max(value) FILTER (WHERE metric = 'sm__inst_executed.avg') AS inst_avg
    FROM m GROUP BY trace_id, launch_id
), tensor_ops AS (
    -- sm__ops_path_tensor_src_<src>[_dst_<dst>].sum; the op_* and sparsity_* splits would count twice.
    SELECT trace_id, launch_id, metric, value,
           regexp_extract(metric, '^sm__ops_path_tensor_src_([a-z0-9]+)', 1) AS src,
           metric NOT LIKE '%\_dst\_%' ESCAPE '\' AS is_parent
    FROM m
    WHERE regexp_matches(metric, '^sm__ops_path_tensor_src_[a-z0-9]+(_dst_[a-z0-9]+)?\.sum$')
), tensor_by_src AS (
    SELECT trace_id, launch_id, src,
           coalesce(max(value) FILTER (WHERE is_parent), sum(value) FILTER (WHERE NOT is_parent)) AS ops
    FROM tensor_ops GROUP BY ALL
), tensor AS (
    SELECT trace_id, launch_id, sum(ops) / 2 AS tensor_macs FROM tensor_by_src GROUP BY ALL
), limits AS (
    SELECT *,
        least(limit_blocks, limit_registers, limit_shared_mem, limit_warps, limit_barriers) AS limit_min
    FROM wide
)
SELECT k.trace_id, k.launch_id, k.name,
       l.duration_ns, l.sm_throughput_pct, l.achieved_occupancy_pct, l.theoretical_occupancy_pct,
       l.limit_blocks, l.limit_registers, l.limit_shared_mem, l.limit_warps, l.limit_barriers,
       nullif(concat_ws('+',
           CASE WHEN l.limit_blocks = l.limit_min THEN 'blocks' END,
           CASE WHEN l.limit_registers = l.limit_min THEN 'registers' END,
           CASE WHEN l.limit_shared_mem = l.limit_min THEN 'shared_mem' END,
           CASE WHEN l.limit_warps = l.limit_min THEN 'warps' END,
           CASE WHEN l.limit_barriers = l.limit_min THEN 'barriers' END), '') AS occupancy_limiter,
       l.waves_per_sm, l.registers_per_thread,
       l.ffma_inst, l.fadd_inst, l.fmul_inst, l.hfma_inst, l.dfma_inst,
       CASE WHEN coalesce(l.ffma_inst, l.hfma_inst, l.dfma_inst) IS NOT NULL
            THEN coalesce(l.ffma_inst, 0) + coalesce(l.hfma_inst, 0) + coalesce(l.dfma_inst, 0) END AS fma_inst,
       l.tensor_inst, t.tensor_macs,
       CASE WHEN coalesce(l.ffma_inst, l.hfma_inst, l.dfma_inst, t.tensor_macs) IS NOT NULL
            THEN coalesce(l.ffma_inst, 0) + coalesce(l.hfma_inst, 0) + coalesce(l.dfma_inst, 0)
                 + coalesce(t.tensor_macs, 0) END AS macs,
       l.sm_count, l.ctas_min, l.ctas_max, l.ctas_avg, l.cycles_min, l.cycles_max, l.cycles_avg,
       l.inst_min, l.inst_max, l.inst_avg
FROM ncu_kernels k
LEFT JOIN limits l USING (trace_id, launch_id)
LEFT JOIN tensor t USING (trace_id, launch_id)
ORDER BY k.trace_id, k.launch_id
