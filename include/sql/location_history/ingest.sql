-- Validate one day of location history. Every input row comes out exactly once, either
-- clean (reason IS NULL) or with the first reason that rejects it.
-- Inputs: the raw source relation (raw rows with filename, file_row_number),
--         tables finest_regions(region_id), stay_categories(category).
-- Jinja (dp_ops.engine.base.ingest_dialect): text, date_column, has_control() and
-- copy_hash(), the spellings in which DuckDB and Spark differ.
WITH typed AS (
    SELECT
        CAST(user_id AS {{ text }})        AS user_id,
        CAST(region_id AS {{ text }})      AS region_id,
        CAST(place_id AS {{ text }})       AS place_id,
        CAST(place_category AS {{ text }}) AS place_category,
        TRY_CAST(dwell_hours AS DOUBLE) AS dwell_hours,
        CAST(dwell_hours AS {{ text }})    AS dwell_hours_text,
        {% if has_date %}
        -- $dated_files: the files with a date column; the others' rows take the day
        CASE WHEN array_contains($dated_files, filename) THEN TRY_CAST({{ date_column }} AS DATE)
             ELSE CAST($day AS DATE) END
        {%- else %}CAST($day AS DATE){% endif %} AS row_date,
        filename                        AS source_file,
        file_row_number                 AS source_row
    FROM {{ source }}
),
judged AS (
    SELECT
        t.*,
        CASE
            WHEN t.user_id IS NULL OR trim(t.user_id) = '' THEN 'null or empty user_id'
            WHEN length(t.user_id) > $max_id_length THEN 'user_id longer than the limit'
            WHEN {{ has_control('t.user_id') }} THEN 'control characters in user_id'
            WHEN t.region_id IS NULL OR trim(t.region_id) = '' THEN 'null or empty region_id'
            WHEN fr.region_id IS NULL THEN 'unknown or non-finest region_id'
            WHEN t.place_id IS NULL OR trim(t.place_id) = '' THEN 'null or empty place_id'
            WHEN length(t.place_id) > $max_id_length THEN 'place_id longer than the limit'
            WHEN {{ has_control('t.place_id') }} THEN 'control characters in place_id'
            WHEN t.place_category IS NULL THEN 'null place_category'
            WHEN sc.category IS NULL THEN 'unknown place_category'
            WHEN t.dwell_hours IS NULL AND t.dwell_hours_text IS NOT NULL THEN 'dwell_hours is not a number'
            WHEN t.dwell_hours IS NULL THEN 'null dwell_hours'
            -- DuckDB 2.0's isnan() misses NaN read from Parquet (zone-map statistics), so
            -- test the text form, which is exact (Spark spells infinity out).
            WHEN lower(CAST(t.dwell_hours AS {{ text }}))
                 IN ('nan', '-nan', 'inf', '-inf', 'infinity', '-infinity')
                THEN 'dwell_hours is not finite'
            WHEN t.dwell_hours < 0 THEN 'negative dwell_hours'
            WHEN t.dwell_hours > 24 THEN 'dwell_hours over 24'
            WHEN t.row_date IS NULL OR t.row_date <> CAST($day AS DATE) THEN 'date outside the partition'
            ELSE NULL
        END AS reason
    FROM typed t
    LEFT JOIN finest_regions fr ON fr.region_id = t.region_id
    LEFT JOIN stay_categories sc ON sc.category = t.place_category
),
deduplicated AS (
    -- copies are counted among the rows that pass only: a valid row is never rejected as
    -- a copy of a row that is itself quarantined (say, for its date)
    SELECT
        *,
        row_number() OVER (
            PARTITION BY {{ copy_hash('user_id, region_id, place_id, place_category, dwell_hours') }}
                         reason IS NULL, user_id, region_id, place_id, place_category,
                         dwell_hours
            ORDER BY source_file, source_row
        ) AS copy_number
    FROM judged
)
SELECT
    user_id, region_id, place_id, place_category, dwell_hours, source_file, source_row,
    CASE
        WHEN reason IS NULL AND copy_number > 1 THEN 'duplicate row'
        ELSE reason
    END AS reason
FROM deduplicated
