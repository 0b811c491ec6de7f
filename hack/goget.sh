#!/usr/bin/env bash
# make goget: proves that a consumer who follows README's Install gets a
# working build of the three library modules, the day the checkout is
# released at the version of the `version` file.
#
# It publishes this checkout's three modules, github.com/quietpatch/quietpatch,
# .../integrations/controllerruntime and .../integrations/otelprom, at
# v<version> ($QP_GOGET_VERSION overrides it) into a module proxy on disk
# (hack/modzip: the .info, .mod, .zip and list files, the zip made with
# golang.org/x/mod/zip from what a tag would carry). Each integration's
# go.mod in that release requires the root at that version and has no
# replace (its checkout has `replace => ../..`, which its consumers would
# ignore). Then it runs the shell blocks of README's Install section as
# they are written, each in a scratch module named mycontroller outside
# the repository, whose main imports quietpatch, statuspatch,
# statuspatch/conditions, statuspatch/source, leader and both integrations:
#
#   get      `go get` of the controller-runtime integration alone first (its
#            release must bring the root by itself: `go get` of all at once
#            would pass even when the integration requires a root version
#            that does not exist, as MVS picks the higher one asked for);
#            then README's `go get ...@latest` block, a check that each
#            module resolved to the version, `go mod tidy`, `go build`, the
#            consumer, `go vet`
#   replace  README's `go mod edit -replace` block (tidy and build
#            included) against the checkout, linked as ../quietpatch; a
#            check that each module is replaced by the checkout; `go vet`
#   work     README's `go work init` block (build included)
#   work after replace
#            in the module the replace step left (tidy required each of
#            our modules at v0.0.0-00010101000000-000000000000): with its
#            replace directives dropped, a workspace must fail to build
#            (Go reads the required version's go.mod, which no proxy has:
#            README says so); README's `go mod edit -dropreplace` block,
#            then README's `go work init` block (build included)
#
# The go commands of the consumers see
#   GOPROXY=file://<proxy>,<upstream>   (get) our modules from disk; everything
#                                       else (a 404 from the file proxy) from
#                                       the real proxy ($(go env GOPROXY) less
#                                       direct/off, else proxy.golang.org);
#                                       replace and work: <upstream> only
#   GONOSUMDB=github.com/quietpatch/quietpatch
#                                       the checksum database is not asked
#                                       about our unpublished modules; every
#                                       other module is still verified
#                                       against GOSUMDB
#   GOPRIVATE= GONOPROXY=               (not GOPRIVATE: it would send our
#                                       modules to `direct`, i.e. git)
#   GOWORK=off                          no go.work applies, but the work
#                                       consumer's own
#   GODEBUG=goindex=0                   the go command indexes a module
#                                       version's files once (in GOCACHE) and
#                                       never looks again: each run publishes
#                                       the same version with the files of the
#                                       checkout as it is then
# The version is removed from the module cache before and after the run
# (the module cache would otherwise serve the first run's zip under the same
# version); runs on one machine take turns (flock).
#
# Quick with a warm module and build cache: the go commands mostly read
# caches, and the consumers' builds link one binary each. Measured on 2
# cores shared with other builds: see the time each step prints.
#
# QP_GOGET_BREAK makes a broken release, to check that this script catches
# it (it must then fail, naming the step):
#   identifier  the consumers use quietpatch.NoSuchIdentifier (step: go build)
#   require     the integration is published requiring the root at a
#               pseudo-version that no proxy has (step: go get of the
#               integration)
# QP_GOGET_KEEP=1 keeps the temporary folder (it is kept on failure anyway).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
version="${QP_GOGET_VERSION:-v$(tr -d '[:space:]' < version)}"
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

# forget removes the published version of our modules from the module cache.
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

# installBlock prints the shell block of README's Install section that
# contains $1.
installBlock() {
  awk -v want="$1" '
    /^## / { install = ($0 == "## Install") }
    install && /^```sh$/ { inblock = 1; block = ""; next }
    inblock && /^```$/ { inblock = 0; if (index(block, want)) { printf "%s", block; found = 1; exit } ; next }
    inblock { block = block $0 "\n" }
    END { exit !found }' "$repo/README.md"
}
step="read README's Install"
say "$step"
mkdir -p "$work/get" "$work/replace" "$work/work"
installBlock "go get $root@" > "$work/install-get.sh" || { echo "goget: README's Install has no block with \"go get $root@\"" >&2; exit 1; }
installBlock "go mod edit -replace" > "$work/install-replace.sh" || { echo "goget: README's Install has no block with \"go mod edit -replace\"" >&2; exit 1; }
installBlock "go work init" > "$work/install-work.sh" || { echo "goget: README's Install has no block with \"go work init\"" >&2; exit 1; }
installBlock "go mod edit -dropreplace" > "$work/install-drop.sh" || { echo "goget: README's Install has no block with \"go mod edit -dropreplace\"" >&2; exit 1; }
for f in get replace work drop; do sed 's/^/    | /' "$work/install-$f.sh"; done

run "build hack/modzip" bash -c 'cd hack/modzip && GOWORK=off go build -o "$1/modzip" .' _ "$work"
run "publish $root@$version" "$work/modzip" -proxy "$proxy" -dir "$repo" -version "$version"
integ_require=(-require "$root=$version")
if [[ "$break_mode" == require ]]; then
  say "QP_GOGET_BREAK=require: publishing the integration requiring $root@v0.0.0-00010101000000-000000000000"
  integ_require=(-require "$root=v0.0.0-00010101000000-000000000000")
fi
run "publish $integ@$version" "$work/modzip" -proxy "$proxy" -dir "$repo/integrations/controllerruntime" \
  -version "$version" "${integ_require[@]}"
run "publish $otelprom@$version" "$work/modzip" -proxy "$proxy" -dir "$repo/integrations/otelprom" \
  -version "$version" -require "$root=$version"

export GONOSUMDB="$root${GONOSUMDB:+,$GONOSUMDB}"
export GOPRIVATE="" GONOPROXY="" GOWORK=off GODEBUG="goindex=0${GODEBUG:+,$GODEBUG}"
say "GOPROXY=file://$proxy,$upstream GONOSUMDB=$GONOSUMDB GOSUMDB=$(go env GOSUMDB) GOFLAGS=$(go env GOFLAGS)"
if [[ "$(go env GOSUMDB)" == off ]]; then
  say "warning: GOSUMDB=off, other modules are not verified against a checksum database"
fi

broken=""
if [[ "$break_mode" == identifier ]]; then
  say "QP_GOGET_BREAK=identifier: the consumers use quietpatch.NoSuchIdentifier"
  broken=$'\n\t_ = quietpatch.NoSuchIdentifier // QP_GOGET_BREAK=identifier'
fi
# consumer writes mycontroller in $1: a controller-runtime user's main
# with loose references (types, zero values, function values, and Add in a
# function that is never run), so that it checks that every package
# resolves and builds without pinning signatures.
consumer() {
  mkdir -p "$1/mycontroller"
  cat > "$1/mycontroller/main.go" <<EOG
// Command mycontroller is hack/goget.sh's stand-in for a user of a release.
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
		Config: quietpatch.Config{Name: "widgets", Lease: leader.Config{Namespace: "widget-system", Name: "widget-status"}},
	})
	return err
}

func main() {
	_ = add
	_ = quietpatch.Config{}
	_ = leader.Config{}
	_ = statuspatch.MergePatch{}
	_ = otelprom.NewMeterProvider
	_ = source.FromInformer[*unstructured.Unstructured]${broken}
	fmt.Println("mycontroller, a consumer of github.com/quietpatch/quietpatch: built")
}
EOG
  (cd "$1/mycontroller" && go mod init example.com/mycontroller 2>/dev/null)
}

# get: the release from the proxy on disk, as README's go get lines say.
export GOPROXY="file://$proxy,$upstream"
consumer "$work/get"
cd "$work/get/mycontroller"
# The integration alone first, as a controller-runtime user would: its
# release must bring the root at the same version by itself.
run "get: go get $integ@$version" go get "$integ@$version"
cd "$work/get"
run "get: README's go get lines" bash -euo pipefail "$work/install-get.sh"
cd "$work/get/mycontroller"
step="get: check the versions resolved"
say "$step"
for m in "$root" "$integ" "$otelprom"; do
  got=$(go list -m -f '{{.Version}}{{with .Replace}} => {{.Path}} {{.Version}}{{end}}' "$m")
  echo "    $m $got"
  [[ "$got" == "$version" ]] || { echo "goget: $m resolved to $got, want $version" >&2; exit 1; }
done
run "get: go mod tidy" go mod tidy
run "get: go build ./..." go build -o "$work/bin/" ./...
run "get: run the consumer" "$work/bin/mycontroller"
run "get: go vet ./..." go vet ./...

# replace and work: the checkout, as ../quietpatch; nothing of ours from a proxy.
export GOPROXY="$upstream"
consumer "$work/replace"
ln -s "$repo" "$work/replace/quietpatch"
cd "$work/replace"
run "replace: README's go mod edit -replace lines" bash -euo pipefail "$work/install-replace.sh"
cd "$work/replace/mycontroller"
step="replace: check the modules are the checkout's"
say "$step"
for m in "$root" "$integ" "$otelprom"; do
  got=$(go list -m -f '{{with .Replace}}{{.Path}}{{end}}' "$m")
  echo "    $m => $got"
  [[ "$got" == ../quietpatch* ]] || { echo "goget: $m is not replaced by the checkout: $got" >&2; exit 1; }
done
run "replace: go vet ./..." go vet ./...

consumer "$work/work"
ln -s "$repo" "$work/work/quietpatch"
cd "$work/work"
run "work: README's go work init lines" env GOWORK= bash -euo pipefail "$work/install-work.sh"
cd "$work/work/mycontroller"
step="work: check the workspace"
say "$step"
mods=$(GOWORK= go list -m | sort | tr '\n' ' ')
echo "    $mods"
for m in "$root" "$integ" "$otelprom"; do
  [[ " $mods" == *" $m "* ]] || { echo "goget: the workspace lacks $m: $mods" >&2; exit 1; }
done
# work after replace: the module the replace step left.
cd "$work/replace/mycontroller"
step="work after replace: a workspace beside requirements at the zero pseudo-version must not build"
say "$step"
cp go.mod "$work/go.mod.replaced"
go mod edit -dropreplace="$root" -dropreplace="$integ" -dropreplace="$otelprom"
GOWORK= go work init . ../quietpatch ../quietpatch/integrations/controllerruntime ../quietpatch/integrations/otelprom
if GOWORK= go build ./... 2> "$work/work-after-replace.err"; then
  echo "goget: the workspace built although go.mod requires our modules at v0.0.0-00010101000000-000000000000: README's Install says it does not" >&2
  exit 1
fi
grep -q "@v0.0.0-00010101000000-000000000000" "$work/work-after-replace.err" || {
  echo "goget: the workspace failed otherwise than README's Install says:" >&2
  cat "$work/work-after-replace.err" >&2
  exit 1
}
echo "    fails as README says: $(head -n 1 "$work/work-after-replace.err")"
rm -f go.work go.work.sum
cp "$work/go.mod.replaced" go.mod
cd "$work/replace"
run "work after replace: README's go mod edit -dropreplace lines" bash -euo pipefail "$work/install-drop.sh"
run "work after replace: README's go work init lines" env GOWORK= bash -euo pipefail "$work/install-work.sh"
cd "$work/replace/mycontroller"
step="work after replace: check the workspace"
say "$step"
mods=$(GOWORK= go list -m | sort | tr '\n' ' ')
echo "    $mods"
for m in "$root" "$integ" "$otelprom"; do
  [[ " $mods" == *" $m "* ]] || { echo "goget: the workspace lacks $m: $mods" >&2; exit 1; }
done
step="done"
say "ok: README's Install, at $version and from the checkout: go get, go mod tidy, go build, go vet passed in $((SECONDS - start)) s"
