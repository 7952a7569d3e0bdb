-- Sum bounded per-user contributions (either report) into (level, region_id, metric) cells. The output
-- is TRUE (un-noised) and private; cells absent here are zero, and the noise step still
-- noises them (delta = 0 needs the whole public domain).
-- Input: the contributions relation with user_id, level, region_id, metric, value.
SELECT level, region_id, metric, CAST(sum(value) AS BIGINT) AS value
FROM {{ contributions }}
GROUP BY level, region_id, metric
ORDER BY level, region_id, metric
