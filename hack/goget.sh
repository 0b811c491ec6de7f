#!/usr/bin/env bash
# make goget: proves that a consumer can `go get` the library and its
# controller-runtime integration the day a release is tagged.
#
# It publishes this checkout's two modules, github.com/quietpatch/quietpatch
# and github.com/quietpatch/quietpatch/integrations/controllerruntime, at a
# fake version ($QP_GOGET_VERSION, default v0.99.0-ci.<unix time>) into a module proxy
# on disk (hack/modzip: the .info, .mod, .zip and list files, the zip made
# with golang.org/x/mod/zip from what a tag would carry). The integration's
# go.mod in that release requires the root at the fake version and has no
# replace (its checkout has `replace => ../..`, which its consumers would
# ignore). Then, in a scratch module outside the repository, a small consumer
# that imports quietpatch, statuspatch, statuspatch/conditions,
# statuspatch/source, leader and the integration does what a user does:
# `go get` of both at that version, `go mod tidy`, `go build ./...`,
# `go vet ./...`.
#
# The go commands of the consumer see
#   GOPROXY=file://<proxy>,<upstream>   our two modules from disk; everything
#                                       else (a 404 from the file proxy) from
#                                       the real proxy ($(go env GOPROXY) less
#                                       direct/off, else proxy.golang.org)
#   GONOSUMDB=github.com/quietpatch/quietpatch
#                                       the checksum database is not asked
#                                       about our unpublished modules; every
#                                       other module is still verified
#                                       against GOSUMDB
#   GOPRIVATE= GONOPROXY=               (not GOPRIVATE: it would send our
#                                       modules to `direct`, i.e. git)
#   GOWORK=off                          no go.work of the checkout applies
# The fake version is removed from the module cache before and after the
# run, so that a second run publishes the checkout as it is then (the module
# cache would otherwise serve the first run's zip under the same version);
# runs on one machine take turns (flock).
#
# Quick with a warm module and build cache: the go commands mostly read
# caches, and the consumer's build links one binary. Measured on 2 cores
# shared with other builds (load 11-15): 43-57 s; the first run on this
# machine, which downloaded a few modules `go mod tidy` wants (ginkgo,
# gomega, ...) and compiled the packages, 115 s. Each step prints its time.
# The consumer first gets the integration alone, as a controller-runtime
# user would: `go get` of both at once would pass even when the
# integration's release requires a root version that does not exist (MVS
# picks the higher one asked for), and hide that broken release.
#
# QP_GOGET_BREAK makes a broken release, to check that this script catches
# it (it must then fail, naming the step):
#   identifier  the consumer uses quietpatch.NoSuchIdentifier (step: go build)
#   require     the integration is published with its go.mod as checked in:
#               the replace, and a require of the root at a pseudo-version
#               that no proxy has (step: go get of the integration)
# QP_GOGET_KEEP=1 keeps the temporary folder (it is kept on failure anyway).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
# A version of its own each run: the go command indexes a module version's
# files once (in GOCACHE) and never looks again, so a version reused with
# other files would build the files of an earlier run.
version="${QP_GOGET_VERSION:-v0.99.0-ci.$(date +%s)}"
break_mode="${QP_GOGET_BREAK:-}"
case "$break_mode" in
  "" | identifier | require) ;;
  *) echo "goget: QP_GOGET_BREAK=$break_mode: want identifier or require" >&2; exit 2 ;;
esac
root=github.com/quietpatch/quietpatch
integ=$root/integrations/controllerruntime
otelprom=$root/integrations/otelprom
start=$SECONDS
step="setup"
say() { echo "==> goget: $*"; }
# run names a step, runs it and says how long it took.
run() {
  local t=$SECONDS
  step="$1"
  shift
  say "$step"
  "$@"
  echo "    ($((SECONDS - t)) s)"
}

work=$(mktemp -d "${TMPDIR:-/tmp}/quietpatch-goget.XXXXXX")
proxy="$work/proxy"
consumer="$work/consumer"
modcache=$(go env GOMODCACHE)

# forget removes the fake version of our modules from the module cache.
forget() {
  local m
  for m in "$root" "$integ" "$otelprom"; do
    if [[ -d "$modcache/$m@$version" ]]; then
      chmod -R u+w "$modcache/$m@$version"
      rm -rf "$modcache/$m@$version"
    fi
    rm -f "$modcache/cache/download/$m/@v/$version".{info,mod,zip,ziphash,lock}
    list="$modcache/cache/download/$m/@v/list"
    if [[ -f "$list" ]]; then
      awk -v v="$version" '$0 != v' "$list" > "$list.tmp" && mv "$list.tmp" "$list"
    fi
  done
}

finish() {
  local rc=$?
  forget || true
  if [[ $rc -ne 0 ]]; then
    echo "goget: FAILED at step \"$step\" (exit $rc) after $((SECONDS - start)) s; files kept in $work" >&2
  elif [[ "${QP_GOGET_KEEP:-}" == 1 ]]; then
    echo "goget: files kept in $work"
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap finish EXIT

lockdir="${XDG_CACHE_HOME:-$HOME/.cache}/quietpatch"
mkdir -p "$lockdir"
exec 9>"$lockdir/goget.lock"
flock 9
forget

# The real proxy for everything else: the configured GOPROXY less
# direct/off (our module paths' prefixes must get a 404, not a git clone).
upstream=$(go env GOPROXY | awk -v RS='[,|\n]' '$0 != "" && $0 != "direct" && $0 != "off" { printf "%s%s", sep, $0; sep = "," }')
upstream="${upstream:-https://proxy.golang.org}"

run "build hack/modzip" bash -c 'cd hack/modzip && GOWORK=off go build -o "$1/modzip" .' _ "$work"
run "publish $root@$version" "$work/modzip" -proxy "$proxy" -dir "$repo" -version "$version"
integ_require=(-require "$root=$version")
if [[ "$break_mode" == require ]]; then
  say "QP_GOGET_BREAK=require: publishing the integration with its go.mod as checked in"
  integ_require=()
fi
run "publish $integ@$version" "$work/modzip" -proxy "$proxy" -dir "$repo/integrations/controllerruntime" \
  -version "$version" "${integ_require[@]}"
run "publish $otelprom@$version" "$work/modzip" -proxy "$proxy" -dir "$repo/integrations/otelprom" \
  -version "$version" "${integ_require[@]}"

export GOPROXY="file://$proxy,$upstream"
export GONOSUMDB="$root${GONOSUMDB:+,$GONOSUMDB}"
export GOPRIVATE="" GONOPROXY="" GOWORK=off
say "GOPROXY=$GOPROXY GONOSUMDB=$GONOSUMDB GOSUMDB=$(go env GOSUMDB) GOFLAGS=$(go env GOFLAGS)"
if [[ "$(go env GOSUMDB)" == off ]]; then
  say "warning: GOSUMDB=off, other modules are not verified against a checksum database"
fi

step="write the consumer"
say "$step in $consumer"
mkdir -p "$consumer"
broken=""
if [[ "$break_mode" == identifier ]]; then
  say "QP_GOGET_BREAK=identifier: the consumer uses quietpatch.NoSuchIdentifier"
  broken=$'\n\t_ = quietpatch.NoSuchIdentifier // QP_GOGET_BREAK=identifier'
fi
# A controller-runtime user's main: loose references (types, zero values,
# function values, and Add in a function that is never run), so that it
# checks that every package resolves and builds without pinning signatures.
cat > "$consumer/main.go" <<EOF
// Command consumer is hack/goget.sh's stand-in for a user of a release.
package main

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/integrations/controllerruntime"
	"github.com/quietpatch/quietpatch/integrations/otelprom"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// add is what a controller's main calls with its manager; never run here.
func add(ctx context.Context, mgr manager.Manager) error {
	computer, err := conditions.New(conditions.Config[*unstructured.Unstructured]{
		Conditions: func(*unstructured.Unstructured) ([]metav1.Condition, error) { return nil, nil },
	})
	if err != nil {
		return err
	}
	widget := &unstructured.Unstructured{}
	widget.SetAPIVersion("example.com/v1")
	widget.SetKind("Widget")
	_, err = controllerruntime.Add(ctx, mgr, widget, computer, controllerruntime.Options{
		Config: quietpatch.Config{Options: statuspatch.Options{Name: "widgets"}, Lease: leader.Config{Namespace: "widget-system", Name: "widget-status"}},
	})
	return err
}

func main() {
	_ = add
	_ = quietpatch.Config{}
	_ = leader.Config{}
	_ = statuspatch.MergePatch{}
	_ = otelprom.NewMeterProvider
	_ = source.Informer[*unstructured.Unstructured]${broken}
	fmt.Println("consumer of github.com/quietpatch/quietpatch: built")
}
EOF
cd "$consumer"
run "go mod init example.com/consumer" go mod init example.com/consumer
# The integration alone first, as a controller-runtime user would: its
# release must bring the root at the same version by itself.
run "go get $integ@$version" go get "$integ@$version"
run "go get $otelprom@$version" go get "$otelprom@$version"
run "go get $root@$version $integ@$version" go get "$root@$version" "$integ@$version"
step="check the versions resolved"
say "$step"
for m in "$root" "$integ" "$otelprom"; do
  got=$(go list -m -f '{{.Version}}{{with .Replace}} => {{.Path}} {{.Version}}{{end}}' "$m")
  echo "    $m $got"
  [[ "$got" == "$version" ]] || { echo "goget: $m resolved to $got, want $version" >&2; exit 1; }
done
run "go mod tidy" go mod tidy
run "go build ./..." go build -o "$work/bin/" ./...
run "run the consumer" "$work/bin/consumer"
run "go vet ./..." go vet ./...
step="done"
say "ok: $root and $integ at $version: go get, go mod tidy, go build, go vet passed in $((SECONDS - start)) s"
