-- layer_diff_rollup: one side of `tracepipe diff --depth N`: layer_diff_side's rows rolled up to the first N levels
-- of their paths, so two runs that place work at different depths compare module by module (eager kernels sit
-- on `model.layers.0.self_attn.q_proj`, compiled ones fused on `model.layers.0`: both roll up to the decoder
-- layer at the depth that names it).
-- Inputs:  diff_side (layer_diff_side rows of one trace), and the depth N as the statement's parameter
-- Output, one row per trace, path rolled up to N levels and pass:
--   trace_id    VARCHAR: the trace
--   path        VARCHAR: the first N levels of the rows' paths; NULL stays NULL
--   layer       VARCHAR: the last of those levels
--   pass        VARCHAR: as in layer_diff_side
--   calls       BIGINT: the calls of the range at that path, where the trace has it
--   kernels     BIGINT: summed kernels
--   gpu_time_ns BIGINT ns: summed GPU time
--   macs        BIGINT MACs: summed; NULL when no row of the group has them
-- Rule: a row's work counts under its ancestor at depth N (a path of N levels or fewer is its own); each group
-- sums its rows' kernels, GPU time and MACs, pass by pass.
WITH rolled AS (
    SELECT *, CASE WHEN path IS NOT NULL
                   THEN array_to_string(list_slice(string_split(path, '/'), 1, CAST(? AS BIGINT)), '/') END AS top
    FROM diff_side
)
SELECT trace_id, top AS path, CASE WHEN top IS NOT NULL THEN string_split(top, '/')[-1] END AS layer,
       pass, max(calls) FILTER (WHERE path = top) AS calls, CAST(sum(kernels) AS BIGINT) AS kernels,
       CAST(sum(gpu_time_ns) AS BIGINT) AS gpu_time_ns, CAST(sum(macs) AS BIGINT) AS macs
FROM rolled
GROUP BY trace_id, top, pass
ORDER BY trace_id, path, pass
