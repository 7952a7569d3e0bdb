#!/usr/bin/env bash
# Make sure Debian's Chromium is installed for the Airflow UI browser test
# (tests/integration/test_ui_browser.py drives /usr/bin/chromium through Playwright's
# `executable_path`; Playwright never downloads a browser of its own here).
#
#   scripts/install_test_browser.sh
#
# Idempotent: nothing to do when /usr/bin/chromium exists. Otherwise, as root on a Debian
# machine, `apt-get install chromium` (with fonts-liberation, so that the screenshots have
# readable text, but none of the desktop recommends: printer setup, notification daemon).
# Without root or apt-get, or when apt-get fails, it says how to install it and exits 0, so
# that `make test` goes on and the browser test skips with the same hint, except under CI (CI set, not false/0),
# where a missing browser is an error: CI must never silently skip that test.
set -euo pipefail

CHROMIUM=/usr/bin/chromium

say() { echo "install_test_browser: $*" >&2; }

# CI unset, empty, 0 or false (any case, blanks ignored) is not CI; anything else is, as
# in the tests (tests/support/ci.py)
in_ci() {
    local ci="${CI:-}"
    ci="${ci,,}"
    case "${ci//[[:space:]]/}" in "" | 0 | false) return 1 ;; esac
}

if [ -x "$CHROMIUM" ]; then
    exit 0
fi

cannot_install() {
    if in_ci; then
        say "ERROR: $CHROMIUM is missing and $1; CI must run the browser test"
        exit 1
    fi
    say "$CHROMIUM is missing and $1: the Airflow UI browser test will be skipped;" \
        "to run it: sudo apt-get install chromium fonts-liberation"
    exit 0
}

[ "$(id -u)" -eq 0 ] || cannot_install "this is not root"
command -v apt-get >/dev/null || cannot_install "there is no apt-get"

started=$SECONDS
out=$(mktemp)
trap 'rm -f "$out"' EXIT
say "installing Debian's chromium package (apt-get)"
if ! { apt-get update -qq &&
       DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           chromium fonts-liberation; } >"$out" 2>&1; then
    cat "$out" >&2
    cannot_install "apt-get install chromium failed"
fi
[ -x "$CHROMIUM" ] || cannot_install "the chromium package did not install it"
say "installed $("$CHROMIUM" --version 2>/dev/null | head -n1) in $((SECONDS - started)) s"
