-- Bounded cell sums of one day of the mobility report, computed directly (DuckDB only).
-- Output: (level, region_id, metric, value) rows whose sums per cell, taken by
-- aggregate_cells.sql, are exactly the cell sums of mobility/bound_contributions.sql (the
-- per-user query, which Spark runs and which states the bounds): the same users, the
-- same pairs kept, the same regions chosen, the same pseudo-random keys. Private, like
-- that query's output. tests/unit/steps/test_bound.py checks the equality on random days
-- built to tie and to exceed the bounds; tests/integration/test_spark_engine.py checks it
-- against Spark.
--
-- Why a second formulation: the per-user query groups every stay by user several times
-- (per region, per level, per pair) and ranks; this one reads and groups every stay once
-- (per user and finest region), settles most users in one grouping of those rows by user,
-- and is several times faster on a large day (benchmarks/README.md). It relies on these facts,
-- each kept exact:
--   * A user whose stays all lie in one region at a level, with at most $max_pairs place
--     categories, keeps every pair there and has that region for every metric at that
--     level: such (user, level)s are summed per region without any per-user row
--     ("simple"). A region table has fewer than 2^21 - 1 regions, so the three levels'
--     region numbers pack into one BIGINT (21 bits each), and "one region at a level" is
--     bit_and = bit_or of that level's bits over the user's stays. 2^21 - 1 marks a stay
--     with no region at that level (a finest region above it): mixed with real regions
--     it makes bit_and differ from bit_or (general); in every stay (bit_and all ones) the
--     user is absent from that level, as in the per-user query.
--   * Every other (user, level) ("general": several regions, or more place categories
--     than $max_pairs) is bounded as the per-user query does, on integer keys: the top
--     region of each metric is the max of (seconds << 22 | region number), and a tie is
--     a different region from the max of (seconds << 22 | -region number); seconds past
--     2^40 (34,000 years) count as a tie, which goes the exact way.
--   * Pairs: every pair of every general (user, level) is counted, then the pairs the
--     per-user query drops (rank > $max_pairs by the same md5 key, only where a
--     (user, level) has more pairs than that) are subtracted.
--   * Ties between regions are broken by the per-user query's md5 keys, on the tied
--     (user, level)s only.
--   * A region of the deepest level (the last of levels) has no sub-regions: it is a
--     finest region, so a user's seconds there are one row of the per-(user, finest
--     region) sums, with nothing to add up.
-- Inputs: the stays relation (clean stays), ancestors(finest_region_id, level, region_id,
-- region_idx) (dp_ops.engine.duckdb.register_ancestors: region_idx numbers the regions).
-- Parameters: as mobility/bound_contributions.sql. Jinja: stays, levels (every level a
-- region table may have, 0..2; $levels picks those computed).
WITH names AS (SELECT DISTINCT region_idx, region_id FROM ancestors),
wide AS (
    SELECT finest_region_id AS region_id,
           {% for l in levels %}max(region_idx) FILTER (WHERE level = {{ l }}) AS r{{ l }}{{ "," if not loop.last }}
           {% endfor %}
    FROM ancestors
    WHERE array_contains($levels, level)
    GROUP BY finest_region_id
),
-- Every stay is read once and grouped once, by user and packed regions (the finest region,
-- as far as the computed levels tell regions apart): the per-user grouping and the general
-- users' per-region sums both read these rows (0.4 per stay on the benchmark days) instead
-- of the stays, so the day's file is not scanned a second time. A user's seconds there fit
-- a BIGINT (clean stays last at most 24 hours; a cast that overflowed would fail, not wrap).
finest AS MATERIALIZED (
    SELECT s.user_id, w.packed,
           CAST(sum(s.seconds) FILTER (WHERE s.place_category = 'workplace') AS BIGINT)
               AS work_seconds,
           CAST(sum(s.seconds) FILTER (WHERE s.place_category = 'residential') AS BIGINT)
               AS home_seconds,
           CAST(sum(s.seconds) AS BIGINT) AS any_seconds,
           coalesce(bit_or(CAST(1 AS INTEGER)
                           << (list_position($place_categories, s.place_category) - 1)),
                    0) AS mask
    FROM (SELECT user_id, region_id, place_category,
                 CAST(round(dwell_hours * 3600) AS BIGINT) AS seconds
          FROM {{ stays }}) AS s
    JOIN (SELECT region_id,
                 {% for l in levels %}(CAST(coalesce(r{{ l }}, 2097151) AS BIGINT) << {{ 21 * loop.index0 }}){{ " | " if not loop.last }}{% endfor %} AS packed
          FROM wide) AS w ON w.region_id = s.region_id
    GROUP BY s.user_id, w.packed
),
per_user_packed AS (
    SELECT user_id, bit_and(packed) AS all_and, bit_or(packed) AS all_or,
           CAST(sum(work_seconds) AS BIGINT) AS work_seconds,
           CAST(sum(home_seconds) AS BIGINT) AS home_seconds,
           bit_or(mask) AS mask
    FROM finest
    GROUP BY user_id
),
per_user AS MATERIALIZED (
    SELECT user_id, work_seconds, home_seconds, mask,
           {% for l in levels %}CAST((all_or >> {{ 21 * loop.index0 }}) & 2097151 AS INTEGER) AS r{{ l }},
           (all_and >> {{ 21 * loop.index0 }}) & 2097151 <> 2097151 AS in{{ l }},
           (xor(all_and, all_or) >> {{ 21 * loop.index0 }}) & 2097151 = 0 AND bit_count(mask) <= $max_pairs AS simple{{ l }}{{ "," if not loop.last }}
           {% endfor %}
    FROM per_user_packed
),
simple AS (
    {% for l in levels %}
    SELECT {{ l }} AS level, r{{ l }} AS region_idx, mask, work_seconds, home_seconds
    FROM per_user
    WHERE in{{ l }} AND simple{{ l }}
    {{ "UNION ALL" if not loop.last }}
    {% endfor %}
),
simple_regions AS (
    SELECT level, region_idx,
           count(*) AS contributors,
           count(*) FILTER (WHERE work_seconds > round($workplace_min_hours * 3600)) AS workplaces,
           count(*) FILTER (WHERE home_seconds IS NOT NULL) AS residential_users,
           sum(CAST(round((least(home_seconds, 86400) - 43200) * $grid_per_hour / 3600.0)
                    AS BIGINT)) FILTER (WHERE home_seconds IS NOT NULL) AS residential_sum_units
    FROM simple
    GROUP BY level, region_idx
),
categories AS (
    SELECT unnest($place_categories) AS category, generate_subscripts($place_categories, 1) AS k
),
simple_cells AS (
    SELECT level, region_idx, metric, value
    FROM (UNPIVOT simple_regions ON contributors, workplaces, residential_users,
                                    residential_sum_units
          INTO NAME metric VALUE value)
),
-- (user, level) pairs in several regions, or with more place categories than max_pairs
general_users AS MATERIALIZED (
    SELECT user_id, CAST(row_number() OVER () AS BIGINT) AS uid,
           {% for l in levels %}in{{ l }} AND NOT simple{{ l }} AS g{{ l }}{{ "," if not loop.last }}
           {% endfor %}
    FROM per_user
    WHERE {% for l in levels %}(in{{ l }} AND NOT simple{{ l }}){{ " OR " if not loop.last }}{% endfor %}
),
-- the general users' finest rows, joined to them once (on the user id string) and kept for
-- both kinds of levels below
general_finest AS MATERIALIZED (
    SELECT g.uid, {% for l in levels %}g.g{{ l }}, {% endfor %}s.packed, s.work_seconds,
           s.home_seconds, s.any_seconds, s.mask
    FROM finest AS s
    JOIN general_users AS g ON g.user_id = s.user_id
),
-- per (general user, level, region): the deepest level's regions have no sub-regions, so
-- each is one finest row of its user (no grouping); coarser levels add finest rows up
by_region AS MATERIALIZED (
    SELECT s.uid, {{ levels[-1] }} AS level,
           CAST((s.packed >> {{ 21 * (levels | length - 1) }}) & 2097151 AS INTEGER) AS region_idx,
           s.work_seconds, s.home_seconds, s.any_seconds, s.mask
    FROM general_finest AS s
    WHERE s.g{{ levels[-1] }} AND (s.packed >> {{ 21 * (levels | length - 1) }}) & 2097151 <> 2097151
    {% if levels | length > 1 %}
    UNION ALL
    SELECT uid, level, region_idx,
           CAST(sum(work_seconds) AS BIGINT) AS work_seconds,
           CAST(sum(home_seconds) AS BIGINT) AS home_seconds,
           CAST(sum(any_seconds) AS BIGINT)  AS any_seconds,
           bit_or(mask) AS mask
    FROM (
        SELECT s.uid, lv.level,
               CAST(nullif((s.packed >> (21 * lv.k)) & 2097151, 2097151) AS INTEGER)
                   AS region_idx,
               s.work_seconds, s.home_seconds, s.any_seconds, s.mask
        FROM general_finest AS s
        CROSS JOIN (SELECT unnest({{ levels[:-1] | list }}) AS level,
                           generate_subscripts({{ levels[:-1] | list }}, 1) - 1 AS k) AS lv
        WHERE CASE lv.level {% for l in levels[:-1] %}WHEN {{ l }} THEN s.g{{ l }} {% endfor %}END
    )
    WHERE region_idx IS NOT NULL
    GROUP BY uid, level, region_idx
    {% endif %}
),
keyed AS (
    SELECT uid, level, mask, work_seconds, home_seconds, any_seconds,
           (CASE WHEN work_seconds < 1099511627775 THEN work_seconds WHEN work_seconds IS NOT NULL THEN 1099511627775 END << 22) | region_idx AS work_hi,
           (CASE WHEN work_seconds < 1099511627775 THEN work_seconds WHEN work_seconds IS NOT NULL THEN 1099511627775 END << 22) | (4194303 - region_idx) AS work_lo,
           (CASE WHEN home_seconds < 1099511627775 THEN home_seconds WHEN home_seconds IS NOT NULL THEN 1099511627775 END << 22) | region_idx AS home_hi,
           (CASE WHEN home_seconds < 1099511627775 THEN home_seconds WHEN home_seconds IS NOT NULL THEN 1099511627775 END << 22) | (4194303 - region_idx) AS home_lo,
           (CASE WHEN any_seconds < 1099511627775 THEN any_seconds WHEN any_seconds IS NOT NULL THEN 1099511627775 END << 22) | region_idx AS any_hi,
           (CASE WHEN any_seconds < 1099511627775 THEN any_seconds WHEN any_seconds IS NOT NULL THEN 1099511627775 END << 22) | (4194303 - region_idx) AS any_lo
    FROM by_region
),
tops AS MATERIALIZED (
    SELECT uid, level,
           sum(bit_count(mask)) AS n_pairs,
           max(work_seconds) AS work_seconds,
           max(home_seconds) AS home_seconds,
           max(any_seconds)  AS any_seconds,
           CAST(max(work_hi) & 4194303 AS INTEGER) AS work_hi,
           CAST(4194303 - (max(work_lo) & 4194303) AS INTEGER) AS work_lo,
           CAST(max(home_hi) & 4194303 AS INTEGER) AS home_hi,
           CAST(4194303 - (max(home_lo) & 4194303) AS INTEGER) AS home_lo,
           CAST(max(any_hi) & 4194303 AS INTEGER) AS any_hi,
           CAST(4194303 - (max(any_lo) & 4194303) AS INTEGER) AS any_lo
    FROM keyed
    GROUP BY uid, level
),
decided AS (
    SELECT uid, level, n_pairs, work_seconds, home_seconds, any_seconds,
           work_hi <> work_lo OR work_seconds >= 1099511627775 AS work_tied,
           home_hi <> home_lo OR home_seconds >= 1099511627775 AS home_tied,
           any_hi <> any_lo OR any_seconds >= 1099511627775 AS any_tied,
           work_hi, home_hi, any_hi
    FROM tops
),
special AS (
    SELECT * FROM decided
    WHERE n_pairs > $max_pairs OR work_tied OR home_tied OR any_tied
),
special_regions AS MATERIALIZED (
    SELECT g.user_id, b.uid, b.level, b.region_idx, n.region_id, b.mask,
           s.n_pairs > $max_pairs AS heavy,
           s.work_tied AND b.work_seconds = s.work_seconds AS work_top,
           s.home_tied AND b.home_seconds = s.home_seconds AS home_top,
           s.any_tied AND b.any_seconds = s.any_seconds AS any_top
    FROM by_region AS b
    JOIN special AS s ON s.uid = b.uid AND s.level = b.level
    JOIN names AS n ON n.region_idx = b.region_idx
    JOIN general_users AS g ON g.uid = b.uid
),
tie_breaks AS (
    SELECT uid, level,
           min_by(region_idx, md5(concat_ws('|', user_id, CAST(level AS STRING), 'work',
                                            region_id, $day, $salt)))
               FILTER (WHERE work_top) AS work_region,
           min_by(region_idx, md5(concat_ws('|', user_id, CAST(level AS STRING), 'home',
                                            region_id, $day, $salt)))
               FILTER (WHERE home_top) AS home_region,
           min_by(region_idx, md5(concat_ws('|', user_id, CAST(level AS STRING), 'any',
                                            region_id, $day, $salt)))
               FILTER (WHERE any_top)  AS any_region
    FROM special_regions
    WHERE work_top OR home_top OR any_top
    GROUP BY uid, level
),
dropped AS (
    SELECT level, region_idx, 'places_' || category AS metric, -1 AS value
    FROM (
        SELECT r.level, r.region_idx, c.category,
               row_number() OVER (
                   PARTITION BY r.uid, r.level
                   ORDER BY md5(concat_ws('|', r.user_id, CAST(r.level AS STRING), c.category,
                                          r.region_id, $day, $salt))) AS pair_rank
        FROM special_regions AS r
        CROSS JOIN categories AS c
        WHERE r.heavy AND (r.mask >> (c.k - 1)) & 1 = 1)
    WHERE pair_rank > $max_pairs
),
-- every pair of every (user, level), simple or general, counted per place-category mask
masks AS (
    SELECT level, region_idx, mask, count(*) AS n
    FROM (SELECT level, region_idx, mask FROM simple
          UNION ALL
          SELECT level, region_idx, mask FROM by_region)
    WHERE mask <> 0
    GROUP BY level, region_idx, mask
),
all_pairs AS (
    SELECT m.level, m.region_idx, 'places_' || c.category AS metric, sum(m.n) AS value
    FROM masks AS m
    CROSS JOIN categories AS c
    WHERE (m.mask >> (c.k - 1)) & 1 = 1
    GROUP BY m.level, m.region_idx, c.category
),
chosen AS MATERIALIZED (
    SELECT d.level, d.work_seconds, d.home_seconds,
           CASE WHEN d.work_tied THEN t.work_region ELSE d.work_hi END AS work_region,
           CASE WHEN d.home_tied THEN t.home_region ELSE d.home_hi END AS home_region,
           CASE WHEN d.any_tied THEN t.any_region ELSE d.any_hi END AS any_region
    FROM decided AS d
    LEFT JOIN tie_breaks AS t ON t.uid = d.uid AND t.level = d.level
),
general_cells AS (
    SELECT level, work_region AS region_idx, 'workplaces' AS metric, count(*) AS value
    FROM chosen
    WHERE work_seconds > round($workplace_min_hours * 3600)
    GROUP BY level, work_region
    UNION ALL
    SELECT level, home_region AS region_idx, 'residential_sum_units' AS metric,
           sum(CAST(round((least(home_seconds, 86400) - 43200) * $grid_per_hour / 3600.0)
                    AS BIGINT)) AS value
    FROM chosen
    WHERE home_seconds IS NOT NULL
    GROUP BY level, home_region
    UNION ALL
    SELECT level, home_region AS region_idx, 'residential_users' AS metric, count(*) AS value
    FROM chosen
    WHERE home_seconds IS NOT NULL
    GROUP BY level, home_region
    UNION ALL
    SELECT level, any_region AS region_idx, 'contributors' AS metric, count(*) AS value
    FROM chosen
    GROUP BY level, any_region
)
-- A cell is present exactly where the per-user query has a row for it: where its sum is not
-- zero, and for residential_sum_units wherever a resident is counted (the sum may be 0).
-- Regions are numbers up to here (integer keys: cheaper joins and groupings); their ids join
-- in on the cells only.
SELECT CAST(c.level AS TINYINT) AS level, n.region_id, c.metric, c.value
FROM (
    SELECT level, region_idx, metric, CAST(sum(value) AS BIGINT) AS value
    FROM (
        SELECT * FROM simple_cells
        UNION ALL SELECT * FROM all_pairs
        UNION ALL SELECT * FROM dropped
        UNION ALL SELECT * FROM general_cells
    )
    GROUP BY level, region_idx, metric
    HAVING sum(value) <> 0 OR metric = 'residential_sum_units'
) AS c
JOIN names AS n ON n.region_idx = c.region_idx
