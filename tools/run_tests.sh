#!/usr/bin/env bash
# The README's test command: install, build, and run the whole GoogleTest suite with ctest.
# GPU cases skip themselves when no device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
# The PyTorch comparison benchmark's CPU test needs PyTorch and PyYAML (Debian's packages).
REMAT_EXTRA_PACKAGES="python3-torch python3-yaml" bash tools/setup.sh
build=${REMAT_BUILD_DIR:-build}
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@"
