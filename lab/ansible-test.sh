#!/usr/bin/env bash
# Run ansible-test on a copy of the tree laid out as ansible_collections/gpucluster/core, which
# ansible-test requires. The copy holds the files git tracks plus untracked files git does not
# ignore, less the collections/ link that points back at the checkout.
#   lab/ansible-test.sh sanity [extra ansible-test args]
set -euo pipefail
cd "$(dirname "$0")/.."

# ansible-test bootstraps pip in its virtual environments with a script it downloads; provide an
# offline one under the name it looks for (the pip version it pins).
pip_version=$(python - <<'PY'
import re, ansible_test, pathlib
src = pathlib.Path(ansible_test.__file__).parent.joinpath('_internal', 'python_requirements.py').read_text()
print(re.search(r"pip='([0-9.]+)'", src).group(1))
PY
)
cache=~/.ansible/test/cache
mkdir -p "$cache"
cp lab/get_pip_offline.py "$cache/get_pip_${pip_version//./_}.py"

# The shellcheck sanity test is skipped silently when shellcheck is missing: install Debian's.
if ! command -v shellcheck >/dev/null && command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
  echo "ansible-test: installing Debian's shellcheck for the shellcheck sanity test"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null; }
fi

work=${ANSIBLE_TEST_WORKDIR:-/tmp/gpucluster-ansible-test}
dest="$work/ansible_collections/gpucluster/core"
rm -rf "$dest"
mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard | grep -zv '^collections/' |
  while IFS= read -r -d '' f; do [[ -e "$f" ]] && printf '%s\0' "$f"; done |
  xargs -0 cp --parents -P -t "$dest"
cd "$dest"
git init -q . && git add -A >/dev/null
echo "ansible-test: running in $dest"
ansible-test "$@" --venv --python "${ANSIBLE_TEST_PYTHON:-3.12}" --color no
# Modules and module_utils also run on managed nodes with older Pythons (RHEL 9 has 3.9): compile
# them there too when such an interpreter is at hand (pyenv on the CI machines).
if [[ "$1" == sanity && -z "${ANSIBLE_TEST_PYTHON:-}" ]]; then
  for v in 3.9 3.11 3.13; do
    py=""
    for candidate in "$(pyenv root 2>/dev/null)"/versions/"$v".*/bin; do
      [[ -x "$candidate/python$v" ]] && py=$candidate
    done
    if [[ -z "$py" ]] && command -v "python$v" >/dev/null; then
      py=$(dirname "$(command -v "python$v")")
    fi
    [[ -n "$py" ]] || continue
    PATH="$py:$PATH" ansible-test sanity --test compile --python "$v" --color no
  done
fi
