#!/usr/bin/env bash
# The container lab: LAB_NODES systemd containers (node1..nodeN) on one docker network, driven by
# the same site.yml as a real cluster and reached the way a site reaches its servers: over SSH as
# an unprivileged admin user with sudo (inventories/lab/group_vars/gpucluster.yml).
#   lab/lab.sh up          create what is missing, bootstrap new nodes, check every node answers over
#                          SSH and becomes root, prepare the GPU stand-in, run site.yml, print a summary
#   lab/lab.sh down        remove exactly the containers, network, volumes, keys and secrets the lab created
#   lab/lab.sh status
#   lab/lab.sh ping        check every node over SSH with become, as site.yml will reach it
#   lab/lab.sh shell NODE  log in to NODE over SSH as the admin user
#   lab/lab.sh trust NODE  record NODE's current host key, read through docker (after a re-key)
set -euo pipefail
cd "$(dirname "$0")/.."

LAB_NODES=${LAB_NODES:-3}
LAB_IMAGE=${LAB_IMAGE:-debian12}
LAB_NETWORK=${LAB_NETWORK:-gpucluster-lab}
# Fixed addresses (nodeN = .10+N) keep a node's address, and so its known_hosts entry, across
# restarts. 10.213.0.0/16 is outside docker's default pools; molecule scenarios use 10.213.1x.0/24.
LAB_SUBNET=${LAB_SUBNET:-10.213.0.0/24}
# A container cannot raise its hard limits (no CAP_SYS_RESOURCE): nodes start with low soft limits
# under the docker daemon's hard ones, so that the login-session limits os_tuning writes are seen
# to take effect (inventories/lab/group_vars/all.yml sets them to the hard caps).
LAB_ULIMIT_MEMLOCK=${LAB_ULIMIT_MEMLOCK:-65536:8388608}
LAB_ULIMIT_NOFILE=${LAB_ULIMIT_NOFILE:-1024:20000}
LABEL=gpucluster.lab
IMAGE="${LAB_IMAGE_REPO:-gpucluster-lab}:$LAB_IMAGE"
LOG_DIR=.lab
INVENTORY=inventories/lab
# The lab's key pair and known_hosts; lab_ssh_dir in inventories/lab/group_vars/gpucluster.yml
# names the same folder. Made for this lab on this machine, git-ignored, removed by lab.sh down.
SSH_DIR=$LOG_DIR/ssh
SSH_KEY=$SSH_DIR/id_ed25519
KNOWN_HOSTS=$SSH_DIR/known_hosts
# The lab's vault password: the roles keep the secrets they generate encrypted in the inventory's store
# (inventories/lab/.secrets; at a site it is committed). lab/vault-password.sh prints a random password
# made for this lab on this machine, kept in .lab/ (git-ignored, removed by lab.sh down with the store).
export ANSIBLE_VAULT_PASSWORD_FILE=$PWD/lab/vault-password.sh
# What the roles generated for this lab: the store (encrypted with the password above) and the controller's
# decrypted working copy. Both are git-ignored in this repository, and go with the lab.
LAB_SECRETS=("$INVENTORY/.secrets" "$INVENTORY/.credentials")

die() { echo "lab: $*" >&2; exit 1; }

check_inputs() {
  if ! [[ "$LAB_NODES" =~ ^[0-9]+$ ]] || (( LAB_NODES < 1 || LAB_NODES > 16 )); then
    die "LAB_NODES=$LAB_NODES is not accepted: a whole number from 1 to 16"
  fi
  [[ "$LAB_IMAGE" == debian12 || "$LAB_IMAGE" == debian13 ]] ||
    die "LAB_IMAGE=$LAB_IMAGE is not accepted: debian12 or debian13"
  [[ "$LAB_SUBNET" =~ ^([0-9]{1,3}\.){3}0/24$ ]] ||
    die "LAB_SUBNET=$LAB_SUBNET is not accepted: an IPv4 /24 network such as 10.213.0.0/24"
  docker info >/dev/null 2>&1 || die "the Docker daemon does not answer (run: make docker)"
  docker image inspect "$IMAGE" >/dev/null 2>&1 || die "image $IMAGE is missing (run: lab/build-image.sh $LAB_IMAGE)"
}

lab_containers() { docker ps -a --filter "label=$LABEL.node" --format '{{.Names}}' | sort -V; }

node_address() { echo "${LAB_SUBNET%.0/24}.$((10 + ${1#node}))"; }

recipe_of() { docker inspect -f "{{ index .Config.Labels \"$LABEL.recipe\" }}" "$1" 2>/dev/null; }

create_node() {
  local name=$1
  # A node created again gets new SSH host keys at first boot: its old known_hosts entry goes now,
  # the bootstrap records the new one (read through docker, not over the network).
  [[ ! -f "$KNOWN_HOSTS" ]] || ssh-keygen -R "$(node_address "$name")" -f "$KNOWN_HOSTS" >/dev/null 2>&1
  # systemd needs SYS_ADMIN and the host's cgroup tree; --privileged is neither needed nor used.
  docker run -d --name "$name" --hostname "$name" \
    --label "$LABEL.node=$name" --label "$LABEL.image=$LAB_IMAGE" --label "$LABEL.network=$LAB_NETWORK" \
    --label "$LABEL.address=$(node_address "$name")" \
    --network "$LAB_NETWORK" --network-alias "$name" --ip "$(node_address "$name")" \
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

ensure_network() {
  if docker network inspect "$LAB_NETWORK" >/dev/null 2>&1; then
    [[ -n "$(docker network inspect -f "{{ index .Labels \"$LABEL.network\" }}" "$LAB_NETWORK")" ]] ||
      die "network $LAB_NETWORK exists but was not made by the lab; remove it or set LAB_NETWORK"
    local subnet
    subnet=$(docker network inspect -f '{{ range .IPAM.Config }}{{ .Subnet }}{{ end }}' "$LAB_NETWORK")
    [[ "$subnet" == "$LAB_SUBNET" ]] ||
      die "network $LAB_NETWORK has subnet ${subnet:-none}, not LAB_SUBNET=$LAB_SUBNET: run make lab-down first"
  else
    docker network create --label "$LABEL.network=$LAB_NETWORK" \
      --subnet "$LAB_SUBNET" --gateway "${LAB_SUBNET%.0/24}.1" "$LAB_NETWORK" >/dev/null ||
      die "cannot create network $LAB_NETWORK on $LAB_SUBNET (another network uses it?): set LAB_SUBNET to a free /24"
  fi
}

# The lab's own key pair. A missing key while nodes exist is not replaced silently: the nodes
# accept only the key they were bootstrapped with.
ensure_key() {
  local nodes
  nodes=$(lab_containers | xargs)
  if [[ ! -f "$SSH_KEY" || ! -f "$SSH_KEY.pub" ]]; then
    [[ -z "$nodes" ]] || die "the lab's SSH key $SSH_KEY is missing, and $nodes accept only the key they were
     bootstrapped with. Restore the key (both $SSH_KEY and $SSH_KEY.pub), or start the lab over:
     make lab-down && make lab"
    mkdir -p "$SSH_DIR"
    chmod 0700 "$SSH_DIR"
    ssh-keygen -q -t ed25519 -N '' -C "gpucluster-lab@$(hostname)" -f "$SSH_KEY"
  fi
  touch "$KNOWN_HOSTS"
}

# Every node must answer over SSH as the admin user and become root, exactly as site.yml will reach
# it; otherwise say which node and what to do, and stop before anything changes.
check_nodes() {
  local out rc=0 block line node msg bad=0 nodes
  nodes=$(seq -f 'node%g' 1 "$LAB_NODES" | paste -sd,)
  out=$(ansible -i "$INVENTORY" "$nodes" -o -m ansible.builtin.command -a 'id -u' 2>&1) || rc=$?
  for node in ${nodes//,/ }; do
    # ansible's one-line output still breaks ssh's messages over several lines: take them all.
    block=$(awk -v n="$node" '/^node[0-9]+ \|/ { cur = ($1 == n) } cur' <<<"$out")
    line=$(head -n 1 <<<"$block")
    if [[ "$line" =~ \|\ CHANGED\ \|\ rc=0\ \|.*\(stdout\)\ 0$ ]]; then
      continue
    fi
    bad=1
    msg="lab: $node ($(node_address "$node")): "
    case "$block" in
      *"REMOTE HOST IDENTIFICATION HAS CHANGED"*|*"Host key verification failed"*)
        msg+="its SSH host key is not the one recorded in $KNOWN_HOSTS when the lab created it: the
     container was re-keyed or replaced outside the lab, or another machine answers on its address.
     If you know why, record the key the container itself holds (read through docker, not over the
     network): lab/lab.sh trust $node   -- or re-create the node: docker rm -f $node && make lab" ;;
      *"Permission denied"*)
        msg+="SSH refuses the lab's key $SSH_KEY for the admin user (its account or
     authorized_keys changed). Re-create the node: docker rm -f $node && make lab" ;;
      *"password is required"*|*"Missing sudo password"*|*"not in the sudoers"*|*"not allowed to"*|*"sudo:"*)
        msg+="the admin user logs in but cannot become root without a password (site.yml runs with
     become). Restore /etc/sudoers.d/gpucluster-lab-admin, or re-create the node: docker rm -f $node && make lab" ;;
      *"Connection refused"*|*"timed out"*|*"No route to host"*)
        if [[ "$(docker container inspect -f '{{.State.Running}}' "$node" 2>/dev/null)" != true ]]; then
          msg+="the container is stopped, as a dead server would be (it stays in the inventory): docker start $node, or make lab"
        else
          msg+="sshd does not answer on port 22 (docker exec $node systemctl status ssh shows why)"
        fi ;;
      "")
        msg+="not in the inventory: is it running? (lab/lab.sh status)" ;;
      *)
        msg+="cannot be reached over SSH with become as site.yml will reach it (ansible's words below).
     Try the login by hand: lab/lab.sh shell $node (then sudo -i); make ping checks every node again" ;;
    esac
    echo "$msg" >&2
    [[ -z "$line" ]] || echo "     ansible said: ${line:0:400}" >&2
    [[ "$(wc -l <<<"$block")" -le 1 ]] || echo "     ... $(tail -n 1 <<<"$block" | cut -c1-400)" >&2
  done
  (( bad == 0 && rc == 0 )) || die "$1"
}

up() {
  check_inputs
  mkdir -p "$LOG_DIR"
  ensure_network
  ensure_key
  local i name image created=() recipe
  recipe=$(docker image inspect -f "{{ index .Config.Labels \"$LABEL.recipe\" }}" "$IMAGE")
  for i in $(seq 1 "$LAB_NODES"); do
    name="node$i"
    if docker container inspect "$name" >/dev/null 2>&1; then
      image=$(docker container inspect -f "{{ index .Config.Labels \"$LABEL.image\" }}" "$name")
      [[ -n "$image" ]] || die "a container named $name exists but was not made by the lab; remove or rename it"
      [[ "$image" == "$LAB_IMAGE" ]] || die "$name runs $image, not $LAB_IMAGE: run make lab-down first"
      [[ "$(recipe_of "$name")" == "$recipe" ]] ||
        die "$name was made from an earlier build of $IMAGE (recipe $(recipe_of "$name"), now $recipe): run make lab-down first"
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

  local start=$SECONDS new=()
  # New nodes, and nodes whose bootstrap did not finish (no host key recorded yet), have no admin
  # account: only they are bootstrapped. A recorded node is never bootstrapped again: what is
  # wrong with it is reported by check_nodes.
  for i in $(seq 1 "$LAB_NODES"); do
    ssh-keygen -F "$(node_address "node$i")" -f "$KNOWN_HOSTS" >/dev/null 2>&1 || new+=("node$i")
  done
  echo "lab: ${#created[@]} node(s) created${created:+ (${created[*]})}"
  if (( ${#new[@]} )); then
    echo "lab: bootstrapping the admin user of ${new[*]} through docker (they have no account yet)"
    ansible-playbook -i "$INVENTORY" lab/bootstrap.yml -e "lab_bootstrap_nodes=$(IFS=,; echo "${new[*]}")" >"$LOG_DIR/bootstrap.log" 2>&1 ||
      die "lab/bootstrap.yml failed for ${new[*]}; see $LOG_DIR/bootstrap.log"
  fi
  check_nodes "site.yml was not run, nothing was changed; fix the node(s) above and run make lab again"
  echo "lab: every node answers over SSH as the admin user and becomes root; running the GPU stand-in preparation and site.yml"
  local log="$LOG_DIR/site.log"
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
  echo "nodes:     $(lab_containers | xargs) (image $IMAGE, network $LAB_NETWORK $LAB_SUBNET)"
  echo "access:    SSH as the admin user with sudo (become), key $SSH_KEY, host keys $KNOWN_HOSTS"
  echo "roles:     $(grep -oE 'TASK \[[a-z_.]+ : ' "$log" | sed -E 's/TASK \[(gpucluster\.core\.)?//; s/ : $//' | awk '!seen[$0]++' | xargs)"
  local recording
  recording=$(ansible-inventory -i "$INVENTORY" --host node1 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin).get("lab_gpu_recording", ""))' 2>/dev/null || true)
  echo "GPUs:      test-only stand-in nvidia-smi replaying ${recording:-the recording named by lab_gpu_recording} (lab/prepare.yml)"
  echo "result:    $( [[ $rc == 0 ]] && echo ok || echo "FAILED (exit $rc)" ) in ${secs}s; recap:"
  sed -n '/PLAY RECAP/,/^$/p' "$log" | tail -n +2 | sed 's/^/           /'
  echo "next:      make ping                       every node over SSH with become"
  echo "           make shell N=node1              log in to node1 (sudo -i for root), then e.g. sinfo; srun -N$LAB_NODES hostname"
  echo "           . .venv/bin/activate            puts ansible on PATH; the lab's vault password is a script:"
  echo "           ANSIBLE_VAULT_PASSWORD_FILE=lab/vault-password.sh ansible-playbook -i $INVENTORY site.yml"
  echo "           Prometheus https://$(node_address node1):9090  Alertmanager https://$(node_address node1):9093  (from this machine;"
  echo "           CA inventories/lab/.credentials/monitoring-pki/ca.crt, user gpucluster-scrape, password in inventories/lab/.credentials/monitoring_scrape_password)"
  echo "           a Prometheus query from this machine (needs curl: apt-get install curl):"
  echo "           curl --cacert inventories/lab/.credentials/monitoring-pki/ca.crt \\"
  echo "             -u \"gpucluster-scrape:\$(cat inventories/lab/.credentials/monitoring_scrape_password)\" 'https://$(node_address node1):9090/api/v1/query?query=gpucluster_gpus'"
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
  # Logs, the lab's key pair, known_hosts, vault password and generated secrets: the next lab makes new ones.
  rm -rf "$LOG_DIR" "${LAB_SECRETS[@]}"
}

status() {
  docker ps -a --filter "label=$LABEL.node" --format 'table {{.Names}}\t{{.Status}}\t{{.Image}}'
}

running_node() {
  local node=${1:-}
  [[ "$node" =~ ^node[0-9]+$ ]] || die "name a lab node, e.g. node1 (running: $(lab_containers | xargs))"
  [[ "$(docker container inspect -f "{{ index .Config.Labels \"$LABEL.node\" }}" "$node" 2>/dev/null)" == "$node" ]] ||
    die "$node is not a lab node (lab nodes: $(lab_containers | xargs); make lab creates them)"
}

ping() {
  [[ -n "$(lab_containers)" ]] || die "no lab nodes (make lab creates them)"
  LAB_NODES=$(lab_containers | tail -1 | tr -dc 0-9)
  [[ -f "$SSH_KEY" ]] || die "the lab's SSH key $SSH_KEY is missing: make lab-down && make lab"
  check_nodes "fix the node(s) above; make ping checks again"
  echo "lab: $(lab_containers | xargs): SSH as the admin user and sudo to root work"
}

shell() {
  running_node "$1"
  [[ -f "$SSH_KEY" ]] || die "the lab's SSH key $SSH_KEY is missing: make lab-down && make lab"
  local user
  user=$(ansible-inventory -i "$INVENTORY" --host "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ansible_user"])')
  exec ssh -i "$SSH_KEY" -o IdentitiesOnly=yes -o UserKnownHostsFile="$KNOWN_HOSTS" -o StrictHostKeyChecking=yes \
    "$user@$(docker inspect -f "{{ (index .NetworkSettings.Networks \"$LAB_NETWORK\").IPAddress }}" "$1")"
}

# After a node was re-keyed on purpose: the key is read from the container through docker (the
# channel that proves which container it is), not accepted from whoever answers on the network.
trust() {
  running_node "$1"
  local address key
  address=$(docker inspect -f "{{ (index .NetworkSettings.Networks \"$LAB_NETWORK\").IPAddress }}" "$1")
  key=$(docker exec "$1" cat /etc/ssh/ssh_host_ed25519_key.pub | awk '{print $1, $2}')
  [[ "$key" == ssh-ed25519\ * ]] || die "$1 has no SSH host key (/etc/ssh/ssh_host_ed25519_key.pub)"
  mkdir -p "$SSH_DIR"
  touch "$KNOWN_HOSTS"
  ssh-keygen -R "$address" -f "$KNOWN_HOSTS" >/dev/null 2>&1 || true
  echo "$address $key" >>"$KNOWN_HOSTS"
  echo "lab: $1 ($address): recorded host key $(ssh-keygen -lf <(echo "$address $key") | awk '{print $2}')"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  ping) ping ;;
  shell) shell "${2:-}" ;;
  trust) trust "${2:-}" ;;
  *) die "usage: lab/lab.sh up|down|status|ping|shell NODE|trust NODE" ;;
esac
