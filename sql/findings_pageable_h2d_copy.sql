-- findings_pageable_h2d_copy: host-to-device copies from pageable (not pinned) memory inside a training or inference
-- step: each is staged through a driver buffer and holds the host until it is done, so it cannot overlap compute.
-- analyze: on request (findings has its rows; write it with `tracepipe analyze --view findings_pageable_h2d_copy`)
-- Inputs:  gpu_op_layers, memcpy (src_kind), step_gpu_idle (the steps' CPU spans), nvtx_ranges (the step range's
--          process)
-- Output, one row per trace, layer path (a leading `ProfilerStep#N` folded to `ProfilerStep#*`) and copy:
--   trace_id, rule ('pageable_h2d_copy'), path, layer, pass, kernel (the copy's name, `[CUDA memcpy
--   Host-to-Device]`), launches (copies), gpu_time_ns (their GPU time, ns), at_stake_ns (= gpu_time_ns: what an
--   asynchronous copy from pinned memory lets overlap with compute, an upper bound, ns), measure ('gb_per_s'),
--   value (bytes / GPU time, GB/s), threshold (NULL), evidence, fix, bytes (B), steps (distinct steps with such
--   copies)
-- Rule: a memcpy of kind Host-to-Device whose source is Pageable (CUPTI's src_kind; Kineto's `Memcpy HtoD
-- (Pageable -> Device)`), launched inside a step: its launching call lies in the CPU span of a step range of
-- step_gpu_idle (ProfilerStep#N / step ranges, same process).  Traces without step ranges have no findings here:
-- copies outside the measured steps (loading the model) are not the loop's cost.
WITH steps AS (
    SELECT DISTINCT s.trace_id, s.step, s.cpu_start_ns, s.cpu_end_ns, r.pid
    FROM step_gpu_idle s
    JOIN nvtx_ranges r ON r.trace_id = s.trace_id AND r.range_id = s.range_id
    WHERE s.step > 0
),
copies AS (
    SELECT g.trace_id, regexp_replace(g.path, '^(ProfilerStep#|step#|step_)[0-9]+(/|$)', '\1*\2') AS path,
           regexp_replace(g.layer, '^(ProfilerStep#|step#|step_)[0-9]+$', '\1*') AS layer,
           g.pass, g.name AS kernel, g.duration_ns, g.bytes, st.step
    FROM gpu_op_layers g
    JOIN memcpy m ON m.trace_id = g.trace_id AND m.copy_id = g.op_row_id
    JOIN steps st ON st.trace_id = g.trace_id AND st.pid = g.launch_pid
                 AND g.launch_start_ns >= st.cpu_start_ns AND g.launch_start_ns < st.cpu_end_ns
    WHERE g.op_kind = 'memcpy' AND m.kind = 'Host-to-Device' AND m.src_kind = 'Pageable'
)
SELECT trace_id, 'pageable_h2d_copy' AS rule, path, any_value(layer) AS layer,
       CASE WHEN count(DISTINCT pass) = 1 THEN any_value(pass) END AS pass, kernel,
       count(*) AS launches, sum(duration_ns)::BIGINT AS gpu_time_ns, sum(duration_ns)::BIGINT AS at_stake_ns,
       'gb_per_s' AS measure, sum(bytes) / nullif(sum(duration_ns), 0) AS value, NULL::DOUBLE AS threshold,
       printf('%d pageable Host-to-Device cop%s in %d step(s): %s B in %s µs (%.2f GB/s)',
              count(*), CASE WHEN count(*) = 1 THEN 'y' ELSE 'ies' END, count(DISTINCT step),
              format('{:,}', sum(bytes)::BIGINT), format('{:,.1f}', sum(duration_ns) / 1e3),
              sum(bytes) / nullif(sum(duration_ns), 0)) AS evidence,
       'Pinned memory (DataLoader(pin_memory=True), tensor.pin_memory()) and .to("cuda", non_blocking=True)' AS fix,
       sum(bytes)::BIGINT AS bytes, count(DISTINCT step) AS steps
FROM copies
GROUP BY trace_id, path, kernel
ORDER BY at_stake_ns DESC, trace_id, path
