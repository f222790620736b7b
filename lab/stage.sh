#!/usr/bin/env bash
# Run one stage of `make test` (or any target) and say when it ended and how long it took, one line
# each, so that a CI log shows where the time goes:
#   == 22:41:33 stage ansible-lint 104 s
#   == 22:41:33 stage molecule health_check 90 s
#   == 22:41:33 stage units 131 s FAILED (exit 1)
# A molecule run also gets one line per action (destroy, syntax, create, prepare, converge,
# idempotence, check, verify), read from molecule's own "[scenario > action] Executed" lines:
#   == 22:35:10   step health_check > converge 41 s
# When STAGE_LOG names a file, the stage lines (not the steps) are appended to it as well; .ci/run
# prints that file as a summary at the end.
#   lab/stage.sh NAME COMMAND [ARGS...]
# The command's exit status is passed on unchanged.
set -uo pipefail

[[ $# -ge 2 ]] || { echo "stage: usage: lab/stage.sh NAME COMMAND [ARGS...]" >&2; exit 2; }
name=$1
shift

now() { date -u +%H:%M:%S; }

# Molecule prints "INFO     [health_check > converge] Executing" when an action starts and
# "... Executed: Successful" (or "Executed: 2 disabled", "Executed: Failed") when it ends.
molecule_steps() {
  local line step t0=$EPOCHSECONDS re='\[([A-Za-z0-9_.-]+) > ([a-z_]+)\] Execut(ing|ed)'
  while IFS= read -r line; do
    printf '%s\n' "$line"
    [[ "$line" =~ $re ]] || continue
    step="${BASH_REMATCH[1]} > ${BASH_REMATCH[2]}"
    if [[ ${BASH_REMATCH[3]} == ing ]]; then
      t0=$EPOCHSECONDS
    else
      printf '== %s   step %s %d s\n' "$(now)" "$step" $((EPOCHSECONDS - t0))
    fi
  done
}

start=$EPOCHSECONDS
echo "== $(now) start $name"
rc=0
if [[ $(basename "$1") == molecule ]]; then
  # Ansible and molecule flush each line; unbuffered Python keeps it so when their output is a pipe.
  PYTHONUNBUFFERED=1 "$@" 2>&1 | molecule_steps
  rc=${PIPESTATUS[0]}
else
  "$@" || rc=$?
fi
summary=$(printf '== %s stage %s %d s' "$(now)" "$name" $((EPOCHSECONDS - start)))
((rc == 0)) || summary+=" FAILED (exit $rc)"
echo "$summary"
if [[ -n "${STAGE_LOG:-}" ]]; then
  echo "$summary" >>"$STAGE_LOG" || echo "stage: cannot append to STAGE_LOG=$STAGE_LOG" >&2
fi
exit "$rc"
