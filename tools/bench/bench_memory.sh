#!/usr/bin/env bash
# Benchmark: the executor's two budgeted memory modes (arena: offsets planned ahead; pool:
# best-fit caching allocator) on the same plans. Prints a table: throughput, measured peak,
# what the memory source held at the peak, fragmentation. Usage: tools/bench/bench_memory.sh [build]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
printf "%-10s %-12s %-9s %-6s %12s %12s %14s %8s\n" config strategy budget memory samples/s peak held frag
run() {  # config batch budget strategy [extra train flags]
  for mode in arena pool; do
    out=$("$build/tools/train" --config "configs/$1.yaml" --batch "$2" --budget "$3" \
          --strategy "$4" --memory $mode --steps 6 --log-every 100 --time-limit 20 "${@:5}" 2>&1) \
      || { printf "%-10s %-12s %-9s %-6s failed: %s\n" "$1" "$4" "$3" $mode "$(tail -1 <<<"$out")"; continue; }
    rate=$(sed -n 's/^done: .*, \([0-9.]*\) samples\/s$/\1/p' <<<"$out")
    peak=$(sed -n 's/^memory: .*measured peak \([0-9.]* [KMG]B\).*/\1/p' <<<"$out")
    held=$(sed -n 's/^memory: .*match), \([0-9.]* [KMG]B\) .*/\1/p' <<<"$out")
    frag=$(sed -n 's/.*fragmentation at the peak \([0-9.]*%\).*/\1/p' <<<"$out")
    printf "%-10s %-12s %-9s %-6s %12s %12s %14s %8s\n" "$1" "$4" "$3" $mode "$rate" "$peak" "$held" "${frag:--}"
  done
}
run small_cnn 32 9.5MB checkmate
run small_cnn 32 9.5MB chen-greedy
run small_dag 16 2.9MB checkmate
run linear16 8 50MB checkmate --input 3x64x64
