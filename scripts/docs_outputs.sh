#!/usr/bin/env bash
# Runs every command whose printed output the docs show, and writes each output to OUT_DIR, so that a
# change of modeled time can be carried into the docs from real runs (compare each file with the
# block that quotes it; docs/testing.md). Everything it prints is modeled except the lines that say
# "Measured".
#
#   scripts/docs_outputs.sh [BUILD_DIR] [OUT_DIR]      (default: build, build/docs_outputs)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-$build/docs_outputs}
rm -rf "$out"
mkdir -p "$out"
build=$(realpath "$build")
out=$(realpath "$out")
root=$PWD
bin="$build/examples"
sightline="$build/tools/sightline"
started=$SECONDS
step() { echo "[$((SECONDS - started)) s] $*"; }

step "the RMSNorm study (README, docs/tutorial.md §2-6)"
(cd "$out" && "$bin/rmsnorm/rmsnorm" --out profiles >study.txt)
"$sightline" view "$out/profiles/naive" >"$out/view_naive.txt"
"$sightline" view "$out/profiles/fused" --output-format summary-text >"$out/summary_fused.txt"

step "the decoder block (docs/tutorial.md §7)"
"$bin/decoder_block/decoder_block" --out "$out/decoder" >"$out/decoder_block.txt"

step "the CI gate's reports (docs/ci-gate.md, docs/formats.md)"
# Run where the docs' relative paths (profiles/naive, tests/baselines/...) hold, so that the reports
# print them as the docs show.
gate="$out/gate"
mkdir -p "$gate/tests"
ln -s "$root/tests/baselines" "$gate/tests/baselines"
"$bin/rmsnorm/rmsnorm" --rows 128 --cols 256 --spec trn2 --timing-only --out "$gate/profiles" >/dev/null
"$bin/rmsnorm/rmsnorm" --rows 256 --cols 256 --spec trn2 --timing-only --out "$gate/bigger" >/dev/null
(cd "$gate" && "$sightline" check profiles/naive --baseline tests/baselines/rmsnorm_naive.json) >"$out/check_pass.txt"
(cd "$gate" && "$sightline" check bigger/naive --baseline tests/baselines/rmsnorm_naive.json \
  --max-regress 'span=5%') >"$out/check_fail.txt" || true
"$sightline" query "$gate/profiles/naive" "select o.name as op, d.name as device, count(*) as n, sum(d.dur_ns) as dur_ns from flows f join runtime_calls r on r.id = f.to_id join flows g on g.kind = 'ac2g' and g.from_id = r.id join device_events d on d.id = g.to_id join ops o on o.id = f.from_id where f.kind = 'fwd' group by o.name, d.name order by dur_ns desc" >"$out/query_flows.txt"
"$sightline" query "$gate/profiles/naive" "select engine, count(*) as instructions, sum(hbm_read_bytes + hbm_write_bytes) as hbm_bytes from instructions group by engine order by engine" >"$out/query_engines.txt"

step "Python (docs/python.md)"
if [ -d "$build/python" ]; then
  (cd "$out" && PYTHONPATH="$build/python" /usr/bin/python3 "$root/examples/python/rmsnorm_naive.py" >python_naive.txt)
fi

step "the models (docs/models.md, docs/tutorial.md §9)"
"$bin/models/esm2/esm2" --config t6_8M --timing-only --out "$out/esm2_t6_8M" >"$out/esm2_t6_8M.txt"
"$bin/models/esm2/esm2" --config t33_650M --timing-only --out "$out/esm2_t33_650M" >"$out/esm2_t33_650M.txt"
"$sightline" view "$out/esm2_t33_650M/eager" >"$out/view_esm2_t33_eager.txt"
"$sightline" view "$out/esm2_t33_650M/compiled" --output-format summary-text >"$out/summary_esm2_t33_compiled.txt"
"$bin/models/llama/llama" --config tiny --out "$out/llama_tiny" >"$out/llama_tiny.txt"
"$bin/models/llama/llama" --config llama3_8b --timing-only --dtype bf16 --out "$out/llama3_8b" >"$out/llama3_8b_bf16.txt"
"$bin/models/llama/llama" --config llama3_8b --timing-only --dtype bf16 --tp 8 --variant compiled \
  --out "$out/llama3_8b_tp8" >"$out/llama3_8b_tp8.txt"
"$bin/models/esm2/esm2" --config t33_650M --timing-only --dtype bf16 --out "$out/esm2_t33_650M_bf16" \
  >"$out/esm2_t33_650M_bf16.txt"
for tp in 1 2 8; do
  "$bin/models/llama/llama" --config small --tokens 32 --check-cpu --tp "$tp" --out "$out/llama_small_tp$tp" \
    >"$out/llama_small_tp$tp.txt"
done

step "every built-in against its floor (bench/README.md)"
if [ -x "$build/bench/kernels/kernel_floors" ]; then
  "$build/bench/kernels/kernel_floors" >"$out/kernel_floors.txt"
fi
step "done: $out"
