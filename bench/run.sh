#!/usr/bin/env bash
# Benchmarks. Prints figures; asserts nothing.
#   lab: first converge of a fresh lab, the idempotent re-run, and a --check --diff run of site.yml
#   parsers: bench/*_bench.py (GPU facts parsing, drift audit at scale)
# BENCH_LAB=0 skips the lab part (it removes and rebuilds the lab).
set -euo pipefail
cd "$(dirname "$0")/.."
LAB_NODES=${LAB_NODES:-3}
export LAB_NODES
out=.lab/bench
inv=inventories/lab

recap() {  # total tasks run, changed, failed across hosts, from an ansible-playbook log
  awk '/PLAY RECAP/ {r=1; next} r && /ok=/ {
         for (i=1;i<=NF;i++) { split($i,a,"="); if (a[1]=="ok") ok+=a[2]; if (a[1]=="changed") ch+=a[2]; if (a[1]=="failed") f+=a[2] } }
       END { printf "%d task results, changed=%d, failed=%d", ok, ch, f }' "$1"
}

timed() {  # label, log, command...
  local label=$1 log=$2; shift 2
  local t0=$EPOCHREALTIME rc=0
  "$@" >"$log" 2>&1 || rc=$?
  local secs
  secs=$(python3 -c "print(f'{$EPOCHREALTIME - $t0:.1f}')")
  printf '%-34s %7s s   %s   (tasks: %d)%s\n' "$label" "$secs" "$(recap "$log")" "$(grep -c '^TASK \[' "$log" || true)" \
    "$( [[ $rc == 0 ]] || echo "   EXIT $rc, see $log")"
}

if [[ "${BENCH_LAB:-1}" == 1 ]]; then
  lab/build-image.sh "${LAB_IMAGE:-debian12}" >/dev/null
  lab/lab.sh down >/dev/null
  mkdir -p "$out"
  echo "== lab: $LAB_NODES nodes, image ${LAB_IMAGE:-debian12}, $(nproc) CPUs"
  timed "first converge (make lab)" "$out/first.log" lab/lab.sh up
  mkdir -p "$out"
  timed "idempotent re-run of site.yml" "$out/rerun.log" ansible-playbook -i "$inv" site.yml
  timed "site.yml --check --diff" "$out/check.log" ansible-playbook -i "$inv" site.yml --check --diff
fi
for script in bench/*_bench.py; do
  [[ -e "$script" ]] || continue
  echo "== $script"
  python "$script"
done
