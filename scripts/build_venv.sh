#!/usr/bin/env bash
# Build the project's virtual environment from its pinned files (what `make venv` runs).
#
#   scripts/build_venv.sh PYTHON VENV
#
# The same pins either way: requirements.txt and requirements-dev.txt under constraints.txt,
# requirements-nodeps.txt without dependencies, then dp_ops/dp_demo editable (`-e .`).
# The installer is uv (pinned below, put into the venv by the interpreter's pip) when it can be had:
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

# Without ensurepip: it installs pip and setuptools from the interpreter's bundled wheels
# by running pip, which takes seconds; uv installs the same wheels (with_pip below).
"$PYTHON" -m venv --without-pip "$VENV"

with_pip() {  # pip (and setuptools) in the venv, as `python -m venv` would have put them
    "$PY" -m pip --version >/dev/null 2>&1 && return 0
    local wheels
    wheels=$("$PYTHON" -c 'import ensurepip, pathlib
print("\n".join(map(str, sorted(pathlib.Path(ensurepip.__file__).parent.glob("_bundled/*.whl")))))' \
        2>/dev/null || true)
    if [ -n "$wheels" ] && [ -x "$VENV/bin/uv" ] && mapfile -t bundled <<<"$wheels" &&
            "$VENV/bin/uv" pip install --quiet --offline --python "$PY" "${bundled[@]}"; then
        return 0
    fi
    "$PY" -m ensurepip --default-pip >/dev/null
}

get_uv() {  # uv into the venv: by the interpreter's own pip, else by the venv's
    "$PYTHON" -m pip --python "$PY" install --quiet "$UV_PIN" 2>/dev/null ||
        { with_pip && "$PY" -m pip install --quiet "$UV_PIN"; }
}

install_with() {  # install_with <installer words...>: the project's three installs
    "$@" -r requirements.txt -r requirements-dev.txt -c constraints.txt &&
    "$@" --no-deps -r requirements-nodeps.txt &&
    "$@" --no-deps -e .
}

installer=${DP_INSTALLER:-uv}
if [ "$installer" = uv ]; then
    if get_uv && with_pip; then
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
with_pip
"$PY" -m pip install --quiet --upgrade pip
install_with "$PY" -m pip install --quiet
echo "build_venv: installed with pip"
