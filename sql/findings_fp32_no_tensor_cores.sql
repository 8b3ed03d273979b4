-- findings_fp32_no_tensor_cores: FP32 GEMM and convolution kernels that run on the CUDA cores (FFMA) of a GPU with
-- tensor cores, where TF32 or bf16 (fp16 on Volta/Turing) would put them on the tensor cores.
-- analyze: on request (findings has its rows; write it with `tracepipe analyze --view findings_fp32_no_tensor_cores`)
-- Inputs:  kernel_layers, device_limits (vendor, compute_major), finding_thresholds (fp32_min_compute_major,
--          tensor_core_speedup), finding_kernel_classes (fp32_simt, tensor_core, convolution)
-- Output, one row per trace, layer path (a leading `ProfilerStep#N` folded to `ProfilerStep#*`) and kernel (short
-- name):
--   trace_id, rule ('fp32_no_tensor_cores'), path, layer, pass, kernel, launches, gpu_time_ns (ns), at_stake_ns
--   (gpu_time_ns * (1 - 1 / tensor_core_speedup), ns), measure ('compute_capability'), value (compute_major.minor of
--   the device), threshold (fp32_min_compute_major), evidence, fix, family ('convolution' | 'gemm'),
--   tf32_elsewhere (the trace runs other kernels of the same family on TF32: TF32 is allowed, the library chose
--   FP32 for this shape), device (name)
-- Rule: an NVIDIA device of compute capability >= fp32_min_compute_major (7.0: Volta's tensor cores); a kernel
-- whose full name is of class fp32_simt (sgemm, ..._ffma_..., gemm<float, ...>, f32f32_f32f32) and not of class
-- tensor_core.  The fix depends on what the trace shows: on cc 7.x only fp16 runs on tensor cores (autocast
-- float16); on cc >= 8.0 TF32 (one flag; on by default for convolutions, off for matmuls) or bf16 autocast; when
-- the same trace already runs TF32 kernels of the
-- family, TF32 is on and the library picked FP32 for this shape (small channel counts, unaligned sizes), so the
-- fix is bf16 autocast or a tensor-core-friendly shape, not the flag.
WITH th AS (
    SELECT max(value) FILTER (name = 'fp32_min_compute_major') AS min_major,
           max(value) FILTER (name = 'tensor_core_speedup') AS speedup
    FROM finding_thresholds
),
cls AS (
    SELECT max(pattern) FILTER (class = 'fp32_simt') AS fp32,
           max(pattern) FILTER (class = 'tensor_core') AS tc,
           max(pattern) FILTER (class = 'convolution') AS conv
    FROM finding_kernel_classes
),
names AS (
    SELECT n.name, regexp_matches(n.name, cls.fp32) AND NOT regexp_matches(n.name, cls.tc) AS fp32_simt,
           regexp_matches(n.name, cls.tc) AND regexp_matches(n.name, '(?i)tf32') AS tf32,
           CASE WHEN regexp_matches(n.name, cls.conv) THEN 'convolution' ELSE 'gemm' END AS family
    FROM (SELECT DISTINCT name FROM kernel_layers) n, cls
),
tf32_seen AS (  -- families the trace already runs on TF32
    SELECT DISTINCT k.trace_id, n.family FROM kernel_layers k JOIN names n USING (name) WHERE n.tf32
),
simt AS (
    SELECT k.trace_id, regexp_replace(k.path, '^(ProfilerStep#|step#|step_)[0-9]+(/|$)', '\1*\2') AS path,
           regexp_replace(k.layer, '^(ProfilerStep#|step#|step_)[0-9]+$', '\1*') AS layer,
           k.pass, coalesce(k.short_name, k.name) AS kernel, k.duration_ns, n.family,
           d.compute_major, d.compute_minor, d.name AS device
    FROM kernel_layers k
    JOIN names n USING (name)
    JOIN device_limits d ON d.trace_id = k.trace_id AND d.device_id = k.device_id
    CROSS JOIN th
    WHERE n.fp32_simt AND d.vendor = 'NVIDIA' AND d.compute_major >= th.min_major
),
grouped AS (
    SELECT trace_id, path, any_value(layer) AS layer,
           CASE WHEN count(DISTINCT pass) = 1 THEN any_value(pass) END AS pass, kernel, any_value(family) AS family,
           count(*) AS launches, sum(duration_ns)::BIGINT AS gpu_time_ns, max(compute_major) AS compute_major,
           max(compute_minor) AS compute_minor, any_value(device) AS device
    FROM simt
    GROUP BY trace_id, path, kernel
)
SELECT g.trace_id, 'fp32_no_tensor_cores' AS rule, g.path, g.layer, g.pass, g.kernel, g.launches, g.gpu_time_ns,
       round(g.gpu_time_ns * (1 - 1 / th.speedup))::BIGINT AS at_stake_ns,
       'compute_capability' AS measure, g.compute_major + g.compute_minor / 10.0 AS value, th.min_major AS threshold,
       printf('%d FP32 %s launch(es) on the CUDA cores (FFMA), %s µs, on a cc %d.%d GPU with tensor cores%s',
              g.launches, g.family, format('{:,.1f}', g.gpu_time_ns / 1e3), g.compute_major, g.compute_minor,
              CASE WHEN t.family IS NOT NULL THEN printf('; other %s kernels here run TF32', g.family) ELSE '' END)
           AS evidence,
       CASE
           WHEN g.compute_major < 8 THEN 'Volta/Turing tensor cores take fp16: torch.autocast("cuda", torch.float16) '
                                         'with a GradScaler'
           WHEN t.family IS NOT NULL THEN 'TF32 is on and the library still chose FP32 for this shape: bf16 autocast, '
                                          'or pad sizes to multiples of 8'
           WHEN g.family = 'convolution' THEN 'bf16 autocast; TF32 is on by default for convolutions, so cuDNN chose '
                                              'FP32 here (pad channels to 8)'
           ELSE 'Allow TF32 matmuls: torch.set_float32_matmul_precision("high"), or bf16 autocast'
       END AS fix,
       g.family, t.family IS NOT NULL AS tf32_elsewhere, g.device
FROM grouped g
CROSS JOIN th
LEFT JOIN tf32_seen t ON t.trace_id = g.trace_id AND t.family = g.family
ORDER BY at_stake_ns DESC, g.trace_id, g.path, g.kernel
