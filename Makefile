# quietpatch — see README.md.
#
#   make demo    the HTTPRoute status controller on a real local control plane
#   make test    lint, unit tests (-race) and the end-to-end suite
#   make bench   benchmarks, one table of ratios measured in the same run
#   make lint    gofmt, go vet, go mod tidy -diff on every module
#   make cluster a local kube-apiserver + etcd until interrupted
#                (make cluster ARGS="-gateway-api=false -v": flags for it)
#   make monitoring  promtool checks of the example's alerts and dashboard

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
MODULES := . examples e2e e2e/tools
# Modules that exist yet (the layout fills in over time).
PRESENT := $(foreach m,$(MODULES),$(if $(wildcard $(m)/go.mod),$(m)))

# envtest's convention: a folder with kube-apiserver and etcd (as
# `setup-envtest use -p path` prints it) replaces the source build. Made
# absolute here, since the recipes and tests run in other folders.
ifneq ($(strip $(KUBEBUILDER_ASSETS)),)
export KUBEBUILDER_ASSETS := $(abspath $(KUBEBUILDER_ASSETS))
endif

.PHONY: all test unit e2e bench lint bins tools monitoring demo cluster fuzz

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
	@for m in $(filter-out e2e,$(PRESENT)); do \
	  echo "==> unit tests $$m"; \
	  (cd $$m && $(GO) test -race -count=1 -timeout 15m ./...); \
	done

e2e: bins tools
	cd e2e && $(GO) test -count=1 -timeout 60m -p 1 ./...

test: lint unit $(if $(filter e2e,$(PRESENT)),monitoring e2e)

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
