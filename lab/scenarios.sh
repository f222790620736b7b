#!/usr/bin/env bash
# The molecule scenarios that `make test` runs: every molecule/<name>/molecule.yml, role scenarios
# first, the whole three-node lab (default) last.
cd "$(dirname "$0")/.." || exit 1
for f in molecule/*/molecule.yml; do
  s=$(basename "$(dirname "$f")")
  [[ "$s" == default ]] || echo "$s"
done
[[ -f molecule/default/molecule.yml ]] && echo default
