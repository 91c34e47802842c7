#!/usr/bin/env bash
# End-to-end test of the Explorer: generates the RMSNorm study's profiles with the example at a small size,
# a generated profile of 100,000 events and a merged profile of two tensor-parallel Llama ranks, serves
# them with `sightline serve` on a free port, drives headless chromium through them and stops the server.
# Usage: explorer/run-e2e.sh BUILD_DIR   (screenshots: explorer/test-results/)
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
explorer_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rmsnorm="$build_dir/examples/rmsnorm/rmsnorm"
serve="$build_dir/tools/sightline"
make_profile="$build_dir/bench/server/make_large_profile"
llama="$build_dir/examples/models/llama/llama"
for binary in "$rmsnorm" "$serve" "$make_profile" "$llama"; do
  [[ -x "$binary" ]] || { echo "run-e2e: $binary is missing; build it first" >&2; exit 2; }
done
[[ -f "$explorer_dir/dist/index.html" ]] || { echo "run-e2e: no built UI; run scripts/explorer.sh" >&2; exit 2; }
[[ -d "$explorer_dir/node_modules/playwright-core" ]] || { echo "run-e2e: run scripts/explorer.sh (npm ci)" >&2; exit 2; }

# shellcheck source=serve.sh
source "$explorer_dir/serve.sh"
work=$(mktemp -d)
cleanup() {
  explorer_stop
  rm -rf "$work"
}
trap cleanup EXIT

# Every row of each live table goes to the log, which numbers.e2e.mjs compares with the CLI and the Explorer.
(cd "$work" && "$rmsnorm" --rows 128 --cols 256 --row-limit -1 --out "$work/profiles" > "$work/rmsnorm.log")
# A profile whose trace.json holds many more executions than were captured (its steps repeat one seed step).
"$make_profile" "$work/profiles/large" --events 100000 > "$work/large.log"
# Two ranks (one process each, as torchrun runs them) of the tiny Llama, each tensor parallel over two
# cores, merged into one profile with every rank's lanes and the collectives lined up (served on its own
# afterwards: the tests above check every profile of their root).
for rank in 0 1; do
  (cd "$work" && "$llama" --config tiny --tp 2 --timing-only --variant compiled --rank "$rank" --world-size 2 \
    --out "$work/rank$rank" > "$work/llama-rank$rank.log")
done
"$serve" merge "$work/rank0/compiled" "$work/rank1/compiled" -o "$work/ranks/tp2-ranks" > "$work/merge.log"
"$serve" view "$work/ranks/tp2-ranks" --output-format summary-json > "$work/ranks-summary.json"

explorer_serve "$serve" "$work/profiles" "$explorer_dir/dist" "$work/server.log"

cd "$explorer_dir"
node tests/e2e/explorer.e2e.mjs "$url" "$work/profiles"
# Navigation as a Perfetto user drives it: first view, deep links, rulers, search paging, keys, chain.
node tests/e2e/navigation.e2e.mjs "$url" "$work/profiles"
# The numbers: the operator table against `sightline table` and the live table; one population.
node tests/e2e/numbers.e2e.mjs "$url" "$work/profiles" "$serve" "$work/rmsnorm.log"
explorer_stop
# The first view of a large profile: the same 100,000-event profile (hard links), served with a first view
# of 1 MiB and the test's gate, which holds the complete index back until the test opens it.
mkdir -p "$work/firstview"
cp -al "$work/profiles/large" "$work/firstview/large"
SIGHTLINE_FIRST_VIEW_BYTES=1048576 SIGHTLINE_FIRST_VIEW_GATE="$work/firstview-gate" \
  explorer_serve "$serve" "$work/firstview" "$explorer_dir/dist" "$work/firstview-server.log"
node tests/e2e/firstview.e2e.mjs "$url" large "$work/firstview-gate" 100000
explorer_stop
# Ranks: the merged profile's lanes of both ranks, each core's collectives, search and the summary (its
# metrics against `sightline view`'s).
explorer_serve "$serve" "$work/ranks" "$explorer_dir/dist" "$work/ranks-server.log"
node tests/e2e/ranks.e2e.mjs "$url" tp2-ranks "$work/ranks-summary.json"
