-- _layer_domains: per trace, the NVTX domain whose push/pop ranges are its layers.
-- analyze: inline (one row per trace: computed again in each of its readers costs less than a file)
-- Inputs:  nvtx_ranges (push/pop ranges)
-- Output, one row per trace with push/pop ranges:
--   trace_id  VARCHAR: the trace
--   dkey      VARCHAR: the layer domain (nvtx_ranges.domain), '' for the default one
-- Rule: the default domain when it has push/pop ranges, else the domain with the most: a CUB `CCCL` or user-library
-- range never becomes a layer nor breaks the model's path (_range_segments), and layer_coverage tells work
-- launched inside the other domains' ranges only.
SELECT trace_id, arg_max(dkey, CAST(dkey = '' AS BIGINT) * 1000000000000 + n) AS dkey
FROM (SELECT trace_id, coalesce(domain, '') AS dkey, count(*) AS n FROM nvtx_ranges WHERE kind = 'push_pop'
      GROUP BY ALL)
GROUP BY trace_id
