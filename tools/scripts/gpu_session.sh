#!/usr/bin/env bash
# One remote run on a GPU machine: gpu_verify.sh's steps under a hard time
# limit, then, whatever happened, the GPU_RESULTS.md entry and the logs, all under $OUT (the
# folder that comes back). Run from the repository root on the device with build-carry/ carried
# (tools/scripts/pack_portable.sh's archive, unpacked by gpu_verify.sh).
# Usage: tools/scripts/gpu_session.sh SECONDS STEP...   (STEP: gpu_verify.sh's, e.g. tests gpt2)
# gpu_verify.sh's own limits (REMAT_STEP_TIMEOUT, REMAT_BENCH_TIMEOUT, REMAT_BENCH_ARGS) pass
# through. Writes $OUT/verify.log (its output and exit status), $OUT/entry.md (append it to
# GPU_RESULTS.md and commit it) and $OUT/logs.tgz (every log and the measured cost tables,
# not the generated images). When the limit cuts the run, the step then running is ended too
# and named in verify.log and entry.md. Exits with gpu_verify.sh's status, or 3 when the limit
# cut it (137 would read as a time-out of the remote run itself).
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 2 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: tools/scripts/gpu_session.sh SECONDS STEP..." >&2
  exit 2
fi
limit=$1
shift
final=${OUT:?gpu_session: OUT must name the folder that comes back}
work=$(mktemp -d /tmp/gpu-verify.XXXXXX)
t0=$(date +%s)
OUT=$work REMAT_NO_ENTRY=1 timeout -s KILL "$limit" bash tools/scripts/gpu_verify.sh "$@" \
  > "$final/verify.log" 2>&1
rc=$?
echo "gpu_session: gpu_verify.sh $* exited with $rc after $(( $(date +%s) - t0 )) s" >> "$final/verify.log"
cut=""
if [ -f "$work/inflight" ]; then  # the step gpu_verify.sh was running when the limit cut it
  read -r step pid started < "$work/inflight"
  kill -KILL -- "-$pid" 2> /dev/null
  cut="the ${limit} s limit cut the run during step $step, after $(( $(date +%s) - started )) s of it"
  echo "gpu_session: $cut" >> "$final/verify.log"
fi
tar czf "$final/logs.tgz" --exclude=imgs -C "$(dirname "$work")" "$(basename "$work")"
if NV=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null); then
  libs=$(ls -d "$NV"/*/lib | tr '\n' : | sed 's/:$//')
  export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
{
  bash tools/scripts/gpu_results_entry.sh "$work" "$*" "${REMAT_PORTABLE_DIR:-build-portable}"
  [ -z "$cut" ] || printf '\nNot finished: %s (steps after it did not run).\n' "$cut"
} > "$final/entry.md" 2>> "$final/verify.log"
[ $rc -eq 137 ] && exit 3
exit $rc
