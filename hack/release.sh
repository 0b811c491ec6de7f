#!/usr/bin/env bash
# make release VERSION=X.Y.Z: cuts release vX.Y.Z of the three library
# modules from a clean checkout whose CI is green (docs/releasing.md):
#
#   1. writes X.Y.Z to the version file;
#   2. hack/apicheck -release: the changelog's shape, the API of the
#      checkout against the last release's snapshot under the version rule
#      (a break needs a minor bump before 1.0, a major one after; additions
#      a minor one), then writes the snapshot hack/apicheck/api/vX.Y.Z/ and
#      moves CHANGELOG.md's Unreleased entries under "## X.Y.Z - <today>";
#   3. makes the integrations require the library at vX.Y.Z (their
#      `replace => ../..` stays for work in the checkout);
#   4. commits "Release vX.Y.Z" and tags it vX.Y.Z,
#      integrations/controllerruntime/vX.Y.Z and integrations/otelprom/vX.Y.Z
#      (annotated). It pushes nothing: it prints the push command.
#
# Anything failing before the commit puts the files back as they were.
set -euo pipefail
cd "$(dirname "$0")/.."
ver="${VERSION:-}"
ver="${ver#v}"
if [[ ! "$ver" =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$ ]]; then
  echo "release: usage: make release VERSION=X.Y.Z (got \"${VERSION:-}\")" >&2
  exit 2
fi
if [[ -n "$(git status --porcelain)" ]]; then
  echo "release: the checkout has uncommitted changes; commit or stash them first" >&2
  git status --short >&2
  exit 1
fi
integrations=(integrations/controllerruntime integrations/otelprom)
tags=("v$ver")
for m in "${integrations[@]}"; do tags+=("$m/v$ver"); done
for t in "${tags[@]}"; do
  if git rev-parse -q --verify "refs/tags/$t" >/dev/null; then
    echo "release: tag $t exists already" >&2
    exit 1
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/quietpatch-release.XXXXXX")
committed=""
restore() {
  local rc=$?
  if [[ -z "$committed" ]]; then
    git checkout -q -- version CHANGELOG.md "${integrations[@]/%//go.mod}" 2>/dev/null || true
    rm -rf "hack/apicheck/api/v$ver"
    [[ $rc -ne 0 ]] && echo "release: failed; the checkout is back as it was" >&2
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap restore EXIT

echo "$ver" > version
(cd hack/apicheck && GOWORK=off go build -o "$tmp/apicheck" .)
"$tmp/apicheck" -release
for m in "${integrations[@]}"; do
  (cd "$m" && go mod edit -require="github.com/quietpatch/quietpatch@v$ver" && GOWORK=off go mod tidy -diff)
done
"$tmp/apicheck" # the result passes the everyday check
git add version CHANGELOG.md "hack/apicheck/api/v$ver" "${integrations[@]/%//go.mod}"
git commit -q -m "Release v$ver"
committed=1
for t in "${tags[@]}"; do
  git tag -a "$t" -m "quietpatch v$ver"
done
echo "release: committed $(git rev-parse --short HEAD) \"Release v$ver\" and tagged ${tags[*]}"
echo "release: publish with: git push origin HEAD ${tags[*]}"
