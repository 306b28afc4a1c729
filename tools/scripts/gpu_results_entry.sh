#!/usr/bin/env bash
# Writes one entry of GPU_RESULTS.md (markdown, on stdout) from a gpu_verify.sh log folder:
# device, driver, CUDA / cuDNN / cuBLAS / PyTorch versions, the build's revision, the command,
# every step's result, each training run's plan, peak (predicted against measured) and speed,
# the PyTorch benchmark's tables and the loader benchmark's. gpu_verify.sh calls it at its end
# (entry in $OUT/gpu_results_entry.md); append that file to GPU_RESULTS.md and commit it.
# Usage: tools/scripts/gpu_results_entry.sh LOG_DIR "STEPS" BUILD_DIR
set -uo pipefail
out=$1
steps=$2
build=${3:-build-portable}
# Each probe has a limit: a GPU in a bad state can hang nvidia-smi, and the entry must still come.
gpu=$(timeout -k 5 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
torch=$(timeout -k 5 60 python3 -c 'import torch; print("PyTorch %s (CUDA %s, cuDNN %s)" % (torch.__version__, torch.version.cuda, torch.backends.cudnn.version()))' 2>/dev/null || echo "PyTorch: not importable")
version=$(timeout -k 5 20 "$build/tools/train" --version 2>/dev/null)
rev=$(sed -n 's/.*(git \([^)]*\)).*/\1/p' <<< "$version" | head -1)
echo "## $(date -u +%Y-%m-%d) — ${gpu:-unknown device}, revision ${rev:-unknown}"
echo
echo "Command: \`tools/scripts/gpu_verify.sh $steps\`; $torch."
echo
echo '```'
echo "$version"
echo '```'
echo
echo "| step | exit | seconds | last line |"
echo "|---|---|---|---|"
if [ -f "$out/summary.txt" ]; then
  while read -r name rc secs rest; do
    echo "| $name | ${rc#rc=} | ${secs%s} | $(sed 's/|/\\|/g' <<< "$rest") |"
  done < "$out/summary.txt"
fi
for log in "$out"/train_*.txt; do
  [ -f "$log" ] || continue
  echo
  echo "**$(basename "$log" .txt)**"
  echo
  echo '```'
  grep -E '^(training graph|model |plan |memory: |time: |done: |data: |eval after|cuda graph)|slowdown' "$log" | cut -c1-200
  echo '```'
done
for log in "$out"/profile_*.txt; do
  [ -f "$log" ] || continue
  echo
  echo "**$(basename "$log" .txt)** (the ten largest ops)"
  echo
  echo '```'
  grep -E '^(total:|by op)' "$log" | cut -c1-200
  grep -E '^op ' "$log" | head -10 | cut -c1-200
  echo '```'
done
for bench in bench_pytorch bench_pytorch_channels_last bench_pytorch_flash loader_bench loader_bench_val; do
  [ -f "$out/$bench.txt" ] || continue
  echo
  echo "**$bench**"
  echo
  echo '```'
  grep -vE '^\s*(solving|\[)' "$out/$bench.txt" | cut -c1-200
  echo '```'
done
