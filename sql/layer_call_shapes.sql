-- layer_call_shapes: the shape of one call of each annotated module, when all its calls in a forward agree.
-- Inputs:  layer_shapes (tracepipe capture's layer_shapes.json: one row per module call of one forward)
-- Output, one row per capture and annotated module:
--   capture_id        VARCHAR: the capture (tracepipe capture's folder)
--   layer             VARCHAR: the module's qualified name: its range text
--   module_type       VARCHAR: the module's class
--   calls_per_forward BIGINT: calls of the module in one forward
--   same_calls        BOOLEAN: every call has the same output shape and MACs
--   out_shape         BIGINT[] elements: the first output's dims; NULL when the calls differ
--   in_shape          BIGINT[] elements: the first input's dims; NULL when the calls differ
--   output_elements   BIGINT elements: product of out_shape
--   out_channels      BIGINT: Conv*: dim 1 of a batched output; Linear: the last dim; NULL for other modules
--   out_positions     BIGINT: output_elements / out_channels: N*P*Q of a conv, the leading dims of a Linear
--   in_channels       BIGINT: out_channels' rule on the input
--   analytic_macs     BIGINT MACs: own MACs of one call; NULL = type not analysed
--   reduction_length  BIGINT MACs: per output element: C_in/groups*R*S of a conv, in_features of a Linear; NULL unless
--                       a whole number
-- Calls that differ (a module reused on different shapes) get NULL shapes: kernels cannot be told apart by
-- call here, so nothing is mapped rather than the wrong call's shape.
WITH g AS (
    SELECT capture_id, layer, any_value(module_type) AS module_type, count(*) AS calls_per_forward,
           count(DISTINCT output_shapes) = 1 AND count(DISTINCT coalesce(macs, -1)) = 1 AS same_calls,
           CAST(json_extract(any_value(output_shapes), '$[0]') AS BIGINT[]) AS out_shape_any,
           CAST(json_extract(any_value(input_shapes), '$[0]') AS BIGINT[]) AS in_shape_any,
           any_value(macs) AS macs_any
    FROM layer_shapes GROUP BY capture_id, layer
), s AS (
    SELECT capture_id, layer, module_type, calls_per_forward, same_calls,
           CASE WHEN same_calls THEN out_shape_any END AS out_shape,
           CASE WHEN same_calls THEN in_shape_any END AS in_shape,
           CASE WHEN same_calls THEN macs_any END AS analytic_macs
    FROM g
), d AS (
    SELECT *,
           list_reduce(out_shape, lambda a, b: a * b) AS output_elements,
           CASE WHEN module_type LIKE '%Conv%' AND len(out_shape) >= 3 THEN out_shape[2]
                WHEN module_type LIKE '%Linear%' THEN out_shape[-1] END AS out_channels,
           CASE WHEN module_type LIKE '%Conv%' AND len(in_shape) >= 3 THEN in_shape[2]
                WHEN module_type LIKE '%Linear%' THEN in_shape[-1] END AS in_channels
    FROM s
)
SELECT capture_id, layer, module_type, calls_per_forward, same_calls, out_shape, in_shape, output_elements,
       out_channels, output_elements // out_channels AS out_positions, in_channels, analytic_macs,
       CASE WHEN analytic_macs % output_elements = 0 THEN analytic_macs // output_elements END AS reduction_length
FROM d
