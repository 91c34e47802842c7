#!/usr/bin/env bash
# Installs everything sightline needs on a fresh Debian 12 machine, then builds it.
# Non-interactive and idempotent: packages already present are not reinstalled, and the build is
# incremental. Usage: scripts/setup.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${1:-build}

# Debian packages: toolchain, C++ libraries, the Python package's build and tests (pybind11, numpy,
# pytest for Debian's /usr/bin/python3), and what the tests use (clang and its libFuzzer runtime for
# scripts/fuzz.sh).
packages=(
  g++ cmake ninja-build pkg-config
  libfmt-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libsimdjson-dev libsqlite3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-dev python3-numpy python3-pytest
  clang libclang-rt-14-dev
  chromium
)
# Node.js and npm for the Explorer; a machine that has them already (any recent version) keeps its own.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

jobs=$(nproc)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSIGHTLINE_WERROR=ON >/dev/null
cmake --build "$build_dir" -j "$jobs"

# The Explorer UI (npm packages from package-lock.json, built with Vite into explorer/dist).
scripts/explorer.sh
