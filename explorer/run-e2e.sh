#!/usr/bin/env bash
# End-to-end test of the Explorer: generates the naive and fused RMSNorm profiles with the example at a
# small size, serves them with sightline-serve on a free port, drives headless chromium through them
# and stops the server. Usage: explorer/run-e2e.sh BUILD_DIR   (screenshots: explorer/test-results/)
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
explorer_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rmsnorm="$build_dir/examples/rmsnorm/rmsnorm"
serve="$build_dir/tools/serve/sightline-serve"
for binary in "$rmsnorm" "$serve"; do
  [[ -x "$binary" ]] || { echo "run-e2e: $binary is missing; build it first" >&2; exit 2; }
done
[[ -f "$explorer_dir/dist/index.html" ]] || { echo "run-e2e: no built UI; run scripts/explorer.sh" >&2; exit 2; }
[[ -d "$explorer_dir/node_modules/playwright-core" ]] || { echo "run-e2e: run scripts/explorer.sh (npm ci)" >&2; exit 2; }

work=$(mktemp -d)
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

(cd "$work" && "$rmsnorm" --rows 128 --cols 256 --out "$work/profiles" > "$work/rmsnorm.log")

"$serve" "$work/profiles" --port 0 --ui "$explorer_dir/dist" > "$work/server.log" 2>&1 &
server_pid=$!
url=""
for _ in $(seq 1 100); do
  url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/' "$work/server.log" || true)
  [[ -n "$url" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$url" ]] || { echo "run-e2e: the server did not start" >&2; cat "$work/server.log" >&2; exit 1; }

cd "$explorer_dir"
node tests/e2e/explorer.e2e.mjs "$url"
