#!/usr/bin/env bash
# Creates the privacy-budget ledger's role and database (both named dp_ledger) beside
# Airflow's metadata database, so that DP_LEDGER_URL in docker-compose.yaml resolves.
#
# The postgres image runs it from /docker-entrypoint-initdb.d once, when its data volume
# is first initialised. It is idempotent, so on a volume created before it existed run:
#   docker compose exec postgres bash /docker-entrypoint-initdb.d/10-create-ledger-db.sh
#
# The ledger gets its own role, owner of its database: Airflow's metadata user cannot
# touch the budget accounting, and the ledger's tables (created by dp_ops on first use)
# live in a database nothing else writes to.
set -Eeo pipefail

: "${DP_LEDGER_DB_PASSWORD:?DP_LEDGER_DB_PASSWORD is not set (see .env.example)}"

# The password goes in as a psql variable, quoted by format(%L), never spliced into SQL.
psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" \
    --dbname "${POSTGRES_DB:-postgres}" \
    --set ledger_password="${DP_LEDGER_DB_PASSWORD}" <<'SQL'
SELECT format('CREATE ROLE dp_ledger LOGIN PASSWORD %L', :'ledger_password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'dp_ledger')
\gexec
SELECT 'CREATE DATABASE dp_ledger OWNER dp_ledger'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'dp_ledger')
\gexec
SQL

echo "dp_ledger role and database ready"
