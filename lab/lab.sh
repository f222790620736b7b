#!/usr/bin/env bash
# The container lab: LAB_NODES systemd containers (node1..nodeN) on one docker network, driven by
# the same site.yml as a real cluster.
#   lab/lab.sh up     create what is missing, prepare the GPU stand-in, run site.yml, print a summary
#   lab/lab.sh down   remove exactly the containers, network and volumes the lab created
#   lab/lab.sh status
set -euo pipefail
cd "$(dirname "$0")/.."

LAB_NODES=${LAB_NODES:-3}
LAB_IMAGE=${LAB_IMAGE:-debian12}
LAB_NETWORK=${LAB_NETWORK:-gpucluster-lab}
# A container cannot raise its hard limits (no CAP_SYS_RESOURCE): nodes start with low soft limits
# under the docker daemon's hard ones, so that the login-session limits os_tuning writes are seen
# to take effect (inventories/lab/group_vars/all.yml sets them to the hard caps).
LAB_ULIMIT_MEMLOCK=${LAB_ULIMIT_MEMLOCK:-65536:8388608}
LAB_ULIMIT_NOFILE=${LAB_ULIMIT_NOFILE:-1024:20000}
LABEL=gpucluster.lab
IMAGE="${LAB_IMAGE_REPO:-gpucluster-lab}:$LAB_IMAGE"
LOG_DIR=.lab
INVENTORY=inventories/lab

die() { echo "lab: $*" >&2; exit 1; }

check_inputs() {
  if ! [[ "$LAB_NODES" =~ ^[0-9]+$ ]] || (( LAB_NODES < 1 || LAB_NODES > 16 )); then
    die "LAB_NODES=$LAB_NODES is not accepted: a whole number from 1 to 16"
  fi
  [[ "$LAB_IMAGE" == debian12 || "$LAB_IMAGE" == debian13 ]] ||
    die "LAB_IMAGE=$LAB_IMAGE is not accepted: debian12 or debian13"
  docker info >/dev/null 2>&1 || die "the Docker daemon does not answer (run: make docker)"
  docker image inspect "$IMAGE" >/dev/null 2>&1 || die "image $IMAGE is missing (run: lab/build-image.sh $LAB_IMAGE)"
}

lab_containers() { docker ps -a --filter "label=$LABEL.node" --format '{{.Names}}' | sort -V; }

create_node() {
  local name=$1
  # systemd needs SYS_ADMIN and the host's cgroup tree; --privileged is neither needed nor used.
  docker run -d --name "$name" --hostname "$name" \
    --label "$LABEL.node=$name" --label "$LABEL.image=$LAB_IMAGE" \
    --network "$LAB_NETWORK" --network-alias "$name" \
    --cap-add SYS_ADMIN --cap-add NET_ADMIN --cgroupns=host \
    -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
    --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
    --ulimit "memlock=$LAB_ULIMIT_MEMLOCK" --ulimit "nofile=$LAB_ULIMIT_NOFILE" \
    --stop-signal SIGRTMIN+3 \
    "$IMAGE" >/dev/null
}

wait_for_systemd() {
  local name=$1 state=""
  for _ in $(seq 60); do
    state=$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)
    [[ "$state" == running || "$state" == degraded ]] && return 0
    sleep 1
  done
  die "$name: systemd did not finish booting (state: ${state:-none})"
}

up() {
  check_inputs
  mkdir -p "$LOG_DIR"
  docker network inspect "$LAB_NETWORK" >/dev/null 2>&1 ||
    docker network create --label "$LABEL.network=$LAB_NETWORK" "$LAB_NETWORK" >/dev/null
  local i name image created=()
  for i in $(seq 1 "$LAB_NODES"); do
    name="node$i"
    if docker container inspect "$name" >/dev/null 2>&1; then
      image=$(docker container inspect -f "{{ index .Config.Labels \"$LABEL.image\" }}" "$name")
      [[ -n "$image" ]] || die "a container named $name exists but was not made by the lab; remove or rename it"
      [[ "$image" == "$LAB_IMAGE" ]] || die "$name runs $image, not $LAB_IMAGE: run make lab-down first"
      [[ "$(docker container inspect -f '{{.State.Running}}' "$name")" == true ]] || docker start "$name" >/dev/null
    else
      create_node "$name"
      created+=("$name")
    fi
  done
  for i in $(seq 1 "$LAB_NODES"); do wait_for_systemd "node$i"; done
  local extra
  extra=$(lab_containers | awk -v n="$LAB_NODES" '{ sub(/^node/, ""); if ($0 + 0 > n) print "node" $0 }' | xargs)
  [[ -z "$extra" ]] || echo "lab: note: $extra from an earlier, larger lab still run (make lab-down removes them)"

  local log="$LOG_DIR/site.log"
  echo "lab: ${#created[@]} node(s) created${created:+ (${created[*]})}; running the GPU stand-in preparation and site.yml"
  local start=$SECONDS
  ansible-playbook -i "$INVENTORY" lab/prepare.yml 2>&1 | tee "$LOG_DIR/prepare.log" | grep -E '^(PLAY RECAP|fatal|ERROR)|failed=[1-9]' || true
  [[ ${PIPESTATUS[0]} == 0 ]] || die "lab/prepare.yml failed; see $LOG_DIR/prepare.log"
  set +e
  ansible-playbook -i "$INVENTORY" site.yml 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  set -e
  summary "$log" $((SECONDS - start)) "$rc"
  return "$rc"
}

summary() {
  local log=$1 secs=$2 rc=$3
  echo
  echo "================ gpucluster lab ================"
  echo "nodes:     $(lab_containers | xargs) (image $IMAGE, network $LAB_NETWORK)"
  echo "roles:     $(grep -oE 'TASK \[[a-z_.]+ : ' "$log" | sed -E 's/TASK \[(gpucluster\.core\.)?//; s/ : $//' | awk '!seen[$0]++' | xargs)"
  local recording
  recording=$(ansible-inventory -i "$INVENTORY" --host node1 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin).get("lab_gpu_recording", ""))' 2>/dev/null || true)
  echo "GPUs:      test-only stand-in nvidia-smi replaying ${recording:-the recording named by lab_gpu_recording} (lab/prepare.yml)"
  echo "result:    $( [[ $rc == 0 ]] && echo ok || echo "FAILED (exit $rc)" ) in ${secs}s; recap:"
  sed -n '/PLAY RECAP/,/^$/p' "$log" | tail -n +2 | sed 's/^/           /'
  local address
  address=$(docker inspect -f "{{ (index .NetworkSettings.Networks \"$LAB_NETWORK\").IPAddress }}" node1 2>/dev/null || true)
  echo "next:      ansible -i $INVENTORY all -m ping"
  echo "           docker exec node1 sinfo; docker exec node1 srun -N$LAB_NODES hostname"
  echo "           Prometheus http://$address:9090  Alertmanager http://$address:9093  (from this machine)"
  echo "           full log: $log; make lab again converges with changed=0; make lab-down removes the lab"
  echo "================================================"
}

down() {
  local names=()
  mapfile -t names < <(lab_containers)
  if (( ${#names[@]} )); then
    # -v removes the anonymous volumes of these containers and nothing else.
    docker rm -f -v "${names[@]}" >/dev/null
    echo "lab: removed containers ${names[*]}"
  fi
  if docker network inspect "$LAB_NETWORK" >/dev/null 2>&1; then
    [[ -n "$(docker network inspect -f "{{ index .Labels \"$LABEL.network\" }}" "$LAB_NETWORK")" ]] ||
      die "network $LAB_NETWORK was not made by the lab; left alone"
    docker network rm "$LAB_NETWORK" >/dev/null
    echo "lab: removed network $LAB_NETWORK"
  fi
  rm -rf "$LOG_DIR"
}

status() {
  docker ps -a --filter "label=$LABEL.node" --format 'table {{.Names}}\t{{.Status}}\t{{.Image}}'
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) die "usage: lab/lab.sh up|down|status" ;;
esac
