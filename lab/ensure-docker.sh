#!/usr/bin/env bash
# Make sure a Docker daemon answers: install Debian's docker.io when docker is missing, start
# dockerd when none runs (machines without systemd as PID 1 included), and say why when it fails.
set -euo pipefail
say() { echo "ensure-docker: $*" >&2; }

if ! command -v docker >/dev/null || ! command -v dockerd >/dev/null; then
  command -v apt-get >/dev/null || { say "docker is missing and this is not a Debian/Ubuntu machine: install Docker, then run make again"; exit 1; }
  [[ $(id -u) == 0 ]] || { say "docker is missing; installing it needs root (apt-get install docker.io)"; exit 1; }
  say "installing Debian's docker.io"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi
docker info >/dev/null 2>&1 && exit 0

if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
  systemctl start docker || true
else
  [[ $(id -u) == 0 ]] || { say "no Docker daemon answers and starting one needs root"; exit 1; }
  say "starting dockerd (log: /var/log/dockerd.log)"
  nohup setsid dockerd >/var/log/dockerd.log 2>&1 &
fi
for _ in $(seq 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 1
done
say "the Docker daemon did not come up within 60 s; its last words:"
tail -n 15 /var/log/dockerd.log >&2 2>/dev/null || journalctl -u docker -n 15 --no-pager >&2 || true
exit 1
