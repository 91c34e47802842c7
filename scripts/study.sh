#!/usr/bin/env bash
# The main job: set up, build, and run the RMSNorm study; then say how to open the profiles in the
# Explorer. Extra arguments go to the study (see --help), e.g. scripts/study.sh --rows 1024 --cols 1024
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
./build/examples/rmsnorm/rmsnorm --out profiles "$@"
cat <<'TXT'

Open the profiles in the Explorer (serves 127.0.0.1 only):
  ./build/tools/sightline serve profiles --port 8600     then browse the URL it prints (it carries
                                                          the access token uploads and deletes need)
Or from the shell:
  ./build/tools/sightline view profiles/fused --output-format summary-text
  ./build/tools/sightline compare profiles/naive profiles/fused
  ./build/tools/sightline roofline profiles/naive -o roofline.svg
TXT
