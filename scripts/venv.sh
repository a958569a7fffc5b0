#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Creates build/venv, the Python of the tests: Debian's /usr/bin/python3 with its packages
# (numpy, torch, pytest: --system-site-packages) plus, from PyPI, the pinned oracles of
# scripts/oracles.txt and the build backend of scripts/python-build.txt (scikit-build-core,
# with which ctest python.install pip-installs the package cpd here). Debian's numpy stays
# the one imported (a constraint keeps pip from installing another, which Debian's torch
# would not load). Configuring cmake afterwards makes the python tests and
# ml_dtypes.crosscheck run with build/venv/bin/python. Idempotent: does nothing when the
# venv already holds exactly those packages.
# usage: scripts/venv.sh [DIR]     (default build/venv)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv="${1:-build/venv}"
python=/usr/bin/python3
lists=(scripts/oracles.txt scripts/python-build.txt)
stamp="$venv/.cpd-oracles"

if [[ -x "$venv/bin/python" && -f "$stamp" ]] && cat "${lists[@]}" | cmp -s - "$stamp"; then
  exit 0
fi
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "venv.sh: $python cannot make a virtual environment (Debian: apt-get install python3-venv)" >&2
  exit 1
fi
echo "venv.sh: creating $venv with the packages of ${lists[*]}"
rm -rf "$venv"
"$python" -m venv --system-site-packages "$venv"
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
"$python" -c 'import numpy; print("numpy==" + numpy.__version__)' >"$constraints"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -c "$constraints" \
  -r scripts/oracles.txt -r scripts/python-build.txt
"$venv/bin/python" -c 'import numpy, sys; assert numpy.__file__.startswith("/usr/"), numpy.__file__'
cat "${lists[@]}" >"$stamp"
