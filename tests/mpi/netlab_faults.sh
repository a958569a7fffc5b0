#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The network lab's faults (scripts/netlab.sh, docs/netlab.md):
#
#   netlab_faults.sh options NETLAB
#     every bad option (no value, given twice, leading zero, not a number, out of
#     range) is one line `netlab: --OPTION: ...` and status 2; needs no root.
set -uo pipefail

mode=${1:-}
netlab=${2:-}
[[ $mode == options ]] && [[ -x $netlab ]] \
  || { echo "usage: netlab_faults.sh options NETLAB" >&2; exit 2; }
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# --- options -------------------------------------------------------------------------

# $1: the option the message must name; the rest: the arguments.
bad_option() {
  local option=$1 out rc lines
  shift
  out=$(timeout 20 "$netlab" "$@" 2>&1 > /dev/null)
  rc=$?
  lines=$(printf '%s\n' "$out" | grep -c .)
  if [[ $rc -ne 2 || $lines -ne 1 || $out != "netlab: $option: "* ]]; then
    fail "netlab.sh $*: status $rc (want 2), stderr: ${out:-(nothing)} (want one line 'netlab: $option: ...')"
  else
    echo "ok: netlab.sh $* -> $out"
  fi
}

if [[ $mode == options ]]; then
  for option in --ranks --rate --delay --timeout; do
    bad_option "$option" "$option"
    bad_option "$option" "$option" --cleanup
  done
  bad_option --ranks --ranks 08 -- true
  bad_option --ranks --ranks 2 --ranks 3 -- true
  bad_option --ranks --ranks x -- true
  bad_option --ranks --ranks 0 -- true
  bad_option --ranks --ranks 65 -- true
  bad_option --ranks --ranks 99999999999999999999 -- true
  bad_option --rate --rate 1gbit --rate 10gbit -- true
  bad_option --rate --rate fast -- true
  bad_option --rate --rate 0bit -- true
  bad_option --rate --rate 010gbit -- true
  bad_option --rate --rate 999999999gbit -- true
  bad_option --delay --delay 1ms --delay 2ms -- true
  bad_option --delay --delay 08ms -- true
  bad_option --delay --delay 50 -- true
  bad_option --delay --delay 11000ms -- true
  bad_option --delay --delay soon -- true
  bad_option --timeout --timeout 60 --timeout 120 -- true
  bad_option --timeout --timeout 08 -- true
  bad_option --timeout --timeout 0 -- true
  bad_option --timeout --timeout 86401 -- true
  bad_option --timeout --timeout 99999999999999999999 -- true
  bad_option --timeout --timeout 1.5 -- true
  bad_option --cleanup --cleanup --cleanup
  bad_option --cleanup --cleanup -- true
  bad_option --cleanup --cleanup --ranks 2
  echo "netlab_faults options: $failures failure(s)"
  ((failures == 0))
  exit
fi

