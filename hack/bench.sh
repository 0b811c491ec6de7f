#!/usr/bin/env bash
# make bench: every benchmark and its baseline measured in the same run, then
# one table of ratios (e2e/cmd/benchtable). Raw output: .cache/bench.txt.
# COUNT sets -count for the micro-benchmarks (default 5), MICRO=0 skips
# them. E2E=0 skips the benchmarks that need the local control plane
# (e2e/perf, run once each; QP_PERF_* variables change their sizes, see
# `go doc ./e2e/perf`); BENCH=regexp runs only the end-to-end benchmarks it
# matches (and no scale table), e.g. BENCH='Adaptive|Storm|Politeness' or
# BENCH=FreshChange. QP_PLOTS_DIR is where the stalled-API and storm
# benchmarks write their samples and plots: default .cache/plots;
# QP_PLOTS_DIR=docs refreshes the ones docs/performance.md shows.
#
# The scale table: for each N of QP_SCALE_ROUTES (default 2000,10000; e.g.
# QP_SCALE_ROUTES=30000,50000,100000 for the large sizes), in a process of
# its own — a fresh control plane per size —, BenchmarkStorm (the plain
# client around a first convergence and a storm of quietpatch.New, with
# fresh edits in both), BenchmarkPoliteness (a competing client alone and
# during a storm) and BenchmarkSharded (R=1 K=1, R=1 K=8, R=4 K=8 of the
# example's binary; SHARDED=0 leaves it out), with N routes; benchtable
# prints the goals' ratios per N. SCALE=0 skips it. About 8 minutes at
# N = 2,000 and 25 at 10,000 on 2 cores; at 50,000 count two hours.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .cache
plots="$(realpath -m "${QP_PLOTS_DIR:-.cache/plots}")"
out=.cache/bench.txt
: > "$out"
count="${COUNT:-5}"
if [[ "${MICRO:-1}" != 0 ]]; then
  echo "==> library micro-benchmarks (-count $count)"
  go test -run '^$' -bench 'Queue|Gauge|Pass|Serve|InstrumentsPerCall|Equal' -benchmem -count "$count" ./... | tee -a "$out"
  if [[ -f examples/go.mod ]]; then
    echo "==> example benchmarks"
    (cd examples && go test -run '^$' -bench . -benchmem -count "$count" ./...) | tee -a "$out"
  fi
fi
if [[ "${E2E:-1}" != 0 ]]; then
  bash e2e/hack/build-binaries.sh
  scale="${SCALE:-1}"
  bench="${BENCH:-}"
  if [[ -z "$bench" && "$scale" != 0 ]]; then
    # Storm, Politeness and Sharded run in the scale table below;
    # FreshChange's edits are part of BenchmarkStorm's runs there.
    bench='SteadyState|Convergence|Failover|StalledMemory|Adaptive'
  elif [[ -n "$bench" ]]; then
    scale=0
  fi
  echo "==> end-to-end benchmarks on the local control plane"
  (cd e2e && QP_PLOTS_DIR="$plots" go test -run '^$' -bench "${bench:-.}" -benchtime 1x -count 1 -timeout 90m ./...) | tee -a "$out"
  if [[ "$scale" != 0 ]]; then
    scale_bench='BenchmarkStorm$|BenchmarkPoliteness$'
    if [[ "${SHARDED:-1}" != 0 ]]; then
      scale_bench+='|BenchmarkSharded$'
    fi
    IFS=, read -ra sizes <<< "${QP_SCALE_ROUTES:-2000,10000}"
    for n in "${sizes[@]}"; do
      echo "==> scale table: N = $n routes, a control plane of its own"
      echo "# scale n=$n" >> "$out"
      # The world's own routes (QP_PERF_ROUTES) only spread the storm's
      # over namespaces: 2,000 of them set the control plane up quickly.
      (cd e2e && QP_PLOTS_DIR="$plots" QP_PERF_ROUTES="${QP_PERF_ROUTES:-2000}" \
        QP_PERF_CONVERGE_ROUTES="${QP_PERF_CONVERGE_ROUTES:-1000}" QP_PERF_ADAPTIVE_ROUTES="${QP_PERF_ADAPTIVE_ROUTES:-1000}" \
        QP_PERF_STORM_ROUTES="$n" QP_PERF_SHARD_ROUTES="$n" \
        go test -run '^$' -bench "$scale_bench" -benchtime 1x -count 1 -timeout 240m ./perf/) | tee -a "$out"
    done
  fi
  echo "==> stall and storm samples and plots in $plots"
fi
echo
(cd e2e && go run ./cmd/benchtable) < "$out" | tee .cache/bench-table.md
