#!/usr/bin/env bash
# One short check on a real GPU server (a lent GPU machine, or a node of a site): records what the collection's
# parsers read there and runs them on it, so a parser or a decision that real output breaks shows at once.
#   - the loaded driver: /proc/driver/nvidia/version, uname -r, and `modinfo [-k KERNEL] -F version nvidia` (what the
#     nvidia_driver role's prebuilt-module check reads), judged by plugins/module_utils/nvidia_prebuilt.py;
#   - `nvidia-smi -q -x`, parsed by plugins/module_utils/gpu_smi_xml.py (GPU count, driver, ECC, remapped rows, PCIe
#     link, throttle reasons, NVLink);
#   - the node health program (gpucluster-health, built as the health_check role builds it) with its JSON verdict.
# Needs python3 and nvidia-smi on the machine; nothing is installed and nothing outside $OUT is written.
# Usage: OUT=/tmp/out lab/device-check.sh [expected GPU count]
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/gpucluster-device-check}
mkdir -p "$OUT"
expected=${1:-}
exec > >(tee "$OUT/device-check.log") 2>&1

echo "== host"
uname -r | tee "$OUT/uname-r.txt"
cat /proc/driver/nvidia/version > "$OUT/proc-driver-nvidia-version.txt" 2>&1 || echo "no /proc/driver/nvidia/version"
cat "$OUT/proc-driver-nvidia-version.txt"

echo "== modinfo"
kernel=$(uname -r)
modinfo -F version nvidia > "$OUT/modinfo.out" 2> "$OUT/modinfo.err"
echo "modinfo -F version nvidia: rc=$? out=$(tr '\n' ' ' < "$OUT/modinfo.out") err=$(tr '\n' ' ' < "$OUT/modinfo.err")"
modinfo -k "$kernel" -F version nvidia > "$OUT/modinfo-k.out" 2> "$OUT/modinfo-k.err"
echo "$?" > "$OUT/modinfo-k.rc"
echo "modinfo -k $kernel: rc=$(cat "$OUT/modinfo-k.rc") out=$(tr '\n' ' ' < "$OUT/modinfo-k.out") err=$(tr '\n' ' ' < "$OUT/modinfo-k.err")"

echo "== nvidia-smi -q -x"
nvidia-smi -q -x > "$OUT/nvidia-smi-q-x.xml" 2> "$OUT/nvidia-smi.err"
echo "rc=$? bytes=$(wc -c < "$OUT/nvidia-smi-q-x.xml")"

echo "== the parsers on it"
PYTHONPATH=$PWD/collections OUT=$OUT KERNEL=$kernel python3 - <<'EOF'
import json, os, re
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_smi_xml, nvidia_prebuilt

out = os.environ['OUT']
with open(os.path.join(out, 'nvidia-smi-q-x.xml'), 'rb') as handle:
    parsed = gpu_smi_xml.parse_nvidia_smi_xml(handle.read())
with open(os.path.join(out, 'gpu_smi_xml.json'), 'w') as handle:
    json.dump(parsed, handle, indent=1, sort_keys=True, default=str)
gpus = parsed.get('devices', []) if isinstance(parsed, dict) else []
print('gpu_smi_xml: %d GPU(s), driver %s, CUDA %s' % (len(gpus), parsed.get('driver_version'), parsed.get('cuda_version')))
for gpu in gpus:
    print('  ', dict((k, gpu.get(k)) for k in sorted(gpu) if k in (
        'index', 'name', 'pci_address', 'ecc_mode', 'ecc_errors', 'remapped_rows', 'pcie', 'temperature_c',
        'clocks_event_reasons_active', 'nvlink', 'persistence_mode')))

proc = open(os.path.join(out, 'proc-driver-nvidia-version.txt')).read()
match = re.search(r'Kernel Module(?: for [^ ]+)?\s+([0-9]+\.[0-9]+(?:\.[0-9]+)?)', proc)
loaded = match.group(1) if match else ''
rc = open(os.path.join(out, 'modinfo-k.rc')).read().strip()
text = open(os.path.join(out, 'modinfo-k.out')).read()
if rc != '0':
    text += open(os.path.join(out, 'modinfo-k.err')).read()
verdict = nvidia_prebuilt.module_version_check(loaded or '0.0', os.environ['KERNEL'], rc, text)
print('loaded driver (from /proc): %r' % loaded)
print('nvidia_prebuilt.module_version_check(loaded, modinfo -k): %s' % json.dumps(verdict))
EOF

echo "== gpucluster-health"
# The module_utils the role packs (its vars/main.yml __health_check_modules), as --module=NAME=PATH.
mapfile -t modules < <(sed -n '/^__health_check_modules:/,/^[^ ]/s/^  - \(.*\)\.py$/--module=\1=plugins\/module_utils\/\1.py/p' \
  roles/health_check/vars/main.yml)
python3 roles/health_check/files/build_zipapp.py --package gpucluster_health --entry cli:main \
  --output-name gpucluster-health.pyz --output-dir "$OUT" \
  --module cli=roles/health_check/files/gpucluster_health_cli.py "${modules[@]}" \
  > "$OUT/build.json" || { echo "build failed"; exit 1; }
args=(--format json)
[[ -n $expected ]] && args+=(--expected-count "$expected")
python3 "$OUT/gpucluster-health.pyz" "${args[@]}" > "$OUT/health.json" 2> "$OUT/health.err"
echo "rc=$? (0 ok, 1 warning, 2 critical, 3 unknown)"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print("status", r["status"], "skipped", r["checks_skipped"]); [print("  ", i) for i in r["issues"]]' "$OUT/health.json"
cat "$OUT/health.err"
rm -f "$OUT/gpucluster-health.pyz"
