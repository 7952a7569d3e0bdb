-- Validate one day of search activity. Every input row comes out exactly once, either
-- clean (reason IS NULL) or with the first reason that rejects it.
-- Inputs: the raw source relation (raw rows with filename, file_row_number),
--         tables finest_regions(region_id), symptom_names(symptom).
-- A null symptom is valid: a search that matches no symptom still counts towards B.
-- Identical rows are kept (a repeated search); bounding counts a user once per symptom.
-- Jinja (dp_ops.engine.base.ingest_dialect): text, date_column and has_control(), the
-- spellings in which DuckDB and Spark differ that this query needs.
WITH typed AS (
    SELECT
        CAST(user_id AS {{ text }})   AS user_id,
        CAST(region_id AS {{ text }}) AS region_id,
        CAST(symptom AS {{ text }})   AS symptom,
        {% if has_date %}
        -- $dated_files: the files with a date column; the others' rows take the day
        CASE WHEN array_contains($dated_files, filename) THEN TRY_CAST({{ date_column }} AS DATE)
             ELSE CAST($day AS DATE) END
        {%- else %}CAST($day AS DATE){% endif %} AS row_date,
        filename                   AS source_file,
        file_row_number            AS source_row
    FROM {{ source }}
)
SELECT
    t.user_id, t.region_id, t.symptom, t.source_file, t.source_row,
    CASE
        WHEN t.user_id IS NULL OR trim(t.user_id) = '' THEN 'null or empty user_id'
        WHEN length(t.user_id) > $max_id_length THEN 'user_id longer than the limit'
        WHEN {{ has_control('t.user_id') }} THEN 'control characters in user_id'
        WHEN t.region_id IS NULL OR trim(t.region_id) = '' THEN 'null or empty region_id'
        WHEN fr.region_id IS NULL THEN 'unknown or non-finest region_id'
        WHEN t.symptom IS NOT NULL AND sn.symptom IS NULL THEN 'unknown symptom'
        WHEN t.row_date IS NULL OR t.row_date <> CAST($day AS DATE) THEN 'date outside the partition'
        ELSE NULL
    END AS reason
FROM typed t
LEFT JOIN finest_regions fr ON fr.region_id = t.region_id
LEFT JOIN symptom_names sn ON sn.symptom = t.symptom
