#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Installs cpd's build and test dependencies (Debian packages only) when any
# is missing; with --force, runs apt-get update/install regardless. With --tests,
# only what building and testing need: gnuplot (the main job's plots,
# scripts/train.sh) is left out.
# Needs root, or passwordless sudo, to install.
set -euo pipefail

packages=(
  build-essential cmake clang libclang-rt-dev pkg-config
  doctest-dev libmpfr-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin libthrust-dev libeigen3-dev zlib1g-dev
  iproute2
  dataset-fashion-mnist
  pybind11-dev python3-dev python3-numpy python3-pytest python3-torch
  python3-venv
)
# Only cpd-train --plot (scripts/train.sh) runs gnuplot; it brings ~60 packages.
plot_packages=(gnuplot-nox)

force=0
tests_only=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    --tests) tests_only=1 ;;
    *) echo "usage: $0 [--force] [--tests]" >&2; exit 2 ;;
  esac
done
if [[ $tests_only -eq 0 ]]; then
  packages+=("${plot_packages[@]}")
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "deps.sh: not a Debian system; install the equivalents of: ${packages[*]}" >&2
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

if [[ $force -eq 0 && ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

if [[ "$(id -u)" -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "deps.sh: missing Debian packages: ${missing[*]}" >&2
  echo "deps.sh: run as root: apt-get install ${missing[*]}" >&2
  exit 1
fi

echo "deps.sh: installing ${missing[*]:-${packages[*]}}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
# --force-unsafe-io: dpkg skips its fsync calls while unpacking (a fresh CI machine installs
# everything on every run); what it risks is a crash in the middle of the install.
"${sudo[@]}" apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-unsafe-io "${packages[@]}"
