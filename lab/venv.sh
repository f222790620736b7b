#!/usr/bin/env bash
# Make the controller's virtualenv from requirements/dev.txt (called by make):
#   lab/venv.sh PYTHON DIR            DIR is the checkout's .venv: made, or brought up to date in place
#   lab/venv.sh PYTHON DIR --cached   DIR is an entry of the venv cache that clones share (make
#                                     VENV_CACHE=..., set by .ci/run): its name is a hash of the
#                                     requirements files and the interpreter, so an entry is never
#                                     updated, only made whole or not at all
# A cache entry is made under a lock (two runs never build the same one), a directory without
# .stamp is a build that did not finish and is made again from nothing, and only the three newest
# entries are kept (each holds the ansible package's 40,000 files).
set -euo pipefail
cd "$(dirname "$0")/.."

[[ $# -ge 2 ]] || { echo "venv: usage: lab/venv.sh PYTHON DIR [--cached]" >&2; exit 2; }
py=$1 dir=$2 mode=${3:-}
if [[ -z "$py" ]] || ! command -v "$py" >/dev/null; then
  echo "venv: PYTHON=$py is not an interpreter: pass PYTHON=/path/to/python3.12 (ansible-core 2.21 needs >= 3.12)" >&2
  exit 1
fi

build() {
  "$py" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --upgrade pip
  "$dir/bin/python" -m pip install -q -r requirements/dev.txt
  touch "$dir/.stamp"
}

if [[ "$mode" != --cached ]]; then
  build
  exit 0
fi

cache=$(dirname "$dir")
mkdir -p "$cache"
exec 9>"$dir.lock"
flock 9
if [[ -f "$dir/.stamp" ]]; then
  echo "venv: $dir was made by another run meanwhile"
  exit 0
fi
rm -rf "$dir"
build
echo "venv: made $dir (VENV_CACHE)"
# Older entries go, unless another run holds one (its lock).
find "$cache" -mindepth 1 -maxdepth 1 -type d -name 'venv-*' -printf '%T@ %p\n' | sort -rn | tail -n +4 | cut -d' ' -f2- |
while IFS= read -r old; do
  (
    exec 8>"$old.lock"
    flock -n 8 || exit 0
    rm -rf "$old"
    rm -f "$old.lock"
    echo "venv: removed the older cache entry $old"
  )
done
