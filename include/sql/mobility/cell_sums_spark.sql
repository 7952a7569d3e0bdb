-- Bounded cell sums of one day of the mobility report, computed directly (Spark only): the
-- Spark counterpart of mobility/cell_sums.sql, which states the method and every exactness
-- argument; this file keeps that method and those arguments and says only where it differs.
-- Output: (level, region_id, metric, value) rows whose sums per cell, taken by
-- aggregate_cells.sql, are exactly the cell sums of mobility/bound_contributions.sql (the
-- per-user query, which states the bounds): the same users, the same pairs kept, the same
-- regions chosen, the same pseudo-random md5 keys. Private, like that query's output.
-- tests/integration/test_spark_engine.py holds it equal to DuckDB's queries on users built
-- to tie and to exceed the bounds.
--
-- Where it differs from mobility/cell_sums.sql, and why (Spark's costs are not DuckDB's):
--   * Spark shuffles, DuckDB does not: every stay is moved once, to the partition of its
--     user (the REPARTITION hint on user_id), before any grouping, and every later grouping
--     and join of per-user rows has user_id among its keys. Only the public region tables
--     are joined by broadcast. (Under adaptive execution a persisted stage does not tell
--     the plans that read it how it is partitioned, so Spark moves the per-user rows, a
--     fraction of the stays, again there; turning adaptive execution off, with joins
--     allowed on part of their keys, avoids that but was measured no faster.)
--   * No user numbers (DuckDB's row_number() OVER (), one partition in Spark): the general
--     users' rows keep their user id, which also keys the md5s.
--   * Per-user and per-(user, level) results are joined back to their rows by hash joins
--     (SHUFFLE_HASH: both sides by user), not by sorted merges;
--     the tops are DuckDB's maxima of the same packed keys, so the same tops and the same
--     ties. A tie is broken by min_by over the md5 key computed on the tied top regions only
--     (a CASE: NULL keys elsewhere, which min_by skips), grouped apart from the tops as
--     DuckDB's tie_breaks is: Spark hashes a grouping of fixed-width values, but sorts
--     every row of one that holds a string (the md5 key).
--   * A general (user, level)'s four metric rows come from one pass over its chosen
--     regions (DuckDB: four groupings), and the simple users' rows are grouped with their
--     place-category mask once, for both their metrics and their pairs.
--   * Every level's regions of a general user are summed by one grouping (DuckDB reads the
--     deepest level's rows as they are): a deepest-level region is one finest row of its
--     user, so its sum is that row, the same value.
--   * A place category outside $place_categories has array_position 0 (DuckDB: NULL): it
--     sets no bit of the mask, as in DuckDB.
-- The common table expressions run as Spark views (dp_ops.engine.spark.split_ctes), each
-- persisted when later ones read it twice (finest, finest_users, simple_groups, keyed,
-- decided and the small public ones): comments sit between them, not inside, so that a name
-- in a comment is not taken for a read.
-- Inputs: the stays relation (clean stays), ancestors(finest_region_id, level, region_id,
-- region_idx) (dp_ops.engine.base.ancestors_table: region_idx numbers the regions as DuckDB
-- does). Parameters: as mobility/bound_contributions.sql. Jinja: stays, levels (every level
-- a region table may have, 0..2; $levels picks those computed).
WITH names AS (
    SELECT DISTINCT region_idx, region_id FROM ancestors
),
-- each finest region's packed regions, 21 bits per level (all ones: none at that level)
packed_regions AS (
    SELECT finest_region_id AS region_id,
           {% for l in levels %}shiftleft(CAST(coalesce(max(region_idx) FILTER (WHERE level = {{ l }}), 2097151) AS BIGINT), {{ 21 * loop.index0 }}){{ " |" if not loop.last }}
           {% endfor %}AS packed
    FROM ancestors
    WHERE array_contains($levels, level)
    GROUP BY finest_region_id
),
-- every stay moved once, to its user's partition, and grouped once by user and packed
-- regions; a user's seconds there fit a BIGINT (a cast that overflowed would fail)
finest AS (
    SELECT s.user_id, s.packed,
           CAST(sum(s.seconds) FILTER (WHERE s.place_category = 'workplace') AS BIGINT)
               AS work_seconds,
           CAST(sum(s.seconds) FILTER (WHERE s.place_category = 'residential') AS BIGINT)
               AS home_seconds,
           CAST(sum(s.seconds) AS BIGINT) AS any_seconds,
           coalesce(bit_or(s.bit), 0) AS mask
    FROM (SELECT /*+ REPARTITION(user_id), BROADCAST(w) */
                 r.user_id, w.packed, r.place_category,
                 CAST(round(r.dwell_hours * 3600) AS BIGINT) AS seconds,
                 CASE WHEN array_position($place_categories, r.place_category) > 0
                      THEN shiftleft(1, CAST(array_position($place_categories, r.place_category)
                                             AS INT) - 1) END AS bit
          FROM {{ stays }} AS r
          JOIN packed_regions AS w ON w.region_id = r.region_id) AS s
    GROUP BY s.user_id, s.packed
),
-- each finest row with its user's packed-region bits, totals and mask: DuckDB's per_user,
-- grouped by user and joined back by a hash join (no sort)
finest_users AS (
    SELECT /*+ SHUFFLE_HASH(u) */
           f.user_id, f.packed, f.work_seconds, f.home_seconds, f.any_seconds, f.mask,
           u.user_work_seconds, u.user_home_seconds, u.user_mask, f.packed = u.first_packed AS first,
           {% for l in levels %}CAST(shiftright(u.all_or, {{ 21 * loop.index0 }}) & 2097151 AS INT) AS r{{ l }},
           (shiftright(u.all_and, {{ 21 * loop.index0 }}) & 2097151) <> 2097151 AS in{{ l }},
           (shiftright(u.all_and ^ u.all_or, {{ 21 * loop.index0 }}) & 2097151) = 0 AND bit_count(u.user_mask) <= $max_pairs AS simple{{ l }}{{ "," if not loop.last }}
           {% endfor %}
    FROM finest AS f
    JOIN (SELECT user_id, bit_and(packed) AS all_and, bit_or(packed) AS all_or,
                 min(packed) AS first_packed,
                 CAST(sum(work_seconds) AS BIGINT) AS user_work_seconds,
                 CAST(sum(home_seconds) AS BIGINT) AS user_home_seconds,
                 bit_or(mask) AS user_mask
          FROM finest
          GROUP BY user_id) AS u ON u.user_id = f.user_id
),
-- simple (user, level)s, from one row of each user (its least packed regions): each keeps
-- every pair and has its one region for every metric; grouped with the mask too, so that
-- the pair counts below read these groups, not the users
simple_groups AS (
    SELECT level, region_idx, mask,
           count(*) AS contributors,
           count(*) FILTER (WHERE work_seconds > round($workplace_min_hours * 3600)) AS workplaces,
           count(*) FILTER (WHERE home_seconds IS NOT NULL) AS residential_users,
           sum(CAST(round((least(home_seconds, 86400) - 43200) * $grid_per_hour / 3600.0)
                    AS BIGINT)) FILTER (WHERE home_seconds IS NOT NULL) AS residential_sum_units
    FROM (SELECT lv.level, lv.region_idx, f.user_work_seconds AS work_seconds,
                 f.user_home_seconds AS home_seconds, f.user_mask AS mask
          FROM finest_users AS f
          LATERAL VIEW inline(array(
              {% for l in levels %}named_struct('level', {{ l }}, 'region_idx', IF(f.in{{ l }} AND f.simple{{ l }}, f.r{{ l }}, NULL)){{ "," if not loop.last }}
              {% endfor %})) lv AS level, region_idx
          WHERE f.first AND lv.region_idx IS NOT NULL) AS s
    GROUP BY level, region_idx, mask
),
-- UNPIVOT leaves out NULLs (a region without a simple resident), as DuckDB's does
simple_cells AS (
    SELECT level, region_idx, metric, value
    FROM (SELECT level, region_idx, CAST(sum(contributors) AS BIGINT) AS contributors,
                 CAST(sum(workplaces) AS BIGINT) AS workplaces,
                 CAST(sum(residential_users) AS BIGINT) AS residential_users,
                 CAST(sum(residential_sum_units) AS BIGINT) AS residential_sum_units
          FROM simple_groups
          GROUP BY level, region_idx) AS r
    UNPIVOT (value FOR metric IN (contributors, workplaces, residential_users,
                                  residential_sum_units))
),
categories AS (
    SELECT pos + 1 AS k, category
    FROM (SELECT posexplode($place_categories) AS (pos, category)) AS c
),
-- per (general user, level, region): the finest rows of the (user, level)s in several
-- regions or with more place categories than max_pairs, added up per region
by_region AS (
    SELECT user_id, level, region_idx,
           CAST(sum(work_seconds) AS BIGINT) AS work_seconds,
           CAST(sum(home_seconds) AS BIGINT) AS home_seconds,
           CAST(sum(any_seconds) AS BIGINT) AS any_seconds,
           bit_or(mask) AS mask
    FROM (SELECT f.user_id, lv.level, lv.region_idx, f.work_seconds, f.home_seconds,
                 f.any_seconds, f.mask
          FROM finest_users AS f
          LATERAL VIEW inline(array(
              {% for l in levels %}named_struct('level', {{ l }}, 'region_idx', IF(f.in{{ l }} AND NOT f.simple{{ l }}, CAST(nullif(shiftright(f.packed, {{ 21 * loop.index0 }}) & 2097151, 2097151) AS INT), NULL)){{ "," if not loop.last }}
              {% endfor %})) lv AS level, region_idx
          WHERE ({% for l in levels %}(f.in{{ l }} AND NOT f.simple{{ l }}){{ " OR " if not loop.last }}{% endfor %})
            AND lv.region_idx IS NOT NULL) AS e
    GROUP BY user_id, level, region_idx
),
-- DuckDB's packed keys: seconds << 22 | region number (or its complement), saturated
keyed AS (
    SELECT user_id, level, region_idx, mask, work_seconds, home_seconds, any_seconds,
           shiftleft(CASE WHEN work_seconds < 1099511627775 THEN work_seconds WHEN work_seconds IS NOT NULL THEN 1099511627775 END, 22) | region_idx AS work_hi,
           shiftleft(CASE WHEN work_seconds < 1099511627775 THEN work_seconds WHEN work_seconds IS NOT NULL THEN 1099511627775 END, 22) | (4194303 - region_idx) AS work_lo,
           shiftleft(CASE WHEN home_seconds < 1099511627775 THEN home_seconds WHEN home_seconds IS NOT NULL THEN 1099511627775 END, 22) | region_idx AS home_hi,
           shiftleft(CASE WHEN home_seconds < 1099511627775 THEN home_seconds WHEN home_seconds IS NOT NULL THEN 1099511627775 END, 22) | (4194303 - region_idx) AS home_lo,
           shiftleft(CASE WHEN any_seconds < 1099511627775 THEN any_seconds WHEN any_seconds IS NOT NULL THEN 1099511627775 END, 22) | region_idx AS any_hi,
           shiftleft(CASE WHEN any_seconds < 1099511627775 THEN any_seconds WHEN any_seconds IS NOT NULL THEN 1099511627775 END, 22) | (4194303 - region_idx) AS any_lo
    FROM by_region
),
-- DuckDB's tops per (general user, level)
tops AS (
    SELECT user_id, level,
           sum(bit_count(mask)) AS n_pairs,
           max(work_seconds) AS work_max,
           max(home_seconds) AS home_max,
           max(any_seconds) AS any_max,
           CAST(max(work_hi) & 4194303 AS INT) AS work_hi,
           CAST(4194303 - (max(work_lo) & 4194303) AS INT) AS work_lo,
           CAST(max(home_hi) & 4194303 AS INT) AS home_hi,
           CAST(4194303 - (max(home_lo) & 4194303) AS INT) AS home_lo,
           CAST(max(any_hi) & 4194303 AS INT) AS any_hi,
           CAST(4194303 - (max(any_lo) & 4194303) AS INT) AS any_lo
    FROM keyed
    GROUP BY user_id, level
),
-- each region row with its (user, level)'s tops, joined back by a hash join
decided AS (
    SELECT /*+ SHUFFLE_HASH(t), BROADCAST(n) */
           k.user_id, k.level, k.region_idx, n.region_id, k.mask, t.n_pairs,
           t.work_max, t.home_max, t.any_max, t.work_hi, t.home_hi, t.any_hi,
           (t.work_hi <> t.work_lo OR t.work_max >= 1099511627775)
               AND k.work_seconds = t.work_max AS work_top,
           (t.home_hi <> t.home_lo OR t.home_max >= 1099511627775)
               AND k.home_seconds = t.home_max AS home_top,
           (t.any_hi <> t.any_lo OR t.any_max >= 1099511627775)
               AND k.any_seconds = t.any_max AS any_top
    FROM keyed AS k
    JOIN tops AS t ON t.user_id = k.user_id AND t.level = k.level
    JOIN names AS n ON n.region_idx = k.region_idx
),
-- each general (user, level)'s tops: the max key's region per metric; fixed-width values
-- only, so Spark groups by hashing (a string among them, such as an md5 key, would make it
-- sort every row)
chosen AS (
    SELECT user_id, level, max(work_max) AS work_seconds, max(home_max) AS home_seconds,
           max(work_hi) AS work_region, max(home_hi) AS home_region,
           max(any_hi) AS any_region
    FROM decided
    GROUP BY user_id, level
),
-- where regions tie for a top (work_top etc. true on the tied regions only, which are
-- rare), the tied region with the least md5 key
tie_breaks AS (
    SELECT user_id, level,
           min_by(region_idx, CASE WHEN work_top THEN md5(concat_ws('|', user_id,
                      CAST(level AS STRING), 'work', region_id, $day, $salt)) END) AS work_region,
           min_by(region_idx, CASE WHEN home_top THEN md5(concat_ws('|', user_id,
                      CAST(level AS STRING), 'home', region_id, $day, $salt)) END) AS home_region,
           min_by(region_idx, CASE WHEN any_top THEN md5(concat_ws('|', user_id,
                      CAST(level AS STRING), 'any', region_id, $day, $salt)) END) AS any_region
    FROM decided
    WHERE work_top OR home_top OR any_top
    GROUP BY user_id, level
),
-- each general (user, level)'s four metric rows, in one pass (DuckDB: four groupings);
-- a count's group exists where it counts someone, and residential_sum_units' wherever a
-- resident is counted, as there
general_cells AS (
    SELECT level, m.region_idx, m.metric, CAST(sum(m.value) AS BIGINT) AS value
    FROM (SELECT c.level, c.work_seconds, c.home_seconds,
                 coalesce(t.work_region, c.work_region) AS work_region,
                 coalesce(t.home_region, c.home_region) AS home_region,
                 coalesce(t.any_region, c.any_region) AS any_region
          FROM chosen AS c
          LEFT JOIN tie_breaks AS t ON t.user_id = c.user_id AND t.level = c.level) AS g
    LATERAL VIEW inline(array(
        IF(work_seconds > round($workplace_min_hours * 3600),
           named_struct('region_idx', work_region, 'metric', 'workplaces', 'value', CAST(1 AS BIGINT)), NULL),
        IF(home_seconds IS NOT NULL,
           named_struct('region_idx', home_region, 'metric', 'residential_sum_units',
                        'value', CAST(round((least(home_seconds, 86400) - 43200) * $grid_per_hour / 3600.0) AS BIGINT)), NULL),
        IF(home_seconds IS NOT NULL,
           named_struct('region_idx', home_region, 'metric', 'residential_users', 'value', CAST(1 AS BIGINT)), NULL),
        named_struct('region_idx', any_region, 'metric', 'contributors', 'value', CAST(1 AS BIGINT))
    )) m AS region_idx, metric, value
    WHERE m.metric IS NOT NULL
    GROUP BY level, m.region_idx, m.metric
),
-- the pairs the per-user query drops: past the first $max_pairs by md5 key, only where a
-- (user, level) has more pairs than that
dropped AS (
    SELECT level, region_idx, 'places_' || category AS metric, -1 AS value
    FROM (
        SELECT d.level, d.region_idx, c.category,
               row_number() OVER (
                   PARTITION BY d.user_id, d.level
                   ORDER BY md5(concat_ws('|', d.user_id, CAST(d.level AS STRING), c.category,
                                          d.region_id, $day, $salt))) AS pair_rank
        FROM decided AS d
        CROSS JOIN categories AS c
        WHERE d.n_pairs > $max_pairs AND (shiftright(d.mask, c.k - 1) & 1) = 1) AS r
    WHERE pair_rank > $max_pairs
),
-- every pair of every (user, level), simple or general, counted per place-category mask
masks AS (
    SELECT level, region_idx, mask, sum(n) AS n
    FROM (SELECT level, region_idx, mask, contributors AS n
          FROM simple_groups
          WHERE mask <> 0
          UNION ALL
          SELECT level, region_idx, mask, 1 AS n
          FROM decided
          WHERE mask <> 0) AS m
    GROUP BY level, region_idx, mask
),
all_pairs AS (
    SELECT m.level, m.region_idx, 'places_' || c.category AS metric, sum(m.n) AS value
    FROM masks AS m
    CROSS JOIN categories AS c
    WHERE (shiftright(m.mask, c.k - 1) & 1) = 1
    GROUP BY m.level, m.region_idx, c.category
)
-- A cell is present exactly where the per-user query has a row for it, as in
-- mobility/cell_sums.sql; region ids join in on the cells only. try_cast and nullif change
-- no value here (a level fits a TINYINT, no metric is ''): they make the columns nullable,
-- as the per-user query's are in the cell file on both engines.
SELECT try_cast(c.level AS TINYINT) AS level, n.region_id, nullif(c.metric, '') AS metric,
       c.value
FROM (
    SELECT level, region_idx, metric, CAST(sum(value) AS BIGINT) AS value
    FROM (
        SELECT level, region_idx, metric, value FROM simple_cells
        UNION ALL SELECT level, region_idx, metric, value FROM all_pairs
        UNION ALL SELECT level, region_idx, metric, value FROM dropped
        UNION ALL SELECT level, region_idx, metric, value FROM general_cells
    ) AS u
    GROUP BY level, region_idx, metric
    HAVING sum(value) <> 0 OR metric = 'residential_sum_units'
) AS c
JOIN names AS n ON n.region_idx = c.region_idx
