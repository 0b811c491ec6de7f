# quietpatch — see README.md.
#
#   make demo    the HTTPRoute status controller on a real local control plane;
#                leaves a report in .cache/demo/ (demo-metrics.svg)
#   make test    lint, apicheck, unit tests (-race), make goget, the envtest suite of
#                the controller-runtime integration and the end-to-end suite
#   make goget   what README's Install says, done by scratch consumers: `go get`
#                of the three library modules, published from the checkout at
#                the version file's version into a module proxy on disk; and
#                the checkout's replace directives and go.work (hack/goget.sh)
#   make apicheck  the version file, CHANGELOG.md, and the exported API
#                against the last release's snapshot (hack/apicheck,
#                golang.org/x/exp/apidiff; docs/releasing.md)
#   make release VERSION=X.Y.Z  cuts a release: snapshot, changelog section,
#                commit and tags (hack/release.sh; docs/releasing.md)
#   make envtest the controller-runtime integration's tests (envtest on the
#                real kube-apiserver and etcd of `make bins`)
#   make generate  controller-gen (sigs.k8s.io/controller-tools) for the
#                controller-runtime example: deepcopy, CRD, RBAC
#   make bench   benchmarks, one table of ratios measured in the same run
#   make lint    gofmt, go vet, go mod tidy -diff on every module
#   make cluster a local kube-apiserver + etcd until interrupted
#                (make cluster ARGS="-gateway-api=false -v": flags for it)
#   make monitoring  promtool checks of the example's alerts and dashboard

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
MODULES := . examples e2e e2e/tools integrations/controllerruntime integrations/otelprom hack/modzip hack/apicheck
# Modules whose tests need kube-apiserver and etcd (`make bins`): run by
# their own targets, not by `unit`.
BINS_MODULES := e2e integrations/controllerruntime
CONTROLLER_GEN := sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
# Modules that exist yet (the layout fills in over time).
PRESENT := $(foreach m,$(MODULES),$(if $(wildcard $(m)/go.mod),$(m)))

# envtest's convention: a folder with kube-apiserver and etcd (as
# `setup-envtest use -p path` prints it) replaces the source build. Made
# absolute here, since the recipes and tests run in other folders.
ifneq ($(strip $(KUBEBUILDER_ASSETS)),)
export KUBEBUILDER_ASSETS := $(abspath $(KUBEBUILDER_ASSETS))
endif

.PHONY: all test unit goget apicheck release envtest generate e2e bench lint bins tools monitoring demo cluster fuzz

all: test

bins:
	bash e2e/hack/build-binaries.sh

# promtool, from its own module (e2e/tools), cached like the binaries above.
tools:
	bash e2e/hack/build-tools.sh

# The example's alerting rules (promtool check/test rules, each alert broken
# on purpose must fail its tests), dashboard queries (promtool's parser) and
# metric names (the naming scheme). Quick: run it while editing
# examples/httproute-status/deploy/monitoring.
monitoring: tools
	cd e2e && $(GO) test -count=1 ./monitoring

lint:
	@for m in $(PRESENT); do \
	  echo "==> lint $$m"; \
	  (cd $$m && out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	   if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi; \
	   $(GO) vet ./... && $(GO) mod tidy -diff); \
	done

unit:
	@for m in $(filter-out $(BINS_MODULES),$(PRESENT)); do \
	  echo "==> unit tests $$m"; \
	  (cd $$m && $(GO) test -race -count=1 -timeout 15m ./...); \
	done

# A consumer's `go get` of the library and of its controller-runtime
# integration at a release made from the checkout (hack/goget.sh): module
# zips in a proxy on disk, the real module proxy for everything else. About
# a minute or less with a warm module cache.
goget:
	bash hack/goget.sh

# The API of the root module and of the integrations against the last
# release's snapshot (hack/apicheck/api/v<X.Y.Z>/), with CHANGELOG.md and
# the version file; a few seconds with a warm build cache.
apicheck:
	cd hack/apicheck && $(GO) run . -root ../..

# make release VERSION=X.Y.Z (docs/releasing.md).
release:
	VERSION="$(VERSION)" bash hack/release.sh

# controller-runtime's envtest.Environment on the binaries of `make bins`
# (or $$KUBEBUILDER_ASSETS): about a minute with -race on 2 cores.
envtest: bins
	cd integrations/controllerruntime && $(GO) test -race -count=1 -timeout 10m ./...

# Regenerates the controller-runtime example's deepcopy functions, CRD and
# RBAC from its Go types and markers; the results are committed.
generate:
	cd integrations/controllerruntime/examples/widget && \
	  $(GO) run $(CONTROLLER_GEN) object paths=./api/... && \
	  $(GO) run $(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd \
	    rbac:roleName=widget-status paths=. output:rbac:artifacts:config=config/rbac

e2e: bins tools
	cd e2e && $(GO) test -count=1 -timeout 60m -p 1 ./...

test: lint apicheck unit goget $(if $(filter integrations/controllerruntime,$(PRESENT)),envtest) $(if $(filter e2e,$(PRESENT)),monitoring e2e)

bench:
	bash hack/bench.sh

# demo and cluster build their command and exec it, so that it is make's own
# child: make passes SIGTERM on to its children (`go run` would die of it and
# leave its child running), and Ctrl-C reaches the whole process group.
# ARGS are passed to the command, e.g. make cluster ARGS="-gateway-api=false".
ARGS ?=

demo: bins
	mkdir -p e2e/.bin && cd e2e && $(GO) build -o .bin/demo ./cmd/demo
	cd e2e && exec .bin/demo $(ARGS)

cluster: bins
	mkdir -p e2e/.bin && cd e2e && $(GO) build -o .bin/localcluster ./cmd/localcluster
	cd e2e && exec .bin/localcluster $(ARGS)
