-- Contribution bounding for one day of the presence report.
-- Output: each user's bounded contributions, one row per (user_id, level, region_id,
-- metric) with value 1. Private: summed per cell by the factory's aggregate query and
-- read only by the noise step.
--
-- Inputs: the stays relation (clean stays: user_id, region_id, place_category, dwell_hours),
--         ancestors(finest_region_id, level, region_id).
-- Parameters: $day, $salt, $levels.
--
-- Bound (per user-day and level): one region, the one where the user stayed longest
-- (ties broken by a pseudo-random key); the user counts once there. So one user-day
-- changes one cell of a level by at most 1: sensitivity 1.
WITH hours AS (
    SELECT s.user_id, a.level, a.region_id, sum(s.dwell_hours) AS hours
    FROM {{ stays }} AS s
    JOIN ancestors AS a ON a.finest_region_id = s.region_id
    WHERE array_contains($levels, a.level)
    GROUP BY s.user_id, a.level, a.region_id
),
ranked AS (
    SELECT user_id, level, region_id,
           row_number() OVER (
               PARTITION BY user_id, level
               ORDER BY hours DESC,
                        md5(concat_ws('|', user_id, CAST(level AS STRING), region_id, $day,
                                      $salt))
           ) AS region_rank
    FROM hours
)
SELECT user_id, CAST(level AS TINYINT) AS level, region_id,
       'present_users' AS metric, CAST(1 AS BIGINT) AS value
FROM ranked
WHERE region_rank = 1
