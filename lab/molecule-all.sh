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
#   MOLECULE_JOBS=1 lab/molecule-all.sh default health_check
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

jobs=${MOLECULE_JOBS:-2}
if ! [[ $jobs =~ ^[1-9][0-9]?$ ]]; then
  echo "molecule-all: MOLECULE_JOBS=$jobs is not accepted: a whole number from 1 to 99" >&2
  exit 2
fi
(($# > 0)) || { echo "molecule-all: usage: lab/molecule-all.sh SCENARIO [SCENARIO...]" >&2; exit 2; }

logdir=$(mktemp -d "${TMPDIR:-/tmp}/gpucluster-molecule.XXXXXX")
trap 'rm -rf "$logdir"' EXIT
declare -A scenario_of=()
failed=()

collect() {
  local pid rc s
  wait -n -p pid
  rc=$?
  s=${scenario_of[$pid]}
  unset "scenario_of[$pid]"
  if [[ $s == @static ]]; then echo "=== make static: output follows"; else echo "=== molecule test -s $s: output follows"; fi
  cat "$logdir/$s.log"
  ((rc == 0)) || failed+=("$s")
}

for s in "$@"; do
  while ((${#scenario_of[@]} >= jobs)); do collect; done
  ((${#failed[@]} == 0)) || break
  if [[ $s == @static ]]; then
    echo "=== $(date -u +%H:%M:%S) make static started (log printed when it ends)"
    make --no-print-directory static >"$logdir/$s.log" 2>&1 &
  else
    echo "=== $(date -u +%H:%M:%S) molecule test -s $s started (log printed when it ends)"
    lab/stage.sh "molecule $s" molecule test -s "$s" >"$logdir/$s.log" 2>&1 &
  fi
  scenario_of[$!]=$s
done
while ((${#scenario_of[@]} > 0)); do collect; done

if ((${#failed[@]} > 0)); then
  echo "molecule-all: FAILED: ${failed[*]} (their output is above; scenarios after the first failure were not started)" >&2
  exit 1
fi
