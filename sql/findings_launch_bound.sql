-- findings_launch_bound: stretches of GPU operations each shorter than the host took to issue it, with the GPU
-- idle between them: the GPU waits on launches (Python, the dispatcher, cudaLaunchKernel), not on work.
-- analyze: on request (findings has its rows; write it with `tracepipe analyze --view findings_launch_bound`)
-- Inputs:  gpu_op_layers, finding_thresholds (launch_bound_min_ops, launch_bound_max_gap_ns)
-- Output, one row per trace and path enclosing stretches (the longest common path of a stretch's operations,
-- a leading `ProfilerStep#N` folded to `ProfilerStep#*`; NULL when they share no range):
--   trace_id, rule ('launch_bound'), path, layer (its last part), pass (NULL unless every operation shares one),
--   kernel (NULL: a stretch is many kernels; top_kernel names the most frequent), launches (operations in the
--   stretches), gpu_time_ns (their summed duration, ns), at_stake_ns (GPU idle between them, ns), measure
--   ('idle_pct'), value (idle between / (idle + busy) of the stretches, %), threshold (NULL: the rule has no
--   share threshold), evidence, fix, stretches, longest_stretch (operations), median_op_ns (ns),
--   median_issue_ns (host time between consecutive launches, ns), top_kernel
-- Rule, per trace and device, GPU operations (kernels, memcpy, memset) in GPU start order:
--   idle before an operation = its start - the latest end of every operation before it (0 when it overlaps);
--   issue interval = its launching call's start - the previous operation's launching call's start (the host's
--   time to issue it: Python, dispatcher, launch call); an operation is starved when its duration is shorter
--   than its issue interval and the GPU sat idle before it (0 < idle <= launch_bound_max_gap_ns: a longer gap is
--   a host stall -- data loading, a synchronisation -- not launch cost).  A stretch is a maximal run of starved
--   operations, at least launch_bound_min_ops long.  At stake: the idle gaps inside each stretch (after its first
--   operation), what CUDA graphs (one launch for the whole stretch) or fusing the small kernels (torch.compile)
--   take away.  Operations without a launching call (no API call in the trace) and operations replayed from a
--   CUDA graph (graph_node_id: one cudaGraphLaunch issued them all, and their launching call is the capture's)
--   are never starved.
WITH th AS (
    SELECT max(value) FILTER (name = 'launch_bound_min_ops') AS min_ops,
           max(value) FILTER (name = 'launch_bound_max_gap_ns') AS max_gap
    FROM finding_thresholds
),
ops AS (
    SELECT trace_id, device_id, op_kind, op_row_id, coalesce(short_name, name) AS kernel, path, pass, duration_ns,
           graph_node_id,
           start_ns - max(end_ns) OVER before AS gap,
           launch_start_ns - lag(launch_start_ns) OVER timeline AS issue_ns,
           row_number() OVER timeline AS pos
    FROM gpu_op_layers
    WINDOW timeline AS (PARTITION BY trace_id, device_id ORDER BY start_ns, end_ns, op_kind, op_row_id),
           before AS (timeline ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
flagged AS (
    SELECT ops.*,
           coalesce(graph_node_id IS NULL AND duration_ns < issue_ns AND gap > 0 AND gap <= th.max_gap, false) AS starved
    FROM ops, th
),
runs AS (  -- a run id per maximal stretch of starved operations: the count of non-starved ones before it
    SELECT *, sum(CASE WHEN starved THEN 0 ELSE 1 END) OVER (PARTITION BY trace_id, device_id ORDER BY pos) AS run
    FROM flagged
),
members AS (
    SELECT r.*, count(*) OVER s AS run_ops, row_number() OVER (s ORDER BY pos) AS run_pos,
           string_split(coalesce(path, ''), '/') AS parts,
           first(string_split(coalesce(path, ''), '/')) OVER (s ORDER BY pos) AS first_parts
    FROM runs r
    WHERE starved
    WINDOW s AS (PARTITION BY trace_id, device_id, run)
),
kept AS (
    SELECT m.*,
           -- leading path parts this operation shares with the stretch's first one
           coalesce(list_position(list_transform(range(1, least(len(parts), len(first_parts)) + 1),
                                                 lambda i: parts[i] = first_parts[i]), false) - 1,
                    least(len(parts), len(first_parts))) AS shared
    FROM members m, th
    WHERE m.run_ops >= th.min_ops
),
stretches AS (
    SELECT trace_id, device_id, run, count(*) AS ops, sum(duration_ns) AS busy,
           sum(CASE WHEN run_pos > 1 THEN gap ELSE 0 END) AS idle,
           nullif(array_to_string(any_value(first_parts)[1:min(shared)], '/'), '') AS common_path,
           CASE WHEN count(DISTINCT pass) = 1 AND count(pass) = count(*) THEN any_value(pass) END AS pass,
           list(duration_ns) AS durations, list(issue_ns) FILTER (run_pos > 1) AS issues, list(kernel) AS kernels
    FROM kept
    GROUP BY trace_id, device_id, run
),
by_path AS (
    SELECT trace_id, regexp_replace(common_path, '^(ProfilerStep#|step#|step_)[0-9]+(/|$)', '\1*\2') AS path,
           count(*) AS stretches, sum(ops) AS launches, sum(busy)::BIGINT AS gpu_time_ns, sum(idle)::BIGINT AS idle,
           max(ops) AS longest_stretch,
           CASE WHEN count(DISTINCT pass) = 1 AND count(pass) = count(*) THEN any_value(pass) END AS pass,
           list_median(flatten(list(durations))) AS median_op_ns, list_median(flatten(list(issues))) AS median_issue_ns,
           list_mode(flatten(list(kernels))) AS top_kernel
    FROM stretches
    GROUP BY ALL
)
SELECT trace_id, 'launch_bound' AS rule, path, regexp_extract(path, '[^/]*$') AS layer, pass, NULL::VARCHAR AS kernel,
       launches, gpu_time_ns, idle AS at_stake_ns,
       'idle_pct' AS measure, 100.0 * idle / nullif(idle + gpu_time_ns, 0) AS value, NULL::DOUBLE AS threshold,
       printf('%d stretch(es), %d GPU ops (median %.1f µs each, launched every %.1f µs): busy %s µs, idle %s µs '
              'between them', stretches, launches, median_op_ns / 1e3, median_issue_ns / 1e3,
              format('{:,.1f}', gpu_time_ns / 1e3), format('{:,.1f}', idle / 1e3)) AS evidence,
       'One CUDA graph for the stretch (torch.compile mode="reduce-overhead"), fused kernels, or a larger batch'
           AS fix,
       stretches, longest_stretch, median_op_ns, median_issue_ns, top_kernel
FROM by_path
ORDER BY at_stake_ns DESC, trace_id, path
