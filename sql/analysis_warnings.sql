-- analysis_warnings: counted warnings about values the analysis could not use, one row per (trace, view, kind).
-- Inputs:  device_limits (duplicate_rows, rejected_trace_values, issue), kernel_occupancy (occupancy_issue,
--          which carries kernel_geometry's launch_issue first), layer_coverage (lack, meaning, fix)
-- Output, one row per trace, view and kind of warning:
--   trace_id          VARCHAR: the trace
--   view              VARCHAR: 'device_limits' | 'kernel_occupancy' | 'layer_coverage': the view whose value it is
--                       about
--   device_id         INTEGER: the GPU concerned; NULL for coverage
--   count             BIGINT: rows concerned: dropped device rows, replaced values, devices, kernels; 1 for a trace's
--                       coverage
--   message           VARCHAR: what and what was done, or what the trace lacks and the capture that gives it
--   example_kernel_id BIGINT: one kernel concerned (kernels.kernel_id); NULL for device rows and coverage
-- Rule: nothing here fails a run; `tracepipe analyze` prints each row as one warning line.  Kernel issues are
-- grouped by their text up to the first ':' (the kind), so one odd register count per kernel stays one line.
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
           || ' ms) has no layer: ' || coalesce(meaning, lack) || coalesce('; fix: ' || fix, ''),
       NULL
FROM layer_coverage WHERE lack IS NOT NULL
