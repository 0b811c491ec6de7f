#!/usr/bin/env bash
# Library size as the issues count it: non-test, non-blank, non-comment lines
# of the root package, ewma, leader, statuspatch (with its subpackages) and
# internal (the machinery behind them), per package, and every library file
# over 400 lines.
set -euo pipefail
cd "$(dirname "$0")/.."
count() { grep -v '^[[:space:]]*$' "$@" | grep -v '^[^:]*:[[:space:]]*//' | wc -l; }
files() { find "$@" -name '*.go' ! -name '*_test.go' | sort; }
total=0
for pkg in . ewma leader statuspatch internal; do
  if [ "$pkg" = . ]; then fs=$(find . -maxdepth 1 -name '*.go' ! -name '*_test.go' | sort); else fs=$(files "$pkg"); fi
  n=$(count -H $fs)
  printf '%-12s %5d\n' "$pkg" "$n"
  total=$((total + n))
done
printf '%-12s %5d\n' library "$total"
for f in $(find . -maxdepth 1 -name '*.go' ! -name '*_test.go'; files ewma leader statuspatch internal); do
  raw=$(wc -l <"$f")
  [ "$raw" -gt 400 ] && echo "over 400 lines: $f ($raw)"
done
true
