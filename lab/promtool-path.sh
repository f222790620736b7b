#!/usr/bin/env bash
# Prints the path of a promtool to use, fetching one when there is none: $PROMTOOL if set, else
# promtool from PATH, else Debian's `prometheus` package unpacked (not installed) into
# .cache/promtool via `apt-get download` (a Debian/Ubuntu controller with apt sources), given
# PROMTOOL_FETCH_TIMEOUT seconds (300).
# Used by tests/monitoring/promtool.sh and by molecule/storage/verify.yml: both may run at once in
# `make test` and either may come first, so the fetch holds a lock and the package is unpacked
# beside the cache and renamed into place only when complete.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ -n "${PROMTOOL:-}" ]; then echo "$PROMTOOL"; exit 0; fi
if command -v promtool >/dev/null 2>&1; then command -v promtool; exit 0; fi
cache="$ROOT/.cache/promtool"
if [ ! -x "$cache/usr/bin/promtool" ]; then
  command -v apt-get >/dev/null 2>&1 \
    || { echo "promtool-path.sh: no promtool on PATH and no apt-get to fetch Debian's; set PROMTOOL=/path/to/promtool" >&2; exit 2; }
  mkdir -p "$ROOT/.cache"
  exec 9>"$ROOT/.cache/promtool.lock"
  flock 9
  if [ ! -x "$cache/usr/bin/promtool" ]; then  # another fetcher may have finished while this one waited
    work="$(mktemp -d "$ROOT/.cache/promtool.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    mkdir "$work/deb"
    # A mirror that stops answering must not hold make test until CI's own limit.
    limit="${PROMTOOL_FETCH_TIMEOUT:-300}"
    (cd "$work/deb" && timeout "$limit" apt-get download prometheus >/dev/null 2>&1) \
      || { echo "promtool-path.sh: apt-get download prometheus failed or took longer than ${limit} s" \
                "(PROMTOOL_FETCH_TIMEOUT); set PROMTOOL=/path/to/promtool" >&2; exit 2; }
    dpkg-deb -x "$work"/deb/prometheus_*.deb "$work"
    rm -rf "$cache"  # what an interrupted fetch left, if anything
    mv -T "$work" "$cache"
  fi
fi
echo "$cache/usr/bin/promtool"
