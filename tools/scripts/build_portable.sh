#!/usr/bin/env bash
# Builds the portable variant (Note [portable build] in cmake/dependencies.cmake) into
# build-portable/: binaries that need only glibc and the CUDA libraries at run time, to carry
# to a GPU machine. Usage: tools/scripts/build_portable.sh [target ...]  (default: every target).
# Ends by listing what each built tool dynamically needs.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${REMAT_PORTABLE_DIR:-build-portable}
jobs=${REMAT_JOBS:-$(nproc)}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DREMAT_PORTABLE=ON
if [ "$#" -gt 0 ]; then
  cmake --build "$build" -j"$jobs" --target "$@"
else
  cmake --build "$build" -j"$jobs"
fi
for tool in train plan profile maxbatch sample evaluate loader_bench; do
  bin="$build/tools/$tool"
  [ -x "$bin" ] || continue
  echo "$bin needs:"
  readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/  \1/p'
  if readelf -d "$bin" | grep -Eq 'lib(Cbc|Clp|CoinUtils|yaml-cpp|openblas|gfortran|bz2|z|turbojpeg|png16)\.so'; then
    echo "build_portable: $bin still needs a library that should be static" >&2
    exit 1
  fi
done
