-- layer_diff: two runs compared per layer path and pass (`tracepipe diff A B`): B against A.
-- Inputs:  diff_a, diff_b (each: layer_diff_side rows of one trace)
-- Output, one row per layer path and pass of either side:
--   path             VARCHAR: the layer path; NULL = outside every range
--   layer            VARCHAR: the innermost range's text
--   pass             VARCHAR: 'all', or forward / backward / optimizer where a side trained
--   status           VARCHAR: 'both' | 'only_a' | 'only_b'
--   calls_a          BIGINT: range instances in A
--   calls_b          BIGINT: in B
--   kernels_a        BIGINT: kernels in A
--   kernels_b        BIGINT: in B
--   kernels_ratio    DOUBLE: kernels_b / kernels_a; NULL when A is 0 or on rows of one side only
--   gpu_time_a_ns    BIGINT ns: GPU time in A (0 on the side that lacks the path)
--   gpu_time_b_ns    BIGINT ns: in B
--   delta_ns         BIGINT ns: B - A (< 0: B faster)
--   ratio            DOUBLE: gpu_time_b_ns / gpu_time_a_ns; NULL when A is 0 and on rows of one side only
--   share_a_pct      DOUBLE %: of A's total GPU time over the 'all' rows
--   share_b_pct      DOUBLE %: of B's
--   macs_a           BIGINT MACs: analytic MACs in A
--   macs_b           BIGINT MACs: in B
--   macs_per_s_a     DOUBLE MAC/s: analytic MACs / GPU time in A
--   macs_per_s_b     DOUBLE MAC/s: in B
--   macs_per_s_ratio DOUBLE: B / A
--   abs_rank         BIGINT: 1 = the largest |delta_ns| within the pass
--   rel_rank         BIGINT: 1 = the largest |ln ratio| among paths on both sides with >= 1% of either side's GPU time;
--                      NULL otherwise
-- Rule: a path matches by its full range path text (`step/model/layer1/layer1.0/layer1.0.conv1`), so two runs of
--          one model compare layer by layer and a layer renamed or moved shows as only_a + only_b.
WITH totals AS (
    SELECT (SELECT sum(gpu_time_ns) FROM diff_a WHERE pass = 'all') AS total_a,
           (SELECT sum(gpu_time_ns) FROM diff_b WHERE pass = 'all') AS total_b
), joined AS (
    SELECT coalesce(a.path, b.path) AS path, coalesce(a.layer, b.layer) AS layer, coalesce(a.pass, b.pass) AS pass,
           CASE WHEN a.pass IS NULL THEN 'only_b' WHEN b.pass IS NULL THEN 'only_a' ELSE 'both' END AS status,
           a.calls AS calls_a, b.calls AS calls_b,
           coalesce(a.kernels, 0) AS kernels_a, coalesce(b.kernels, 0) AS kernels_b,
           coalesce(a.gpu_time_ns, 0) AS gpu_time_a_ns, coalesce(b.gpu_time_ns, 0) AS gpu_time_b_ns,
           a.macs AS macs_a, b.macs AS macs_b
    FROM diff_a a
    FULL OUTER JOIN diff_b b ON a.path IS NOT DISTINCT FROM b.path AND a.pass = b.pass
), measured AS (
    SELECT j.*,
           CASE WHEN status = 'both' THEN kernels_b / nullif(kernels_a, 0) END AS kernels_ratio,
           gpu_time_b_ns - gpu_time_a_ns AS delta_ns,
           CASE WHEN status = 'both' THEN gpu_time_b_ns / nullif(gpu_time_a_ns, 0) END AS ratio,
           100.0 * gpu_time_a_ns / nullif(t.total_a, 0) AS share_a_pct,
           100.0 * gpu_time_b_ns / nullif(t.total_b, 0) AS share_b_pct,
           macs_a / nullif(gpu_time_a_ns, 0) * 1e9 AS macs_per_s_a,
           macs_b / nullif(gpu_time_b_ns, 0) * 1e9 AS macs_per_s_b
    FROM joined j, totals t
)
SELECT path, layer, pass, status, calls_a, calls_b, kernels_a, kernels_b, kernels_ratio,
       gpu_time_a_ns, gpu_time_b_ns, delta_ns, ratio, share_a_pct, share_b_pct,
       macs_a, macs_b, macs_per_s_a, macs_per_s_b, macs_per_s_b / nullif(macs_per_s_a, 0) AS macs_per_s_ratio,
       row_number() OVER (PARTITION BY pass ORDER BY abs(delta_ns) DESC, path NULLS LAST) AS abs_rank,
       CASE WHEN relevant THEN row_number() OVER (PARTITION BY pass, relevant
                                                  ORDER BY abs(ln(ratio)) DESC, path NULLS LAST) END AS rel_rank
FROM (SELECT *, status = 'both' AND gpu_time_a_ns > 0 AND gpu_time_b_ns > 0
                AND greatest(share_a_pct, share_b_pct) >= 1.0 AS relevant FROM measured)
ORDER BY pass = 'all' DESC, pass, abs_rank
