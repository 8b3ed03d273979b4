-- analysis_warnings: counted warnings about values the analysis could not use, one row per (trace, view, kind).
-- Inputs:  device_limits (duplicate_rows, rejected_trace_values, issue), kernel_occupancy (occupancy_issue,
--          which carries kernel_geometry's launch_issue first), layer_coverage (lack, meaning, fix, gpu_ns),
--          gpu_op_layers (launch thread and instant, duration), _autotuning_spans
-- Output, one row per trace, view and kind of warning:
--   trace_id          VARCHAR: the trace
--   view              VARCHAR: 'device_limits' | 'kernel_occupancy' | 'layer_coverage' | 'gpu_op_layers': the view
--                       whose value it is about
--   device_id         INTEGER: the GPU concerned; NULL for coverage and autotuning
--   count             BIGINT: rows concerned: dropped device rows, replaced values, devices, kernels, autotuning's GPU
--                       operations; 1 for a trace's coverage
--   message           VARCHAR: what and what was done, or what the trace lacks and the capture that gives it
--   example_kernel_id BIGINT: one kernel concerned (kernels.kernel_id); NULL for device rows and coverage
-- GPU time here is of every GPU operation (layer_coverage's gpu_ns: kernels, copies and memsets), which the
-- messages say: the report's "GPU time" is of kernels alone.
-- Rule: nothing here fails a run; `tracepipe analyze` prints each row as one warning line.  Kernel issues are
-- grouped by their text up to the first ':' (the kind), so one odd register count per kernel stays one line.
-- Inductor's autotuning: GPU operations launched inside a `CachingAutotuner.*` op on their thread
-- (_autotuning_spans: a compiled region's first call benchmarks each Triton kernel's configs, and flushes the cache
-- between runs) are work of no step of the model, yet count in the region's layers: said from 1% of the trace's GPU
-- time (the compiled sample's first step: 88% of it, its top kernel the cache flush's FillFunctor, a diff against
-- the eager run x29).
SELECT trace_id, 'device_limits' AS view, device_id, duplicate_rows AS count,
       'device ' || device_id || ': ' || duplicate_rows || ' more devices row(s) for this id dropped, kept "'
           || coalesce(name, '?') || '"' AS message,
       NULL::BIGINT AS example_kernel_id
FROM device_limits WHERE duplicate_rows > 0
UNION ALL
SELECT trace_id, 'device_limits', device_id, len(rejected_trace_values),
       'device ' || device_id || ': impossible trace values replaced from the architecture table ('
           || coalesce(arch_name, 'no row: left NULL') || '): ' || array_to_string(rejected_trace_values, ', '),
       NULL
FROM device_limits WHERE len(rejected_trace_values) > 0
UNION ALL
SELECT trace_id, 'device_limits', device_id, 1,
       'device ' || device_id || ' ("' || coalesce(name, '?') || '"): ' || issue, NULL
FROM device_limits WHERE issue IS NOT NULL
UNION ALL
SELECT trace_id, 'kernel_occupancy', device_id, count(*),
       count(*) || ' kernel(s) with NULL occupancy: ' || any_value(occupancy_issue)
           || CASE WHEN count(DISTINCT occupancy_issue) > 1 THEN ' (and similar)' ELSE '' END,
       min(kernel_id)
FROM kernel_occupancy WHERE occupancy_issue IS NOT NULL
GROUP BY trace_id, device_id, split_part(occupancy_issue, ':', 1)
UNION ALL
SELECT trace_id, 'layer_coverage', NULL, 1,
       no_layer_pct || '% of GPU time (' || round(no_layer_ns / 1e6, 3) || ' of ' || round(gpu_ns / 1e6, 3)
           || ' ms of kernels, copies and memsets) has no layer: ' || coalesce(meaning, lack)
           || coalesce('; fix: ' || fix, ''),
       NULL
FROM layer_coverage WHERE lack IS NOT NULL
UNION ALL
SELECT g.trace_id, 'gpu_op_layers', NULL, count(*),
       round(100.0 * sum(g.duration_ns) / any_value(c.gpu_ns), 1) || '% of GPU time ('
           || round(sum(g.duration_ns) / 1e6, 3) || ' ms, ' || count(*) || ' kernels, copies and memsets) is'
           || ' Inductor''s autotuning (launched inside CachingAutotuner ops: a compiled region''s first call'
           || ' benchmarks its kernels), counted in that region''s layers; capture from a step after the first'
           || ' compiled call',
       min(g.kernel_id)
FROM gpu_op_layers g
JOIN _autotuning_spans a   -- one span at most: no operation counted twice
  ON a.trace_id = g.trace_id AND a.tid = g.launch_tid AND a.pid_key = coalesce(g.launch_pid, -1)
 AND g.launch_start_ns BETWEEN a.start_ns AND a.end_ns
JOIN layer_coverage c ON c.trace_id = g.trace_id
GROUP BY g.trace_id
HAVING sum(g.duration_ns) >= 0.01 * any_value(c.gpu_ns)
