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
-- Work at the finest level first (one row per stay), then roll up to the levels: the
-- join with the ancestors multiplies rows by the number of levels, so it comes after the
-- per-user reductions.
WITH finest_hours AS (
    SELECT user_id, region_id,
           -- whole seconds: integer sums are exact and the same in any order, on any
           -- engine and thread count, so ties between regions break the same way
           sum(CAST(round(dwell_hours * 3600) AS BIGINT))
               FILTER (WHERE place_category = 'workplace')   AS work_seconds,
           sum(CAST(round(dwell_hours * 3600) AS BIGINT))
               FILTER (WHERE place_category = 'residential') AS home_seconds,
           sum(CAST(round(dwell_hours * 3600) AS BIGINT))    AS any_seconds
    FROM {{ stays }}
    GROUP BY user_id, region_id
),
finest_pairs AS (
    SELECT DISTINCT user_id, place_category AS category, region_id
    FROM {{ stays }}
    WHERE array_contains($place_categories, place_category)
),
-- Only a user with more place stays than $max_pairs can have more pairs than that at any
-- level: the pseudo-random choice (a sort per user and level) is made for those users
-- only; everyone else keeps all their pairs. Same result as ranking everyone, at a
-- fraction of the cost (tests/unit/steps/test_bound.py checks it against the plain query).
heavy_users AS (
    SELECT user_id
    FROM {{ stays }}
    WHERE array_contains($place_categories, place_category)
    GROUP BY user_id
    HAVING count(*) > $max_pairs
),
place_pairs AS (
    SELECT DISTINCT p.user_id, a.level, p.category, a.region_id
    FROM finest_pairs AS p
    JOIN ancestors AS a ON a.finest_region_id = p.region_id
    WHERE array_contains($levels, a.level)
),
place_pairs_flagged AS (
    SELECT p.user_id, p.level, p.category, p.region_id, h.user_id IS NOT NULL AS heavy
    FROM place_pairs AS p
    LEFT JOIN heavy_users AS h ON h.user_id = p.user_id
),
place_pairs_ranked AS (
    SELECT
        user_id, level, category, region_id,
        row_number() OVER (
            PARTITION BY user_id, level
            ORDER BY md5(concat_ws('|', user_id, CAST(level AS STRING), category, region_id,
                                   $day, $salt))
        ) AS pair_rank
    FROM place_pairs_flagged
    WHERE heavy
),
places AS (
    SELECT user_id, level, region_id, 'places_' || category AS metric, 1 AS value
    FROM place_pairs_flagged
    WHERE NOT heavy
    UNION ALL
    SELECT user_id, level, region_id, 'places_' || category AS metric, 1 AS value
    FROM place_pairs_ranked
    WHERE pair_rank <= $max_pairs
),
hours_by_region AS (
    SELECT f.user_id, a.level, a.region_id,
           sum(f.work_seconds) AS work_seconds,
           sum(f.home_seconds) AS home_seconds,
           sum(f.any_seconds)  AS any_seconds
    FROM finest_hours AS f
    JOIN ancestors AS a ON a.finest_region_id = f.region_id
    WHERE array_contains($levels, a.level)
    GROUP BY f.user_id, a.level, a.region_id
),
-- Each user-day and level has one region per metric: the region with the most seconds of
-- it (work, home, any), ties broken by the pseudo-random key. A user present in one region
-- at a level (always at the top level, mostly below) has that region for every metric.
-- For users in several regions the top is found by grouping, and the key (an md5) is
-- computed only where regions tie for the top, which is rare: no sort per user. The
-- result is exactly "rank by seconds, then by key, take the first" (checked against that
-- plain query in tests/unit/steps/test_bound.py).
user_levels AS (
    SELECT user_id, level, count(*) AS n_regions, min(region_id) AS only_region,
           max(work_seconds) AS work_seconds, max(home_seconds) AS home_seconds,
           max(any_seconds) AS any_seconds
    FROM hours_by_region
    GROUP BY user_id, level
),
several_regions AS (
    -- top_* is NULL where either side is NULL (no such hours): never a top
    SELECT h.user_id, h.level, h.region_id,
           h.work_seconds = u.work_seconds AS top_work,
           h.home_seconds = u.home_seconds AS top_home,
           h.any_seconds = u.any_seconds AS top_any
    FROM hours_by_region AS h
    JOIN user_levels AS u ON u.user_id = h.user_id AND u.level = h.level
    WHERE u.n_regions > 1
),
tops AS (
    SELECT user_id, level,
           count(*) FILTER (WHERE top_work)        AS n_work,
           min(region_id) FILTER (WHERE top_work)  AS work_region,
           count(*) FILTER (WHERE top_home)        AS n_home,
           min(region_id) FILTER (WHERE top_home)  AS home_region,
           count(*) FILTER (WHERE top_any)         AS n_any,
           min(region_id) FILTER (WHERE top_any)   AS any_region
    FROM several_regions
    GROUP BY user_id, level
),
tie_breaks AS (
    SELECT s.user_id, s.level,
           min_by(s.region_id, md5(concat_ws('|', s.user_id, CAST(s.level AS STRING), 'work',
                                             s.region_id, $day, $salt)))
               FILTER (WHERE s.top_work AND t.n_work > 1) AS work_region,
           min_by(s.region_id, md5(concat_ws('|', s.user_id, CAST(s.level AS STRING), 'home',
                                             s.region_id, $day, $salt)))
               FILTER (WHERE s.top_home AND t.n_home > 1) AS home_region,
           min_by(s.region_id, md5(concat_ws('|', s.user_id, CAST(s.level AS STRING), 'any',
                                             s.region_id, $day, $salt)))
               FILTER (WHERE s.top_any AND t.n_any > 1)   AS any_region
    FROM several_regions AS s
    JOIN tops AS t ON t.user_id = s.user_id AND t.level = s.level
    WHERE (s.top_work AND t.n_work > 1) OR (s.top_home AND t.n_home > 1)
       OR (s.top_any AND t.n_any > 1)
    GROUP BY s.user_id, s.level
),
chosen AS (
    SELECT u.user_id, u.level, u.work_seconds, u.home_seconds,
           CASE WHEN u.n_regions = 1 THEN u.only_region
                ELSE coalesce(b.work_region, t.work_region) END AS work_region,
           CASE WHEN u.n_regions = 1 THEN u.only_region
                ELSE coalesce(b.home_region, t.home_region) END AS home_region,
           CASE WHEN u.n_regions = 1 THEN u.only_region
                ELSE coalesce(b.any_region, t.any_region) END AS any_region
    FROM user_levels AS u
    LEFT JOIN tops AS t ON t.user_id = u.user_id AND t.level = u.level
    LEFT JOIN tie_breaks AS b ON b.user_id = u.user_id AND b.level = u.level
),
workplaces AS (
    SELECT user_id, level, work_region AS region_id, 'workplaces' AS metric, 1 AS value
    FROM chosen
    WHERE work_seconds > round($workplace_min_hours * 3600)
),
residential AS (
    SELECT user_id, level, home_region AS region_id, 'residential_sum_units' AS metric,
           CAST(round((least(home_seconds, 86400) - 43200) * $grid_per_hour / 3600.0)
                AS BIGINT) AS value
    FROM chosen
    WHERE home_seconds IS NOT NULL
    UNION ALL
    SELECT user_id, level, home_region AS region_id, 'residential_users' AS metric, 1 AS value
    FROM chosen
    WHERE home_seconds IS NOT NULL
),
contributors AS (
    SELECT user_id, level, any_region AS region_id, 'contributors' AS metric, 1 AS value
    FROM chosen
)
SELECT user_id, CAST(level AS TINYINT) AS level, region_id, metric, CAST(value AS BIGINT) AS value
FROM (
    SELECT * FROM places
    UNION ALL SELECT * FROM workplaces
    UNION ALL SELECT * FROM residential
    UNION ALL SELECT * FROM contributors
)
