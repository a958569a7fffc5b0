#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The network lab's faults (scripts/netlab.sh, docs/netlab.md), each run for real:
#
#   netlab_faults.sh options NETLAB
#     every bad option (no value, given twice, leading zero, not a number, out of
#     range) is one line `netlab: --OPTION: ...` and status 2; needs no root.
#   netlab_faults.sh lab NETLAB PINGPONG
#     SIGINT to the process group (Ctrl-C) during the setup and during a long command,
#     SIGHUP and SIGTERM during it, SIGINT when the output's reader dies too: the lab
#     ends within a few seconds, with 128+signal, and leaves nothing; SIGKILL of the
#     script, then --cleanup or a next run: the killed lab's processes, namespaces and
#     temp directory are gone; a second lab and --cleanup while one runs: refused (75),
#     the first one untouched and its ping-pong finishes; --timeout; --delay without
#     netem. Needs root: 77 (skipped) otherwise, or when the lab cannot run here, or
#     while another lab runs.
#
# "Nothing left" means: no cpdlab-* namespace, no process in a namespace that one of the
# labs had, no process running a program of this test, no new /tmp/cpdlab.* directory.
# The test cleans up after itself even when the script under test does not: its EXIT
# trap kills what its labs started and removes what appeared while it ran. Every wait
# is bounded.
set -uo pipefail

mode=${1:-}
netlab=${2:-}
pingpong=${3:-}
[[ $mode == options || $mode == lab ]] && [[ -x $netlab ]] \
  || { echo "usage: netlab_faults.sh options|lab NETLAB [PINGPONG]" >&2; exit 2; }
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

# --- the lab: setup, bookkeeping, cleanup ------------------------------------------------

[[ $(id -u) -eq 0 ]] || { echo "netlab_faults: needs root (network namespaces); skipped"; exit 77; }
command -v ip > /dev/null || { echo "netlab_faults: needs iproute2; skipped"; exit 77; }
[[ -x $pingpong ]] || { echo "usage: netlab_faults.sh lab NETLAB PINGPONG" >&2; exit 2; }
if [[ -e /run/cpdlab.lock ]] && ! flock -n /run/cpdlab.lock true; then
  echo "netlab_faults: another lab is running (it holds /run/cpdlab.lock); skipped"
  exit 77
fi

tmp=$(mktemp -d /tmp/netlab-faults.XXXXXX)
cp "$(command -v sleep)" "$tmp/labsleep"  # the lab's long command: a program of this test
dirs_before=$(ls -d /tmp/cpdlab.* 2> /dev/null | sort)
namespaces_before=$(ip netns list | awk '$1 ~ /^cpdlab-/ { print $1 }' | sort)
lab_inodes=""  # the network namespaces (inodes) that the labs had
started=""     # the labs started (their pids, each its process group)
set -m         # each lab in a process group of its own, SIGINT not ignored

cpdlab_namespaces() { ip netns list | awk '$1 ~ /^cpdlab-/ { print $1 }' | sort; }
new_dirs() { comm -13 <(echo "$dirs_before") <(ls -d /tmp/cpdlab.* 2> /dev/null | sort) | grep . ; }
# Remembers the namespaces of the running lab, to find its processes after they are deleted.
note_namespaces() {
  local ns
  for ns in $(cpdlab_namespaces); do lab_inodes+=" $(stat -L -c %i "/run/netns/$ns" 2> /dev/null)"; done
}
# Live processes in a namespace a lab had, or running a program of this test (a zombie
# has neither a namespace nor a program).
leftovers() {
  {
    find /proc -mindepth 2 -maxdepth 2 -path '/proc/[0-9]*/exe' -lname "$tmp/*" -printf '%h\n' 2> /dev/null
    stat -L -c '%i %n' /proc/[0-9]*/ns/net 2> /dev/null \
      | awk -v inodes="$lab_inodes" 'BEGIN { n = split(inodes, a, " "); for (i = 1; i <= n; ++i) lab[a[i]] = 1 }
                                     $1 in lab { print $2 }'
  } | sed 's|^/proc/||; s|/.*||' | sort -un
}
# Kills what the labs started and removes what appeared while the test ran: the test
# leaves nothing, also when the script under test fails to.
remove_leftovers() {
  local pid ns t
  for pid in $started; do kill -KILL -- "-$pid" 2> /dev/null; done
  for ((t = 0; t < 50; ++t)); do
    pid=$(leftovers)
    [[ -n $pid ]] || break
    kill -KILL $pid 2> /dev/null
    sleep 0.1
  done
  for ns in $(comm -13 <(echo "$namespaces_before") <(cpdlab_namespaces)); do
    # shellcheck disable=SC2046 # the pids, split
    kill -KILL $(ip netns pids "$ns") 2> /dev/null
    ip netns delete "$ns"
  done
  new_dirs | xargs -r rm -rf --
}
# A watchdog ends the test (SIGTERM, so that the EXIT trap cleans up) well before ctest's
# TIMEOUT would kill it with no chance to.
(sleep 420 && echo "FAIL: the test ran for 420 s; stopping it" && kill -TERM $$) &
watchdog=$!
disown "$watchdog"
trap 'trap "" INT TERM HUP; kill -- "-$watchdog" 2> /dev/null; remove_leftovers; rm -rf -- "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# Starts a lab in the background: $1 the file for its output, the rest netlab.sh's
# arguments. Sets lab_pid. The signals a terminal sends are not ignored in it, even where
# this test was started with them ignored (a shell script cannot trap those).
default_signals=()
env --default-signal=INT true 2> /dev/null && default_signals=(env "--default-signal=INT,TERM,HUP")
start_lab() {
  local out=$1
  shift
  "${default_signals[@]}" "$netlab" "$@" > "$out" 2>&1 &
  lab_pid=$!
  started+=" $lab_pid"
}
# Waits (at most 20 s) until $1 processes of program $2 run; notes the lab's namespaces.
wait_running() {
  local t n=0
  for ((t = 0; t < 200; ++t)); do
    n=$(pgrep -fc "^$2( |$)")
    ((n >= $1)) && break
    sleep 0.1
  done
  note_namespaces
  ((n >= $1)) || { fail "$3: after 20 s, $n of $1 '$2' process(es) run in the lab"; return 1; }
}
# Waits (at most $2 s) for the lab $1 to end; sets lab_status ('running' if it did not)
# and lab_seconds.
wait_lab() {
  local t start=$SECONDS
  for ((t = 0; t < $2 * 10; ++t)); do
    kill -0 "$1" 2> /dev/null || break
    sleep 0.1
  done
  lab_seconds=$((SECONDS - start))
  lab_status=running
  kill -0 "$1" 2> /dev/null && return 0
  wait "$1"
  lab_status=$?
}
# Checks that nothing of the labs is left after the case $1; removes what is.
check_clean() {
  local what="" p
  [[ -z $(cpdlab_namespaces) ]] || what+=" namespaces $(cpdlab_namespaces | xargs);"
  p=$(leftovers | xargs)
  [[ -z $p ]] || what+=" processes $(ps -o pid=,args= -p "${p// /,}" | cut -c1-80 | xargs);"
  [[ -z $(new_dirs) ]] || what+=" directories $(new_dirs | xargs);"
  if [[ -n $what ]]; then
    fail "$1: left$what"
    remove_leftovers
  else
    echo "ok: $1: nothing left"
  fi
}
# Shows a lab's output, indented.
show() { sed 's/^/    | /' "$1"; }

# --- the cases -------------------------------------------------------------------------

# Can the lab run here at all?
timeout 60 "$netlab" --ranks 1 --timeout 30 -- true > "$tmp/probe.txt" 2>&1
rc=$?
if ((rc == 77)); then
  show "$tmp/probe.txt"
  echo "netlab_faults: the lab cannot run here; skipped"
  exit 77
fi
((rc == 0)) || { show "$tmp/probe.txt"; fail "a lab running 'true' ended with $rc"; }
check_clean "a lab running 'true'"

# $1 the signal, $2 'group' (to the process group, as Ctrl-C) or 'script', $3 'setup'
# (sent 0.3 s after the start) or 'command' (sent while the command runs).
signal_case() {
  local sig=$1 to=$2 when=$3 want name="SIG$1 to the $2 during the $3"
  want=$((128 + $(kill -l "$sig")))
  start_lab "$tmp/lab.txt" --ranks 2 --timeout 300 -- "$tmp/labsleep" 600
  if [[ $when == setup ]]; then
    sleep 0.3
  else
    wait_running 2 "$tmp/labsleep" "$name" || true
  fi
  if [[ $to == group ]]; then kill -s "$sig" -- "-$lab_pid"; else kill -s "$sig" "$lab_pid"; fi
  wait_lab "$lab_pid" 15
  if [[ $lab_status != "$want" || $lab_seconds -gt 8 ]]; then
    show "$tmp/lab.txt"
    fail "$name: status $lab_status after $lab_seconds s (want $want within 8 s)"
  else
    echo "ok: $name: status $lab_status after $lab_seconds s"
  fi
  check_clean "$name"
}
signal_case INT group setup
signal_case INT group command
signal_case HUP script command
signal_case TERM script command

# Ctrl-C on `netlab.sh ... 2>&1 | tee log`: the reader of the script's output dies with
# it, and the lab's last words must not end it early (SIGPIPE) or change its status.
piped_case() {
  local name="SIGINT to the group and the reader of the output" reader
  mkfifo "$tmp/pipe"
  cat "$tmp/pipe" > "$tmp/piped.txt" &
  reader=$!
  start_lab "$tmp/pipe" --ranks 2 --timeout 300 -- "$tmp/labsleep" 600
  wait_running 2 "$tmp/labsleep" "$name" || true
  kill -INT -- "-$lab_pid"
  kill -INT "$reader"
  wait_lab "$lab_pid" 15
  if [[ $lab_status != 130 || $lab_seconds -gt 8 ]]; then
    show "$tmp/piped.txt"
    fail "$name: status $lab_status after $lab_seconds s (want 130 within 8 s)"
  else
    echo "ok: $name: status $lab_status after $lab_seconds s"
  fi
  wait "$reader"
  rm -f "$tmp/pipe"
  check_clean "$name"
}
piped_case

# SIGKILL of the script (no trap can catch it): its processes live on in the lab's
# namespaces until $1 (--cleanup, or a next lab) removes them, its namespaces and its temp
# directory.
killed_case() {
  local name="SIGKILL of the script, then $*" n
  start_lab "$tmp/lab.txt" --ranks 2 --timeout 300 -- "$tmp/labsleep" 600
  wait_running 2 "$tmp/labsleep" "$name" || true
  kill -KILL "$lab_pid"
  wait_lab "$lab_pid" 10
  n=$(pgrep -fc "^$tmp/labsleep( |$)")
  ((n == 2)) || fail "$name: $n of the killed lab's 2 ranks live on (the case tests nothing)"
  timeout 60 "$netlab" "$@" > "$tmp/next.txt" 2>&1
  rc=$?
  show "$tmp/next.txt"
  ((rc == 0)) || fail "$name: status $rc (want 0)"
  check_clean "$name"
}
killed_case --cleanup
killed_case --ranks 2 --timeout 60 -- true

# A second lab, and --cleanup, while one runs: refused with 75, touching nothing; the
# first lab's ping-pong finishes.
concurrent_case() {
  local name="a second lab while one runs" before after rc
  start_lab "$tmp/first.txt" --ranks 2 --rate 1gbit --timeout 120 -- "$pingpong" --seconds 2
  wait_running 2 "$pingpong" "$name" || true
  before=$(for ns in $(cpdlab_namespaces); do echo "$ns $(stat -L -c %i "/run/netns/$ns")"; done)
  for second in "--ranks 2 --timeout 60 -- true" "--cleanup"; do
    # shellcheck disable=SC2086 # the arguments, split
    timeout 30 "$netlab" $second > "$tmp/second.txt" 2>&1
    rc=$?
    after=$(for ns in $(cpdlab_namespaces); do echo "$ns $(stat -L -c %i "/run/netns/$ns")"; done)
    if ((rc != 75)) || ! grep -q "^netlab: a.* lab is running" "$tmp/second.txt" || [[ $after != "$before" ]]; then
      show "$tmp/second.txt"
      fail "$name: netlab.sh $second: status $rc (want 75, 'netlab: ... lab is running'), the first" \
        "lab's namespaces before: $(echo $before) after: $(echo $after)"
    else
      echo "ok: $name: netlab.sh $second refused: $(head -n 1 "$tmp/second.txt")"
    fi
  done
  wait_lab "$lab_pid" 60
  if [[ $lab_status != 0 ]] || ! grep -q "netlab_pingpong: ranks=2" "$tmp/first.txt"; then
    show "$tmp/first.txt"
    fail "$name: the first lab's ping-pong: status $lab_status (want 0 and its results)"
  else
    echo "ok: $name: the first lab's ping-pong finished: $(grep -o 'bandwidth_gbit=[0-9.]*' "$tmp/first.txt")"
  fi
  check_clean "$name"
}
concurrent_case

# --timeout stops the command (status 124) and the lab leaves nothing.
start_lab "$tmp/lab.txt" --ranks 2 --timeout 5 -- "$tmp/labsleep" 600
wait_running 2 "$tmp/labsleep" "--timeout 5" || true
wait_lab "$lab_pid" 30
if [[ $lab_status != 124 ]] || ! grep -q "ran past --timeout 5 s" "$tmp/lab.txt"; then
  show "$tmp/lab.txt"
  fail "--timeout 5: status $lab_status (want 124 and the message)"
else
  echo "ok: --timeout 5: status 124 after $lab_seconds s"
fi
check_clean "--timeout 5"

# --delay needs the kernel's netem qdisc: without it the lab cannot run here (77, and a
# message that says so), never a bare tc error with the status of a bad option.
timeout 60 "$netlab" --ranks 1 --delay 1ms --timeout 30 -- true > "$tmp/lab.txt" 2>&1
rc=$?
if ((rc == 0)) || { ((rc == 77)) && grep -q "^netlab: --delay: .*netem" "$tmp/lab.txt"; }; then
  echo "ok: --delay 1ms: status $rc"
else
  show "$tmp/lab.txt"
  fail "--delay 1ms: status $rc (want 0, or 77 and 'netlab: --delay: ... netem')"
fi
check_clean "--delay 1ms"

echo "netlab_faults lab: $failures failure(s)"
((failures == 0))
