#!/usr/bin/env bash
# Installs what remat needs on Debian 12 (as root) — only the packages that are missing —
# then configures and builds into ./build. CUDA is used when nvcc is present.
set -euo pipefail
cd "$(dirname "$0")/../.."

packages=(cmake g++ make pkg-config libyaml-cpp-dev libgtest-dev coinor-libcbc-dev
          libopenblas-dev nlohmann-json3-dev zlib1g-dev libbz2-dev openmpi-bin libopenmpi-dev
          libturbojpeg0-dev libpng-dev libonnx-dev libprotobuf-dev
          ${REMAT_EXTRA_PACKAGES:-})
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then echo "setup: need root to install packages" >&2; exit 1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# nvcc lives in /usr/local/cuda/bin on CUDA machines; CMake looks on PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
build=${REMAT_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release ${REMAT_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
