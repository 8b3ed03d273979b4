-- gpu_ops: the GPU operations of the kinds asked for (kernels, memcpy, memset), all in the columns of `kernels`:
-- the one projection of the three tables that the views reading every kind of operation share.
-- Inputs:  kernels, memcpy, memset
-- Parameters:
--   kinds      VARCHAR[] of 'kernel', 'memcpy', 'memset': the kinds wanted (default: all three)
-- Output, one row per GPU operation of those kinds: every column of `kernels` (a copy or a memset has those it
-- shares with kernels, the others NULL; its name and short_name are `[CUDA memcpy <kind>]` / `[CUDA memset]`),
-- then
--   op_kind    VARCHAR: 'kernel' | 'memcpy' | 'memset'
--   op_row_id  BIGINT: kernel_id / copy_id / set_id
--   bytes      BIGINT bytes: moved or set (NULL for kernels)
--   copy_kind  VARCHAR: the copy's direction (memcpy.kind: 'HtoD', 'DtoH', 'DtoD', ...; NULL for the others)
-- Rule: a kind left out costs no scan (its branch's filter folds to false before the plan runs), so a view that
-- joins each kind to rows of its own kind (gpu_op_layers: op_kind is then no join key) asks for one at a time.
CREATE OR REPLACE MACRO gpu_ops(kinds := ['kernel', 'memcpy', 'memset']) AS TABLE
SELECT *, 'kernel' AS op_kind, kernel_id AS op_row_id, CAST(NULL AS BIGINT) AS bytes, CAST(NULL AS VARCHAR) AS copy_kind
FROM kernels
WHERE list_contains(kinds, 'kernel')
UNION ALL BY NAME
SELECT trace_id, 'memcpy' AS op_kind, copy_id AS op_row_id, device_id, context_id, stream_id, correlation_id,
       external_id, start_ns, end_ns, duration_ns, bytes, kind AS copy_kind, pid, graph_node_id,
       '[CUDA memcpy ' || coalesce(kind, 'unknown') || ']' AS name,
       '[CUDA memcpy ' || coalesce(kind, 'unknown') || ']' AS short_name
FROM memcpy
WHERE list_contains(kinds, 'memcpy')
UNION ALL BY NAME
SELECT trace_id, 'memset' AS op_kind, set_id AS op_row_id, device_id, context_id, stream_id, correlation_id,
       external_id, start_ns, end_ns, duration_ns, bytes, NULL AS copy_kind, pid, graph_node_id,
       '[CUDA memset]' AS name, '[CUDA memset]' AS short_name
FROM memset
WHERE list_contains(kinds, 'memset')
