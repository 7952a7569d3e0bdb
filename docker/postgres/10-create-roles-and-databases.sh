#!/usr/bin/env bash
# Creates the stack's PostgreSQL roles and databases, as the image's superuser (postgres),
# so that nothing else ever needs the superuser (docs/deploy.md, "The database roles"):
#
#   airflow          Airflow's metadata role (AIRFLOW_DB_PASSWORD, from POSTGRES_PASSWORD
#                    in .env): owns database airflow; no superuser, createrole or createdb;
#                    may not even connect to dp_ledger.
#   dp_ledger_owner  owns database dp_ledger, and so the ledger's tables and append-only
#                    triggers (DP_LEDGER_OWNER_DB_PASSWORD); used only by airflow-init's
#                    `python -m dp_ops ledger init --grant dp_ledger`.
#   dp_ledger        the pipeline's role (DP_LEDGER_URL, DP_LEDGER_DB_PASSWORD): may connect
#                    to dp_ledger; `ledger init --grant` gives it SELECT and INSERT on the
#                    ledger's tables, nothing else (no UPDATE, DELETE, TRUNCATE, DDL).
#
# The postgres image runs it from /docker-entrypoint-initdb.d once, when its data volume
# is first initialised. It is idempotent: it creates what is missing and, on every run,
# sets the roles' attributes and passwords (from the container's environment, i.e. .env)
# and the databases' owners and privileges again. To rerun it on an existing volume (after
# changing one of the passwords in .env and `docker compose up -d postgres`):
#   docker compose exec postgres bash /docker-entrypoint-initdb.d/10-create-roles-and-databases.sh
# A volume created before it (by 10-create-ledger-db.sh, when airflow was the image's
# superuser) cannot be repaired by it: it stops with an error, and docs/deploy.md
# ("A volume created before the three roles") says how to re-create or migrate it.
set -Eeo pipefail

: "${AIRFLOW_DB_PASSWORD:?AIRFLOW_DB_PASSWORD is not set (POSTGRES_PASSWORD in .env)}"
: "${DP_LEDGER_OWNER_DB_PASSWORD:?DP_LEDGER_OWNER_DB_PASSWORD is not set (see .env.example)}"
: "${DP_LEDGER_DB_PASSWORD:?DP_LEDGER_DB_PASSWORD is not set (see .env.example)}"

# The passwords go in as psql variables, quoted by format(%L), never spliced into SQL.
psql -X -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" \
    --dbname "${POSTGRES_DB:-postgres}" \
    --set airflow_password="${AIRFLOW_DB_PASSWORD}" \
    --set owner_password="${DP_LEDGER_OWNER_DB_PASSWORD}" \
    --set ledger_password="${DP_LEDGER_DB_PASSWORD}" <<'SQL'
-- The bootstrap superuser (oid 10) cannot lose SUPERUSER: a cluster initialised with
-- POSTGRES_USER=airflow must be re-created (docs/deploy.md).
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'airflow' AND oid = 10) THEN
    RAISE EXCEPTION 'role airflow is the superuser this cluster was initialised with and '
      'can never lose SUPERUSER: re-create the volume or migrate it with pg_dump and '
      'pg_restore (docs/deploy.md, "A volume created before the three roles")';
  END IF;
END $$;

-- The three login roles, with nothing but LOGIN (created if missing, reset if present).
SELECT format('%s ROLE %I WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION '
              'NOBYPASSRLS PASSWORD %L',
              CASE WHEN EXISTS (SELECT FROM pg_roles WHERE rolname = r.name)
                   THEN 'ALTER' ELSE 'CREATE' END,
              r.name, r.password)
FROM (VALUES ('airflow', :'airflow_password'),
             ('dp_ledger_owner', :'owner_password'),
             ('dp_ledger', :'ledger_password')) AS r(name, password)
\gexec

-- Airflow's metadata database, owned by airflow, and nobody else's.
SELECT 'CREATE DATABASE airflow OWNER airflow'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'airflow')
\gexec
ALTER DATABASE airflow OWNER TO airflow;
REVOKE ALL ON DATABASE airflow FROM PUBLIC;
REVOKE ALL ON DATABASE airflow FROM dp_ledger_owner, dp_ledger;
GRANT CONNECT ON DATABASE airflow TO airflow;

-- The ledger's database, owned by dp_ledger_owner; the pipeline's role may connect,
-- Airflow's may not.
SELECT 'CREATE DATABASE dp_ledger OWNER dp_ledger_owner'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'dp_ledger')
\gexec
ALTER DATABASE dp_ledger OWNER TO dp_ledger_owner;
REVOKE ALL ON DATABASE dp_ledger FROM PUBLIC;
REVOKE ALL ON DATABASE dp_ledger FROM airflow;
GRANT CONNECT ON DATABASE dp_ledger TO dp_ledger, dp_ledger_owner;

\connect dp_ledger
-- Only the owner creates objects in schema public (PostgreSQL 15 and later already
-- withhold CREATE from PUBLIC, and the schema belongs to pg_database_owner, i.e.
-- dp_ledger_owner; older servers give it to the superuser, hence the ALTER).
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
SELECT 'ALTER SCHEMA public OWNER TO dp_ledger_owner'
WHERE (SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'public')
      NOT IN ('pg_database_owner', 'dp_ledger_owner')
\gexec
SQL

echo "roles airflow, dp_ledger_owner, dp_ledger and databases airflow, dp_ledger ready"
