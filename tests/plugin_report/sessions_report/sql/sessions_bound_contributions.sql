-- Contribution bounding for one day of the sessions report.
-- Output: each user's bounded contributions, one row per (user_id, level, region_id,
-- metric) with the minutes the user adds. Private: summed per cell by the factory.
--
-- Inputs: the sessions relation (clean sessions: user_id, region_id, app, minutes),
--         ancestors(finest_region_id, level, region_id).
-- Parameters: $day, $salt, $levels, $max_minutes.
--
-- Bound (per user-day and level): one region, the one with most of the user's minutes
-- (ties broken by a pseudo-random key), and there the user's minutes of the day, rounded
-- and capped at $max_minutes. So one user-day changes one cell of a level by at most
-- $max_minutes: the sensitivity.
WITH minutes AS (
    SELECT s.user_id, a.level, a.region_id, sum(s.minutes) AS minutes
    FROM {{ sessions }} AS s
    JOIN ancestors AS a ON a.finest_region_id = s.region_id
    WHERE array_contains($levels, a.level)
    GROUP BY s.user_id, a.level, a.region_id
),
ranked AS (
    SELECT user_id, level, region_id,
           sum(minutes) OVER (PARTITION BY user_id, level) AS day_minutes,
           row_number() OVER (
               PARTITION BY user_id, level
               ORDER BY minutes DESC,
                        md5(concat_ws('|', user_id, CAST(level AS STRING), region_id, $day,
                                      $salt))
           ) AS region_rank
    FROM minutes
)
SELECT user_id, CAST(level AS TINYINT) AS level, region_id,
       'session_minutes' AS metric,
       CAST(least(round(day_minutes), $max_minutes) AS BIGINT) AS value
FROM ranked
WHERE region_rank = 1
