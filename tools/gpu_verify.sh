#!/usr/bin/env bash
# Runs on a GPU machine the checks issue 5 asks for, from a portable build carried there
# (build here with tools/build_portable.sh, carry build-portable/). Writes logs to $OUT (or
# ./gpu-logs). Steps: library paths from the NVIDIA Python wheels if present, ldd check, the
# CUDA test suites, `train` on the small CNN on the GPU, `profile` on VGG19 at batch 64, and
# `train` VGG19 under a 15 GB budget for 20 steps.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${REMAT_PORTABLE_DIR:-build-portable}
out=${OUT:-gpu-logs}
mkdir -p "$out"
if NV=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null); then
  export LD_LIBRARY_PATH=$(ls -d "$NV"/*/lib | tr '\n' :)${LD_LIBRARY_PATH:-}
fi
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
ldd "$build/tools/train" > "$out/ldd.txt" 2>&1
if grep -q "not found" "$out/ldd.txt"; then cat "$out/ldd.txt"; echo "gpu_verify: unresolved libraries" >&2; exit 1; fi
export REMAT_CACHE_DIR=$out/cache
run() {  # name command...
  local name=$1; shift
  local t0=$(date +%s)
  "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  printf "%-22s rc=%d  %4ds  %s\n" "$name" $rc $(( $(date +%s) - t0 )) "$(tail -1 "$out/$name.txt" | cut -c1-110)"
}
for t in test_cuda_backend test_cuda_ops_a test_cuda_ops_b test_cuda_train test_profiler; do
  run "$t" "$build/tests/$t"
done
run train_small_cuda "$build/tools/train" --config configs/small_cnn.yaml --device cuda --steps 30 --log-every 10
run train_small_budget "$build/tools/train" --config configs/small_cnn.yaml --device cuda --steps 20 \
    --budget 6MB --strategy checkmate --trace "$out/small_trace.json"
run profile_vgg19_b64 "$build/tools/profile" --config configs/vgg19.yaml --device cuda --batch 64 \
    -o "$out/vgg19_b64_costs.json"
run train_vgg19_15GB "$build/tools/train" --config configs/vgg19.yaml --device cuda --budget 15GB \
    --steps 20 --cost-model "$out/vgg19_b64_costs.json" --batch 64 --trace "$out/vgg19_trace.json"
