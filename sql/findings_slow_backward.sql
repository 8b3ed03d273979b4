-- findings_slow_backward: layers whose backward takes much longer than their forward, with the backward kernel
-- to look at first.
-- analyze: on request (findings has its rows; write it with `tracepipe analyze --view findings_slow_backward`)
-- Inputs:  layer_summary (GPU time by pass), kernel_layers (the backward kernels),
--          finding_thresholds (backward_max_ratio, backward_expected_ratio)
-- Output, one row per trace and layer path (a leading `ProfilerStep#N` folded to `ProfilerStep#*`, its steps
-- summed) that fires:
--   trace_id, rule ('slow_backward'), path, layer, pass ('backward'), kernel (the path's backward kernel with
--   the most time), launches (backward kernels), gpu_time_ns (backward GPU time, ns), at_stake_ns (backward -
--   backward_expected_ratio * forward, ns), measure ('backward_over_forward'), value (backward / forward), threshold
--   (backward_max_ratio), evidence, fix, forward_gpu_time_ns, backward_gpu_time_ns (ns), top_kernel_ns (ns)
-- Rule: layer_summary's split by pass (backward kernels count for the forward layer with the same autograd
-- sequence number, sql/launch_point_layers.sql); a path with forward GPU time > 0 fires when its backward is
-- more than backward_max_ratio times its forward.  A layer's backward computes two products for its forward's
-- one (input and weight gradients), so about backward_expected_ratio (2x) is normal and what is above it is at
-- stake; a larger ratio means extra work: an atomic scatter (embedding, index_add), a separate reduction (bias
-- gradient), a sort.
WITH th AS (
    SELECT max(value) FILTER (name = 'backward_max_ratio') AS max_ratio,
           max(value) FILTER (name = 'backward_expected_ratio') AS expected
    FROM finding_thresholds
),
layers AS (
    SELECT trace_id, regexp_replace(path, '^(ProfilerStep#|step#|step_)[0-9]+(/|$)', '\1*\2') AS path,
           any_value(regexp_replace(layer, '^(ProfilerStep#|step#|step_)[0-9]+$', '\1*')) AS layer,
           sum(forward_gpu_time_ns) AS fwd, sum(backward_gpu_time_ns) AS bwd,
           sum(backward_kernels) AS bwd_kernels
    FROM layer_summary
    WHERE path IS NOT NULL
    GROUP BY ALL
),
top_kernel AS (
    SELECT trace_id, path, arg_max(kernel, ns) AS kernel, max(ns) AS ns
    FROM (
        SELECT trace_id, regexp_replace(path, '^(ProfilerStep#|step#|step_)[0-9]+(/|$)', '\1*\2') AS path,
               coalesce(short_name, name) AS kernel, sum(duration_ns) AS ns
        FROM kernel_layers
        WHERE pass = 'backward' AND path IS NOT NULL
        GROUP BY ALL
    )
    GROUP BY trace_id, path
)
SELECT l.trace_id, 'slow_backward' AS rule, l.path, l.layer, 'backward' AS pass, t.kernel,
       l.bwd_kernels AS launches, l.bwd::BIGINT AS gpu_time_ns,
       round(l.bwd - th.expected * l.fwd)::BIGINT AS at_stake_ns,
       'backward_over_forward' AS measure, l.bwd / l.fwd AS value, th.max_ratio AS threshold,
       printf('backward %s µs = %.1fx the forward''s %s µs (about %.0fx is normal); top kernel %s, %s µs',
              format('{:,.1f}', l.bwd / 1e3), l.bwd / l.fwd, format('{:,.1f}', l.fwd / 1e3), th.expected, t.kernel,
              format('{:,.1f}', t.ns / 1e3)) AS evidence,
       printf('Start with %s: embedding/index scatters (sparse=True), bias reductions and small kernels fuse under '
              'torch.compile', t.kernel) AS fix,
       l.fwd::BIGINT AS forward_gpu_time_ns, l.bwd::BIGINT AS backward_gpu_time_ns, t.ns::BIGINT AS top_kernel_ns
FROM layers l
JOIN top_kernel t USING (trace_id, path)
CROSS JOIN th
WHERE l.fwd > 0 AND l.bwd > th.max_ratio * l.fwd
ORDER BY at_stake_ns DESC, l.trace_id, l.path
