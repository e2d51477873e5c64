#!/usr/bin/env bash
# Device check (issue 10): batched rollout through VLLMSampler, one RSFT step (full, then
# LoRA), the weight sync and a rollout after it, on one GPU; then the Ray backend with two
# vLLM replicas on that GPU (issue 21; needs ray importable there: carry its wheel in .whl/,
# or pass --ray-replicas 0 to skip it). Within 9 minutes.
# Prepared here (no network there):
#   python bench/gpu_check.py --prepare .gpucheck      # SmolLM2-135M config + tokenizer, ~3.5 MB
#   echo /.gpucheck/ >> .git/info/exclude
#   optional vLLM wheels for the image's python (3.12) in .whl/ (see the device README)
# Run there, from the repository root, carrying .gpucheck (and .whl):
#   bash bench/gpu_check.sh [gpu_check.py options]
set -uo pipefail
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || { echo "gpu_check: wheel install failed"; exit 1; }
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export WHALEKIT_CACHE="${WHALEKIT_CACHE:-/tmp/whalekit-cache}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
LOG="${OUT:-/tmp}/gpu_check.log"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$LOG"
python3 -c "import vllm; print('vllm', vllm.__version__)" 2>/dev/null | tee -a "$LOG" || echo "vllm: not importable" | tee -a "$LOG"
python3 -c "import ray; print('ray', ray.__version__)" 2>/dev/null | tee -a "$LOG" || echo "ray: not importable" | tee -a "$LOG"
timeout 540 python3 bench/gpu_check.py "$@" 2>&1 | grep -v -E "^(INFO|DEBUG)|it/s\]$" | tee -a "$LOG"
status=${PIPESTATUS[0]}
[ "$status" = 124 ] && echo "gpu_check: stopped at the 540 s limit" | tee -a "$LOG"
exit "$status"
