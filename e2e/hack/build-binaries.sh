#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy and links them into
# e2e/.bin (git ignores it; $QP_BIN_DIR overrides it). The versioned binaries
# live in a machine-wide store ($QP_BIN_CACHE, default ~/.cache/quietpatch/bin)
# so every clone on the machine — CI's fresh clone included — reuses them; a
# binary is reused while its file name matches the module version pinned in
# e2e/go.mod, otherwise it is rebuilt. Progress: one line per 100 compiled
# packages, against the total.
#
# envtest's convention: when $KUBEBUILDER_ASSETS names a folder (as
# controller-runtime's setup-envtest leaves it), nothing is built: the links
# point at its kube-apiserver and etcd instead, and the script fails, naming
# the file, if either is missing.
#
# The go commands run inside the e2e module with GOWORK=off, so a go.work of
# the caller's (one that does not list e2e, say) does not change what is built.
set -euo pipefail
caller_pwd=$PWD
cd "$(dirname "$0")/.."
export GOWORK=off
bindir="${QP_BIN_DIR:-$PWD/.bin}"
mkdir -p "$bindir"

# link name target: points $bindir/name at target, unless they are one file
# already (QP_BIN_DIR set to the folder that holds the binary itself).
link() {
  if [[ "$(realpath -m "$bindir/$1")" != "$(realpath -m "$2")" ]]; then
    ln -sfn "$2" "$bindir/$1"
  fi
}

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  assets=$KUBEBUILDER_ASSETS
  [[ $assets == /* ]] || assets="$caller_pwd/$assets"
  for name in kube-apiserver etcd; do
    if [[ ! -f "$assets/$name" || ! -x "$assets/$name" ]]; then
      echo "build-binaries.sh: KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable file $name ($assets/$name); point it at a folder with kube-apiserver and etcd (setup-envtest use -p path prints one) or unset it to build both from source" >&2
      exit 1
    fi
  done
  for name in kube-apiserver etcd; do
    version=$(timeout 30 "$assets/$name" --version 2>&1 | head -n 1 || true)
    echo "==> $name: using $assets/$name from KUBEBUILDER_ASSETS (${version:-version unknown}); not building it"
    link "$name" "$assets/$name"
  done
  exit 0
fi

store="${QP_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/quietpatch/bin}"
mkdir -p "$store"

build() { # name pkg version
  local name=$1 pkg=$2 ver=$3 out="$store/$1-$3"
  if [[ -x "$out" ]]; then
    echo "==> $name $ver: cached at $out"
  else
    local total
    total=$(go list -deps "$pkg" | wc -l)
    echo "==> building $name $ver ($total packages; a cold kube-apiserver build takes ~8 min on 2 cores)"
    local start=$SECONDS
    if ! go build -v -trimpath -o "$out.tmp" "$pkg" 2>&1 | awk -v total="$total" -v name="$name" '
      /^#|: / { print; next }
      { n++; if (n % 100 == 0) printf "    %s: %d/%d packages compiled\n", name, n, total; fflush() }'; then
      echo "build-binaries.sh: building $name $ver ($pkg) failed; the compiler's messages are above" >&2
      exit 1
    fi
    mv "$out.tmp" "$out"
    echo "==> $name built in $((SECONDS - start)) s"
  fi
  link "$name" "$out"
}

build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
build etcd ./cmd/etcd "$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
