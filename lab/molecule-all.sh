#!/usr/bin/env bash
# Run `molecule test` for each scenario named as an argument, MOLECULE_JOBS at a time (default 2).
# Every scenario has its own container names and subnet (molecule/*/molecule.yml), so two can run
# side by side; much of a scenario's time is spent waiting on package installs, daemons and SSH, so
# two at once finish sooner than one after the other, even on two cores.
# Each scenario's output goes to its own log, printed whole when the scenario ends, so the CI log
# never interleaves two scenarios. After the first failure no further scenario starts; the running
# ones finish (a scenario stopped half-way would leave its containers behind); the exit status is
# non-zero and the failed scenarios are named last.
# The name @static stands for `make static` (yamllint, ansible-lint, sanity, units, promtool): make
# test runs it as one job beside the longest scenario, so the static checks do not delay the lab.
# The first scenario named is the critical path (make test names the longest first: the whole lab and
# its cluster-wide checks, which run on after the other jobs have ended). It gets the CPU first: every other job
# runs under `nice -n MOLECULE_NICE` (default 10), and the first scenario's containers (molecule
# names them <scenario>-*) get MOLECULE_CPU_SHARES (default 4096, docker's default is 1024) as they
# start, and every other container MOLECULE_BG_CPU_SHARES (default 64), so its nodes' work goes ahead of
# the other scenarios' nodes (with cgroup v1 all containers share the weight of the docker group, which
# competes with the host's processes as one: inside it, only these weights decide). The other jobs use
# the CPU the critical path leaves idle (it waits on daemons, SSH and apt much of the time).
#   MOLECULE_JOBS=1 lab/molecule-all.sh default health_check
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

jobs=${MOLECULE_JOBS:-2}
if ! [[ $jobs =~ ^[1-9][0-9]?$ ]]; then
  echo "molecule-all: MOLECULE_JOBS=$jobs is not accepted: a whole number from 1 to 99" >&2
  exit 2
fi
(($# > 0)) || { echo "molecule-all: usage: lab/molecule-all.sh SCENARIO [SCENARIO...]" >&2; exit 2; }
nice_level=${MOLECULE_NICE:-10}
cpu_shares=${MOLECULE_CPU_SHARES:-4096}
bg_cpu_shares=${MOLECULE_BG_CPU_SHARES:-64}
if ! [[ $nice_level =~ ^[0-9]{1,2}$ ]] || ((nice_level > 19)); then
  echo "molecule-all: MOLECULE_NICE=$nice_level is not accepted: a whole number from 0 to 19" >&2
  exit 2
fi
if ! [[ $cpu_shares =~ ^[0-9]{1,6}$ ]] || ((cpu_shares < 2 || cpu_shares > 262144)); then
  echo "molecule-all: MOLECULE_CPU_SHARES=$cpu_shares is not accepted: a whole number from 2 to 262144" >&2
  exit 2
fi
if ! [[ $bg_cpu_shares =~ ^[0-9]{1,6}$ ]] || ((bg_cpu_shares < 2 || bg_cpu_shares > 262144)); then
  echo "molecule-all: MOLECULE_BG_CPU_SHARES=$bg_cpu_shares is not accepted: a whole number from 2 to 262144" >&2
  exit 2
fi
critical=$1

logdir=$(mktemp -d "${TMPDIR:-/tmp}/gpucluster-molecule.XXXXXX")
watcher=
cleanup() {
  # The watcher runs in a process group of its own (setsid): end docker events with it.
  [[ -n $watcher ]] && kill -- -"$watcher" 2>/dev/null
  rm -rf "$logdir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Give the critical scenario's containers their CPU shares as docker starts them (a restarted node
# keeps them: docker stores them with the container). Best effort: a docker that cannot set shares
# leaves the default, and the run is only slower.
if [[ $critical != @static ]] && command -v docker >/dev/null && command -v setsid >/dev/null; then
  setsid lab/cpu-shares-watch.sh "$critical" "$cpu_shares" "$bg_cpu_shares" </dev/null &
  watcher=$!
fi
declare -A scenario_of=()
failed=()

collect() {
  local pid rc s
  while :; do
    wait -n -p pid
    rc=$?
    [[ -n ${scenario_of[$pid]+set} ]] && break
    # The CPU-shares watcher ended (docker events stopped): the jobs go on without it.
    [[ $pid == "$watcher" ]] && watcher=
  done
  s=${scenario_of[$pid]}
  unset "scenario_of[$pid]"
  if [[ $s == @static ]]; then echo "=== make static: output follows"; else echo "=== molecule test -s $s: output follows"; fi
  cat "$logdir/$s.log"
  ((rc == 0)) || failed+=("$s")
}

for s in "$@"; do
  while ((${#scenario_of[@]} >= jobs)); do collect; done
  ((${#failed[@]} == 0)) || break
  niceness=()
  [[ $s == "$critical" ]] || niceness=(nice -n "$nice_level")
  if [[ $s == @static ]]; then
    echo "=== $(date -u +%H:%M:%S) make static started${niceness:+ (nice $nice_level)} (log printed when it ends)"
    "${niceness[@]}" make --no-print-directory static >"$logdir/$s.log" 2>&1 &
  else
    echo "=== $(date -u +%H:%M:%S) molecule test -s $s started${niceness:+ (nice $nice_level)} (log printed when it ends)"
    "${niceness[@]}" lab/stage.sh "molecule $s" molecule test -s "$s" >"$logdir/$s.log" 2>&1 &
  fi
  scenario_of[$!]=$s
done
while ((${#scenario_of[@]} > 0)); do collect; done

if ((${#failed[@]} > 0)); then
  echo "molecule-all: FAILED: ${failed[*]} (their output is above; scenarios after the first failure were not started)" >&2
  exit 1
fi
