#!/usr/bin/env bash
# The molecule scenarios that `make test` runs: every molecule/<name>/molecule.yml. lab/molecule-all.sh
# runs them two at a time, so the longest start first (the whole three-node lab, Slurm, the driver)
# and the short role scenarios fill in beside them; a scenario not named here runs after these.
# Scenarios named in `long` run only with GPUCLUSTER_LAB_LONG=1 (or by name: make molecule
# SCENARIOS=NAME): their lab proof passes, but make test would take more than its hour with them
# (docs/DEVELOPING.md, "CI time"). None is now.
cd "$(dirname "$0")/.." || exit 1
order=(default nvidia_driver monitoring container_runtime rdma storage health_check)
long=()
for s in "${order[@]}"; do
  [[ -f molecule/$s/molecule.yml ]] && echo "$s"
done
for f in molecule/*/molecule.yml; do
  s=$(basename "$(dirname "$f")")
  [[ " ${order[*]} " == *" $s "* ]] && continue
  [[ " ${long[*]} " == *" $s "* && ${GPUCLUSTER_LAB_LONG:-0} != 1 ]] && continue
  echo "$s"
done
