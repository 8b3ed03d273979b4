-- findings: what to fix in which layer, ranked by the GPU time at stake: one row per trace, layer path, kernel or op
-- and rule, with the evidence in numbers and a one-line fix.
-- Inputs:  findings_layout_conversion, findings_tail_wave, findings_low_occupancy, findings_launch_bound,
--          findings_fp32_no_tensor_cores, findings_pageable_h2d_copy, findings_slow_backward, findings_straggler_rank,
--          layer_summary (each trace's summed kernel time), step_gpu_idle (each trace's GPU wall time),
--          finding_thresholds (min_at_stake_ns, min_at_stake_pct)
-- Output:  trace_id, priority (1 = the most GPU time at stake in its trace), rule, path (the layer path; a leading
--          `ProfilerStep#N` folded to `ProfilerStep#*`, so one finding covers the layer in every step; NULL =
--          outside every range), layer (innermost range), pass ('forward' | 'backward' | 'optimizer' when the
--          operations concerned share one, else NULL), kernel (short name of the kernel or the op's name; NULL where
--          the finding is about a stretch of many kernels or a whole layer), launches (GPU operations concerned),
--          gpu_time_ns (their GPU time, ns), at_stake_ns (GPU time the fix could save, ns: each rule's estimate, in
--          its view's header), share_pct (at_stake_ns over the trace's GPU wall time: step_gpu_idle's wall_ns summed
--          over its steps and devices, %: the share of the profiled time the fix could save), measure (the rule's
--          key number, its unit in the name), value, threshold (what value was compared with; NULL for rules
--          without one), evidence (the numbers, one line), fix (one line)
-- Rule: the union of the findings_<rule> views (one view per rule; each header says when its rule fires and how
-- it estimates the time at stake), keeping the findings worth a look: at_stake_ns >= min_at_stake_ns and at least
-- min_at_stake_pct of the trace's summed kernel time, its GPU work (pipeline/analyze/finding_rules.py holds every
-- threshold).  Sorted by time at
-- stake, then trace, rule, path and kernel, so runs agree row for row.
WITH th AS (
    SELECT max(value) FILTER (name = 'min_at_stake_ns') AS min_ns,
           max(value) FILTER (name = 'min_at_stake_pct') AS min_pct
    FROM finding_thresholds
),
found AS (  -- every rule's rows, by column name (each view adds columns of its own; the shared ones are kept below)
    FROM findings_layout_conversion
    UNION ALL BY NAME FROM findings_tail_wave
    UNION ALL BY NAME FROM findings_low_occupancy
    UNION ALL BY NAME FROM findings_launch_bound
    UNION ALL BY NAME FROM findings_fp32_no_tensor_cores
    UNION ALL BY NAME FROM findings_pageable_h2d_copy
    UNION ALL BY NAME FROM findings_slow_backward
    UNION ALL BY NAME FROM findings_straggler_rank
),
totals AS (
    SELECT trace_id, sum(gpu_time_ns) AS trace_ns FROM layer_summary GROUP BY trace_id
),
walls AS (
    SELECT trace_id, sum(wall_ns) AS wall_ns FROM step_gpu_idle GROUP BY trace_id
),
kept AS (
    SELECT f.trace_id, f.rule, f.path, f.layer, f.pass, f.kernel, f.launches, f.gpu_time_ns, f.at_stake_ns, f.measure,
           f.value, f.threshold, f.evidence, f.fix, 100.0 * f.at_stake_ns / nullif(w.wall_ns, 0) AS share_pct
    FROM found f
    JOIN totals t USING (trace_id)
    LEFT JOIN walls w USING (trace_id)
    CROSS JOIN th
    WHERE t.trace_ns > 0 AND f.at_stake_ns >= th.min_ns AND 100.0 * f.at_stake_ns >= th.min_pct * t.trace_ns
)
SELECT trace_id,
       row_number() OVER (PARTITION BY trace_id ORDER BY at_stake_ns DESC, rule, path NULLS FIRST, kernel NULLS FIRST)
           AS priority,
       rule, path, layer, pass, kernel, launches::BIGINT AS launches, gpu_time_ns, at_stake_ns, share_pct, measure,
       value::DOUBLE AS value, threshold, evidence, fix
FROM kept
ORDER BY at_stake_ns DESC, trace_id, rule, path NULLS FIRST, kernel NULLS FIRST
