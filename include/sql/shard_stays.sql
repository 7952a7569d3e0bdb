-- The rows of one user shard: users are split into $shards shards by the first 32 bits of
-- md5(user_id), which DuckDB and Spark compute alike (their hash() functions differ).
-- Bounding is per user, so each shard bounds its users completely and the per-cell sums of
-- the shards add up to the unsharded sums exactly.
-- Input: the rows relation (with user_id). Parameters: $shards, $shard.
-- Jinja: dialect ('duckdb', the default, or 'spark'), since the two engines parse hex
-- differently; both expressions give the same number for the same user.
SELECT *
FROM {{ rows }}
{% if dialect | default('duckdb') == 'spark' -%}
WHERE CAST(conv(substr(md5(user_id), 1, 8), 16, 10) AS BIGINT) % $shards = $shard
{% else -%}
WHERE CAST(('0x' || substr(md5(user_id), 1, 8)) AS UBIGINT) % $shards = $shard
{% endif -%}
