-- findings: what to fix in which layer, ranked by the GPU time at stake: one row per trace, layer path, kernel or op
-- and rule, with the evidence in numbers and a one-line fix.
-- analyze: spills (its memory goes to sorts, windows and aggregates: on big inputs it runs under 3/4 of DuckDB's
--          limit; 10M kernels: 16.9 -> 19.7 s, 2,124 -> 1,794 MB: docs/benchmarks.md, spill_share_44.txt)
-- Inputs:  kernel_layers, gpu_op_layers, kernel_waves, kernel_occupancy, device_limits, memcpy, step_gpu_idle,
--          nvtx_ranges, rank_jobs, _autotuning_spans,
--          finding_thresholds (every number the rules compare with), finding_kernel_classes (kernel families by name)
-- Macros:  step_folded
-- Output, one row per trace, layer path, kernel or op and rule:
--   trace_id    VARCHAR: the trace
--   priority    BIGINT: 1 = the most GPU time at stake in its trace
--   rule        VARCHAR: the rule that fired (below)
--   path        VARCHAR: the layer path, a leading numbered step range folded (`ProfilerStep#7/fc1` is
--                 `ProfilerStep#*/fc1`: one finding for the layer in every step, its steps summed); NULL = outside
--                 every range
--   layer       VARCHAR: the innermost range, folded alike
--   pass        VARCHAR: 'forward' | 'backward' | 'optimizer' when the operations concerned share one, else NULL
--   kernel      VARCHAR: short name of the kernel or the op's name; NULL where the finding is about a stretch of many
--                 kernels or a whole layer
--   launches    BIGINT: GPU operations concerned
--   gpu_time_ns BIGINT ns: their GPU time
--   at_stake_ns BIGINT ns: GPU time the fix could save: each rule's estimate, below
--   share_pct   DOUBLE %: at_stake_ns of the trace's GPU wall time (step_gpu_idle's wall_ns summed over its steps and
--                 devices)
--   measure     VARCHAR: the rule's key number, its unit in the name
--   value       DOUBLE: that number
--   threshold   DOUBLE: what value was compared with; NULL for rules without one
--   evidence    VARCHAR: the numbers, one line
--   fix         VARCHAR: what to change, one line
--   detail      MAP(VARCHAR, DOUBLE): the rule's other numbers, name -> value (waves and slots, registers, stretches,
--                 bytes, ranks ...)
-- Rules, one CTE each, over inputs each read once (a view a rule reads twice would be bound twice, at every
-- connection's start: docs/benchmarks.md), but gpu_op_layers: launch_bound's windows sort only its timing columns,
-- and the path and pass of the operations in long stretches are looked up after (its every column through the
-- windows' sorts cost 10M kernels 33 s and 8.5 GB of spill: docs/benchmarks.md); the thresholds:
-- pipeline/analyze/finding_rules.py.
--   layout_conversion: a layer running a convolution (class `convolution`) and layout transforms (class
--     `layout_conversion`: cuDNN's nchwToNhwc / nhwcToNchw, transposes) that take >= layout_min_share_pct of its GPU
--     time (layer_summary, every pass); one row per transform kernel; at stake: its whole time (a channels_last
--     model and input need no transform).
--   tail_wave: launches of >= tail_min_waves waves of resident blocks whose last wave is < tail_max_fill full
--     (kernel_waves); at stake per launch d * (waves * slots - blocks) / (waves * slots): the slot-time the last wave
--     leaves empty, every wave as long as the others.
--   low_occupancy: launches under occupancy_max_pct theoretical occupancy (kernel_occupancy), per kernel and
--     limiter, mean duration >= occupancy_min_mean_ns; library GEMM / convolution / attention kernels (class
--     library_tiled: their tile is their occupancy, on purpose) and collectives (class communication) left out; at
--     stake, an upper bound: d * (1 - occupancy / occupancy_max_pct), a latency-bound kernel running in proportion
--     to its resident warps.
--   launch_bound: per trace and device, GPU operations in start order; one is starved when its duration is shorter
--     than its issue interval (its launching call's start - the previous operation's) and the GPU idled before it
--     (0 < gap <= launch_bound_max_gap_ns: longer is a host stall); a stretch is a run of >= launch_bound_min_ops
--     starved operations; its path the longest path its operations share; at stake: the idle gaps after its first
--     operation (what one CUDA graph or fused kernels remove). Operations without a launching call, and kernels
--     replayed from a CUDA graph (issued by one launch), are never starved.
--   fp32_no_tensor_cores: a kernel of class fp32_simt (sgemm, _ffma_, gemm<float, ...>) and not tensor_core, on an
--     NVIDIA GPU of compute capability >= fp32_min_compute_major; at stake d * (1 - 1 / tensor_core_speedup); the
--     fix: fp16 on cc 7.x, else TF32 or bf16 -- bf16 where the trace already runs the family on TF32 (the library
--     chose FP32 for the shape).
--   pageable_h2d_copy: Host-to-Device copies from Pageable memory (memcpy.src_kind) whose launching call lies in a
--     step range of the same process (step_gpu_idle, step >= 1); at stake: their GPU time (what an asynchronous
--     pinned copy can overlap).
--   slow_backward: a path whose backward GPU time > backward_max_ratio x its forward's (its kernels' pass split);
--     at stake: backward - backward_expected_ratio x forward; the kernel: its backward kernel with the most time.
--   straggler_rank: per job of rank_jobs and path, the slowest rank >= straggler_min_slowdown x the median over the
--     job's ranks that ran it (ties to the lower rank); at stake: slowest - median.
-- No rule reads Inductor's autotuning: GPU operations launched inside a `CachingAutotuner.*` op on their thread
-- (_autotuning_spans) benchmark a compiled kernel's configs and flush the cache between runs in a compiled
-- region's first call, work of no step (the compiled sample's top findings had been its cache flush's fill kernel
-- and its benchmarks' stretches: 97.7% of that trace's GPU time); they stay on the timeline, as GPU time between.
-- Kept: at_stake_ns >= min_at_stake_ns and >= min_at_stake_pct of the trace's summed kernel time (autotuning's left
-- out). Sorted by time at stake, then trace, rule, path and kernel; sums are exact (DECIMAL), so runs agree to the bit.
WITH th AS (
    SELECT max(value) FILTER (name = 'min_at_stake_ns') AS min_ns,
           max(value) FILTER (name = 'min_at_stake_pct') AS min_pct,
           max(value) FILTER (name = 'layout_min_share_pct') AS layout_min_share,
           max(value) FILTER (name = 'tail_min_waves') AS tail_min_waves,
           max(value) FILTER (name = 'tail_max_fill') AS tail_max_fill,
           max(value) FILTER (name = 'occupancy_max_pct') AS occ_max,
           max(value) FILTER (name = 'occupancy_min_mean_ns') AS occ_min_mean,
           max(value) FILTER (name = 'launch_bound_min_ops') AS launch_min_ops,
           max(value) FILTER (name = 'launch_bound_max_gap_ns') AS launch_max_gap,
           max(value) FILTER (name = 'fp32_min_compute_major') AS fp32_min_major,
           max(value) FILTER (name = 'tensor_core_speedup') AS tc_speedup,
           max(value) FILTER (name = 'backward_max_ratio') AS bwd_max_ratio,
           max(value) FILTER (name = 'backward_expected_ratio') AS bwd_expected,
           max(value) FILTER (name = 'straggler_min_slowdown') AS straggler_min
    FROM finding_thresholds
),
cls AS (
    SELECT max(pattern) FILTER (class = 'convolution') AS conv,
           max(pattern) FILTER (class = 'layout_conversion') AS layout,
           max(pattern) FILTER (class = 'library_tiled') AS tiled,
           max(pattern) FILTER (class = 'communication') AS comm,
           max(pattern) FILTER (class = 'fp32_simt') AS fp32,
           max(pattern) FILTER (class = 'tensor_core') AS tc
    FROM finding_kernel_classes
),
-- the shared inputs, each read (and bound) once; paths and layer names folded over numbered steps
kl AS (  -- every kernel, but autotuning's
    SELECT trace_id, kernel_id, device_id, name, coalesce(short_name, name) AS kernel, duration_ns, pass,
           step_folded(path) AS path,
           step_folded(layer) AS layer
    FROM kernel_layers k
    ANTI JOIN _autotuning_spans a
      ON a.trace_id = k.trace_id AND a.tid = k.launch_tid AND a.pid_key = coalesce(k.launch_pid, -1)
     AND k.launch_start_ns BETWEEN a.start_ns AND a.end_ns
),
names AS (  -- each distinct kernel name classified once (the patterns are per-row values, not constants)
    SELECT n.name,
           regexp_matches(n.name, cls.conv) AS is_conv,
           regexp_matches(n.name, cls.layout) AS is_layout,
           regexp_matches(n.name, cls.tiled) OR regexp_matches(n.name, cls.comm) AS not_occupancy,
           regexp_matches(n.name, cls.fp32) AND NOT regexp_matches(n.name, cls.tc) AS fp32_simt,
           regexp_matches(n.name, cls.tc) AND regexp_matches(n.name, '(?i)tf32') AS tf32,
           CASE WHEN regexp_matches(n.name, cls.conv) THEN 'convolution' ELSE 'gemm' END AS family
    FROM (SELECT DISTINCT name FROM kl) n, cls
),
ls AS (  -- per trace and folded path, its kernels as innermost: layer_summary's rollup, of kl's kernels
    SELECT trace_id, path, any_value(layer) AS layer, count(*) AS kernels, sum(duration_ns) AS gpu_time_ns,
           coalesce(sum(duration_ns) FILTER (pass = 'forward'), 0) AS fwd,
           coalesce(sum(duration_ns) FILTER (pass = 'backward'), 0) AS bwd,
           count(*) FILTER (pass = 'backward') AS bwd_kernels
    FROM kl
    GROUP BY trace_id, path
),
timeline AS (  -- every GPU operation (kernels, copies, memsets) on its device's timeline; only the columns the
               -- windows and the starved test read (every row goes through the windows' sort): the texts are looked
               -- up for the operations of long stretches only (stretch_members)
    SELECT trace_id, device_id, op_kind, op_row_id, duration_ns, graph_node_id, tuning,
           start_ns - max(end_ns) OVER before AS gap,
           launch_start_ns - lag(launch_start_ns) OVER timeline AS issue_ns,
           row_number() OVER timeline AS pos
    FROM (SELECT g.trace_id, g.device_id, g.op_kind, g.op_row_id, g.duration_ns, g.graph_node_id, g.start_ns, g.end_ns,
                 g.launch_start_ns, a.trace_id IS NOT NULL AS tuning
          FROM gpu_op_layers g
          LEFT JOIN _autotuning_spans a   -- one span at most: no row doubled
            ON a.trace_id = g.trace_id AND a.tid = g.launch_tid AND a.pid_key = coalesce(g.launch_pid, -1)
           AND g.launch_start_ns BETWEEN a.start_ns AND a.end_ns)
    WINDOW timeline AS (PARTITION BY trace_id, device_id ORDER BY start_ns, end_ns, op_kind, op_row_id),
           before AS (timeline ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
-- layout_conversion ---------------------------------------------------------------------------------------------
layout_kernels AS (
    SELECT k.trace_id, k.path, k.layer, k.pass, k.kernel, k.duration_ns, n.is_conv, n.is_layout
    FROM kl k
    JOIN names n USING (name)
    WHERE k.path IS NOT NULL AND (n.is_conv OR n.is_layout)
),
layout_layers AS (
    SELECT trace_id, path, sum(duration_ns) FILTER (is_layout) AS layout_ns
    FROM layout_kernels
    GROUP BY trace_id, path
    HAVING bool_or(is_conv) AND bool_or(is_layout)
),
layout AS (
    SELECT k.trace_id, 'layout_conversion' AS rule, k.path, any_value(k.layer) AS layer,
           CASE WHEN count(DISTINCT k.pass) = 1 THEN any_value(k.pass) END AS pass, k.kernel,
           count(*) AS launches, sum(k.duration_ns)::BIGINT AS gpu_time_ns, sum(k.duration_ns)::BIGINT AS at_stake_ns,
           'layout_share_pct' AS measure, 100.0 * any_value(l.layout_ns) / any_value(s.gpu_time_ns) AS value,
           any_value(th.layout_min_share) AS threshold,
           printf('%d launches take %s of %s''s %s µs (%.1f %%); all its layout transforms %.1f %%', count(*),
                  format('{:,.1f}', sum(k.duration_ns) / 1e3), any_value(k.layer),
                  format('{:,.1f}', any_value(s.gpu_time_ns) / 1e3),
                  100.0 * sum(k.duration_ns) / any_value(s.gpu_time_ns),
                  100.0 * any_value(l.layout_ns) / any_value(s.gpu_time_ns)) AS evidence,
           'channels_last: model.to(memory_format=torch.channels_last) and the same for the input' AS fix,
           map(['layer_gpu_time_ns', 'layout_gpu_time_ns'],
               [any_value(s.gpu_time_ns)::DOUBLE, any_value(l.layout_ns)::DOUBLE]) AS detail
    FROM layout_kernels k
    JOIN layout_layers l USING (trace_id, path)
    JOIN ls s ON s.trace_id = k.trace_id AND s.path = k.path
    CROSS JOIN th
    WHERE k.is_layout AND s.gpu_time_ns > 0 AND 100.0 * l.layout_ns >= th.layout_min_share * s.gpu_time_ns
    GROUP BY k.trace_id, k.path, k.kernel
),
-- tail_wave -----------------------------------------------------------------------------------------------------
tail_launches AS (
    SELECT k.trace_id, k.path, k.layer, k.pass, k.kernel, k.kernel_id, k.duration_ns, w.blocks, w.sm_count,
           w.resident_blocks_per_sm, w.sm_count * w.resident_blocks_per_sm AS slots, w.waves, w.waves_per_sm,
           w.tail_wave_blocks, w.tail_wave_utilization,
           -- d * (waves - blocks / slots) / waves, exactly: a DECIMAL per launch, the same sum in any order
           (k.duration_ns::HUGEINT * (w.waves * w.sm_count * w.resident_blocks_per_sm - w.blocks))::DECIMAL(38, 6)
               / (w.waves * w.sm_count * w.resident_blocks_per_sm) AS at_stake
    FROM kernel_waves w
    JOIN kl k USING (trace_id, kernel_id)
    CROSS JOIN th
    WHERE w.waves >= th.tail_min_waves AND w.tail_wave_utilization < th.tail_max_fill AND w.resident_blocks_per_sm > 0
),
tail_shown AS (  -- the launch the evidence quotes: the most at stake, ties to the first launched
    SELECT *, row_number() OVER (PARTITION BY trace_id, path, kernel ORDER BY at_stake DESC, kernel_id) = 1 AS shown
    FROM tail_launches
),
tail AS (
    SELECT trace_id, 'tail_wave' AS rule, path, any_value(layer) AS layer,
           CASE WHEN count(DISTINCT pass) = 1 THEN any_value(pass) END AS pass, kernel,
           count(*) AS launches, sum(duration_ns)::BIGINT AS gpu_time_ns, round(sum(at_stake))::BIGINT AS at_stake_ns,
           'tail_fill' AS measure, any_value(tail_wave_utilization) FILTER (shown) AS value,
           any_value(th.tail_max_fill) AS threshold,
           printf('%d blocks, %d slots (%d SMs x %d): %d waves, the last %.1f %% full; %d launch(es), %s µs',
                  any_value(blocks) FILTER (shown), any_value(slots) FILTER (shown),
                  any_value(sm_count) FILTER (shown), any_value(resident_blocks_per_sm) FILTER (shown),
                  any_value(waves) FILTER (shown), 100.0 * any_value(tail_wave_utilization) FILTER (shown), count(*),
                  format('{:,.1f}', sum(duration_ns) / 1e3)) AS evidence,
           printf('Whole waves: a multiple of %d blocks (batch size or tile), or fewer, larger blocks; '
                  'cudnn.benchmark tries other tiles', any_value(slots) FILTER (shown)) AS fix,
           map(['blocks', 'slots', 'sm_count', 'resident_blocks_per_sm', 'waves', 'waves_per_sm', 'tail_wave_blocks'],
               [(any_value(blocks) FILTER (shown))::DOUBLE, (any_value(slots) FILTER (shown))::DOUBLE,
                (any_value(sm_count) FILTER (shown))::DOUBLE, (any_value(resident_blocks_per_sm) FILTER (shown))::DOUBLE,
                (any_value(waves) FILTER (shown))::DOUBLE, (any_value(waves_per_sm) FILTER (shown))::DOUBLE,
                (any_value(tail_wave_blocks) FILTER (shown))::DOUBLE]) AS detail
    FROM tail_shown
    CROSS JOIN th
    GROUP BY trace_id, path, kernel
),
-- low_occupancy -------------------------------------------------------------------------------------------------
occupancy_launches AS (
    SELECT k.trace_id, k.path, k.layer, k.pass, k.kernel, k.duration_ns, o.limiter,
           o.theoretical_occupancy_pct AS occ, o.resident_blocks_per_sm, o.threads_per_block, o.registers_per_thread,
           o.smem_per_block_allocated_bytes,
           -- a DECIMAL per launch: the sum is the same in any order and thread split
           k.duration_ns * (1 - o.theoretical_occupancy_pct / th.occ_max)::DECIMAL(38, 9) AS at_stake
    FROM kernel_occupancy o
    JOIN kl k USING (trace_id, kernel_id)
    CROSS JOIN th
    WHERE o.theoretical_occupancy_pct < th.occ_max
      -- a filter, not a join: joined, the kernels and their names became the hash table's build side (DuckDB
      -- estimated 400k of 10M kernels' 6.4M) rather than the launches under the bar (findings_windows_44.txt)
      AND EXISTS (SELECT 1 FROM names n WHERE n.name = k.name AND NOT n.not_occupancy)
),
occupancy AS (
    SELECT trace_id, 'low_occupancy' AS rule, path, any_value(layer) AS layer,
           CASE WHEN count(DISTINCT pass) = 1 THEN any_value(pass) END AS pass, kernel,
           count(*) AS launches, sum(duration_ns)::BIGINT AS gpu_time_ns, round(sum(at_stake))::BIGINT AS at_stake_ns,
           'theoretical_occupancy_pct' AS measure, avg(occ::DECIMAL(38, 9))::DOUBLE AS value,
           any_value(th.occ_max) AS threshold,
           printf('occupancy %.1f %% (%d blocks of %d threads an SM), limited by %s: %d registers/thread, '
                  '%d B shared/block; %d launch(es), mean %s µs',
                  avg(occ::DECIMAL(38, 9)), max(resident_blocks_per_sm), max(threads_per_block),
                  coalesce(limiter, '?'), max(registers_per_thread), max(smem_per_block_allocated_bytes), count(*),
                  format('{:,.1f}', avg(duration_ns) / 1e3)) AS evidence,
           CASE limiter
               WHEN 'registers' THEN 'Fewer registers: __launch_bounds__ or -maxrregcount; Triton: a smaller BLOCK or '
                                     'more num_warps'
               WHEN 'shared_mem' THEN 'Less shared memory per block: smaller tiles or fewer pipeline stages'
               WHEN 'warps' THEN 'A block size whose warps divide the SM''s slots: 128 or 256 threads'
               WHEN 'blocks' THEN 'Bigger blocks (128+ threads): the per-SM block cap leaves warp slots empty'
               ELSE 'Check the launch in Nsight Compute''s occupancy section'
           END AS fix,
           map(['resident_blocks_per_sm', 'threads_per_block', 'registers_per_thread', 'smem_per_block_bytes',
                'mean_ns'],
               [max(resident_blocks_per_sm)::DOUBLE, max(threads_per_block)::DOUBLE, max(registers_per_thread)::DOUBLE,
                max(smem_per_block_allocated_bytes)::DOUBLE, avg(duration_ns)::DOUBLE]) AS detail
    FROM occupancy_launches
    CROSS JOIN th
    GROUP BY trace_id, path, kernel, limiter
    HAVING avg(duration_ns) >= any_value(th.occ_min_mean)
),
-- launch_bound --------------------------------------------------------------------------------------------------
starved AS (  -- operations shorter than their issue interval after a short idle gap (never a graph replay's)
    SELECT o.trace_id, o.device_id, o.op_kind, o.op_row_id, o.duration_ns, o.gap, o.issue_ns, o.pos
    FROM timeline o, th
    WHERE NOT o.tuning AND o.graph_node_id IS NULL AND o.duration_ns < o.issue_ns
      AND o.gap > 0 AND o.gap <= th.launch_max_gap
),
members AS (  -- a maximal stretch of starved operations shares its count of operations not starved before it: a
              -- starved one's position less its rank among the starved (a window over the starved ones only)
    SELECT *, pos - row_number() OVER (PARTITION BY trace_id, device_id ORDER BY pos) AS run
    FROM starved
),
long_runs AS (  -- stretches of launch_bound_min_ops or more, with their first operation
    SELECT m.trace_id, m.device_id, m.run, min(m.pos) AS first_pos
    FROM members m, th
    GROUP BY m.trace_id, m.device_id, m.run
    HAVING count(*) >= any_value(th.launch_min_ops)
),
stretch_members AS (  -- their operations, with path and pass (looked up for these only, not carried through windows)
    SELECT m.*, r.first_pos, g.path, g.pass
    FROM members m
    JOIN long_runs r USING (trace_id, device_id, run)
    JOIN gpu_op_layers g ON g.trace_id = m.trace_id AND g.op_kind = m.op_kind AND g.op_row_id = m.op_row_id
),
stretch_paths AS (  -- each distinct path of a stretch, split once, and whether the stretch's first operation has it
    SELECT trace_id, device_id, run, string_split(coalesce(path, ''), '/') AS parts, bool_or(pos = first_pos) AS first
    FROM stretch_members
    GROUP BY trace_id, device_id, run, path
),
stretch_common AS (  -- each stretch's common path: the parts all its paths share with its first operation's, folded
                     -- over numbered steps (once a stretch, not an operation)
    SELECT p.trace_id, p.device_id, p.run,
           step_folded(nullif(array_to_string(any_value(f.parts)[1:min(
               coalesce(list_position(list_transform(range(1, least(len(p.parts), len(f.parts)) + 1),
                                                     lambda i: p.parts[i] = f.parts[i]), false) - 1,
                        least(len(p.parts), len(f.parts))))], '/'), '')) AS path
    FROM stretch_paths p
    JOIN stretch_paths f ON f.first AND f.trace_id = p.trace_id AND f.device_id = p.device_id AND f.run = p.run
    GROUP BY p.trace_id, p.device_id, p.run
),
stretch_ops AS (  -- the stretches' operations, each with its stretch's common path
    SELECT m.*, c.path AS common_path
    FROM stretch_members m
    JOIN stretch_common c USING (trace_id, device_id, run)
),
stretches AS (  -- per stretch: its operations, busy and idle time, pass and folded common path
    SELECT trace_id, device_id, run, any_value(common_path) AS path,
           count(*) AS ops, sum(duration_ns) AS busy,
           sum(CASE WHEN pos > first_pos THEN gap ELSE 0 END) AS idle,
           CASE WHEN count(DISTINCT pass) = 1 AND count(pass) = count(*) THEN any_value(pass) END AS pass
    FROM stretch_ops
    GROUP BY trace_id, device_id, run
),
path_medians AS (  -- the operations' durations and issue intervals (after each stretch's first), per folded path
    SELECT trace_id, common_path AS path, median(duration_ns) AS median_op_ns,
           median(issue_ns) FILTER (pos > first_pos) AS median_issue_ns
    FROM stretch_ops
    GROUP BY trace_id, common_path
),
launch_paths AS (
    SELECT s.trace_id, s.path, count(*) AS stretches, sum(s.ops) AS launches, sum(s.busy)::BIGINT AS gpu_time_ns,
           sum(s.idle)::BIGINT AS idle, max(s.ops) AS longest_stretch,
           CASE WHEN count(DISTINCT s.pass) = 1 AND count(s.pass) = count(*) THEN any_value(s.pass) END AS pass,
           any_value(p.median_op_ns) AS median_op_ns, any_value(p.median_issue_ns) AS median_issue_ns
    FROM stretches s
    JOIN path_medians p ON p.trace_id = s.trace_id AND p.path IS NOT DISTINCT FROM s.path
    GROUP BY s.trace_id, s.path
),
launch AS (
    SELECT trace_id, 'launch_bound' AS rule, path, regexp_extract(path, '[^/]*$') AS layer, pass,
           NULL::VARCHAR AS kernel, launches, gpu_time_ns, idle AS at_stake_ns, 'idle_pct' AS measure,
           100.0 * idle / nullif(idle + gpu_time_ns, 0) AS value, NULL::DOUBLE AS threshold,
           printf('%d stretch(es), %d GPU ops (median %.1f µs each, launched every %.1f µs): busy %s µs, idle %s µs '
                  'between them', stretches, launches, median_op_ns / 1e3, median_issue_ns / 1e3,
                  format('{:,.1f}', gpu_time_ns / 1e3), format('{:,.1f}', idle / 1e3)) AS evidence,
           'One CUDA graph for the stretch (torch.compile mode="reduce-overhead"), fused kernels, or a larger batch'
               AS fix,
           map(['stretches', 'longest_stretch', 'median_op_ns', 'median_issue_ns'],
               [stretches::DOUBLE, longest_stretch::DOUBLE, median_op_ns::DOUBLE, median_issue_ns::DOUBLE]) AS detail
    FROM launch_paths
),
-- fp32_no_tensor_cores ------------------------------------------------------------------------------------------
tf32_seen AS (  -- families the trace already runs on TF32
    SELECT DISTINCT k.trace_id, n.family FROM kl k JOIN names n USING (name) WHERE n.tf32
),
fp32_kernels AS (
    SELECT k.trace_id, k.path, k.layer, k.pass, k.kernel, k.duration_ns, n.family, d.compute_major, d.compute_minor
    FROM kl k
    JOIN names n USING (name)
    JOIN device_limits d ON d.trace_id = k.trace_id AND d.device_id = k.device_id
    CROSS JOIN th
    WHERE n.fp32_simt AND d.vendor = 'NVIDIA' AND d.compute_major >= th.fp32_min_major
),
fp32_grouped AS (
    SELECT trace_id, path, any_value(layer) AS layer, CASE WHEN count(DISTINCT pass) = 1 THEN any_value(pass) END AS pass,
           kernel, any_value(family) AS family, count(*) AS launches, sum(duration_ns)::BIGINT AS gpu_time_ns,
           max(compute_major) AS compute_major, max(compute_minor) AS compute_minor
    FROM fp32_kernels
    GROUP BY trace_id, path, kernel
),
fp32 AS (
    SELECT g.trace_id, 'fp32_no_tensor_cores' AS rule, g.path, g.layer, g.pass, g.kernel, g.launches, g.gpu_time_ns,
           round(g.gpu_time_ns * (1 - 1 / th.tc_speedup))::BIGINT AS at_stake_ns, 'compute_capability' AS measure,
           g.compute_major + g.compute_minor / 10.0 AS value, th.fp32_min_major AS threshold,
           printf('%d FP32 %s launch(es) on the CUDA cores (FFMA), %s µs, on a cc %d.%d GPU with tensor cores%s',
                  g.launches, g.family, format('{:,.1f}', g.gpu_time_ns / 1e3), g.compute_major, g.compute_minor,
                  CASE WHEN t.family IS NOT NULL THEN printf('; other %s kernels here run TF32', g.family) ELSE '' END)
               AS evidence,
           CASE
               WHEN g.compute_major < 8 THEN 'Volta/Turing tensor cores take fp16: torch.autocast("cuda", torch.float16) '
                                             'with a GradScaler'
               WHEN t.family IS NOT NULL THEN 'TF32 is on and the library still chose FP32 for this shape: bf16 '
                                              'autocast, or pad sizes to multiples of 8'
               WHEN g.family = 'convolution' THEN 'bf16 autocast; TF32 is on by default for convolutions, so cuDNN '
                                                  'chose FP32 here (pad channels to 8)'
               ELSE 'Allow TF32 matmuls: torch.set_float32_matmul_precision("high"), or bf16 autocast'
           END AS fix,
           map(['compute_major', 'tf32_elsewhere'], [g.compute_major::DOUBLE, (t.family IS NOT NULL)::INTEGER::DOUBLE])
               AS detail
    FROM fp32_grouped g
    CROSS JOIN th
    LEFT JOIN tf32_seen t ON t.trace_id = g.trace_id AND t.family = g.family
),
-- pageable_h2d_copy ---------------------------------------------------------------------------------------------
steps AS (
    SELECT DISTINCT s.trace_id, s.step, s.cpu_start_ns, s.cpu_end_ns, r.pid
    FROM step_gpu_idle s
    JOIN nvtx_ranges r ON r.trace_id = s.trace_id AND r.range_id = s.range_id
    WHERE s.step > 0
),
copies AS (
    SELECT o.trace_id, step_folded(o.path) AS path,
           step_folded(o.layer) AS layer,
           o.pass, o.name AS kernel, o.duration_ns, o.bytes, st.step
    FROM gpu_op_layers o
    JOIN memcpy m ON m.trace_id = o.trace_id AND m.copy_id = o.op_row_id
    JOIN steps st ON st.trace_id = o.trace_id AND st.pid = o.launch_pid
                 AND o.launch_start_ns >= st.cpu_start_ns AND o.launch_start_ns < st.cpu_end_ns
    ANTI JOIN _autotuning_spans a
      ON a.trace_id = o.trace_id AND a.tid = o.launch_tid AND a.pid_key = coalesce(o.launch_pid, -1)
     AND o.launch_start_ns BETWEEN a.start_ns AND a.end_ns
    WHERE o.op_kind = 'memcpy' AND m.kind = 'Host-to-Device' AND m.src_kind = 'Pageable'
),
pageable AS (
    SELECT trace_id, 'pageable_h2d_copy' AS rule, path, any_value(layer) AS layer,
           CASE WHEN count(DISTINCT pass) = 1 THEN any_value(pass) END AS pass, kernel,
           count(*) AS launches, sum(duration_ns)::BIGINT AS gpu_time_ns, sum(duration_ns)::BIGINT AS at_stake_ns,
           'gb_per_s' AS measure, sum(bytes) / nullif(sum(duration_ns), 0) AS value, NULL::DOUBLE AS threshold,
           printf('%d pageable Host-to-Device cop%s in %d step(s): %s B in %s µs (%.2f GB/s)',
                  count(*), CASE WHEN count(*) = 1 THEN 'y' ELSE 'ies' END, count(DISTINCT step),
                  format('{:,}', sum(bytes)::BIGINT), format('{:,.1f}', sum(duration_ns) / 1e3),
                  sum(bytes) / nullif(sum(duration_ns), 0)) AS evidence,
           'Pinned memory (DataLoader(pin_memory=True), tensor.pin_memory()) and .to("cuda", non_blocking=True)'
               AS fix,
           map(['bytes', 'steps'], [sum(bytes)::DOUBLE, count(DISTINCT step)::DOUBLE]) AS detail
    FROM copies
    GROUP BY trace_id, path, kernel
),
-- slow_backward -------------------------------------------------------------------------------------------------
backward_top AS (  -- each path's backward kernel with the most time
    SELECT trace_id, path, arg_max(kernel, (ns, kernel)) AS kernel, max(ns) AS ns
    FROM (SELECT trace_id, path, kernel, sum(duration_ns) AS ns FROM kl WHERE pass = 'backward' GROUP BY ALL)
    GROUP BY trace_id, path
),
backward AS (
    SELECT l.trace_id, 'slow_backward' AS rule, l.path, l.layer, 'backward' AS pass, t.kernel,
           l.bwd_kernels AS launches, l.bwd::BIGINT AS gpu_time_ns,
           round(l.bwd - th.bwd_expected * l.fwd)::BIGINT AS at_stake_ns, 'backward_over_forward' AS measure,
           l.bwd / l.fwd AS value, th.bwd_max_ratio AS threshold,
           printf('backward %s µs = %.1fx the forward''s %s µs (about %.0fx is normal); top kernel %s, %s µs',
                  format('{:,.1f}', l.bwd / 1e3), l.bwd / l.fwd, format('{:,.1f}', l.fwd / 1e3), th.bwd_expected,
                  t.kernel, format('{:,.1f}', t.ns / 1e3)) AS evidence,
           printf('Start with %s: embedding/index scatters (sparse=True), bias reductions and small kernels fuse '
                  'under torch.compile', t.kernel) AS fix,
           map(['forward_gpu_time_ns', 'backward_gpu_time_ns', 'top_kernel_ns'], [l.fwd::DOUBLE, l.bwd::DOUBLE, t.ns::DOUBLE])
               AS detail
    FROM ls l
    JOIN backward_top t USING (trace_id, path)
    CROSS JOIN th
    WHERE l.path IS NOT NULL AND l.fwd > 0 AND l.bwd > th.bwd_max_ratio * l.fwd
),
-- straggler_rank ------------------------------------------------------------------------------------------------
ranked AS (
    SELECT j.job, l.trace_id, j.rank, l.path, l.layer, l.kernels, l.gpu_time_ns,
           row_number() OVER per_path AS pos, count(*) OVER (PARTITION BY j.job, l.path) AS ranks,
           median(l.gpu_time_ns) OVER (PARTITION BY j.job, l.path) AS median_ns
    FROM ls l
    JOIN rank_jobs j USING (trace_id)
    WHERE l.path IS NOT NULL
    WINDOW per_path AS (PARTITION BY j.job, l.path ORDER BY l.gpu_time_ns DESC, j.rank, l.trace_id)
),
straggler AS (
    SELECT r.trace_id, 'straggler_rank' AS rule, r.path, r.layer, NULL::VARCHAR AS pass, NULL::VARCHAR AS kernel,
           r.kernels::BIGINT AS launches, r.gpu_time_ns::BIGINT AS gpu_time_ns,
           round(r.gpu_time_ns - r.median_ns)::BIGINT AS at_stake_ns, 'slowdown' AS measure,
           r.gpu_time_ns / r.median_ns AS value, th.straggler_min AS threshold,
           printf('rank %d takes %s µs, %.2fx the median %s µs of the job''s %d ranks', r.rank,
                  format('{:,.1f}', r.gpu_time_ns / 1e3), r.gpu_time_ns / r.median_ns,
                  format('{:,.1f}', r.median_ns / 1e3), r.ranks) AS evidence,
           printf('Rank %d lags here: compare its inputs (shard sizes, sequence lengths) and its GPU (clocks, '
                  'temperature)', r.rank) AS fix,
           map(['ranks', 'slowest_rank', 'median_gpu_time_ns'], [r.ranks::DOUBLE, r.rank::DOUBLE, r.median_ns::DOUBLE])
               AS detail
    FROM ranked r
    CROSS JOIN th
    WHERE r.pos = 1 AND r.ranks >= 2 AND r.median_ns > 0 AND r.gpu_time_ns >= th.straggler_min * r.median_ns
),
-- every rule's rows, kept when worth a look ---------------------------------------------------------------------
found AS (
    FROM layout
    UNION ALL BY NAME FROM tail
    UNION ALL BY NAME FROM occupancy
    UNION ALL BY NAME FROM launch
    UNION ALL BY NAME FROM fp32
    UNION ALL BY NAME FROM pageable
    UNION ALL BY NAME FROM backward
    UNION ALL BY NAME FROM straggler
),
totals AS (
    SELECT trace_id, sum(gpu_time_ns) AS trace_ns FROM ls GROUP BY trace_id
),
walls AS (
    SELECT trace_id, sum(wall_ns) AS wall_ns FROM step_gpu_idle GROUP BY trace_id
),
kept AS (
    SELECT f.*, 100.0 * f.at_stake_ns / nullif(w.wall_ns, 0) AS share_pct
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
       value::DOUBLE AS value, threshold::DOUBLE AS threshold, evidence, fix, detail
FROM kept
ORDER BY at_stake_ns DESC, trace_id, rule, path NULLS FIRST, kernel NULLS FIRST
