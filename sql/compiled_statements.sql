-- compiled_statements: each op the profiler recorded for a statement of a compiled graph's call -- a Triton kernel's
-- launch op, an extern call's aten op -- with the modules tracepipe capture recorded for that statement
-- (compiled_kernels, from compiled_kernels.json).
-- analyze: on request (an intermediate of launch_point_layers, which places the launches inside each: write it
--          with `tracepipe analyze --view compiled_statements`)
-- Inputs:  ops, compiled_kernels
-- Macros:  outermost_intervals
-- Output, one row per statement op of a graph call whose graph the capture recorded:
--   trace_id     VARCHAR: the trace
--   pid          BIGINT: the op's process
--   tid          BIGINT: the op's CPU thread
--   start_ns     BIGINT ns, CPU clock: the op's start
--   end_ns       BIGINT ns, CPU clock: its end
--   graph_key    VARCHAR: the graph's FX graph cache key (the call's `## Call CompiledFxGraph <key> ##` op)
--   graph        VARCHAR: 'forward' | 'backward' | 'inference': which of the region's graphs
--   launch_name  VARCHAR: the statement's name (a Triton kernel's launch op, an extern call's aten op)
--   occurrence   BIGINT: how many ops of that name came before it in this call of the graph
--   module       VARCHAR: the module of the statement's output (compiled_kernels' rule), its qualified name relative to
--                  the compiled module ('' = the compiled module itself)
--   module_chain VARCHAR: that module's chain, outermost first (JSON list)
--   modules      VARCHAR: every innermost module the statement computes (JSON list: a fused kernel serving several
--                  modules lists each)
--   root_name    VARCHAR: the capture's root range text (the compiled module's own range when it is the model)
-- Rule: Inductor's generated call() launches its kernels and extern calls in a fixed order, and both the PyTorch
-- profiler and emit_nvtx record each as an op inside the graph call's op: a Triton kernel's launch op has the
-- kernel's name, an extern call the aten op's (`extern_kernels.mm` -> `aten::mm`).  The ops of a call named like
-- one of the graph's statements -- the outermost such, outside Inductor's autotuning (`CachingAutotuner.*` ops,
-- where a kernel's first call benchmarks its configs) -- numbered among those of their name in the call, are the
-- statements (graph key, name, occurrence) of compiled_kernels.  A launch inside one is that statement's work
-- (launch_point_layers); work in none (the autotuning benchmarks, a CUDA-graph replay in a PyTorch trace, a graph
-- the capture did not record) keeps the range around the compiled region.  A replayed node in nsys
-- (--cuda-graph-trace=node) counts as launched where it was made: inside its statement op of the recording call.
WITH calls AS (   -- each call of a compiled graph
    SELECT trace_id, pid, tid, op_id, start_ns, end_ns,
           regexp_extract(name, '^## Call CompiledFxGraph (\S+) ##$', 1) AS graph_key
    FROM ops WHERE name LIKE '## Call CompiledFxGraph %'
),
names AS (SELECT DISTINCT graph_key, launch_name FROM compiled_kernels),
named AS (   -- the ops of each call named as one of its graph's statements (the call is their lane)
    SELECT o.trace_id, o.pid, o.tid, o.op_id, o.start_ns, o.end_ns, o.name AS launch_name, c.op_id AS call_id,
           c.graph_key, c.op_id AS lane, NULL AS sublane, o.op_id AS tie
    FROM calls c
    JOIN names n ON n.graph_key = c.graph_key
    JOIN ops o
      ON o.trace_id = c.trace_id AND o.pid IS NOT DISTINCT FROM c.pid AND o.tid = c.tid AND o.name = n.launch_name
     AND o.start_ns >= c.start_ns AND o.end_ns <= c.end_ns
),
tuning AS (   -- Inductor's autotuning inside a call: a Triton kernel's first call benchmarks its configs,
              -- launching the kernel again and again (ops of the same name, compile-time work, no statement)
    SELECT o.trace_id, o.pid, o.tid, o.start_ns, o.end_ns
    FROM ops o WHERE o.name LIKE 'CachingAutotuner.%' AND (o.trace_id, o.tid) IN (SELECT trace_id, tid FROM calls)
),
statements AS (   -- named ops in no other named op, not even one ending at their start (cudagraph trees record
                  -- a call's statements inside their own ops) nor in autotuning, numbered per name in the call
    SELECT n.trace_id, n.pid, n.tid, n.start_ns, n.end_ns, n.graph_key, n.launch_name,
           row_number() OVER (PARTITION BY n.trace_id, n.call_id, n.launch_name ORDER BY n.start_ns, n.op_id) - 1
               AS occurrence
    FROM outermost_intervals(named, true) n
    WHERE NOT EXISTS (SELECT 1 FROM tuning t WHERE t.trace_id = n.trace_id AND t.pid IS NOT DISTINCT FROM n.pid
                      AND t.tid = n.tid AND t.start_ns <= n.start_ns AND n.end_ns <= t.end_ns)
),
known AS (   -- one row per statement of the recorded graphs (a graph recorded twice: the first capture)
    SELECT * FROM compiled_kernels
    QUALIFY row_number() OVER (PARTITION BY graph_key, launch_name, occurrence ORDER BY capture_id) = 1
)
SELECT s.trace_id, s.pid, s.tid, s.start_ns, s.end_ns, s.graph_key, k.graph, s.launch_name, s.occurrence,
       k.module, k.module_chain, k.modules, k.root_name
FROM statements s
JOIN known k ON k.graph_key = s.graph_key AND k.launch_name = s.launch_name AND k.occurrence = s.occurrence
