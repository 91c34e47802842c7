#!/usr/bin/env bash
# The Explorer's browser benchmark: writes a generated one-million-event profile with
# make_large_profile, serves it with `sightline serve`, and runs frame_bench.mjs in headless chromium
# (time to first frame, frame times while panning). A benchmark, not a test: it prints, never fails on
# speed. Usage: bench/explorer/run.sh BUILD_DIR [EVENTS]   (default 1000000 events)
# Needs the built UI (explorer/dist) and explorer/node_modules (scripts/explorer.sh), and chromium
# (SIGHTLINE_CHROMIUM overrides /usr/bin/chromium).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 BUILD_DIR [EVENTS]" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
events=${2:-1000000}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
explorer_dir=$(cd "$here/../../explorer" && pwd)
make_profile="$build_dir/bench/server/make_large_profile"
sightline="$build_dir/tools/sightline"
for binary in "$make_profile" "$sightline"; do
  [[ -x "$binary" ]] || { echo "bench/explorer: $binary is missing; build it first" >&2; exit 2; }
done
[[ -f "$explorer_dir/dist/index.html" ]] || { echo "bench/explorer: no built UI; run scripts/explorer.sh" >&2; exit 2; }
[[ -d "$explorer_dir/node_modules/playwright-core" ]] || { echo "bench/explorer: run scripts/explorer.sh (npm ci)" >&2; exit 2; }

# shellcheck source=../../explorer/serve.sh
source "$explorer_dir/serve.sh"
# Under BUILD_DIR: the 10M-event profile is 3.8 GB, more than a small /tmp may hold.
work=$(mktemp -d "$build_dir/explorer-bench.XXXXXX")
cleanup() {
  explorer_stop
  rm -rf "$work"
}
trap cleanup EXIT

"$make_profile" "$work/profiles/large" --events "$events"

# The anchor, measured in the same run: one single-threaded pass over trace.json (md5sum, file in the
# page cache), so that a figure can be read as a ratio on a machine whose load varies.
anchor_start=$(date +%s%N)
md5sum "$work/profiles/large/trace.json" > /dev/null
export SIGHTLINE_BENCH_ANCHOR_MS=$(( ($(date +%s%N) - anchor_start) / 1000000 ))

# A fresh server, so the first open in the browser is the cold one that indexes the profile.
explorer_serve "$sightline" "$work/profiles" "$explorer_dir/dist" "$work/server.log"

node "$here/frame_bench.mjs" "$url" large
