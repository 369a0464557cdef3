#!/usr/bin/env bash
# On a CUDA machine: the GPU tests, then a short bench of each pair in fp16, one summary at the end.
#   bash scripts/gpu_check.sh            (set SPECDEMO_SMOLLM2 to a SmolLM2 folder when offline)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
python3 -m pytest -m gpu -q tests/test_gpu.py 2>&1 | tee "$out/gpu_tests.log"
tests=$(tail -1 "$out/gpu_tests.log")
for preset in bundled-tinystories smollm2-135m; do
  python3 -m specdemo bench --preset "$preset" --dtype float16 --gammas 3,4,6 --max-new-tokens 96 --repeats 3 \
    > "$out/bench-$preset.txt" 2>"$out/bench-$preset.err" || echo "bench $preset failed: see bench-$preset.err"
done
echo "== summary =="
echo "tests: $tests"
for preset in bundled-tinystories smollm2-135m; do echo "-- $preset (fp16)"; cat "$out/bench-$preset.txt"; done
nvidia-smi --query-gpu=name,memory.used --format=csv
