#!/usr/bin/env bash
# The GPU checks in one prepared run on the H200 machine (device `run` from the repository root, timeout_s 600):
#
#   bash bench/h200.sh        figures and logs under $OUT (bench/out/h200 where $OUT is unset)
#
# 1. bench/grid.py: every architecture of the reference grid at its true size (random weights) through the
#    platform's loaders, engine step, yes/no scorer and LoRA trainer, and the projected hours of the whole grid;
#    its budget guard skips, with a SKIPPED line, whatever would run past 290 s.
#    The JSON is rewritten after each architecture: a grid stopped by its time limit keeps what it measured.
# 2. bench/encoders.py --vit-large-only: ViT-L/16 bf16 eager and compiled block by block, what image_embeddings
#    runs on CUDA (fraction of the measured matmul rate, agreement with eager), and its pipeline on 90 full-size
#    JPEGs decoded by nvJPEG, against the model alone. (Compiling the whole model is the slow compile: left to a
#    run of its own, `--vit-modes whole`.)
# Each part has its own time limit, so that one running long leaves the other its figures: at most 8 minutes.
# Copy the JSON files that come back into bench/results/ (grid_h200.json, encoders_h200_vit_large.json).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/out/h200}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TQDM_DISABLE=1 DAGSTER_DISABLE_TELEMETRY=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$out/gpu.txt"
python3 -c "import torch, transformers, timm, peft; print('torch', torch.__version__, 'transformers', \
transformers.__version__, 'timm', timm.__version__, 'peft', peft.__version__)" 2>&1 | tee -a "$out/gpu.txt"
timeout 340 python3 bench/grid.py --budget-s 290 --json "$out/grid_h200.json" 2>&1 | tee "$out/grid_h200.log"
timeout 150 python3 bench/encoders.py --vit-large-only --vit-modes off blocks --images 30 \
    --out /tmp/focus-bench/full-size --json "$out/encoders_h200_vit_large.json" 2>&1 \
    | tee "$out/encoders_h200_vit_large.log"
