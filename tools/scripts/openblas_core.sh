# Sourced by tools/run_tests.sh and tools/run_main.sh: openblas_pick_core PROGRAM.
# Debian 12's OpenBLAS (0.3.21) chooses its kernels from the CPU's identity, and on a CPU it
# does not recognise it falls back to its Prescott (SSE3) kernels: on a 2-core Intel Xeon with
# AVX-512 and FMA (2026-11-30) it printed "Core: Prescott". Those kernels are slower and round
# every product as well as every sum, which put the imported DenseNet-121's and RegNet's
# comparisons with PyTorch beyond their bounds (Note [ONNX model tolerance]); the Haswell kernels
# pass them. So where OpenBLAS picked a core older than Haswell on a CPU that has AVX2 and FMA,
# this exports OPENBLAS_CORETYPE=Haswell and says so. A value already set is kept. PROGRAM is any
# built program that links OpenBLAS (OPENBLAS_VERBOSE=2 makes the library print its choice when
# it loads).
openblas_pick_core() {
  local program=$1 core
  [ -n "${OPENBLAS_CORETYPE:-}" ] && return 0
  grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo || return 0
  [ -x "$program" ] || return 0
  # A program that fails here leaves the choice alone (|| true: under set -e and pipefail).
  core=$(OPENBLAS_VERBOSE=2 "$program" --version 2>&1 | sed -n 's/^Core: //p' | head -n 1 || true)
  case "$core" in
    Katmai|Coppermine|Northwood|Prescott|Banias|Core2|Penryn|Dunnington|Nehalem|Atom|Sandybridge)
      export OPENBLAS_CORETYPE=Haswell
      echo "openblas: this CPU has AVX2 and FMA but OpenBLAS chose its $core kernels; using its" \
           "Haswell kernels (OPENBLAS_CORETYPE=Haswell)" ;;
  esac
}
