#!/usr/bin/env bash
# Packs the portable build's tools and GPU test suites, stripped, into one xz archive small
# enough to carry to a GPU machine (a remote run carries at most 64 MiB; the binaries are
# ~35 MB each, mostly the same static libraries, which xz's large dictionary shares):
#   tools/scripts/build_portable.sh && tools/scripts/pack_portable.sh     -> build-carry/remat-portable.tar.xz
# There, `tar xJf build-carry/remat-portable.tar.xz` recreates build-portable/{tools,tests}
# (tools/scripts/gpu_verify.sh does it when build-portable/ is absent).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${REMAT_PORTABLE_DIR:-build-portable}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build-portable/tools" "$stage/build-portable/tests" build-carry
for t in train plan profile maxbatch sweep sample evaluate loader_bench; do
  strip -o "$stage/build-portable/tools/$t" "$build/tools/$t"
done
for t in test_cuda_backend test_cuda_ops_a test_cuda_ops_b test_cuda_ops_c test_cuda_attention_flash test_cuda_ops_spatial test_cuda_ops_bf16 test_cuda_channels_last test_finite_check test_cuda_train test_profiler test_nccl; do
  strip -o "$stage/build-portable/tests/$t" "$build/tests/$t"
done
tar -C "$stage" -cf - build-portable | xz -T"$(nproc)" -9e --lzma2=dict=192MiB > build-carry/remat-portable.tar.xz.tmp
mv build-carry/remat-portable.tar.xz.tmp build-carry/remat-portable.tar.xz
ls -l build-carry/remat-portable.tar.xz
