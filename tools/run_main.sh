#!/usr/bin/env bash
# The README's main command: install, build, and train. On a machine with an NVIDIA GPU (and a
# CUDA build) it trains VGG19 under a 15 GB budget; otherwise a small CNN on the CPU under a
# budget below what keeping every activation needs. It builds only `train` (and the libraries it
# links), so the first step comes soon on a fresh machine; the other tools and the tests are
# built by run_tests.sh, or by `cmake --build build`.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "run_main: setting up (missing packages, configure, build train)"
REMAT_BUILD_TARGETS="train" bash tools/scripts/setup.sh
build=${REMAT_BUILD_DIR:-build}
source tools/scripts/openblas_core.sh
openblas_pick_core "$build/tools/train"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && [ -f configs/vgg19.yaml ] \
   && grep -q 'REMAT_HAVE_CUDA:INTERNAL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "run_main: training configs/vgg19.yaml on the GPU under a 15 GB budget (20 steps)"
  exec "$build/tools/train" --config configs/vgg19.yaml --device cuda --budget 15GB --steps 20 "$@"
fi
echo "run_main: no GPU found; training configs/small_cnn.yaml on the CPU under a 9 MB budget"
echo "run_main: (keeping every activation would need 10.95 MB; the Checkmate MILP decides what to recompute)"
exec "$build/tools/train" --config configs/small_cnn.yaml --device cpu --steps 30 --budget 9MB \
     --strategy checkmate "$@"
