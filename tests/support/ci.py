"""Whether the tests run under CI, where a missing tool or server fails a test that would
otherwise be skipped (strace, ssh-keygen, Chromium, the PostgreSQL server)."""

from __future__ import annotations

import os

# the values of CI that mean "not CI"; compared stripped and lower-cased. The shell scripts
# (scripts/with_test_postgres.sh, scripts/install_*.sh) apply the same rule.
NOT_CI = frozenset({"", "0", "false"})


def in_ci() -> bool:
    """True when the environment variable ``CI`` is set to anything but empty, ``0`` or
    ``false`` (any case, surrounding blanks ignored): CI services set ``CI=true`` (.ci/run
    is started so), and any other value also counts, so a typo never turns CI's failures
    into skips."""
    return os.environ.get("CI", "").strip().lower() not in NOT_CI
