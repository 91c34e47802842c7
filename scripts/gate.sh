#!/usr/bin/env bash
# The performance gate (docs/ci-gate.md): profiles the RMSNorm study at a small fixed size and checks
# each variant against its baseline committed in tests/baselines/. Every gated number is modeled (device
# time, counts, bytes), so it is the same on every machine and the thresholds are 0.
#
#   scripts/gate.sh [BUILD_DIR]            check (exit 1 on a regression, 2 when it cannot check)
#   scripts/gate.sh --update [BUILD_DIR]   after an intended change: write the baselines again, then
#                                          commit tests/baselines/ with the change that moved them
#
# Reports (text on stdout, JUnit XML and Markdown) go to BUILD_DIR/gate/.
set -euo pipefail
cd "$(dirname "$0")/.."

update=0
if [ "${1:-}" = "--update" ]; then
  update=1
  shift
fi
build_dir=${1:-build}
baselines=tests/baselines
# The study's size and spec for the gate: small, so the gate takes a second. Results are not computed
# (--timing-only): modeled times are the same as a functional run (tests/neuron/modeled_time_test.cpp).
study_args=(--rows 128 --cols 256 --spec trn2 --timing-only)
variants=(naive fused compiled)

out="$build_dir/gate"
rm -rf "$out"
mkdir -p "$out"
"$build_dir/examples/rmsnorm/rmsnorm" "${study_args[@]}" --out "$out/profiles" >"$out/study.log"

sightline="$build_dir/tools/sightline"
if [ "$update" = 1 ]; then
  mkdir -p "$baselines"
  for v in "${variants[@]}"; do
    "$sightline" check "$out/profiles/$v" --write-baseline "$baselines/rmsnorm_$v.json"
  done
  echo "gate: baselines written; review \`git diff $baselines\` and commit them with the change"
  exit 0
fi

status=0
for v in "${variants[@]}"; do
  rc=0
  "$sightline" check "$out/profiles/$v" --baseline "$baselines/rmsnorm_$v.json" \
    --junit "$out/rmsnorm_$v.junit.xml" --markdown "$out/rmsnorm_$v.md" || rc=$?
  # The worst outcome wins: 2 (could not check) over 1 (regression) over 0.
  if [ "$rc" -gt "$status" ]; then status=$rc; fi
  echo
done
if [ "$status" = 1 ]; then
  echo "gate: a modeled metric regressed (above). If the change is intended, run scripts/gate.sh --update"
  echo "      and commit tests/baselines/ with it."
fi
exit "$status"
