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
# prints that file as a summary at the end. A stage that fails also leaves an excerpt of its output in
# STAGE_LOG.failed (a command's last lines; for molecule, the failed tasks with a few lines after each),
# which .ci/run prints after the stage list, and a one-line reason in STAGE_LOG.why (the task that
# stopped a host and its failure, cut to 1000 characters), which .ci/run prints last of all: a CI log
# cut to its last few lines still says what failed.
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

# The excerpt of a failed stage: at most 50 lines, so that it fits in the tail of a CI log.
excerpt() {
  local kind=$1 file=$2
  if [[ $kind == molecule ]]; then
    # Each failed task's name, then its failure with up to six lines after it (no SSH chatter).
    awk '/^TASK \[/ { task = $0 }
         /^(fatal|failed): |FAILED!|^ERROR |^CRITICAL |Executed: Failed/ {
           if (task != shown) { print task; shown = task }
           print; left = 6; next }
         left > 0 && !/^<[^>]+> (ESTABLISH|SSH: EXEC)/ { print; left-- }' "$file" | tail -n 50
  else
    tail -n 50 "$file"
  fi
}

# One line that says why a stage failed. For molecule: the failure that stopped a host, that is the last
# failed or unreachable task of a host that the first PLAY RECAP with failures counts as failed or
# unreachable (a failure a rescue handled or one ignored is not it), with the "assertion:" and "msg:" of its
# result when Ansible prints the result over the following lines (a block msg, "msg: |-", joined into the line);
# without such a recap (a cut log), the first failure not ignored; without any, molecule's own error. For
# another command: its last non-empty line (pytest's and make's summaries). Cut to 1000 characters.
reason() {
  local kind=$1 file=$2 line=
  if [[ $kind == molecule ]]; then
    line=$(awk '
      function indent(text) { match(text, /^ */); return RLENGTH }
      function keep() { if (pending != "") { last[phost] = pending; order[phost] = ++seq; if (first == "") first = pending }
                        pending = ""; msgwait = 0; inblock = 0 }
      /^TASK \[/ { keep(); task = $0; sub(/ \*+$/, "", task); next }
      /^(fatal|failed): \[/ { keep(); phost = $2; gsub(/^\[|\]:?$/, "", phost); pending = task " " $0
                             msgwait = ($0 ~ /=> *$/) ? 12 : 0; next }
      /^\.\.\.ignoring/ { pending = ""; msgwait = 0; inblock = 0; next }
      # A value printed over several lines (a block, msg: |-, or a long line folded) continues on lines indented
      # deeper than its key: joined into the line. A line indented no deeper ends it.
      inblock && ($0 ~ /^ *$/ || indent($0) > blockind) {
        b = $0; gsub(/^ +| +$/, "", b); if (b != "" && length(pending) < 1200) pending = pending " " b; next }
      inblock { inblock = 0 }
      # The result printed below a failure: its assertion (the condition that failed) and its msg. A line that
      # is not indented (the next task, the recap) ends it.
      msgwait > 0 && /^ / {
        msgwait--
        if ($0 ~ /^ +(assertion|msg): /) {
          k = $0; sub(/^ +/, "", k); blockind = indent($0); inblock = 1
          if (k ~ /^[a-z]+: [|>][-+]?$/) sub(/ [|>][-+]?$/, "", k)
          pending = pending " " k
          if (k ~ /^msg:/) msgwait = 0 }
        next }
      { msgwait = 0 }
      /^PLAY RECAP/ { keep(); recap = 1; best = ""; bestseq = 0; next }
      recap && /^[^ ].* : ok=/ {
        host = $1; bad = 0
        for (i = 2; i <= NF; i++) if ($i ~ /^(failed|unreachable)=[1-9]/) bad = 1
        if (bad && (host in last) && (best == "" || order[host] < bestseq)) { best = last[host]; bestseq = order[host] }
        next }
      recap { recap = 0; if (best != "") { print best; found = 1; exit }; delete last }
      /^CRITICAL |^ERROR / && !err { err = $0 }
      END { if (found) exit; keep(); if (recap && best != "") print best
            else if (first != "") print first
            else if (err) print err }' "$file")
  else
    line=$(grep -v '^[[:space:]]*$' "$file" | tail -n 1)
  fi
  line=${line:-(no output)}
  printf '%s\n' "${line:0:1000}"
}

start=$EPOCHSECONDS
echo "== $(now) start $name"
rc=0
out=
if [[ -n "${STAGE_LOG:-}" ]]; then
  out=$(mktemp "${TMPDIR:-/tmp}/gpucluster-stage.XXXXXX") || out=
fi
[[ -n $out ]] && trap 'rm -f "$out"' EXIT
kind='command'
if [[ $(basename "$1") == molecule ]]; then
  kind=molecule
  # Ansible and molecule flush each line; unbuffered Python keeps it so when their output is a pipe.
  PYTHONUNBUFFERED=1 "$@" 2>&1 | molecule_steps | tee "${out:-/dev/null}"
  rc=${PIPESTATUS[0]}
elif [[ -n $out ]]; then
  "$@" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
else
  "$@" || rc=$?
fi
summary=$(printf '== %s stage %s %d s' "$(now)" "$name" $((EPOCHSECONDS - start)))
((rc == 0)) || summary+=" FAILED (exit $rc)"
echo "$summary"
if [[ -n "${STAGE_LOG:-}" ]]; then
  echo "$summary" >>"$STAGE_LOG" || echo "stage: cannot append to STAGE_LOG=$STAGE_LOG" >&2
  if ((rc != 0)) && [[ -n $out ]]; then
    { echo "== what stage $name printed last (its whole output is above):"; excerpt "$kind" "$out"; } \
      >>"$STAGE_LOG.failed" || echo "stage: cannot append to $STAGE_LOG.failed" >&2
    echo "== why stage $name failed: $(reason "$kind" "$out")" >>"$STAGE_LOG.why" \
      || echo "stage: cannot append to $STAGE_LOG.why" >&2
  fi
fi
exit "$rc"
