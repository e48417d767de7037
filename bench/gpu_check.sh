#!/usr/bin/env bash
# GPU readiness check: trains the LibriSpeech-100 model on generated data in bf16 and fp16 (in memory: the
# model's own speed), runs the real trainer (`asr train`, default device, 3 h of generated WAVs) and prints its
# speed over the model's, and decodes in every mode on CUDA (bench/gpu_check.py says how and what).
#
#     bash bench/gpu_check.sh                      # ≈ 10 min on one GPU → bench/gpu_check.json
#     python recipes/results.py recipes/synthetic/exp/small --update --bench bench   # → RESULTS.md's GPU table
#     bash bench/gpu_check.sh --steps 100 --json gpu.json   # options go to bench/gpu_check.py
#
# Without a usable GPU it says so in one line and exits with status 2 (CPU smoke test instead:
# .venv/bin/python bench/gpu_check.py --device cpu --steps 3 --small).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
SMOKE="$PY bench/gpu_check.py --device cpu --steps 3 --small"

if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_check: no GPU here (nvidia-smi not found); nothing measured. On a CPU, a smoke test: $SMOKE" >&2
    exit 2
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no GPU here (nvidia-smi finds no device: $(nvidia-smi -L 2>&1 | head -n 1)); nothing measured" >&2
    exit 2
fi
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check: nvidia-smi sees a GPU but torch.cuda.is_available() is False ($("$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -n 1)); nothing measured" >&2
    exit 2
fi
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
exec "$PY" bench/gpu_check.py --device cuda "$@"
