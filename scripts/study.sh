#!/usr/bin/env bash
# The main job: set up, build, and run the RMSNorm study.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
./build/examples/rmsnorm/rmsnorm "$@"
