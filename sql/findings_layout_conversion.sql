-- findings_layout_conversion: layout transforms (NCHW <-> NHWC, transposes) inside convolution layers, and their
-- share of the layer: what running the model in channels_last would save.
-- analyze: on request (findings has its rows; write it with `tracepipe analyze --view findings_layout_conversion`)
-- Inputs:  kernel_layers, layer_summary (the layer's GPU time), finding_thresholds (layout_min_share_pct),
--          finding_kernel_classes (convolution, layout_conversion)
-- Output, one row per trace, layer path and layout-transform kernel (short name) of a layer that runs a convolution
-- (as in every findings view, a leading numbered step range is folded: `ProfilerStep#7/conv1` and
-- `ProfilerStep#8/conv1` are `ProfilerStep#*/conv1`, one finding for the layer in every step):
--   trace_id, rule ('layout_conversion'), path, layer, pass (of the transform's launches when they share one, else
--   NULL), kernel (short name), launches, gpu_time_ns (the kernel's, ns), at_stake_ns (= gpu_time_ns: the
--   transforms channels_last removes, ns), measure ('layout_share_pct'), value (every layout transform of the
--   layer over the layer's GPU time, %), threshold (layout_min_share_pct, %), evidence, fix (one line each),
--   layer_gpu_time_ns (ns), layout_gpu_time_ns (all transforms of the layer, ns), kernel_share_pct (this kernel
--   over the layer, %), conv_kernel (the layer's convolution kernel with the most time)
-- Rule: a layer path runs a convolution (a kernel of class `convolution`) and kernels of class `layout_conversion`
-- whose summed time is at least layout_min_share_pct of the layer's GPU time (layer_summary.gpu_time_ns: every
-- kernel whose innermost range is the layer, all passes).  cuDNN's NHWC kernels (`..._nhwckrsc_nhwc_...`) read
-- NHWC; with an NCHW (contiguous) model it converts the input and filter in (nchwToNhwc) and the output back
-- (nhwcToNchw) on every call; a channels_last model and input need none of them, so their whole time is at stake.
WITH th AS (
    SELECT max(value) FILTER (name = 'layout_min_share_pct') AS min_share FROM finding_thresholds
),
cls AS (
    SELECT max(pattern) FILTER (class = 'convolution') AS conv,
           max(pattern) FILTER (class = 'layout_conversion') AS layout
    FROM finding_kernel_classes
),
names AS (  -- each distinct name classified once (the patterns are per-row values, not constants)
    SELECT n.name, regexp_matches(n.name, cls.conv) AS is_conv, regexp_matches(n.name, cls.layout) AS is_layout
    FROM (SELECT DISTINCT name FROM kernel_layers WHERE path IS NOT NULL) n, cls
),
classed AS (
    SELECT k.trace_id, regexp_replace(k.path, '^(ProfilerStep#|step#|step_)[0-9]+(/|$)', '\1*\2') AS path,
           regexp_replace(k.layer, '^(ProfilerStep#|step#|step_)[0-9]+$', '\1*') AS layer,
           k.pass, coalesce(k.short_name, k.name) AS kernel, k.duration_ns,
           n.is_conv, n.is_layout
    FROM kernel_layers k
    JOIN names n USING (name)
    WHERE k.path IS NOT NULL AND (n.is_conv OR n.is_layout)
),
per_layer AS (
    SELECT trace_id, path,
           sum(duration_ns) FILTER (is_layout) AS layout_ns,
           arg_max(kernel, duration_ns) FILTER (is_conv) AS conv_kernel
    FROM classed
    GROUP BY trace_id, path
    HAVING bool_or(is_conv) AND bool_or(is_layout)
),
per_kernel AS (
    SELECT trace_id, path, any_value(layer) AS layer, kernel,
           CASE WHEN count(DISTINCT pass) = 1 THEN any_value(pass) END AS pass,
           count(*) AS launches, sum(duration_ns)::BIGINT AS gpu_time_ns
    FROM classed
    WHERE is_layout
    GROUP BY trace_id, path, kernel
)
SELECT k.trace_id, 'layout_conversion' AS rule, k.path, k.layer, k.pass, k.kernel, k.launches, k.gpu_time_ns,
       k.gpu_time_ns AS at_stake_ns,
       'layout_share_pct' AS measure, 100.0 * l.layout_ns / s.gpu_time_ns AS value, th.min_share AS threshold,
       printf('%d launches take %s of %s''s %s µs (%.1f %%); all its layout transforms %.1f %%',
              k.launches, format('{:,.1f}', k.gpu_time_ns / 1e3), k.layer, format('{:,.1f}', s.gpu_time_ns / 1e3),
              100.0 * k.gpu_time_ns / s.gpu_time_ns, 100.0 * l.layout_ns / s.gpu_time_ns) AS evidence,
       'channels_last: model.to(memory_format=torch.channels_last) and the same for the input' AS fix,
       s.gpu_time_ns AS layer_gpu_time_ns, l.layout_ns::BIGINT AS layout_gpu_time_ns,
       100.0 * k.gpu_time_ns / s.gpu_time_ns AS kernel_share_pct, l.conv_kernel
FROM per_kernel k
JOIN per_layer l USING (trace_id, path)
JOIN (SELECT trace_id, regexp_replace(path, '^(ProfilerStep#|step#|step_)[0-9]+(/|$)', '\1*\2') AS path,
             sum(gpu_time_ns)::BIGINT AS gpu_time_ns
      FROM layer_summary GROUP BY ALL) s ON s.trace_id = k.trace_id AND s.path = k.path
CROSS JOIN th
WHERE s.gpu_time_ns > 0 AND 100.0 * l.layout_ns >= th.min_share * s.gpu_time_ns
ORDER BY at_stake_ns DESC, k.trace_id, k.path, k.kernel
