#!/usr/bin/env bash
# Builds promtool (github.com/prometheus/prometheus/cmd/promtool) from the Go
# module proxy and links it into e2e/.bin (git ignores it), for the checks of
# the example's alerting rules and dashboard (e2e/monitoring).
#
# promtool comes from its own module, e2e/tools (a `tool` directive in
# e2e/tools/go.mod pins the Prometheus version), so that Prometheus and its
# dependencies enter neither the library's go.mod nor the e2e module's.
#
# Like build-binaries.sh, the versioned binary lives in a machine-wide store
# ($QP_BIN_CACHE, default ~/.cache/quietpatch/bin) as promtool-<version>, so
# every clone on the machine (CI's fresh clone included) reuses it; it is
# rebuilt when e2e/tools/go.mod pins another version. The build uses the
# `remove_all_sd` tag: rule checks need none of Prometheus's service-discovery
# plugins, and leaving them out saves ~250 of ~1,360 packages. Measured cold
# (empty Go build cache, modules downloaded) on 2 cores shared with other
# builds (load ~10): 254 s wall, 169 s of CPU; 83 s wall on a quieter machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bindir="${QP_BIN_DIR:-$PWD/.bin}"
store="${QP_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/quietpatch/bin}"
mkdir -p "$bindir" "$store"

pkg=github.com/prometheus/prometheus/cmd/promtool
tags=remove_all_sd
ver=$(cd tools && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
out="$store/promtool-$ver"
if [[ -x "$out" ]]; then
  echo "==> promtool $ver: cached at $out"
else
  total=$(cd tools && go list -tags "$tags" -deps "$pkg" | wc -l)
  echo "==> building promtool $ver ($total packages; a cold build takes ~3 CPU-minutes: 1.5-4 min on 2 cores)"
  start=$SECONDS
  (cd tools && go build -v -trimpath -tags "$tags" \
    -ldflags "-X github.com/prometheus/common/version.Version=$ver" -o "$out.tmp" "$pkg") 2>&1 | awk -v total="$total" '
    /^#|: / { print; next }
    { n++; if (n % 100 == 0) printf "    promtool: %d/%d packages compiled\n", n, total; fflush() }'
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "build of promtool failed" >&2; exit 1; }
  mv "$out.tmp" "$out"
  echo "==> promtool built in $((SECONDS - start)) s"
fi
ln -sfn "$out" "$bindir/promtool"
"$bindir/promtool" --version | head -n 1
