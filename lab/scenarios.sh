#!/usr/bin/env bash
# The molecule scenarios that `make test` runs: every molecule/<name>/molecule.yml. lab/molecule-all.sh
# runs them two at a time, so the longest start first (the whole three-node lab, Slurm, the driver)
# and the short role scenarios fill in beside them; a scenario not named here runs after these.
cd "$(dirname "$0")/.." || exit 1
order=(default nvidia_driver monitoring container_runtime rdma health_check)
for s in "${order[@]}"; do
  [[ -f molecule/$s/molecule.yml ]] && echo "$s"
done
for f in molecule/*/molecule.yml; do
  s=$(basename "$(dirname "$f")")
  [[ " ${order[*]} " == *" $s "* ]] || echo "$s"
done
