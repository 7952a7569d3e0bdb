-- Contribution bounding for one day of the Search Trends Symptoms dataset.
-- Output: each user's bounded contributions, one row per (user_id, level, region_id,
-- metric) with value 1. Private: summed per cell by aggregate_cells.sql and read
-- only by the noise step.
--
-- Inputs: the searches relation (clean searches: user_id, region_id, symptom (null for a
--         search matching no symptom)),
--         ancestors(finest_region_id, level, region_id): each finest region and its
--         ancestors, one row per level.
-- Parameters: $day, $salt, $max_symptoms, $levels, $symptom_prefix, $volume_cell.
--
-- Bounds (per user-day and level), which the noise step's sensitivities rely on:
--   one region: the region of the level where the user searched most (ties broken at
--               random); searches made elsewhere that day are not counted at this level;
--   B:          the user counts once, in that region (cell $volume_cell);
--   A:          the user counts at most once per symptom searched in that region, and in
--               at most $max_symptoms symptoms; extra symptoms are dropped uniformly at
--               random. So one user-day changes the A vector of a level by at most
--               $max_symptoms in L1, and B by at most 1.
-- "At random" is a pseudo-random key md5(user, level, candidate, day, salt), the same on
-- DuckDB and Spark; the privacy guarantee rests on the bounds holding, not on the key.
-- Portable SQL: it runs unchanged on DuckDB and on Spark (dp_ops.engine.spark turns the
-- $name bind parameters into Spark's :name), so use only functions and types both know.
WITH searches_by_level AS (
    SELECT s.user_id, a.level, a.region_id, s.symptom
    FROM {{ searches }} AS s
    JOIN ancestors AS a ON a.finest_region_id = s.region_id
    WHERE array_contains($levels, a.level)
),
region_ranked AS (
    SELECT
        user_id, level, region_id,
        row_number() OVER (
            PARTITION BY user_id, level
            ORDER BY count(*) DESC,
                     md5(concat_ws('|', user_id, CAST(level AS STRING), 'region', region_id,
                                   $day, $salt))
        ) AS region_rank
    FROM searches_by_level
    GROUP BY user_id, level, region_id
),
user_region AS (
    SELECT user_id, level, region_id FROM region_ranked WHERE region_rank = 1
),
symptoms_ranked AS (
    SELECT
        s.user_id, s.level, s.region_id, s.symptom,
        row_number() OVER (
            PARTITION BY s.user_id, s.level
            ORDER BY md5(concat_ws('|', s.user_id, CAST(s.level AS STRING), 'symptom',
                                   s.symptom, $day, $salt))
        ) AS symptom_rank
    FROM (
        SELECT DISTINCT sl.user_id, sl.level, sl.region_id, sl.symptom
        FROM searches_by_level AS sl
        JOIN user_region AS u
          ON u.user_id = sl.user_id AND u.level = sl.level AND u.region_id = sl.region_id
        WHERE sl.symptom IS NOT NULL
    ) AS s
)
SELECT user_id, CAST(level AS TINYINT) AS level, region_id,
       $volume_cell AS metric, CAST(1 AS BIGINT) AS value
FROM user_region
UNION ALL
SELECT user_id, CAST(level AS TINYINT) AS level, region_id,
       $symptom_prefix || symptom AS metric, CAST(1 AS BIGINT) AS value
FROM symptoms_ranked
WHERE symptom_rank <= $max_symptoms
