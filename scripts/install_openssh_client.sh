#!/usr/bin/env bash
# Make sure the stock `ssh-keygen` is installed for the release-signature tests
# (tests/support/release_keys.py: `ssh-keygen -Y verify` of a real release).
#
#   scripts/install_openssh_client.sh
#
# Idempotent: nothing to do when ssh-keygen is on PATH. Otherwise, as root on a Debian
# machine, `apt-get install openssh-client`. Without root or apt-get, or when apt-get fails,
# it says how to install it and exits 0 (the test skips with the same hint), except under
# CI (CI set, not false/0), where a missing tool is an error.
set -euo pipefail

say() { echo "install_openssh_client: $*" >&2; }

# CI unset, empty, 0 or false (any case, blanks ignored) is not CI; anything else is, as
# in the tests (tests/support/ci.py)
in_ci() {
    local ci="${CI:-}"
    ci="${ci,,}"
    case "${ci//[[:space:]]/}" in "" | 0 | false) return 1 ;; esac
}

if command -v ssh-keygen >/dev/null; then
    exit 0
fi

cannot_install() {
    if in_ci; then
        say "ERROR: ssh-keygen is missing and $1; CI must run the release-signature test"
        exit 1
    fi
    say "ssh-keygen is missing and $1: the release-signature test will be skipped;" \
        "to run it: sudo apt-get install openssh-client"
    exit 0
}

[ "$(id -u)" -eq 0 ] || cannot_install "this is not root"
command -v apt-get >/dev/null || cannot_install "there is no apt-get"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
say "installing Debian's openssh-client package (apt-get)"
if ! { apt-get update -qq &&
       DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           openssh-client; } >"$out" 2>&1; then
    cat "$out" >&2
    cannot_install "apt-get install openssh-client failed"
fi
