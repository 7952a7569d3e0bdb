#!/usr/bin/env bash
# Build the project's virtual environment from its pinned files (what `make venv` runs).
#
#   scripts/build_venv.sh PYTHON VENV
#
# The same pins either way: requirements.txt and requirements-dev.txt under constraints.txt,
# requirements-nodeps.txt without dependencies, then dp_ops/dp_demo editable (`-e .`).
# The installer is uv (pinned below, installed into the venv by pip) when it can be had:
# it resolves and downloads in parallel and links from its cache (tried offline first, see
# below). pip is the fallback when uv cannot be installed here or fails, and
# DP_INSTALLER=pip asks for pip outright.
# uv reads no pip.conf: an index other than PyPI is given to it as UV_INDEX_URL.
# Both compile the installed modules to bytecode (uv only when asked: --compile-bytecode),
# so no process compiles them again at import.
set -euo pipefail

PYTHON=${1:?usage: build_venv.sh PYTHON VENV}
VENV=${2:?usage: build_venv.sh PYTHON VENV}
UV_PIN="uv==0.13.9"
PY="$VENV/bin/python"

"$PYTHON" -m venv "$VENV"

install_with() {  # install_with <installer words...>: the project's three installs
    "$@" -r requirements.txt -r requirements-dev.txt -c constraints.txt &&
    "$@" --no-deps -r requirements-nodeps.txt &&
    "$@" --no-deps -e .
}

installer=${DP_INSTALLER:-uv}
if [ "$installer" = uv ]; then
    if "$PY" -m pip install --quiet "$UV_PIN"; then
        uv_install=("$VENV/bin/uv" pip install --quiet --compile-bytecode --python "$PY")
        # uv's cache first, without the network: every version is pinned, so what the
        # cache holds is what the index would give. An index that answers every
        # revalidation with a fresh copy (some mirrors do) would otherwise make uv
        # download and build pyspark's source distribution again on every build. When
        # the cache lacks a pinned file, the same installs run online.
        if install_with "${uv_install[@]}" --offline 2>/dev/null; then
            echo "build_venv: installed with $UV_PIN from its cache"
            exit 0
        fi
        if install_with "${uv_install[@]}"; then
            echo "build_venv: installed with $UV_PIN"
            exit 0
        fi
    fi
    echo "build_venv: uv could not install the environment; falling back to pip" >&2
elif [ "$installer" != pip ]; then
    echo "build_venv: DP_INSTALLER must be uv or pip, not '$installer'" >&2
    exit 2
fi
"$PY" -m pip install --quiet --upgrade pip
install_with "$PY" -m pip install --quiet
echo "build_venv: installed with pip"
