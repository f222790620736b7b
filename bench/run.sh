#!/usr/bin/env bash
# Benchmarks. Prints figures; asserts nothing (the goals are benchmarks, not timed tests).
#   lab: for each lab size in BENCH_SIZES (default "3 6"): remove the lab, then time the first
#        converge of a fresh lab (lab/lab.sh up: containers, bootstrap, GPU stand-in, site.yml),
#        the idempotent re-run of site.yml with the fast path (docs/performance.md), the same re-run
#        with gpucluster_fast_path=false (every role's full path) and a --check --diff run, each with
#        its ratio to the first converge, the CPU seconds the controller and the nodes spent on it, and
#        per node: controller CPU, task results and module runs on the node, and the workers' CPU by action
#        and the costliest tasks (bench/callback_plugins);
#        then the 15 most expensive tasks of the full-path re-run
#        (ansible.posix.profile_tasks: a task's time summed over all nodes' results).
#   parsers: bench/*_bench.py (GPU facts parsing, drift audit at scale, the checkpoint scan and backup, ...)
# BENCH_LAB=0 skips the lab part (it removes and rebuilds the lab). Logs: .bench/<nodes>-nodes/.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_SIZES=${BENCH_SIZES:-3 6}
TOP=15
inv=inventories/lab
out=.bench
# The lab's vault password (the roles' generated secrets are encrypted in the lab inventory's store), as lab/lab.sh sets it.
export ANSIBLE_VAULT_PASSWORD_FILE=$PWD/lab/vault-password.sh

die() { echo "bench: $*" >&2; exit 1; }

recap() {  # task results, changed, failed, unreachable across hosts, from an ansible-playbook log
  awk '/PLAY RECAP/ {r=1; next} r && /ok=/ {
         for (i=1;i<=NF;i++) { split($i,a,"="); if (a[1]=="ok") ok+=a[2]; if (a[1]=="changed") ch+=a[2];
                               if (a[1]=="failed") f+=a[2]; if (a[1]=="unreachable") u+=a[2] } }
       END { printf "%d task results, changed=%d, failed=%d, unreachable=%d", ok, ch, f, u }' "$1"
}

# CPU seconds the lab's containers have used so far (cgroup v1 cpuacct or v2 cpu.stat), summed.
nodes_cpu() {
  local id total=0 ns
  for id in $(docker ps -q --no-trunc --filter "label=gpucluster.lab.node"); do
    if [[ -r /sys/fs/cgroup/cpuacct/docker/$id/cpuacct.usage ]]; then
      ns=$(cat "/sys/fs/cgroup/cpuacct/docker/$id/cpuacct.usage")
    elif [[ -r /sys/fs/cgroup/system.slice/docker-$id.scope/cpu.stat ]]; then
      ns=$(( $(awk '/^usage_usec/ { print $2 }' "/sys/fs/cgroup/system.slice/docker-$id.scope/cpu.stat") * 1000 ))
    else
      echo -1; return
    fi
    total=$(( total + ns ))
  done
  echo "$total"
}

# Runs a command and writes the CPU seconds (user + system) it and its children used to $CPU_FILE.
with_cpu() {
  python3 -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write("%.1f" % (r.ru_utime + r.ru_stime))
sys.exit(rc)' "$CPU_FILE" "$@"
}

declare -A SECS CPUS
failed=()
timed() {  # key, label, log, command...; returns the command's exit status
  local key=$1 label=$2 log=$3; shift 3
  local t0=$EPOCHREALTIME rc=0 ratio n0 n1 cpu
  CPU_FILE=$log.cpu
  n0=$(nodes_cpu)
  with_cpu "$@" >"$log" 2>&1 || rc=$?
  n1=$(nodes_cpu)
  SECS[$key]=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  ratio=$(awk -v s="${SECS[$key]}" -v f="${SECS[${key%%:*}:first]:-0}" 'BEGIN { if (f > 0) printf "%.2f", s / f; else printf "-" }')
  printf '  %-32s %7s s  %5s x first   %s   (%d tasks)%s\n' "$label" "${SECS[$key]}" "$ratio" "$(recap "$log")" \
    "$(grep -c '^TASK \[' "$log" || true)" "$( [[ $rc == 0 ]] || echo "   EXIT $rc, see $log")"
  # Where the CPU went: the controller (ansible-playbook and its workers, ssh) and the nodes (their
  # Python running each module). At a site every node has its own cores; in the lab all share these.
  cpu=$(cat "$CPU_FILE" 2>/dev/null || echo '?')
  CPUS[$key]=$cpu
  if [[ $key != *:first && $n0 -ge 0 && $n1 -ge 0 ]]; then
    printf '  %-32s controller %s s, nodes %s s (%s s per node)\n' "  CPU" "$cpu" \
      "$(awk -v a="$n0" -v b="$n1" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')" \
      "$(awk -v a="$n0" -v b="$n1" -v n="$nodes" 'BEGIN { printf "%.1f", (b - a) / 1e9 / n }')"
  fi
  if [[ -s $log.counts ]]; then
    python3 - "$log.counts" "$cpu" "$nodes" <<'PY'
import json, sys
counts = json.load(open(sys.argv[1]))
cpu_split = counts.pop('_cpu', {})
nodes = [h for h in counts if h != 'localhost'] or list(counts)
n = max(int(sys.argv[3]), 1)
results = sum(counts[h]['results'] for h in nodes) / float(len(nodes))
runs = sum(counts[h]['module_runs'] for h in nodes) / float(len(nodes))
try:
    cpu = '%.1f s' % (float(sys.argv[2]) / n)
except ValueError:
    cpu = '?'
print('  %-32s controller CPU %s, %.0f task results, %.0f module runs on the node' % ('  per node', cpu, results, runs))
# Where the controller's CPU goes: the workers' seconds per action and the costliest tasks (all nodes together).
if cpu_split.get('by_action'):
    print('  %-32s %.1f s in the workers; by action: %s' % ('  controller CPU', cpu_split['workers_seconds'], ', '.join(
        '%s %.1f s (%d)' % (row['name'].split('.')[-1], row['seconds'], row['results']) for row in cpu_split['by_action'][:6])))
    for row in cpu_split['by_task'][:3]:
        print('  %-32s %6.2f s over %d results: %s' % ('', row['seconds'], row['results'], row['name'][:110]))
PY
  fi
  (( rc == 0 )) || failed+=("$nodes nodes: $label (exit $rc, $log)")
  return "$rc"
}

top_tasks() {  # the profile_tasks summary at the end of a log, as "seconds  task"
  awk '/^TASKS RECAP/ {t=1; n=0; next} t && /^=+ *$/ {s=1; next}
       t && s && /-+ +[0-9.]+s$/ { secs=$NF; sub(/s$/, "", secs); name=$0; sub(/ -+ +[0-9.]+s$/, "", name);
                                 printf "    %7.2f s  %s\n", secs, name }' "$1" | head -n "$TOP"
}

bench_lab() {
  local nodes=$1
  local dir="$out/$nodes-nodes"
  export LAB_NODES=$nodes
  lab/lab.sh down >/dev/null
  mkdir -p "$dir"
  # The preload callback's compiled templates (docs/performance.md): empty for each size's first converge, as
  # on a new controller; the runs after it read what it kept.
  export GPUCLUSTER_COMPILE_CACHE_DIR=$PWD/$dir/compiled
  rm -rf "$GPUCLUSTER_COMPILE_CACHE_DIR"
  echo "== lab: $nodes nodes, image ${LAB_IMAGE:-debian12}, $(nproc) CPUs, $(date -u +%FT%TZ)"
  # A first converge that failed leaves a half-built lab: timing re-runs of it would mean nothing.
  if ! timed "$nodes:first" "first converge (make lab)" "$dir/first.log" lab/lab.sh up; then
    grep -E -A4 '^(fatal|failed):' "$dir/first.log" | head -n 20 | sed 's/^/    /' || true
    echo "  $nodes nodes: the first converge failed; no re-run or check run timed"
    return 0
  fi
  # The counting callback (bench/callback_plugins) writes its figures beside each log.
  local plugins=ANSIBLE_CALLBACK_PLUGINS=$PWD/bench/callback_plugins
  timed "$nodes:rerun" "re-run, fast path" "$dir/rerun.log" env "$plugins" GPUCLUSTER_BENCH_COUNTS="$dir/rerun.log.counts" \
    ANSIBLE_CALLBACKS_ENABLED=gpucluster.core.preload,gpucluster_bench_counts ansible-playbook -i "$inv" site.yml || true
  timed "$nodes:full" "re-run, fast path off" "$dir/full.log" env "$plugins" GPUCLUSTER_BENCH_COUNTS="$dir/full.log.counts" \
    ANSIBLE_CALLBACKS_ENABLED=gpucluster.core.preload,ansible.posix.profile_tasks,gpucluster_bench_counts PROFILE_TASKS_TASK_OUTPUT_LIMIT=$TOP \
    ansible-playbook -i "$inv" site.yml -e gpucluster_fast_path=false || true
  timed "$nodes:check" "--check --diff, fast path" "$dir/check.log" env "$plugins" GPUCLUSTER_BENCH_COUNTS="$dir/check.log.counts" \
    ANSIBLE_CALLBACKS_ENABLED=gpucluster.core.preload,gpucluster_bench_counts ansible-playbook -i "$inv" site.yml --check --diff || true
  echo "  the $TOP most expensive tasks of the full-path re-run (all nodes together):"
  top_tasks "$dir/full.log"
}

if [[ "${BENCH_LAB:-1}" == 1 ]]; then
  for n in $BENCH_SIZES; do
    if ! [[ "$n" =~ ^[0-9]+$ ]] || (( n < 2 || n > 16 )); then
      die "BENCH_SIZES=\"$BENCH_SIZES\" is not accepted: lab sizes from 2 to 16 (lab/lab.sh), e.g. \"3 6\""
    fi
  done
  # The lab's nodes' image (LAB_IMAGE with PyTorch), as make lab builds it.
  lab/lab.sh image >/dev/null
  rm -rf "$out"
  for n in $BENCH_SIZES; do bench_lab "$n"; done
  read -r -a sizes <<<"$BENCH_SIZES"
  if (( ${#sizes[@]} > 1 )); then
    first=${sizes[0]} last=${sizes[-1]}
    if [[ -n "${SECS[$last:rerun]:-}" && -n "${SECS[$first:rerun]:-}" ]]; then
      echo "== re-run at $last nodes / re-run at $first nodes: $(awk -v a="${SECS[$last:rerun]}" -v b="${SECS[$first:rerun]}" 'BEGIN { printf "%.2f", a / b }')"
    fi
    # What scales: the controller's CPU each node adds to a run, and the part every run pays once (starting
    # Ansible, loading the playbook, the preload), from the two sizes' CPU (a straight line through both).
    for run in rerun full check; do
      a=${CPUS[$first:$run]:-?} b=${CPUS[$last:$run]:-?}
      [[ $a =~ ^[0-9.]+$ && $b =~ ^[0-9.]+$ ]] || continue
      awk -v a="$a" -v b="$b" -v n="$first" -v m="$last" -v run="$run" 'BEGIN {
        slope = (b - a) / (m - n); fixed = a - slope * n
        printf "== controller CPU, %s: %.1f s per node added (%d to %d nodes), %.1f s paid once per run\n", run, slope, n, m, fixed }'
    done
  fi
  # The lab is left down: the machine's cores go back to whoever shares it.
  lab/lab.sh down >/dev/null
fi
for script in bench/*_bench.py; do
  [[ -e "$script" ]] || continue
  echo "== $script"
  python "$script"
done
if (( ${#failed[@]} )); then
  printf 'bench: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
