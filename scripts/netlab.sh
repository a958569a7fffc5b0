#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The network lab (docs/netlab.md): W MPI ranks, each in a network namespace of its
# own whose one NIC (a veth) is plugged into a switch (a Linux bridge in a further
# namespace), every link shaped with tc to a rate and a delay; Open MPI's TCP
# transport carries all traffic between ranks over those links.
#
#   scripts/netlab.sh [--ranks W] [--rate RATE] [--delay DELAY] [--timeout SECONDS]
#                     -- COMMAND [ARGUMENTS]
#   scripts/netlab.sh --cleanup
#
#   --ranks W        MPI ranks, one per namespace, 1 to 64 (default 2)
#   --rate RATE      each NIC's rate in each direction, as tc writes it, 1mbit to
#                    400gbit: 100mbit, 1gbit, 10gbit, 25gbit, 100gbit (default 10gbit)
#   --delay DELAY    one-way delay added on each NIC, as tc writes it, 0 to 10 s:
#                    0, 50us, 1ms (default 0)
#   --timeout S      the command is stopped after S seconds, 1 to 86400 (default 600)
#   --cleanup        only remove what a killed lab left, then exit
#
# Each option at most once; a number is written without leading zeros.
# It creates only namespaces named cpdlab-*, and in them only the private
# addresses 10.213.0.0/24; nothing is added to the host's own namespace, and no
# traffic leaves the lab. One lab at a time: a lab holds the lock /run/cpdlab.lock
# while it runs, and a second one (or --cleanup) refuses with status 75, touching
# nothing. Everything is removed on exit, also after a failure; SIGINT (Ctrl-C),
# SIGTERM and SIGHUP stop the lab at once (the command and every process in the
# lab's namespaces are killed, everything removed) and it exits 128+signal. What a
# lab killed with SIGKILL left (processes, namespaces, temp directory) is removed by
# the next run or by --cleanup. Needs root (network namespaces) and Open MPI's
# mpirun; exits 77 when the lab cannot run here, 2 on a bad option, 75 when another
# lab runs, else with the command's status (124: it ran past --timeout).
set -euo pipefail

prefix=cpdlab
subnet=10.213.0
lock_file=/run/cpdlab.lock
work=""

die() {
  echo "netlab: $*" >&2
  exit 2
}
# The lab cannot run on this machine (not root, no iproute2, no namespaces): exit 77,
# which the smoke test (ctest netlab.smoke) reports as skipped.
unavailable() {
  echo "netlab: $*" >&2
  exit 77
}

# --- the command line: every option at most once, every value checked ------------

declare -A given=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks | --rate | --delay | --timeout)
      [[ -z ${given[$1]+set} ]] || die "$1: given twice ('${given[$1]}', then '${2-}'); give it once"
      [[ $# -ge 2 && $2 != --* ]] || die "$1: needs a value (see --help)"
      given[$1]=$2
      shift 2
      ;;
    --cleanup)
      [[ -z ${given[$1]+set} ]] || die "$1: given twice"
      given[$1]=1
      shift
      ;;
    --) shift; break ;;
    -h | --help) awk 'NR >= 3 && /^#/ { sub(/^# ?/, ""); print; next } NR >= 3 { exit }' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
ranks=${given[--ranks]-2}
rate=${given[--rate]-10gbit}
delay=${given[--delay]-0}
timeout_s=${given[--timeout]-600}
cleanup_only=${given[--cleanup]-0}

# Digits only and no leading zero (bash reads 08 as a bad octal number), and few enough
# digits that the arithmetic cannot overflow.
[[ $ranks =~ ^[1-9][0-9]?$ ]] && ((ranks <= 64)) \
  || die "--ranks: '$ranks' is not a whole number from 1 to 64 (digits, no leading zero)"
[[ $timeout_s =~ ^[1-9][0-9]{0,4}$ ]] && ((timeout_s <= 86400)) \
  || die "--timeout: '$timeout_s' is not a whole number of seconds from 1 to 86400 (digits, no leading zero)"

# tc's rate in bit/s, or nothing when it is not one the lab takes.
rate_bits() {
  [[ $1 =~ ^([1-9][0-9]{0,5})(k|m|g)?bit$ ]] || return 0
  local mult=1
  case ${BASH_REMATCH[2]} in
    k) mult=1000 ;;
    m) mult=1000000 ;;
    g) mult=1000000000 ;;
  esac
  echo $((BASH_REMATCH[1] * mult))
}
# A tc delay in microseconds, or nothing when it is not one the lab takes.
delay_us() {
  [[ $1 == 0 ]] && { echo 0; return 0; }
  [[ $1 =~ ^([1-9][0-9]{0,7})(us|ms)$ ]] || return 0
  local mult=1
  [[ ${BASH_REMATCH[2]} == ms ]] && mult=1000
  echo $((BASH_REMATCH[1] * mult))
}
rate_bps=$(rate_bits "$rate")
[[ -n $rate_bps ]] && ((rate_bps >= 1000000 && rate_bps <= 400000000000)) \
  || die "--rate: '$rate' is not a tc rate from 1mbit to 400gbit, such as 100mbit or 10gbit"
delay_v=$(delay_us "$delay")
[[ -n $delay_v ]] && ((delay_v <= 10000000)) \
  || die "--delay: '$delay' is not a tc delay from 0 to 10 s with its unit, such as 0, 50us or 1ms"
if ((cleanup_only)); then
  for o in --ranks --rate --delay --timeout; do
    [[ -z ${given[$o]+set} ]] || die "--cleanup: takes no other option ($o)"
  done
  [[ $# -eq 0 ]] || die "--cleanup: takes no command ('$1')"
else
  [[ $# -gt 0 ]] || die "no command (usage: scripts/netlab.sh [options] -- COMMAND [ARGUMENTS])"
fi

[[ $(id -u) -eq 0 ]] || unavailable "needs root: network namespaces and tc need CAP_NET_ADMIN (run it as root, e.g. with sudo)"
command -v ip > /dev/null || unavailable "needs 'ip' and 'tc' (apt-get install -y iproute2)"
command -v tc > /dev/null || unavailable "needs 'tc' (apt-get install -y iproute2)"
command -v flock > /dev/null || unavailable "needs 'flock' (apt-get install -y util-linux)"

# --- one lab at a time, and what a killed one left ---------------------------------

# The lock (fd 9) is held while the lab runs and released by the kernel when the script
# ends, however it ends; the file records the running lab (its pid and temp directory),
# and is emptied when a lab ends cleanly. The command does not inherit fd 9, so after a
# SIGKILL of the script the lock is free even while the lab's processes live on.
take_lock() {
  [[ -d /run && ! -L $lock_file ]] || unavailable "cannot keep the lab's lock in $lock_file (no /run, or a link there)"
  exec 9<> "$lock_file" || unavailable "cannot open the lab's lock file $lock_file"
  if ! flock -n 9; then
    local holder which=another
    holder=$(recorded pid)
    ((cleanup_only)) && which=a
    echo "netlab: $which lab is running (pid ${holder:-unknown}, which" \
      "holds $lock_file); it was left untouched: wait until it ends, or stop it (kill -INT ${holder:-PID})" >&2
    exit 75
  fi
}
# A field of the lab recorded in the lock file: pid or work.
recorded() { awk -v k="$1" '$1 == k { print $2 }' "$lock_file" 2> /dev/null || true; }
record() { printf 'pid %s\nwork %s\n' "$$" "$work" > "$lock_file"; }

# Every namespace of the lab: under the lock, every cpdlab-* is this lab's or a killed one's.
lab_namespaces() { ip netns list 2> /dev/null | awk -v p="^${prefix}-" '$1 ~ p { print $1 }'; }
# Every process in the lab's namespaces: mpirun, the daemons, the ranks, and what they
# started (the lab starts nothing outside them but this script).
lab_pids() {
  local ns
  for ns in $(lab_namespaces); do ip netns pids "$ns" 2> /dev/null || true; done
}
# Ends every process in the lab's namespaces: SIGTERM, up to 2 s to end, then SIGKILL.
# Bounded: 2 s + 5 s. Prints how many there were.
kill_lab() {
  local pids t n
  pids=$(lab_pids)
  n=$(wc -w <<< "$pids")
  echo "$n"
  ((n > 0)) || return 0
  kill -TERM $pids 2> /dev/null || true
  for ((t = 0; t < 20; ++t)); do
    [[ -n $(lab_pids) ]] || return 0
    sleep 0.1
  done
  for ((t = 0; t < 50; ++t)); do
    pids=$(lab_pids)
    [[ -n $pids ]] || return 0
    kill -KILL $pids 2> /dev/null || true
    sleep 0.1
  done
  echo "netlab: processes $(lab_pids | xargs) are still in the lab's namespaces after SIGKILL" >&2
}
# Removes a lab: its processes, its namespaces (their veths and the bridge go with them),
# the temp directory $1, and its record in the lock file. Prints how many processes it killed.
remove_lab() {
  local ns n
  n=$(kill_lab)
  for ns in $(lab_namespaces); do ip netns delete "$ns" 2> /dev/null || true; done
  [[ -z $(lab_namespaces) ]] || echo "netlab: could not delete the namespaces $(lab_namespaces | xargs)" >&2
  if [[ $1 =~ ^/tmp/cpdlab\.[A-Za-z0-9]+$ && -d $1 && ! -L $1 ]]; then rm -rf -- "$1"; fi
  : > "$lock_file"
  echo "$n"
}
# What a lab killed with SIGKILL left: its processes, namespaces and temp directory.
remove_killed_lab() {
  local pid old namespaces n
  pid=$(recorded pid)
  old=$(recorded work)
  namespaces=$(lab_namespaces | xargs)
  [[ -n $namespaces || -n $pid ]] || return 0
  n=$(remove_lab "$old")
  echo "netlab: removed what a killed lab${pid:+ (pid $pid)} left: ${n} process(es), the namespaces" \
    "${namespaces:-(none)}, the temp directory ${old:-(none)}" >&2
}

take_lock
remove_killed_lab
if ((cleanup_only)); then
  echo "netlab: cleaned up: no lab is running, and nothing of one is left"
  exit 0
fi
command -v mpirun > /dev/null || unavailable "needs Open MPI's mpirun (apt-get install -y openmpi-bin libopenmpi-dev)"

# A signal stops the lab at once: the command and every process in the namespaces are
# killed, everything is removed, and the script ends by the same signal (status 128+n).
# Bash runs a trap only between commands: the command runs in the background, and the
# script waits for it with `wait`, which a signal interrupts.
on_signal() {
  set +e
  trap '' INT TERM HUP PIPE
  local n
  n=$(remove_lab "$work")
  echo "netlab: stopped by SIG$1: killed the command and the lab's ${n} process(es), removed the lab" >&2
  trap - EXIT "$1"
  kill -s "$1" $$
  exit $((128 + $2))
}
on_exit() {
  local status=$? n
  trap '' INT TERM HUP PIPE
  n=$(remove_lab "$work")
  ((n == 0)) || echo "netlab: killed ${n} process(es) left in the lab's namespaces after the command ended" >&2
  exit "$status"
}
trap on_exit EXIT
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP
work=$(mktemp -d /tmp/cpdlab.XXXXXX)
record

# Shapes the egress of interface $2 in namespace $1: a token bucket at the rate (burst:
# 1 ms of the rate, at least 64 KiB so that one GSO packet fits; queue: 50 ms), then
# the delay. Both ends of a link are shaped, so each NIC has the rate in both directions.
# A kernel without the qdisc (sch_tbf, sch_netem) cannot run the lab: 77.
shape() {
  local ns=$1 dev=$2 burst
  burst=$((rate_bps / 8 / 1000))
  ((burst < 65536)) && burst=65536
  if [[ $delay == 0 ]]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms \
      || unavailable "--rate: tc could not add the tbf qdisc that shapes the links (is sch_tbf in this kernel?)"
  else
    ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: tbf rate "$rate" burst "$burst" latency 50ms \
      || unavailable "--rate: tc could not add the tbf qdisc that shapes the links (is sch_tbf in this kernel?)"
    ip netns exec "$ns" tc qdisc add dev "$dev" parent 1:1 handle 10: netem delay "$delay" \
      || unavailable "--delay: tc could not add the netem qdisc that delays the links (is sch_netem in this kernel? modprobe sch_netem)"
  fi
}

sw="${prefix}-sw"
ip netns add "$sw" 2> /dev/null || unavailable "cannot create a network namespace here (ip netns add failed)"
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
for ((r = 0; r < ranks; ++r)); do
  ns="${prefix}-${r}"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$sw" link add "p$r" type veth peer name eth0 netns "$ns"
  ip -n "$sw" link set "p$r" master br0 up
  ip -n "$ns" addr add "${subnet}.$((r + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  shape "$ns" eth0
  shape "$sw" "p$r"
done
# Wait until every link has its carrier on both ends: the kernel raises a new veth's
# carrier asynchronously (up to a second later), and a daemon whose first connection
# to mpirun goes out before that could fail to connect back (seen: about 1 run in 10).
# Bounded: 50 checks 0.1 s apart per link.
link_up() { ip -n "$1" -o link show "$2" 2> /dev/null | grep -q 'LOWER_UP.* state UP'; }
for ((r = 0; r < ranks; ++r)); do
  for ((t = 0; t < 50; ++t)); do
    link_up "$sw" "p$r" && link_up "${prefix}-$r" eth0 && break
    sleep 0.1
  done
  link_up "$sw" "p$r" && link_up "${prefix}-$r" eth0 || { echo "netlab: the link of rank $r has no carrier after 5 s" >&2; exit 1; }
done
echo "netlab: ${ranks} rank(s) in namespaces ${prefix}-0..$((ranks - 1)), ${subnet}.1-${ranks}/24 on a bridge" \
  "(namespace ${sw}), each NIC ${rate} per direction, delay ${delay}"

# Everything MPI runs inside the lab: mpirun in the switch's namespace (an address on
# the bridge, 10.213.0.254), and on each rank's "host" (its address) an Open MPI daemon
# started by a launch agent that enters the rank's namespace where ssh would log in.
# Daemons and ranks talk over the lab's links only: TCP for the out-of-band channel and
# for the byte transfer layer (no shared memory between ranks, no other interface).
ip -n "$sw" addr add "${subnet}.254/24" dev br0
for ((r = 0; r < ranks; ++r)); do echo "${subnet}.$((r + 1)) slots=1"; done > "$work/hosts"
# Each "host" gets a session directory of its own: the namespaces share this machine's
# hostname and /tmp, so Open MPI's daemons would otherwise create the same session
# directories and topology files at once (seen: mkdir races, and daemons crashing in
# hwloc_shmem_topology_write, about 1 launch in 6). mpirun's own is in the temp directory
# too (nothing is left in /tmp when mpirun is killed), set by TMPDIR: an MCA parameter
# would be passed on to the daemons. The agent gives the daemons the caller's TMPDIR back.
tmpdir_env="-u TMPDIR"
[[ -z ${TMPDIR+set} ]] || tmpdir_env="TMPDIR=$(printf '%q' "$TMPDIR")"
{
  echo '#!/usr/bin/env bash'
  echo '# Open MPI launch agent: $1 is a rank address, the rest the command ssh would run there.'
  echo 'host=$1'
  echo 'shift'
  echo 'n=$((${host##*.} - 1))'
  echo "mkdir -p \"${work}/session-\$n\""
  echo "exec ip netns exec \"${prefix}-\$n\" env ${tmpdir_env} OMPI_MCA_orte_tmpdir_base=\"${work}/session-\$n\" sh -c \"\$*\""
} > "$work/agent"
chmod +x "$work/agent"
mkdir "$work/session-mpirun"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
# --leave-session-attached: the daemons stay children of their launch agents, so a
# daemon that fails ends the run with an error instead of leaving mpirun waiting.
# --bind-to none: each daemon believes its "host" is a machine of its own and binds its
# rank to core 0, so every rank would share one core; a rank that busy-polls then holds it
# for a whole scheduler tick, which capped MPI in the lab near 1 Gbit/s with a 4 ms
# latency floor whatever the link (measured: 3992 us and 1.04 Gbit/s bound, 13 us and
# 5.1 Gbit/s unbound, 10gbit links, 2 ranks).
# timeout runs inside the switch's namespace too, so that every process the command
# starts is in a namespace of the lab. The command keeps the standard input.
ip netns exec "$sw" env TMPDIR="$work/session-mpirun" \
  timeout --kill-after=10 "$timeout_s" mpirun -n "$ranks" --hostfile "$work/hosts" --map-by node \
  --bind-to none --leave-session-attached \
  --mca plm_rsh_agent "$work/agent" --mca plm_rsh_no_tree_spawn 1 \
  --mca oob_tcp_if_include "${subnet}.0/24" --mca btl tcp,self --mca btl_tcp_if_include "${subnet}.0/24" \
  "$@" <&0 9>&- &
wait $! || status=$?
if ((status == 124)); then
  echo "netlab: the command ran past --timeout ${timeout_s} s and was stopped" >&2
fi
exit "$status"
