#!/usr/bin/env bash
# Runs the libFuzzer harnesses of tests/fuzz for a bounded time each, two at a time, seeded from
# configs/, tests/data/ and tests/fuzz/seeds/, and prints one line per harness: executions,
# executions per second, corpus size and crashes. Exit 1 if any harness crashed (its input is
# kept in $build/fuzz-artifacts/), 0 otherwise.
#
#   tools/scripts/fuzz.sh [SECONDS] [HARNESS ...]    # default 60 s each; harnesses: config problem
#                                             # schedule plan costs safetensors images overrides npy
#                                             # onnx (where built)
#
# REMAT_FUZZ_RUNS=N also stops each harness after N executions (whichever comes first).
# Needs the sanitizer build (build-asan: clang, ASan + UBSan + libFuzzer instrumentation), which
# tools/run_tests.sh makes; REMAT_ASAN_BUILD_DIR names another. The corpus grows across runs in
# $build/fuzz-corpus/.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-60}
shift || true
harnesses=("$@")
build=${REMAT_ASAN_BUILD_DIR:-build-asan}
if ((${#harnesses[@]} == 0)); then
  harnesses=(config problem schedule plan costs safetensors images overrides npy)
  [ -x "$build/tests/fuzz/fuzz_onnx" ] && harnesses+=(onnx)  # built where ONNX was found
fi
for h in "${harnesses[@]}"; do
  [ -x "$build/tests/fuzz/fuzz_$h" ] || { echo "fuzz: $build/tests/fuzz/fuzz_$h is missing (run tools/run_tests.sh first)" >&2; exit 2; }
done

# Seeds: each harness's committed seeds plus the files it reads in the repository.
seed() {
  local h=$1 corpus=$build/fuzz-corpus/$1
  mkdir -p "$corpus"
  [ -d "tests/fuzz/seeds/$h" ] && cp -n tests/fuzz/seeds/"$h"/* "$corpus"/ 2>/dev/null || true
  case $h in
    config) cp -n configs/*.yaml "$corpus"/ ;;
    problem) cp -n tests/data/*.json "$corpus"/ ;;
  esac
}

# Leaks in the harness process are reported by libFuzzer itself; allocations beyond -rss_limit_mb
# (2 GB) are findings, not a reason to abort the sanitizer.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$build/fuzz-artifacts" "$build/fuzz-logs"
run_one() {
  local h=$1 log=$build/fuzz-logs/$1.log
  seed "$h"
  local rc=0
  "$build/tests/fuzz/fuzz_$h" -max_total_time="$seconds" ${REMAT_FUZZ_RUNS:+-runs=$REMAT_FUZZ_RUNS} \
    -timeout=25 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$h-" \
    "$build/fuzz-corpus/$h" >"$log" 2>&1 || rc=$?
  local execs speed corpus
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  corpus=$(ls "$build/fuzz-corpus/$h" | wc -l)
  if [ "$rc" -eq 0 ]; then
    printf 'fuzz %-12s %10s execs %7s/s  corpus %5s  crashes 0\n' "$h" "${execs:-?}" "${speed:-?}" "$corpus"
  else
    printf 'fuzz %-12s %10s execs %7s/s  corpus %5s  CRASH (exit %s): see %s\n' "$h" \
      "${execs:-?}" "${speed:-?}" "$corpus" "$rc" "$log"
    grep -m3 -E 'ERROR|SUMMARY|runtime error|terminate|Test unit written' "$log" | sed 's/^/    /'
  fi
  return "$rc"
}

# Two at a time (the machines this runs on have two cores).
failed=0
pids=()
for h in "${harnesses[@]}"; do
  run_one "$h" &
  pids+=($!)
  if ((${#pids[@]} == 2)); then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
exit $failed
