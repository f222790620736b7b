#!/usr/bin/env bash
# Offline checks of the monitoring role's Prometheus artefacts, run by `make test`:
#   1. render the alert rules and their unit tests with the role defaults (and with a second,
#      short-duration set like the lab's), 2. `promtool check rules`, 3. `promtool test rules`,
#   4. every PromQL expression of the shipped Grafana dashboards parses (`promtool check rules`
#      over a generated file of recording rules), 5. the node_exporter textfile the health program
#      writes passes `promtool check metrics` (the metric-name lint) for every real recording
#      (tests/monitoring/health_corpus.py; the corpus is $GPUCLUSTER_FIXTURES or ../shared/fixtures;
#      GPU, kernel log, nvidia-smi failure and RDMA recordings), and so do the textfiles
#      playbooks/validate.yml writes (tests/monitoring/validate_textfiles.py) and those of who uses the GPUs
#      (the Slurm controller's metrics and the health program's job labels: tests/monitoring/usage_textfiles.py).
# promtool comes from $PROMTOOL, PATH, or Debian's `prometheus` package unpacked (not installed)
# into .cache/promtool (lab/promtool-path.sh, shared with molecule/storage/verify.yml).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
export ANSIBLE_CONFIG="$ROOT/ansible.cfg" ANSIBLE_COLLECTIONS_PATH="$ROOT/collections"
PLAYBOOK="${ANSIBLE_PLAYBOOK:-$ROOT/.venv/bin/ansible-playbook}"
[ -x "$PLAYBOOK" ] || PLAYBOOK=ansible-playbook

PROMTOOL="$("$ROOT/lab/promtool-path.sh")"
"$PROMTOOL" --version 2>&1 | head -1
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

run_set() {  # $1 = name, rest = extra ansible-playbook args
  local name="$1"; shift
  local out="$WORK/$name"
  "$PLAYBOOK" -i localhost, "$ROOT/tests/monitoring/render_rules.yml" -e "out_dir=$out" "$@" >"$WORK/$name.log" 2>&1 \
    || { cat "$WORK/$name.log" >&2; echo "promtool.sh: rendering the rules ($name) failed" >&2; exit 1; }
  echo "== rules rendered with $name settings"
  "$PROMTOOL" check rules "$out"/rules.d/*.rules.yml
  "$PROMTOOL" test rules "$out"/rule-tests/*.test.yml
}

run_set defaults
# The lab's short hold times and different thresholds: the tests are rendered from the same values.
run_set lab -e monitoring_alert_node_down_for=5s -e monitoring_alert_default_for=30s \
  -e monitoring_alert_throttle_for=1m -e monitoring_alert_gpu_temperature_margin_celsius=10 \
  -e monitoring_alert_disk_free_percent=15 -e monitoring_alert_memory_available_percent=8 \
  -e monitoring_alert_health_stale_seconds=600 -e monitoring_alert_gpu_idle_for=30s -e monitoring_alert_imbalance_for=1m

echo "== dashboard queries parse"
"$PY" "$ROOT/tests/monitoring/dashboard_queries.py" rules > "$WORK/dashboards.rules.yml"
"$PROMTOOL" check rules "$WORK/dashboards.rules.yml"

echo "== health program (every real recording) and validate textfiles pass promtool's metric lint"
"$PY" "$ROOT/tests/monitoring/health_corpus.py" --textfiles "$WORK/textfiles" > "$WORK/textfiles.list"
"$PY" "$ROOT/tests/monitoring/validate_textfiles.py" --textfiles "$WORK/validate" > "$WORK/validate.list"
grep -q . "$WORK/validate.list" || { echo "promtool.sh: no validate textfile to lint" >&2; exit 1; }
cat "$WORK/validate.list" >> "$WORK/textfiles.list"
"$PY" "$ROOT/tests/monitoring/usage_textfiles.py" --textfiles "$WORK/usage" > "$WORK/usage.list"
grep -q . "$WORK/usage.list" || { echo "promtool.sh: no usage textfile to lint" >&2; exit 1; }
cat "$WORK/usage.list" >> "$WORK/textfiles.list"
linted=0
while read -r prom; do
  # check metrics exits 0 without a word when the lint is clean; any problem is printed and fails the stage.
  if ! problems="$("$PROMTOOL" check metrics < "$prom" 2>&1)" || [ -n "$problems" ]; then
    echo "promtool.sh: $(basename "$prom"): $problems" >&2
    exit 1
  fi
  linted=$((linted + 1))
done < "$WORK/textfiles.list"
[ "$linted" -gt 0 ] || { echo "promtool.sh: no health program textfile to lint" >&2; exit 1; }
echo "  SUCCESS: $linted textfiles"
