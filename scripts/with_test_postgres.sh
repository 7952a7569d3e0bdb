#!/usr/bin/env bash
# Run a command (`make test`: pytest) with DP_TEST_POSTGRES_URL set, so that the ledger
# tests (tests/unit/privacy/test_ledger.py) run on PostgreSQL as well as on SQLite.
#
#   scripts/with_test_postgres.sh .venv/bin/python -m pytest -q
#
# The server, first that works of:
#   1. DP_TEST_POSTGRES_URL already set (postgresql+psycopg://user:pw@host/db): used as is;
#   2. a server on 127.0.0.1:$DP_TEST_POSTGRES_PORT (default 5432) that accepts
#      postgres:postgres, database postgres (`docker run -e POSTGRES_PASSWORD=postgres ...`);
#   3. a throwaway cluster of our own: initdb in a temporary directory, loopback only, a free
#      port, fsync off (test data only), a non-superuser role owning the test database;
#      stopped and deleted when the command ends, whether it passed or failed. As root
#      without PostgreSQL's server programs, Debian's `postgresql` package is installed
#      first with apt-get. As root the cluster belongs to the `postgres` user (initdb
#      refuses to run as root); otherwise to the calling user.
# With 3., DP_TEST_POSTGRES_APP_URL is set too: a second role of the same database, for the
# tests that check what the pipeline's role may not do (with 1. set it yourself; with 2.
# those tests create it as the superuser). The role of DP_TEST_POSTGRES_URL must be allowed
# to create databases (CREATEDB) for the pipeline-level attack tests.
# With none of these, the PostgreSQL cases are skipped with one line saying how to enable
# them, except under CI (CI set, not false/0), where that is an error: CI must never
# silently skip them. The wrapped command's exit status is this script's.
#
# Needs `python3` with SQLAlchemy and psycopg on PATH (make puts .venv/bin first).
set -euo pipefail

say() { echo "with_test_postgres: $*" >&2; }

# CI unset, empty, 0 or false (any case, blanks ignored) is not CI; anything else is, as
# in the tests (tests/support/ci.py)
in_ci() {
    local ci="${CI:-}"
    ci="${ci,,}"
    case "${ci//[[:space:]]/}" in "" | 0 | false) return 1 ;; esac
}

if [ $# -eq 0 ]; then
    say "usage: $0 COMMAND [ARG...]"
    exit 2
fi

# no_server REASON COMMAND...: under CI, fail; elsewhere run COMMAND, whose PostgreSQL
# cases then skip.
no_server() {
    if in_ci; then
        say "ERROR: no PostgreSQL server for the ledger tests: $1"
        say "CI must run them on PostgreSQL; set DP_TEST_POSTGRES_URL or run as root on Debian"
        exit 1
    fi
    say "no PostgreSQL ($1): the PostgreSQL ledger tests will be skipped; to run them, set" \
        "DP_TEST_POSTGRES_URL=postgresql+psycopg://user:pw@host/db or run as root on Debian"
    shift
    "$@"  # not exec: an EXIT trap may have a directory to delete
    exit
}

# Prints nothing if URL accepts a connection, else the reason.
probe() {
    python3 - "$1" <<'PY' || echo "the probe failed"
import sys

try:
    import sqlalchemy as sa
except ImportError:
    sys.exit(print("python3 has no SQLAlchemy (run this through make: .venv/bin first on PATH)"))
engine = sa.create_engine(sys.argv[1])
try:
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
except Exception as exc:  # noqa: BLE001 - the reason is reported, whatever it is
    print(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
finally:
    engine.dispose()
PY
}

# 1. a URL given by the caller
if [ -n "${DP_TEST_POSTGRES_URL:-}" ]; then
    if why=$(probe "$DP_TEST_POSTGRES_URL") && [ -z "$why" ]; then
        say "using DP_TEST_POSTGRES_URL"
        exec "$@"
    fi
    say "ERROR: DP_TEST_POSTGRES_URL does not accept a connection: ${why:-probe failed}"
    exit 1
fi

# 2. a server already listening
port=${DP_TEST_POSTGRES_PORT:-5432}
url="postgresql+psycopg://postgres:postgres@127.0.0.1:$port/postgres"
if why=$(probe "$url") && [ -z "$why" ]; then
    say "using the PostgreSQL server on 127.0.0.1:$port"
    DP_TEST_POSTGRES_URL=$url exec "$@"
fi
case "$why" in
    *"Connection refused"*) ;;  # nothing listens there: the usual case
    *) say "no use of 127.0.0.1:$port as postgres:postgres ($why); trying a private server" ;;
esac

# 3. a cluster of our own
find_pg_bin() {
    local bin
    bin=$(find /usr/lib/postgresql -maxdepth 3 -path '*/bin/initdb' 2>/dev/null | sort -V | tail -n1)
    [ -n "$bin" ] || bin=$(command -v initdb || true)
    [ -n "$bin" ] && dirname "$bin"
}

install_postgresql() {
    local started=$SECONDS out
    out=$(mktemp)
    say "installing Debian's postgresql package (apt-get)"
    if ! { apt-get update -qq &&
           DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
               postgresql; } >"$out" 2>&1; then
        cat "$out" >&2
        rm -f "$out"
        return 1
    fi
    rm -f "$out"
    say "installed postgresql in $((SECONDS - started)) s"
    # Where an init system is allowed to, the package starts its default cluster (port 5432);
    # nothing here uses it, so do not leave it running.
    if command -v pg_lsclusters >/dev/null; then
        pg_lsclusters --no-header 2>/dev/null | while read -r ver name _port status _rest; do
            if [ "$status" = online ]; then pg_ctlcluster "$ver" "$name" stop || true; fi
        done
    fi
}

root=false
[ "$(id -u)" -eq 0 ] && root=true
pg_bin=$(find_pg_bin || true)
if [ -z "$pg_bin" ]; then
    if $root && command -v apt-get >/dev/null; then
        install_postgresql || no_server "apt-get install postgresql failed" "$@"
        pg_bin=$(find_pg_bin || true)
        [ -n "$pg_bin" ] || no_server "no initdb after installing postgresql" "$@"
    else
        no_server "no server on 127.0.0.1:$port, no initdb, and not root with apt-get" "$@"
    fi
fi

if $root; then
    id postgres >/dev/null 2>&1 || no_server "running as root, but there is no postgres user" "$@"
    # from /: postgres may not be allowed into the caller's directory (pg_ctl and psql
    # would warn that they cannot change back to it)
    as_owner() { (cd / && runuser -u postgres -- "$@"); }
else
    as_owner() { "$@"; }
fi

dir=$(mktemp -d /tmp/dp_test_pg.XXXXXX)  # short: the socket path must fit in 107 bytes
pgdata=$dir/data
# Stop and delete the cluster however the command ends; keep the command's exit status.
cleanup() {
    local status=$?
    if [ -f "$pgdata/postmaster.pid" ]; then
        as_owner "$pg_bin/pg_ctl" -D "$pgdata" -m fast -w -t 60 stop >/dev/null 2>&1 ||
            say "could not stop the PostgreSQL server in $pgdata"
    fi
    rm -rf "$dir"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if $root; then chown postgres: "$dir"; fi
chmod 700 "$dir"

secret() { od -An -tx1 -N16 /dev/urandom | tr -d ' \n'; }
superuser_pw=$(secret)
test_pw=$(secret)
printf '%s\n' "$superuser_pw" >"$dir/pw"
if $root; then chown postgres: "$dir/pw"; fi

# local (socket) connections are trusted: the socket lives in $dir, which only its owner
# can enter; TCP needs a password
as_owner "$pg_bin/initdb" -D "$pgdata" -U postgres --pwfile="$dir/pw" --auth-local=trust \
    --auth-host=scram-sha-256 -E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    no_server "initdb failed" "$@"
}
rm -f "$dir/pw"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=$(free_port)
# fsync, synchronous_commit and full_page_writes off: a crash may lose this cluster, which
# holds nothing but test data and is deleted afterwards anyway
if ! as_owner "$pg_bin/pg_ctl" -D "$pgdata" -l "$dir/server.log" -w -t 60 -o \
        "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
        start >/dev/null; then
    cat "$dir/server.log" >&2 || true
    no_server "the PostgreSQL server did not start" "$@"
fi
app_pw=$(secret)
# dp_test owns the test database (the ledger's owner role) and may create databases (the
# pipeline-level attack tests copy a ledger as a database made from a template); dp_test_app
# is a second role with no rights of its own, which the role tests grant what the
# pipeline's role gets (SELECT and INSERT) and then try UPDATE and DELETE as
as_owner "$pg_bin/psql" -X -q -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
    -c "CREATE ROLE dp_test LOGIN CREATEDB PASSWORD '$test_pw'" \
    -c "CREATE ROLE dp_test_app LOGIN PASSWORD '$app_pw'" \
    -c "CREATE DATABASE dp_test OWNER dp_test" >/dev/null
export DP_TEST_POSTGRES_URL="postgresql+psycopg://dp_test:$test_pw@127.0.0.1:$port/dp_test"
export DP_TEST_POSTGRES_APP_URL="postgresql+psycopg://dp_test_app:$app_pw@127.0.0.1:$port/dp_test"
say "PostgreSQL $("$pg_bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (throwaway, $dir)"
"$@"
