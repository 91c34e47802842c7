#!/usr/bin/env bash
# Every test (docs/testing.md): the suite in a Release build with warnings as errors, the performance
# gate against the committed baselines, the installed SDK, the Explorer, the suite under ASan+UBSan,
# the threaded tests under TSan, and fuzzing. Fails on the first red step.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
started=$SECONDS
# Each step says when it starts, in seconds since the start, so a slow step shows in the log.
step() { echo "== [$((SECONDS - started)) s] $*"; }
trap 'echo "== [$((SECONDS - started)) s] done (exit $?)"' EXIT

step "set-up: Debian packages, Release build (-Werror), the Explorer"
scripts/setup.sh build
step "tests (Release, -Werror)"
ctest --test-dir build --output-on-failure -j "$jobs"
step "performance gate: the RMSNorm study against tests/baselines (modeled, exact; docs/ci-gate.md)"
scripts/gate.sh build

step "the docs' printed outputs: every quoted block equals what its command prints (docs/testing.md)"
scripts/docs_outputs.sh build build/docs_outputs
/usr/bin/python3 scripts/docs_check.py build/docs_outputs
step "the installed SDK: find_package(sightline) consumer project, installed sightline serve"
scripts/sdk_check.sh build

step "Explorer: unit tests (Vitest) and end-to-end tests (headless chromium against sightline serve)"
(cd explorer && npx vitest run)
explorer/run-e2e.sh build

step "tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DSIGHTLINE_WERROR=ON -DSIGHTLINE_SANITIZE='address;undefined' \
  -DSIGHTLINE_BUILD_BENCH=OFF -DSIGHTLINE_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"

step "threaded tests under ThreadSanitizer"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DSIGHTLINE_WERROR=ON -DSIGHTLINE_SANITIZE=thread \
  -DSIGHTLINE_BUILD_BENCH=OFF -DSIGHTLINE_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-tsan -j "$jobs" --target sightline_threads_tests
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions="$PWD/tests/tsan.supp" ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L threads --no-tests=error

step "fuzzing every reader of our file formats (libFuzzer, ASan+UBSan), fixed seed and runs"
scripts/fuzz.sh
