-- layer_coverage: how much of each trace's GPU time has a layer, and when too little does, what the trace lacks
-- and the capture that would give it one row per trace with GPU operations.
-- Inputs:  gpu_op_layers, ops, nvtx_ranges, _layer_domains, trace_meta, layer_hints
-- Output, one row per trace with GPU operations:
--   trace_id             VARCHAR: the trace
--   source_format        VARCHAR: trace_meta's
--   gpu_ns               BIGINT ns: summed duration of every GPU operation (kernels, memcpy, memset)
--   layered_ns           BIGINT ns: of it, the operations with a layer: a range that is no step (`ProfilerStep#N`,
--                          `step`), or in an optimizer step (pass `optimizer`: its own place)
--   no_layer_ns          BIGINT ns: the rest: launched outside every range or only inside a step
--   no_layer_pct         DOUBLE %: no_layer_ns of gpu_ns
--   backward_ns          BIGINT ns: the backward pass's GPU time
--   backward_unlinked_ns BIGINT ns: of it, the time with no layer launched in no backward op linked to a forward op
--                          (only autograd's thread says it is backward)
--   forward_unrecorded_ns BIGINT ns: of that, the time launched in a backward op whose sequence number no forward op
--                          of the trace has (its forward ran before the recording began)
--   no_launch_ns         BIGINT ns: GPU time with no layer whose launching API call the trace lacks
--   other_domain_ns      BIGINT ns: GPU time with no layer launched inside a push/pop range of an NVTX domain that is
--                          not the layer domain (_layer_domains)
--   other_domains        VARCHAR: those domains, most GPU time first, joined by ', '; NULL when none
--   lack                 VARCHAR: NULL when no_layer_pct is under the warning threshold (10%), else what is missing:
--                          'no_layers' (no operation has a layer: the trace holds no module range or frame;
--                          where its format has a fix for them, 'no_cpu_ops' when it holds no CPU op either, and
--                          'no_modules' when its ops have Python stacks: layer_hints.NO_LAYER_CASES),
--                          'no_launch' (most of that time is work whose launching call the trace lacks),
--                          'other_domain' (most of it was launched inside ranges of other NVTX domains only),
--                          'forward_unrecorded' (most backward time with no layer is in backward ops numbered for
--                          forward ops the trace does not hold), 'backward_unlinked' (the rest of the backward time
--                          with no layer is linked to no forward op), or
--                          'partial' (work launched outside every module range: outside the model, or in modules the
--                          capture did not range)
--   meaning              VARCHAR: that, in words (for 'other_domain', naming the domains)
--   fix                  VARCHAR: the capture that would give the work a layer (layer_hints); NULL for work outside the
--                          model
-- Rule: a layer is a range that places work in the model; a step range holds a whole iteration and says nothing
-- of which layer ran, so work whose innermost range is a step has no layer.  Unlinked backward work is told apart
-- by its backward op: one with a sequence number (ops.sequence_number >= 0) was numbered for a forward op the trace
-- does not hold (a real training trace recorded from mid-step: all 128 backward ops numbered, none of their forward
-- ops), one without was never numbered (PyTorch 1.8).  `analysis_warnings` prints a row of this view per trace
-- whose lack is set.
WITH params AS (SELECT 10.0 AS warn_pct),
gpu AS (   -- each GPU operation: has it a layer; was its backward op numbered
    SELECT g.trace_id, g.op_kind, g.op_row_id, g.launch_pid, g.launch_tid, g.launch_start_ns, g.duration_ns, g.pass,
           g.fwd_op_id, g.launch_call_id,
           coalesce(g.pass = 'optimizer' OR (g.range_id IS NOT NULL
                    AND NOT regexp_matches(g.layer, '^(ProfilerStep#\d+|step([#_ ]?\d+)?)$')), false) AS layered,
           b.op_id IS NOT NULL AS numbered
    FROM gpu_op_layers g
    LEFT JOIN (SELECT trace_id, op_id FROM ops WHERE sequence_number >= 0) b   -- numbered ops only: a small build
      ON b.trace_id = g.trace_id AND b.op_id = g.bwd_op_id AND g.fwd_op_id IS NULL
),
other_ranges AS (   -- push/pop ranges of the domains that are not the trace's layer domain (none in most traces)
    SELECT r.trace_id, r.pid, r.tid, r.start_ns, r.end_ns, r.domain
    FROM nvtx_ranges r JOIN _layer_domains d ON d.trace_id = r.trace_id AND coalesce(r.domain, '') <> d.dkey
    WHERE r.kind = 'push_pop'
),
in_other AS (   -- each operation with no layer launched inside such a range: the domain of the innermost one
    SELECT g.trace_id, any_value(g.duration_ns) AS duration_ns, arg_max(o.domain, o.start_ns) AS domain
    FROM (SELECT * FROM gpu WHERE NOT layered) g
    JOIN other_ranges o
      ON o.trace_id = g.trace_id AND o.pid IS NOT DISTINCT FROM g.launch_pid AND o.tid = g.launch_tid
     AND g.launch_start_ns BETWEEN o.start_ns AND o.end_ns
    GROUP BY g.trace_id, g.op_kind, g.op_row_id
),
other AS (
    SELECT trace_id, CAST(sum(ns) AS BIGINT) AS other_domain_ns,
           string_agg(coalesce(domain, '(default)'), ', ' ORDER BY ns DESC, domain) AS other_domains
    FROM (SELECT trace_id, domain, sum(duration_ns) AS ns FROM in_other GROUP BY ALL)
    GROUP BY trace_id
),
ops_held AS (   -- per trace: has it CPU ops, and Python stacks on them (which case of no layers it is)
    SELECT trace_id, true AS has_ops, bool_or(call_stack IS NOT NULL) AS has_stacks FROM ops GROUP BY trace_id
),
per_trace AS (
    SELECT trace_id,
           CAST(sum(duration_ns) AS BIGINT) AS gpu_ns,
           CAST(coalesce(sum(duration_ns) FILTER (layered), 0) AS BIGINT) AS layered_ns,
           CAST(coalesce(sum(duration_ns) FILTER (pass = 'backward'), 0) AS BIGINT) AS backward_ns,
           CAST(coalesce(sum(duration_ns) FILTER (pass = 'backward' AND NOT layered AND fwd_op_id IS NULL), 0)
                AS BIGINT) AS backward_unlinked_ns,
           CAST(coalesce(sum(duration_ns) FILTER (pass = 'backward' AND NOT layered AND fwd_op_id IS NULL
                                                  AND numbered), 0) AS BIGINT) AS forward_unrecorded_ns,
           CAST(coalesce(sum(duration_ns) FILTER (NOT layered AND launch_call_id IS NULL), 0) AS BIGINT)
               AS no_launch_ns,
           bool_or(layered AND pass IS DISTINCT FROM 'optimizer') AS any_layer
    FROM gpu GROUP BY trace_id
),
judged AS (
    SELECT p.*, m.source_format, p.gpu_ns - p.layered_ns AS no_layer_ns,
           round(100.0 * (p.gpu_ns - p.layered_ns) / nullif(p.gpu_ns, 0), 1) AS no_layer_pct,
           coalesce(o.other_domain_ns, 0) AS other_domain_ns, o.other_domains,
           coalesce(h.has_ops, false) AS has_ops, coalesce(h.has_stacks, false) AS has_stacks
    FROM per_trace p
    LEFT JOIN other o USING (trace_id)
    LEFT JOIN ops_held h USING (trace_id)
    LEFT JOIN (SELECT trace_id, any_value(source_format) AS source_format FROM trace_meta GROUP BY ALL) m
      USING (trace_id)
)
SELECT j.trace_id, j.source_format, j.gpu_ns, j.layered_ns, j.no_layer_ns, j.no_layer_pct, j.backward_ns,
       j.backward_unlinked_ns, j.forward_unrecorded_ns, j.no_launch_ns, j.other_domain_ns, j.other_domains, l.lack,
       (SELECT any_value(meaning) FROM layer_hints m WHERE m.lack = l.lack)
           || CASE WHEN l.lack = 'other_domain' THEN ' (' || j.other_domains || ')' ELSE '' END AS meaning,
       h.fix
FROM judged j
CROSS JOIN params
LEFT JOIN LATERAL (
    SELECT CASE WHEN j.no_layer_pct IS NULL OR j.no_layer_pct < params.warn_pct THEN NULL
                WHEN NOT j.any_layer THEN CASE   -- the first case its format has a fix for (NO_LAYER_CASES)
                    WHEN NOT j.has_ops AND EXISTS (SELECT 1 FROM layer_hints x WHERE x.source_format = j.source_format
                                                   AND x.lack = 'no_cpu_ops' AND x.fix IS NOT NULL) THEN 'no_cpu_ops'
                    WHEN j.has_stacks AND EXISTS (SELECT 1 FROM layer_hints x WHERE x.source_format = j.source_format
                                                  AND x.lack = 'no_modules' AND x.fix IS NOT NULL) THEN 'no_modules'
                    ELSE 'no_layers' END
                WHEN j.no_launch_ns * 2 > j.no_layer_ns THEN 'no_launch'
                WHEN j.other_domain_ns * 2 > j.no_layer_ns THEN 'other_domain'
                WHEN j.backward_unlinked_ns * 2 > j.backward_ns
                     AND j.forward_unrecorded_ns * 2 > j.backward_unlinked_ns THEN 'forward_unrecorded'
                WHEN j.backward_unlinked_ns * 2 > j.backward_ns THEN 'backward_unlinked'
                ELSE 'partial' END AS lack
) l ON true
LEFT JOIN layer_hints h ON h.source_format = j.source_format AND h.lack = l.lack
