#!/usr/bin/env bash
# Runs on a GPU machine the GPU checks and measurements, from a portable build carried
# there (build here with tools/scripts/build_portable.sh, carry build-portable/). Writes logs to $OUT (or
# ./gpu-logs) and prints one line per step. Usage: tools/scripts/gpu_verify.sh [tests] [train]
# [gpt2] [bench] [loader] [layout] [bn] [graphs] [quick] [pending] (default: the first five, in
# that order; steps run in the order given).
#   tests: the CUDA test suites (and the CPU suites that touch the CUDA build);
#   train: `train` on the small CNN on the GPU (keep-everything and under a budget), `profile`
#          on VGG19 at batch 64, and `train` VGG19 under a 15 GB budget for 20 steps with the
#          measured costs (predicted against measured peak and step time);
#   gpt2:  GPT-2 124M (T = 1024, batch 8) on the GPU: keep-everything in tf32 and bf16, and bf16
#          under a 6 GB budget (checkmate, FLOPs costs; keep-everything needs 11.23 GB):
#          tokens/s = samples/s x 1024 in each run's summary JSON; gpt2_fused (the fused
#          attention op) in bf16, with REMAT_ATTENTION_KERNEL=rows, tiled and flash (the
#          default; also under the 6 GB budget);
#          then `profile` in bf16 (the time op by op, against the step's);
#   bench: tools/bench/bench_pytorch.py, remat against PyTorch on VGG19 and ResNet-50 (fp32/tf32 and
#          bf16 rows);
#   layout: Note [channels-last layout]: ResNet-50 and VGG19 at batch 64 in bf16,
#          keep-everything, for 20 steps as written (channels_first) and with
#          layout=channels_last, back to back, each after a `profile` in that layout (its cost
#          table shows every node's time and workspace), ResNet-50 channels-last once more with
#          REMAT_BN_KERNELS=cudnn, then the benchmark on both against PyTorch with
#          --remat-override layout=channels_last (keep-everything and 50 %);
#   bn:    ResNet-50 at batch 64 in bf16, keep-everything, for 10 steps with each REMAT_BN_KERNELS
#          (auto, own, cudnn: Note [batchnorm on the GPU]), each after a `profile` with it (the
#          batch-norm and bias nodes' times, ours against cuDNN's on every plane size);
#   graphs: Note [step graphs]: ResNet-50 b64 bf16 keep-everything, GPT-2 bf16 keep-everything and
#          under 6 GB, and gpt2_fused bf16 with the flash kernels, each with its plan replayed as
#          a CUDA graph (the default) and with --no-cuda-graph, back to back: samples/s and the
#          losses (equal when the replay is right) in each run's summary JSON;
#   quick: every path not yet run on a GPU (the list at the top of GPU_RESULTS.md) in about six
#          minutes: first VGG19 b64 bf16 under 3.5 GB with its copies on their streams,
#          planned by greedy-offload and by checkmate-offload (measured link and costs:
#          predicted against measured peak and step time), then ResNet-50 b64 bf16 as
#          written, channels-last, and channels-last with batch norm and relu fused
#          (fuse=batchnorm_relu), GPT-2 bf16 with and without CUDA graphs, gpt2_fused bf16 on
#          the flash attention kernels, VGG19 b64 bf16 as written and channels-last, vit_tiny
#          bf16 (transpose, class_token, non-causal attention on packed q, k, v; as written and
#          under 10 MB), then the benchmark against
#          PyTorch of gpt2_fused with the flash kernels and of ResNet-50 and VGG19
#          channels-last (keep-everything and 50 %). With `tests` first:
#          REMAT_STEP_TIMEOUT=100 tools/scripts/gpu_session.sh 430 tests quick;
#   pending: the runs the list at the top of GPU_RESULTS.md names. What the convolutions'
#          workspace cap costs under a budget (Note [conv algorithm choice], Note [workspaces
#          from the backend]): VGG19 b64 bf16 under 3.5 GB, checkmate-offload over measured
#          costs, with train's cap (an eighth of the room, 220 MiB), --workspace-limit 512MB
#          and 1GB, and channels-last with train's cap: each run's "time:" line against
#          keep-everything's 31 ms a step; gpt2_fused bf16 on the default attention kernels;
#   loader: loader_bench on 2,000 ImageNet-sized JPEGs it writes: decode + augment images/s at
#          1, 4, 8 and 15 threads and the wait of 25 and 50 ms steps (ResNet-50's batch of 64 at
#          2,560 and 1,280 images/s), and train ResNet-50 from that folder on the GPU.
# Library paths come from the NVIDIA Python wheels when present (PyTorch's cuDNN and cuBLAS).
# Each step has a time limit (REMAT_STEP_TIMEOUT seconds, default 300; each test suite
# REMAT_TEST_TIMEOUT, default 90; the benchmark REMAT_BENCH_TIMEOUT, default 1800;
# REMAT_BENCH_ARGS, extra arguments for it such as "--no-maxbatch --fractions 0.5" for a short
# run), then a KILL 15 s later (train and profile stop at a TERM only between steps); exit 1 if
# any failed. The step running is named in $OUT/inflight with its process group, for
# gpu_session.sh to name and end when its own limit cuts the run.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${REMAT_PORTABLE_DIR:-build-portable}
out=${OUT:-gpu-logs}
limit=${REMAT_STEP_TIMEOUT:-300}
steps=${*:-tests train gpt2 bench loader}
mkdir -p "$out"
: > "$out/summary.txt"
out_abs=$(cd "$out" && pwd)  # data paths in configs are relative to the config's folder
# tools/scripts/pack_portable.sh's archive, unpacked unless this build-portable/ came from it
# (a machine kept warm keeps the last call's build-portable/, which a repacked archive replaces).
if [ -f build-carry/remat-portable.tar.xz ]; then
  sum=$(sha256sum build-carry/remat-portable.tar.xz | cut -d' ' -f1)
  if [ "$(cat build-portable/.archive.sha256 2>/dev/null)" != "$sum" ]; then
    rm -rf build-portable
    tar xJf build-carry/remat-portable.tar.xz && echo "$sum" > build-portable/.archive.sha256
  fi
fi
if NV=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null); then
  libs=$(ls -d "$NV"/*/lib | tr '\n' : | sed 's/:$//')
  export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export PYTHONUNBUFFERED=1  # a benchmark cut by its limit still leaves what it printed
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
ldd "$build/tools/train" > "$out/ldd.txt" 2>&1
if grep -q "not found" "$out/ldd.txt"; then cat "$out/ldd.txt"; echo "gpu_verify: unresolved libraries" >&2; exit 1; fi
export REMAT_CACHE_DIR=$out/cache
failed=0
run() {  # name command...
  local name=$1; shift
  local t0=$(date +%s)
  # In the background so that its process group (timeout makes one) can be named in inflight.
  timeout -k 15 "$limit" "$@" > "$out/$name.txt" 2>&1 &
  local pid=$!
  echo "$name $pid $t0" > "$out/inflight"
  wait $pid
  local rc=$?
  rm -f "$out/inflight"
  [ $rc -eq 0 ] || failed=1
  printf "%-22s rc=%d  %4ds  %s\n" "$name" $rc $(( $(date +%s) - t0 )) "$(tail -1 "$out/$name.txt" | cut -c1-110)" \
    | tee -a "$out/summary.txt"
}
for step in $steps; do
  case $step in
    tests)
      for t in test_cuda_backend test_cuda_ops_a test_cuda_ops_b test_cuda_ops_c test_cuda_attention_flash test_cuda_ops_spatial test_cuda_ops_bf16 test_cuda_channels_last test_finite_check test_cuda_train test_profiler test_nccl; do
        limit=${REMAT_TEST_TIMEOUT:-90} run "$t" "$build/tests/$t"
      done ;;
    train)
      run train_small_cuda "$build/tools/train" --config configs/small_cnn.yaml --device cuda --steps 30 --log-every 10
      run train_small_budget "$build/tools/train" --config configs/small_cnn.yaml --device cuda --steps 20 \
          --budget 12MB --strategy checkmate --trace "$out/small_trace.json"
      run profile_vgg19_b64 "$build/tools/profile" --config configs/vgg19.yaml --device cuda --batch 64 \
          -o "$out/vgg19_b64_costs.json"
      run train_vgg19_15GB "$build/tools/train" --config configs/vgg19.yaml --device cuda --budget 15GB --time-limit 20 \
          --steps 20 --cost-model "$out/vgg19_b64_costs.json" --batch 64 --trace "$out/vgg19_trace.json"
      # bf16: the small CNN, VGG19 at 15 GB with its own measured costs, gpt2_tiny.
      run train_small_bf16 "$build/tools/train" --config configs/small_cnn.yaml --device cuda --steps 30 \
          --precision bf16 --log-every 10
      run profile_vgg19_b64_bf16 "$build/tools/profile" --config configs/vgg19.yaml --device cuda \
          --batch 64 --precision bf16 -o "$out/vgg19_b64_bf16_costs.json"
      run train_vgg19_bf16_15GB "$build/tools/train" --config configs/vgg19.yaml --device cuda \
          --precision bf16 --budget 15GB --time-limit 20 --steps 20 --cost-model "$out/vgg19_b64_bf16_costs.json" \
          --batch 64
      run train_gpt2_tiny_bf16 "$build/tools/train" --config configs/gpt2_tiny.yaml --device cuda \
          --precision bf16 --steps 30 --log-every 10 ;;
    gpt2)
      for prec in tf32 bf16; do
        run train_gpt2_$prec "$build/tools/train" --config configs/gpt2.yaml --device cuda \
            --precision $prec --steps 11 --log-every 5 --summary "$out/gpt2_$prec.json"
      done
      run train_gpt2_bf16_6GB "$build/tools/train" --config configs/gpt2.yaml --device cuda \
          --precision bf16 --budget 6GB --strategy checkmate --time-limit 30 --steps 11 \
          --log-every 5 --summary "$out/gpt2_bf16_6GB.json"
      # The fused attention op (configs/gpt2_fused.yaml): no T x T values, its own kernels; first
      # the row kernels (Note [attention kernels]).
      REMAT_ATTENTION_KERNEL=rows run train_gpt2_fused_bf16_rows "$build/tools/train" \
          --config configs/gpt2_fused.yaml --device cuda --precision bf16 --steps 11 --log-every 5 \
          --summary "$out/gpt2_fused_bf16_rows.json"
      # The same with the tiled attention kernels (Note [tiled attention kernels]).
      REMAT_ATTENTION_KERNEL=tiled run train_gpt2_fused_bf16_tiled "$build/tools/train" \
          --config configs/gpt2_fused.yaml --device cuda --precision bf16 --steps 11 --log-every 5 \
          --summary "$out/gpt2_fused_bf16_tiled.json"
      # The same on tensor cores (Note [flash attention kernels]), keep-everything and at 6 GB.
      REMAT_ATTENTION_KERNEL=flash run train_gpt2_fused_bf16_flash "$build/tools/train" \
          --config configs/gpt2_fused.yaml --device cuda --precision bf16 --steps 11 --log-every 5 \
          --summary "$out/gpt2_fused_bf16_flash.json"
      REMAT_ATTENTION_KERNEL=flash run train_gpt2_fused_bf16_flash_6GB "$build/tools/train" \
          --config configs/gpt2_fused.yaml --device cuda --precision bf16 --budget 6GB \
          --strategy checkmate --time-limit 30 --steps 11 --log-every 5 \
          --summary "$out/gpt2_fused_bf16_flash_6GB.json"
      # Where the bf16 step's time goes: each node alone, summed op by op, against 133 ms a step.
      run profile_gpt2_bf16 "$build/tools/profile" --config configs/gpt2.yaml --device cuda \
          --precision bf16 --repeats 5 -o "$out/gpt2_bf16_costs.json" ;;
    bench)
      # shellcheck disable=SC2086  # REMAT_BENCH_ARGS is a list of arguments
      limit=${REMAT_BENCH_TIMEOUT:-1800} run bench_pytorch python3 tools/bench/bench_pytorch.py --device cuda --bin "$build/tools" \
          --json "$out/bench_pytorch.json" ${REMAT_BENCH_ARGS:-} ;;
    loader)
      run loader_bench "$build/tools/loader_bench" --config configs/resnet50.yaml --data "$out/imgs/train" \
          --make 2000 --threads 1,4,8,15 --batches 8 --step-ms 25,50 --json "$out/loader_bench.json"
      run loader_bench_val "$build/tools/loader_bench" --config configs/resnet50.yaml --data "$out/imgs/val" \
          --make 200 --make-seed 2 --threads 15 --batches 2 --eval
      run train_resnet50_folder "$build/tools/train" --config configs/resnet50.yaml --device cuda \
          classes=10 layers.predictions.units=10 "data={source: folder, path: $out_abs/imgs/train}" \
          "val={source: folder, path: $out_abs/imgs/val}" --steps 100 --eval-every 50 --log-every 10 \
          --summary "$out/resnet50_folder.json" ;;
    layout)
      for model in resnet50 vgg19; do
        for lay in channels_first channels_last; do
          run profile_${model}_bf16_$lay "$build/tools/profile" --config configs/$model.yaml \
              --device cuda --batch 64 --precision bf16 --no-cache layout=$lay -o "$out/${model}_bf16_$lay.json"
          run train_${model}_bf16_$lay "$build/tools/train" --config configs/$model.yaml \
              --device cuda --batch 64 --precision bf16 --steps 20 --log-every 10 layout=$lay \
              --summary "$out/${model}_bf16_$lay.summary.json"
        done
      done
      # Channels-last batch norm on cuDNN's NHWC routines instead of kernels/batchnorm_nhwc.cu.
      REMAT_BN_KERNELS=cudnn run train_resnet50_bf16_channels_last_bn_cudnn "$build/tools/train" \
          --config configs/resnet50.yaml --device cuda --batch 64 --precision bf16 --steps 20 \
          --log-every 10 layout=channels_last --summary "$out/resnet50_bf16_channels_last_bn_cudnn.json"
      limit=${REMAT_BENCH_TIMEOUT:-1800} run bench_pytorch_channels_last python3 tools/bench/bench_pytorch.py \
          --device cuda --bin "$build/tools" --precision bf16 --no-maxbatch --fractions 0.5 --steps 10 \
          --time-limit 10 --remat-override layout=channels_last --json "$out/bench_pytorch_channels_last.json" ;;
    bn)
      for k in auto own cudnn; do
        REMAT_BN_KERNELS=$k run profile_resnet50_bf16_bn_$k "$build/tools/profile" --config configs/resnet50.yaml \
            --device cuda --batch 64 --precision bf16 --no-cache -o "$out/resnet50_bf16_bn_$k.json"
        REMAT_BN_KERNELS=$k run train_resnet50_bf16_bn_$k "$build/tools/train" --config configs/resnet50.yaml \
            --device cuda --batch 64 --precision bf16 --steps 20 --log-every 10 \
            --summary "$out/resnet50_bf16_bn_$k.summary.json"
      done ;;
    graphs)
      for mode in graph nograph; do
        flag=()
        [ $mode = nograph ] && flag=(--no-cuda-graph)
        run train_resnet50_bf16_$mode "$build/tools/train" --config configs/resnet50.yaml --device cuda \
            --batch 64 --precision bf16 --steps 20 --log-every 10 "${flag[@]}" \
            --summary "$out/resnet50_bf16_$mode.json"
        run train_gpt2_bf16_$mode "$build/tools/train" --config configs/gpt2.yaml --device cuda \
            --precision bf16 --steps 11 --log-every 5 "${flag[@]}" --summary "$out/gpt2_bf16_$mode.json"
        run train_gpt2_bf16_6GB_$mode "$build/tools/train" --config configs/gpt2.yaml --device cuda \
            --precision bf16 --budget 6GB --strategy checkmate --time-limit 30 --steps 11 --log-every 5 \
            "${flag[@]}" --summary "$out/gpt2_bf16_6GB_$mode.json"
        REMAT_ATTENTION_KERNEL=flash run train_gpt2_fused_bf16_flash_$mode "$build/tools/train" \
            --config configs/gpt2_fused.yaml --device cuda --precision bf16 --steps 11 --log-every 5 \
            "${flag[@]}" --summary "$out/gpt2_fused_bf16_flash_$mode.json"
      done ;;
    quick)
      # Copies on their streams first (Note [copy streams]): VGG19 b64 bf16 under 3.5 GB
      # (keep-everything needs 4.27 GB) with streamed copies over the link `profile` measures,
      # greedy-offload's plan and checkmate-offload's (the MILP with copies; the cost table the
      # first run measured is cached); their "memory:" and "time:" lines give the device peak
      # and the step time against the plan's.
      for strategy in greedy-offload checkmate-offload; do
        run train_vgg19_bf16_$strategy "$build/tools/train" --config configs/vgg19.yaml \
            --device cuda --batch 64 --precision bf16 --steps 12 --log-every 6 --budget 3.5GB \
            --strategy $strategy --time-limit 15 --copy-overlap stream --cost-model profile \
            --summary "$out/vgg19_bf16_$strategy.json"
      done
      for lay in channels_first channels_last channels_last_fused; do
        fuse=none
        [ $lay = channels_last_fused ] && fuse=batchnorm_relu
        run train_resnet50_bf16_$lay "$build/tools/train" --config configs/resnet50.yaml \
            --device cuda --batch 64 --precision bf16 --steps 12 --log-every 6 \
            layout=${lay%_fused} fuse=$fuse --summary "$out/resnet50_bf16_$lay.summary.json"
      done
      for mode in graph nograph; do
        flag=()
        [ $mode = nograph ] && flag=(--no-cuda-graph)
        run train_gpt2_bf16_$mode "$build/tools/train" --config configs/gpt2.yaml --device cuda \
            --precision bf16 --steps 11 --log-every 5 "${flag[@]}" --summary "$out/gpt2_bf16_$mode.json"
      done
      REMAT_ATTENTION_KERNEL=flash run train_gpt2_fused_bf16_flash "$build/tools/train" \
          --config configs/gpt2_fused.yaml --device cuda --precision bf16 --steps 11 --log-every 5 \
          --summary "$out/gpt2_fused_bf16_flash.json"
      for lay in channels_first channels_last; do
        run train_vgg19_bf16_$lay "$build/tools/train" --config configs/vgg19.yaml \
            --device cuda --batch 64 --precision bf16 --steps 12 --log-every 6 \
            layout=$lay --summary "$out/vgg19_bf16_$lay.summary.json"
      done
      run train_vit_tiny_bf16 "$build/tools/train" --config configs/vit_tiny.yaml --device cuda \
          --precision bf16 --steps 20 --log-every 10 --summary "$out/vit_tiny_bf16.json"
      run train_vit_tiny_bf16_10MB "$build/tools/train" --config configs/vit_tiny.yaml --device cuda \
          --precision bf16 --steps 20 --log-every 10 --budget 10MB --strategy checkmate \
          --summary "$out/vit_tiny_bf16_10MB.json"
      REMAT_ATTENTION_KERNEL=flash limit=${REMAT_BENCH_TIMEOUT:-150} run bench_pytorch_flash python3 \
          tools/bench/bench_pytorch.py --device cuda --bin "$build/tools" --config configs/gpt2_fused.yaml \
          --precision bf16 --no-maxbatch --fractions 0.5 --steps 10 --time-limit 10 \
          --json "$out/bench_pytorch_flash.json"
      limit=${REMAT_BENCH_TIMEOUT:-150} run bench_pytorch_channels_last python3 tools/bench/bench_pytorch.py \
          --device cuda --bin "$build/tools" --config configs/resnet50.yaml --config configs/vgg19.yaml \
          --precision bf16 --no-maxbatch --fractions 0.5 --steps 10 --time-limit 10 \
          --remat-override layout=channels_last --json "$out/bench_pytorch_channels_last.json" ;;
    pending)
      for cap in default 512MB 1GB channels_last; do
        more=()
        case $cap in
          default) ;;
          channels_last) more=(layout=channels_last) ;;
          *) more=(--workspace-limit "$cap") ;;
        esac
        run train_vgg19_bf16_3.5GB_ws_$cap "$build/tools/train" --config configs/vgg19.yaml \
            --device cuda --batch 64 --precision bf16 --steps 12 --log-every 6 --budget 3.5GB \
            --strategy checkmate-offload --time-limit 10 --copy-overlap stream \
            --cost-model profile "${more[@]}" --summary "$out/vgg19_bf16_3.5GB_ws_$cap.json"
      done
      run train_gpt2_fused_bf16_default "$build/tools/train" --config configs/gpt2_fused.yaml \
          --device cuda --precision bf16 --steps 11 --log-every 5 \
          --summary "$out/gpt2_fused_bf16_default.json" ;;
    *) echo "gpu_verify: unknown step '$step' (known: tests train gpt2 bench loader layout bn graphs quick pending)" >&2; exit 2 ;;
  esac
done
# The entry for GPU_RESULTS.md: append it there and commit it (a number not kept is lost).
# gpu_session.sh writes its own (REMAT_NO_ENTRY=1).
if [ -z "${REMAT_NO_ENTRY:-}" ]; then
  bash tools/scripts/gpu_results_entry.sh "$out" "$steps" "$build" > "$out/gpu_results_entry.md"
  echo "gpu_verify: GPU_RESULTS.md entry in $out/gpu_results_entry.md"
fi
exit $failed
