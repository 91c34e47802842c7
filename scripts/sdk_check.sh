#!/usr/bin/env bash
# The installed SDK, as a user gets it: install the build into a temporary prefix, build the consumer
# project (tests/sdk/consumer) against it with find_package(sightline), run it (profile, table, profile
# directory), and serve that directory with the installed `sightline serve`.
# Usage: scripts/sdk_check.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
build_dir=${1:-build}
work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S tests/sdk/consumer -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
# The consumer must not see the source tree: run it from elsewhere.
(cd "$work" && ./consumer/consumer "$work/profiles/rmsnorm") > "$work/consumer.out"
grep -q "Torch-Compiled Region" "$work/consumer.out" || { cat "$work/consumer.out"; echo "sdk: no compiled row"; exit 1; }
test -f "$work/profiles/rmsnorm/manifest.json" || { echo "sdk: the consumer wrote no profile"; exit 1; }

# The installed Python package, when the build has it (docs/python.md): the naive tutorial script runs
# from outside the source tree against the install only, and its profile is served below.
python_site=$(find "$work/prefix" -path '*/site-packages/sightline' -type d -printf '%h\n' 2>/dev/null | head -1)
python_names=
if [ -n "$python_site" ]; then
  (cd "$work" && PYTHONPATH="$python_site" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 \
    "$repo/examples/python/rmsnorm_naive.py" --rows 256 --cols 512 --out "$work/profiles") > "$work/python.out"
  grep -q "Self NEURON time total" "$work/python.out" || { cat "$work/python.out"; echo "sdk: no table from Python"; exit 1; }
  python_names=naive
fi

port=$((20000 + RANDOM % 20000))
"$work/prefix/bin/sightline" serve "$work/profiles" --port "$port" > "$work/serve.out" 2>&1 &
server_pid=$!
python3 - "$port" $python_names <<'PY'
import json, sys, time, urllib.request
port = sys.argv[1]
for _ in range(100):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/profiles", timeout=2) as r:
            listing = json.load(r)
        break
    except OSError:
        time.sleep(0.1)
else:
    sys.exit("sdk: the installed sightline serve did not answer")
names = [p.get("name") for p in listing.get("profiles", listing if isinstance(listing, list) else [])]
for expected in ["rmsnorm", *sys.argv[2:]]:
    if expected not in names:
        sys.exit(f"sdk: the installed server does not list the profile {expected}: {listing}")
with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
    if b"<html" not in r.read().lower():
        sys.exit("sdk: the installed server does not serve the installed Explorer")
PY
echo "sdk: installed, built a find_package(sightline) consumer, profiled, served: ok"
