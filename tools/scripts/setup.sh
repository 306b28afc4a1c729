#!/usr/bin/env bash
# Installs what remat needs on Debian 12 (as root) — only the packages that are missing —
# then configures and builds into ./build: everything (the tools and the tests), or only the
# targets REMAT_BUILD_TARGETS names (space-separated, e.g. "train": run_main.sh). CUDA is used
# when nvcc is present. One line per phase says what it is doing.
set -euo pipefail
cd "$(dirname "$0")/../.."

packages=(cmake g++ make pkg-config libyaml-cpp-dev libgtest-dev coinor-libcbc-dev
          libopenblas-dev nlohmann-json3-dev zlib1g-dev libbz2-dev openmpi-bin libopenmpi-dev
          libturbojpeg0-dev libpng-dev libonnx-dev libprotobuf-dev libonnx-testdata
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
else
  echo "setup: the ${#packages[@]} packages needed are installed"
fi

# nvcc lives in /usr/local/cuda/bin on CUDA machines; CMake looks on PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
build=${REMAT_BUILD_DIR:-build}
echo "setup: configuring $build/"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release ${REMAT_CMAKE_ARGS:-} >/dev/null
# What the configuration decided (nvcc found and REMAT_WITH_CUDA not off).
if grep -q 'REMAT_HAVE_CUDA:INTERNAL=ON' "$build/CMakeCache.txt"; then kind="with CUDA"; else kind="CPU only"; fi
jobs=$(nproc)
if [ -n "${REMAT_BUILD_TARGETS:-}" ]; then
  read -ra targets <<< "$REMAT_BUILD_TARGETS"
  echo "setup: building ${#targets[@]} target(s) (${targets[*]}), $kind, with $jobs jobs"
  cmake --build "$build" -j"$jobs" --target "${targets[@]}"
else
  echo "setup: building everything (the tools and the tests), $kind, with $jobs jobs"
  cmake --build "$build" -j"$jobs"
fi
