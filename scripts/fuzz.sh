#!/usr/bin/env bash
# Fuzzes every reader of our file formats with libFuzzer under clang, ASan and UBSan: NEFF, NTFF,
# trace.json (the one reader, through the analysis reader and the Explorer server's index), the manifest,
# safetensors checkpoints and the server's upload validator
# (the whole library is built with coverage instrumentation,
# -fsanitize=fuzzer-no-link, so the fuzzer sees the readers' branches). Each target starts from its
# seed corpus (tests/fuzz/corpus/<target>, copied, so the repository's corpus is not changed).
#   scripts/fuzz.sh            CI: a fixed seed and a fixed number of runs per target (about a minute
#                              each), so that a run is reproducible and a red CI names a real input
#   scripts/fuzz.sh SECONDS    exploring: random seeds, SECONDS per target (docs/testing.md)
# A failure (crash, sanitizer report, hang over 10 s, over 2 GiB) fails the script and leaves the input
# in $FUZZ_OUT (default build-fuzz/findings).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-}
jobs=$(nproc)
out=${FUZZ_OUT:-build-fuzz/findings}
targets=(neff_fuzz ntff_fuzz manifest_fuzz trace_reader_fuzz upload_fuzz safetensors_fuzz)
# CI's runs per target: about a minute each on the project's 2-core machine (execs/s differ by reader).
declare -A ci_runs=([neff_fuzz]=2000000 [ntff_fuzz]=2000000 [manifest_fuzz]=500000
                    [trace_reader_fuzz]=12000 [upload_fuzz]=70000
                    [safetensors_fuzz]=100000)  # ~30 s: 99k runs took 30 s at ~3,200 exec/s

cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DSIGHTLINE_SANITIZE='address;undefined' \
  -DSIGHTLINE_BUILD_BENCH=OFF -DSIGHTLINE_BUILD_EXAMPLES=OFF -DSIGHTLINE_BUILD_TESTS=ON >/dev/null
cmake --build build-fuzz -j "$jobs" --target "${targets[@]}"

mkdir -p "$out"
for target in "${targets[@]}"; do
  corpus=$(mktemp -d)
  cp tests/fuzz/corpus/"$target"/* "$corpus"/
  if [ -n "$seconds" ]; then
    budget=(-max_total_time="$seconds")
    echo "fuzz: $target for ${seconds} s"
  else
    budget=(-seed=1 -runs="${ci_runs[$target]}")
    echo "fuzz: $target, ${ci_runs[$target]} runs from seed 1"
  fi
  # -timeout: an input that takes over 10 s is a hang; -rss_limit_mb: unbounded allocation is a finding.
  binary=$(find build-fuzz/tests -type f -name "$target" -perm -u+x | head -1)
  if [ -z "$binary" ]; then echo "fuzz: $target was not built"; exit 1; fi
  if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$binary" "${budget[@]}" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$out/$target-" -print_final_stats=1 "$corpus" > "$out/$target.log" 2>&1; then
    tail -40 "$out/$target.log"
    echo "fuzz: $target found a failure; the input is in $out/"
    rm -rf "$corpus"
    exit 1
  fi
  # libFuzzer's last status line: executions, coverage (cov: edges, ft: features), corpus size.
  { grep -E "^#[0-9]+[[:space:]]+DONE" "$out/$target.log" || true; } | tail -1 | sed "s/^/fuzz: $target: /"
  { grep -E "stat::(number_of_executed_units|peak_rss_mb)" "$out/$target.log" || true; } | sed "s/^/fuzz: $target: /"
  rm -rf "$corpus"
done
echo "fuzz: every target ran without a failure"
