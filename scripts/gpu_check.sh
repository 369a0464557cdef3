#!/usr/bin/env bash
# One prepared run for a lent CUDA GPU (≤ 10 minutes; the machine reaches nothing outside): the GPU tests,
# then scripts/gpu_check.py (identity on every kind of step, eager against compiled step timings of the GPU
# presets' real architectures with random weights, the seed prompt's race through the app), a summary last.
# Outputs land in $OUT (default /tmp). Fails, with the reason, on any missing piece.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
export OUT="$out" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 SPECDEMO_CACHE_DIR="$out/cache"
python3 -c "import torch, transformers; assert torch.cuda.is_available(), 'no CUDA'; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())" || exit 1
python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$out/gpu_tests.log"
tests=$?
python3 scripts/gpu_check.py 2>&1 | tee "$out/gpu_check.log"
check=$?
echo "GPU tests: $(tail -1 "$out/gpu_tests.log")"
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
[ "$tests" -eq 0 ] && [ "$check" -eq 0 ]
