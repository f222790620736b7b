#!/usr/bin/env bash
# Give every container of one molecule scenario (named <scenario>-*) a CPU weight as docker starts
# it, and every other container started meanwhile another (lower) one: lab/molecule-all.sh runs this
# for make test's critical path, in a process group of its own that it ends when it exits. A restarted
# container keeps its shares (docker stores them with it).
#   lab/cpu-shares-watch.sh SCENARIO SHARES [OTHER_SHARES]
set -uo pipefail
scenario=${1:?usage: lab/cpu-shares-watch.sh SCENARIO SHARES [OTHER_SHARES]}
shares=${2:?usage: lab/cpu-shares-watch.sh SCENARIO SHARES [OTHER_SHARES]}
others=${3:-}
docker events --filter type=container --filter event=start --format '{{.Actor.Attributes.name}}' 2>/dev/null |
  while read -r name; do
    if [[ $name == "$scenario"-* ]]; then
      weight=$shares
    elif [[ -n $others ]]; then
      weight=$others
    else
      continue
    fi
    docker update --cpu-shares "$weight" "$name" >/dev/null 2>&1 ||
      echo "cpu-shares-watch: could not give $name $weight CPU shares (it runs with docker's default)" >&2
  done
