#!/usr/bin/env bash
# Build the lab's systemd node image from Debian packages (no image registry needed).
#
#   lab/build-image.sh [debian12|debian13|debian12-torch|debian13-torch]...
#
# The image stands in for a freshly installed GPU server: systemd, Python for Ansible, sshd and
# sudo, nothing else. Every role installs what it needs itself. sshd creates its host keys at
# first boot, so every node has its own (the image carries none); password logins are off, the
# lab's bootstrap (lab/bootstrap.yml) adds the admin user and its key. The Debian mirror is taken
# from this machine's own apt configuration at build time; no host name is written into the
# repository.
# NAME-torch is NAME plus Debian's CPU-only python3-torch (no recommends), what a site brings for its
# training jobs: the acceptance playbook's distributed-training smoke test (playbooks/validate.yml)
# needs it on every node, and the molecule default scenario uses it. It is one layer over NAME,
# installed once per recipe instead of on every node of every test run (309 packages, 235 MB).
# Images are labelled with a hash of their recipe, so an unchanged recipe is not rebuilt
# (FORCE=1 rebuilds).
set -euo pipefail

IMAGE_REPO=${LAB_IMAGE_REPO:-gpucluster-lab}
COMPONENTS="main contrib non-free non-free-firmware"
PACKAGES="systemd,systemd-sysv,dbus,iproute2,iputils-ping,procps,kmod,ca-certificates,gnupg,python3,python3-apt,sudo,openssh-server"

die() { echo "build-image: $*" >&2; exit 1; }

suite_of() {
  case "$1" in
    debian12) echo bookworm ;;
    debian13) echo trixie ;;
    *) die "unknown image '$1' (accepted: debian12, debian13)" ;;
  esac
}

ensure_mmdebstrap() {
  command -v mmdebstrap >/dev/null && return
  echo "build-image: installing mmdebstrap from Debian" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
}

mirror_uris() {
  # "URI SUITE" pairs known to this machine's apt; the first non-security and first security URI.
  local targets
  # shellcheck disable=SC2016  # $(REPO_URI) is apt's own placeholder syntax, not a shell expansion
  targets=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' | sort -u)
  MAIN_URI=$(awk '$2 !~ /-security$/ {print $1; exit}' <<<"$targets")
  SEC_URI=$(awk '$2 ~ /-security$/ {print $1; exit}' <<<"$targets")
  [[ -n "$MAIN_URI" ]] || die "no Debian archive found in this machine's apt sources (run apt-get update?)"
}

build_torch() {
  local name=$1 base=${1%-torch} image recipe box
  image="$IMAGE_REPO:$name"
  build "$base"
  recipe=$( { cat "$0"; docker image inspect -f '{{ index .Config.Labels "gpucluster.lab.recipe" }}' "$IMAGE_REPO:$base"; } | sha256sum | cut -c1-16)
  if [[ "${FORCE:-0}" != 1 ]] &&
     [[ "$(docker image inspect -f '{{ index .Config.Labels "gpucluster.lab.recipe" }}' "$image" 2>/dev/null)" == "$recipe" ]]; then
    echo "build-image: $image is current (recipe $recipe)"
    return
  fi
  echo "build-image: building $image: $IMAGE_REPO:$base plus python3-torch" >&2
  box="gpucluster-image-build-$$"
  docker rm -f "$box" >/dev/null 2>&1 || true
  # No systemd, no sshd: the layer gets packages only (no machine-id, no host keys), and the
  # package lists are emptied and dated 1970 again as in the base image. The shell is given as the
  # command, not with --entrypoint: docker commit keeps an entrypoint set that way (ENTRYPOINT []
  # does not clear it), and the image would then start "/bin/sh /lib/systemd/systemd".
  docker run --name "$box" "$IMAGE_REPO:$base" /bin/sh -euc '
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends python3-torch >/dev/null
    python3 -c "import torch, torch.distributed; assert torch.distributed.is_gloo_available()"
    rm -rf /var/lib/apt/lists/*_* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb
    touch -d @0 /var/lib/apt/lists' || { docker rm -f "$box" >/dev/null; die "installing python3-torch into $image failed"; }
  docker commit \
    -c 'CMD ["/lib/systemd/systemd"]' \
    -c "LABEL gpucluster.lab.recipe=$recipe" \
    "$box" "$image" >/dev/null
  docker rm -f "$box" >/dev/null
  # A node must boot systemd itself: refuse an image that would start anything else.
  [[ "$(docker image inspect -f '{{ json .Config.Entrypoint }} {{ json .Config.Cmd }}' "$image")" == 'null ["/lib/systemd/systemd"]' ]] ||
    die "$image does not start /lib/systemd/systemd as its only command: $(docker image inspect -f '{{ json .Config.Entrypoint }} {{ json .Config.Cmd }}' "$image")"
  echo "build-image: built $image (recipe $recipe)"
}
build() {
  local name=$1 suite image recipe work
  [[ $name == *-torch ]] && { build_torch "$name"; return; }
  suite=$(suite_of "$name")
  image="$IMAGE_REPO:$name"
  recipe=$( { cat "$0"; echo "$suite|$COMPONENTS|$PACKAGES"; } | sha256sum | cut -c1-16)
  if [[ "${FORCE:-0}" != 1 ]] &&
     [[ "$(docker image inspect -f '{{ index .Config.Labels "gpucluster.lab.recipe" }}' "$image" 2>/dev/null)" == "$recipe" ]]; then
    echo "build-image: $image is current (recipe $recipe)"
    return
  fi
  ensure_mmdebstrap
  mirror_uris
  work=$(mktemp -d "${TMPDIR:-/tmp}/gpucluster-image.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" RETURN
  {
    printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: %s\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$MAIN_URI" "$suite" "$suite" "$COMPONENTS"
    if [[ -n "$SEC_URI" ]]; then
      printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: %s\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$SEC_URI" "$suite" "$COMPONENTS"
    fi
  } >"$work/debian.sources"
  echo "build-image: building $image from Debian $suite" >&2
  # shellcheck disable=SC2016  # the hooks are expanded by mmdebstrap's shell ("$1" is the root fs)
  # Hooks: keep one sources file under its usual name; every container gets its own machine-id
  # and its own SSH host keys (made by ssh-keygen -A before sshd starts); keys only, no root or
  # password logins; no gettys; empty apt lists dated 1970 so that the first apt task really
  # updates them.
  mmdebstrap --variant=apt --mode=root --quiet \
    --include="$PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='mv "$1/etc/apt/sources.list.d/0000debian.sources" "$1/etc/apt/sources.list.d/debian.sources"' \
    --customize-hook=': > "$1/etc/machine-id"; rm -f "$1/var/lib/dbus/machine-id" "$1/etc/hostname"' \
    --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*_key "$1"/etc/ssh/ssh_host_*_key.pub' \
    --customize-hook='mkdir -p "$1/etc/systemd/system/ssh.service.d"; printf "[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n" > "$1/etc/systemd/system/ssh.service.d/host-keys.conf"' \
    --customize-hook='printf "PermitRootLogin no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n" > "$1/etc/ssh/sshd_config.d/gpucluster-lab.conf"' \
    --customize-hook='chroot "$1" systemctl mask getty.target console-getty.service systemd-firstboot.service' \
    --skip=cleanup/apt \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/*_* "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb; touch -d @0 "$1/var/lib/apt/lists"' \
    "$suite" "$work/rootfs.tar" "$work/debian.sources"
  docker import \
    -c 'CMD ["/lib/systemd/systemd"]' \
    -c 'ENV container=docker' \
    -c "LABEL gpucluster.lab.recipe=$recipe gpucluster.lab.suite=$suite" \
    "$work/rootfs.tar" "$image" >/dev/null
  echo "build-image: built $image (recipe $recipe)"
}

command -v docker >/dev/null || die "docker is not installed (make lab installs it: see README)"
docker info >/dev/null 2>&1 || die "the Docker daemon does not answer (make lab starts one: see README)"
[[ $# -gt 0 ]] || set -- debian12 debian13
for name in "$@"; do build "$name"; done
