#!/usr/bin/env bash
# One call of the device tool's `run` in a GPU session: gpu_verify.sh's steps under a hard time
# limit, then, whatever happened, the GPU_RESULTS.md entry and the logs, all under $OUT (the
# folder that comes back). Run from the repository root on the device with build-carry/ carried
# (tools/scripts/pack_portable.sh's archive, unpacked by gpu_verify.sh).
# Usage: tools/scripts/gpu_session.sh SECONDS STEP...   (STEP: gpu_verify.sh's, e.g. tests gpt2)
# gpu_verify.sh's own limits (REMAT_STEP_TIMEOUT, REMAT_BENCH_TIMEOUT, REMAT_BENCH_ARGS) pass
# through. Writes $OUT/verify.log (its output and exit status), $OUT/entry.md (append it to
# GPU_RESULTS.md and commit it) and $OUT/logs.tgz (every log but the cost cache). Exits with
# gpu_verify.sh's status (137 when the limit killed it).
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
OUT=$work timeout -s KILL "$limit" bash tools/scripts/gpu_verify.sh "$@" > "$final/verify.log" 2>&1
rc=$?
echo "gpu_session: gpu_verify.sh $* exited with $rc" >> "$final/verify.log"
if NV=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null); then
  export LD_LIBRARY_PATH=$(ls -d "$NV"/*/lib | tr '\n' :)${LD_LIBRARY_PATH:-}
fi
bash tools/scripts/gpu_results_entry.sh "$work" "$*" "${REMAT_PORTABLE_DIR:-build-portable}" \
  > "$final/entry.md" 2>> "$final/verify.log"
tar czf "$final/logs.tgz" --exclude=cache -C "$(dirname "$work")" "$(basename "$work")"
exit $rc
