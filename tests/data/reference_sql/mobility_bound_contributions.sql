-- Contribution bounding for one day of the mobility report.
-- Output: each user's bounded contributions, one row per (user_id, level, region_id,
-- metric) with the value the user adds to that cell. Private: summed per cell by
-- aggregate_cells.sql and read only by the noise step.
--
-- Inputs: the stays relation (clean stays: user_id, region_id, place_category, dwell_hours),
--         ancestors(finest_region_id, level, region_id): each finest region and its
--         ancestors, one row per level.
-- Parameters: $day, $salt, $max_pairs, $workplace_min_hours, $grid_per_hour, $levels,
--             $place_categories.
--
-- Bounds (per user-day and level), which the noise step's sensitivities rely on:
--   public places: a user counts once per (category, region) cell and in at most
--                  $max_pairs cells; extra pairs are dropped uniformly at random;
--   workplaces:    one region (the one with most workplace hours), counted only above
--                  $workplace_min_hours there;
--   residential:   one home region (most residential hours); hours (summed in whole
--                  seconds) clamped to [0, 24], offset by -12 and put on a grid of
--                  1/$grid_per_hour hour;
--   contributors:  one region (the one with most hours of any stay).
-- "At random" is a pseudo-random key md5(user, candidate, day, salt), the same on DuckDB
-- and Spark; the privacy guarantee rests on the bounds holding, not on the key's secrecy.
-- Portable SQL: it runs unchanged on DuckDB and on Spark (dp_ops.engine.spark turns the
-- $name bind parameters into Spark's :name), so use only functions and types both know.
WITH stays_by_level AS (
    SELECT s.user_id, a.level, a.region_id, s.place_category AS category,
           -- whole seconds: integer sums are exact and the same in any order, on any
           -- engine and thread count, so ties between regions break the same way
           CAST(round(s.dwell_hours * 3600) AS BIGINT) AS dwell_seconds
    FROM {{ stays }} AS s
    JOIN ancestors AS a ON a.finest_region_id = s.region_id
    WHERE array_contains($levels, a.level)
),
place_pairs AS (
    SELECT DISTINCT user_id, level, category, region_id
    FROM stays_by_level
    WHERE array_contains($place_categories, category)
),
place_pairs_ranked AS (
    SELECT
        *,
        row_number() OVER (
            PARTITION BY user_id, level
            ORDER BY md5(concat_ws('|', user_id, CAST(level AS STRING), category, region_id,
                                   $day, $salt))
        ) AS pair_rank
    FROM place_pairs
),
places AS (
    SELECT user_id, level, region_id, 'places_' || category AS metric, 1 AS value
    FROM place_pairs_ranked
    WHERE pair_rank <= $max_pairs
),
hours_by_region AS (
    SELECT user_id, level, region_id,
           sum(dwell_seconds) FILTER (WHERE category = 'workplace')   AS work_seconds,
           sum(dwell_seconds) FILTER (WHERE category = 'residential') AS home_seconds,
           sum(dwell_seconds)                                        AS any_seconds
    FROM stays_by_level
    GROUP BY user_id, level, region_id
),
chosen AS (
    SELECT
        user_id, level, region_id, work_seconds, home_seconds, any_seconds,
        row_number() OVER (
            PARTITION BY user_id, level
            ORDER BY work_seconds DESC NULLS LAST,
                     md5(concat_ws('|', user_id, CAST(level AS STRING), 'work', region_id, $day, $salt))
        ) AS work_rank,
        row_number() OVER (
            PARTITION BY user_id, level
            ORDER BY home_seconds DESC NULLS LAST,
                     md5(concat_ws('|', user_id, CAST(level AS STRING), 'home', region_id, $day, $salt))
        ) AS home_rank,
        row_number() OVER (
            PARTITION BY user_id, level
            ORDER BY any_seconds DESC,
                     md5(concat_ws('|', user_id, CAST(level AS STRING), 'any', region_id, $day, $salt))
        ) AS any_rank
    FROM hours_by_region
),
workplaces AS (
    SELECT user_id, level, region_id, 'workplaces' AS metric, 1 AS value
    FROM chosen
    WHERE work_rank = 1 AND work_seconds > round($workplace_min_hours * 3600)
),
residential AS (
    SELECT user_id, level, region_id, 'residential_sum_units' AS metric,
           CAST(round((least(home_seconds, 86400) - 43200) * $grid_per_hour / 3600.0)
                AS BIGINT) AS value
    FROM chosen
    WHERE home_rank = 1 AND home_seconds IS NOT NULL
    UNION ALL
    SELECT user_id, level, region_id, 'residential_users' AS metric, 1 AS value
    FROM chosen
    WHERE home_rank = 1 AND home_seconds IS NOT NULL
),
contributors AS (
    SELECT user_id, level, region_id, 'contributors' AS metric, 1 AS value
    FROM chosen
    WHERE any_rank = 1
)
SELECT user_id, CAST(level AS TINYINT) AS level, region_id, metric, CAST(value AS BIGINT) AS value
FROM (
    SELECT * FROM places
    UNION ALL SELECT * FROM workplaces
    UNION ALL SELECT * FROM residential
    UNION ALL SELECT * FROM contributors
)
