#!/usr/bin/env bash
# make bench: every benchmark and its baseline measured in the same run, then
# one table of ratios (e2e/cmd/benchtable). Raw output: .cache/bench.txt.
# COUNT sets -count for the micro-benchmarks (default 5), MICRO=0 skips
# them. E2E=0 skips the benchmarks that need the local control plane
# (e2e/perf, run once each, about 15-25 minutes on 2 cores; QP_PERF_*
# variables change their sizes, see `go doc ./e2e/perf`); BENCH=regexp runs
# only the end-to-end benchmarks it matches, e.g.
# BENCH='Adaptive|Storm|Politeness' or BENCH=FreshChange. QP_PLOTS_DIR is where the stalled-API
# and storm benchmarks write their samples and plots: default .cache/plots;
# QP_PLOTS_DIR=docs refreshes the ones docs/performance.md shows.
# BenchmarkSharded (BENCH=Sharded) runs the example's binary as processes
# on a control plane of its own (ShardedListAndWatch on) over
# QP_PERF_SHARD_ROUTES routes, 5,000 by default (about 5 minutes); the
# large run: QP_PERF_SHARD_ROUTES=50000 BENCH=Sharded MICRO=0 make bench
# (about 40 minutes); QP_PERF_SHARD_PLOT=docs writes docs/shards-held.*.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .cache
plots="$(realpath -m "${QP_PLOTS_DIR:-.cache/plots}")"
out=.cache/bench.txt
: > "$out"
count="${COUNT:-5}"
if [[ "${MICRO:-1}" != 0 ]]; then
  echo "==> library micro-benchmarks (-count $count)"
  go test -run '^$' -bench 'Queue|Gauge|Reconcile|InstrumentsPerPatch|Equal' -benchmem -count "$count" ./... | tee -a "$out"
  if [[ -f examples/go.mod ]]; then
    echo "==> example benchmarks"
    (cd examples && go test -run '^$' -bench . -benchmem -count "$count" ./...) | tee -a "$out"
  fi
fi
if [[ "${E2E:-1}" != 0 ]]; then
  bash e2e/hack/build-binaries.sh
  echo "==> end-to-end benchmarks on the local control plane"
  (cd e2e && QP_PLOTS_DIR="$plots" go test -run '^$' -bench "${BENCH:-.}" -benchtime 1x -count 1 -timeout 90m ./...) | tee -a "$out"
  echo "==> stall and storm samples and plots in $plots"
fi
echo
(cd e2e && go run ./cmd/benchtable) < "$out" | tee .cache/bench-table.md
