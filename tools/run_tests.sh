#!/usr/bin/env bash
# The README's test command (CI runs exactly this): installs what is missing, then three stages.
#   normal    build/ (CUDA parts when nvcc is found): the whole GoogleTest suite; GPU cases skip
#             themselves when no device is present. Extra arguments go to this stage's ctest.
#   sanitize  build-asan/: CPU-only, clang, ASan + UBSan with libFuzzer instrumentation (Note
#             [sanitizer build] in CMakeLists.txt): the suite again, where any memory error, leak
#             or undefined behaviour fails the test. Left out for time (REMAT_ASAN_EXCLUDE, a
#             ctest -E regex; "" runs everything): the slowest suites, 3-10x slower here, whose
#             code the faster ones cover — the zoo configs bit for bit under baselines (~330 s;
#             small_cnn and small_dag run every strategy), the 40-step loss test (~80 s; shorter
#             trainings run), the MILP and moment-bound brute-force searches (~170 s; the
#             searches are test code)
#             and the PyTorch benchmark (~45 s; Python and torch are not instrumented), the
#             imported torchvision and GPT models against PyTorch (~4 min; the importer runs
#             under ASan in OnnxImport.* and the fuzz stage, the training in the suites above); one
#             CPU step of the full-size GPT-2s (~520 s; gpt2_tiny runs every op) and of the
#             larger zoo CNNs, in fp32 and in bf16 (~190 s each; small_cnn, small_dag, mobilenet,
#             linear16 and gpt2_tiny run the same ops), and of the artifact's deeper variants
#             (DenseNet-169/201, ResNet-152, ResNet-101/152 v2, NASNet-Large, InceptionV3,
#             Xception: DenseNet-121, ResNet-50 v2, NASNet-Mobile and MobileNetV2 run their
#             ops), and of FCN-32, PSPNet (ResNet-50) and ResNet-101 (~230 s in fp32 and bf16,
#             2026-11-28, when CI took 42 min: PSPNet (VGG), the U-Nets and SegNets and ResNet-50
#             v2 run their ops, and the op suites run crop and every other op), gpt2_tiny's
#             50-step loss test (~65 s), the commands of README.md and docs/ (the tools the other suites
#             run), checkmate against the full MILP (~100 s; the MILP
#             solves are Cbc's), and six solver tests whose outcome depends on speed: the
#             wall-clock test, checkmate against LP rounding run alone with the same limit
#             (checkmate gives its LP rounding part of the limit; slowed 5x, lone LP rounding
#             can end 0.005 % better), and checkmate's rounding at smaller budgets (Note
#             [smaller budgets]; slowed, lp's own step takes the 30 s and nothing is left for
#             them), and the monotone sweep (it needs checkmate to fit at least four of six
#             budgets at 0.5 s each; slowed, beside another test, it fitted three on
#             2026-11-28), and checkmate's max batch against the cheap drops' (its 5 s bisection
#             reached 36 of 37 under ASan on 2026-11-28), and checkmate against its kept tail
#             (the search needs 0.25 s of the 0.8 s checkmate gives it; slowed, it is cut
#             short). The normal stage runs all six. Built
#             without MPI: OpenMPI leaks in components it unloads at MPI_Finalize, which LSan can
#             neither attribute nor suppress by name, so the mpirun suites run in `normal` only.
#   fuzz      each libFuzzer harness of tests/fuzz for REMAT_FUZZ_SECONDS (default 10) seconds
#             (tools/scripts/fuzz.sh; longer campaigns run that script directly).
# REMAT_TEST_STAGES picks stages (default "normal sanitize fuzz").
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/scripts/openblas_core.sh
# The tests allocate and touch hundreds of MB at a time (a model's weights, gradients and their
# references in the test itself, PyTorch's exports and float64 runs): glibc's malloc then advises
# its large blocks as transparent huge pages, one page fault per 2 MB rather than per 4 KB (Note
# [huge pages] in runtime/backends/cpu_backend.cpp does the same for the CPU backend's own
# blocks). On a 2-core Intel Xeon virtual machine (2026-12-02, beside a build) the imported
# VGG-11's comparison with PyTorch took 47 s rather than 187 s. A value already set is kept;
# where transparent huge pages are off it changes nothing, and ASan's allocator ignores it.
export GLIBC_TUNABLES=${GLIBC_TUNABLES:-glibc.malloc.hugetlb=1}
# ctest runs as many tests at once as there are cores, so each test's OpenBLAS takes one thread
# (its default is one per core): with more threads than cores a product waits for a thread that
# another test has descheduled, and waits long (on a 2-core Xeon beside a build, 2026-12-03, a
# 100-step small_cnn training took 1.1 s with one thread and 1 to 15 s with two; the zoo and
# rematerialization suites ran in 59 s rather than 77 s). A value already set is kept. The
# comparisons with PyTorch of the imported models set their own (tests/onnx_models.cpp).
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
stages=${REMAT_TEST_STAGES:-normal sanitize fuzz}
has_stage() { [[ " $stages " == *" $1 "* ]]; }

if has_stage normal; then
  # The PyTorch comparison benchmark's CPU test needs PyTorch and PyYAML, the zoo's cross-check
  # torchvision, the ONNX import's comparisons torchvision and python3-onnx (Debian's packages).
  build=${REMAT_BUILD_DIR:-build}
  # Without a GPU the CUDA parts are built to be compiled, not run: one architecture (sm_90,
  # the H100/H200 the GPU checks run on) instead of the default two, which takes a third off
  # compiling the kernels (measured on a 2-core Xeon, 2026-12-02). No kernel has an
  # architecture-specific path. An architecture set in REMAT_CMAKE_ARGS is kept.
  cmake_args=${REMAT_CMAKE_ARGS:-}
  if ! nvidia-smi -L >/dev/null 2>&1 && [[ "$cmake_args" != *REMAT_CUDA_ARCHITECTURES* ]]; then
    cmake_args+=" -DREMAT_CUDA_ARCHITECTURES=90"
  fi
  REMAT_CMAKE_ARGS="$cmake_args" \
    REMAT_EXTRA_PACKAGES="python3-torch python3-torchvision python3-onnx python3-yaml" \
    bash tools/scripts/setup.sh
  openblas_pick_core "$build/tools/plan"
  # A test that hangs is stopped after --timeout (the suite's slowest takes 30 s on 2 cores;
  # ctest sets no limit by default) and run once more; its timeout stays in the log with its
  # name. One test held a CI run for its 90 minutes (2026-11-26; most likely the arena packing of a
  # plan of 777,176 buffers, Note [arena packing], since made fast).
  ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 600 \
    --repeat after-timeout:2 "$@"
fi

if has_stage sanitize || has_stage fuzz; then
  asan=${REMAT_ASAN_BUILD_DIR:-build-asan}
  # clang (with its sanitizer and libFuzzer runtimes) only for these stages.
  REMAT_EXTRA_PACKAGES="clang libclang-rt-14-dev" REMAT_BUILD_DIR="$asan" \
    REMAT_CMAKE_ARGS="-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREMAT_WITH_CUDA=OFF -DREMAT_WITH_MPI=OFF
      -DREMAT_SANITIZE=address,undefined -DREMAT_FUZZ=ON" bash tools/scripts/setup.sh
  openblas_pick_core "$asan/tools/plan"
fi

default_asan_exclude='^(RematExec\.ZooConfigsBitIdenticalUnderBaselines|TrainEndToEnd\.SmallCnnLossFalls|MilpBruteForce\..*|OffloadMilp\..*|LpOffload\.NeverBelowTheExhaustiveOptimumNorAboveLp|MomentBound\.NeverAboveTheExhaustiveOptimum|BenchPytorch\..*|OnnxModels\..*|Configs/Gpt2Zoo\.OneCpuStepAtASmallSequence/gpt2(_medium)?|Configs/Zoo\.OneCpuTrainingStepAtSmallInputHasFiniteLoss/(fcn8|fcn32|resnet50_pspnet|resnet101|vgg16|vgg19|resnet50|unet|segnet|densenet169|densenet201|resnet152|resnet101_v2|resnet152_v2|nasnet_large|inception_v3|xception)|Configs/Bf16Zoo\.TrainsAStepWithThePlannedPeak/(fcn8|fcn32|resnet50_pspnet|resnet101|vgg16|vgg19|resnet50|unet|segnet|gpt2|gpt2_medium|densenet169|densenet201|resnet152|resnet101_v2|resnet152_v2|nasnet_large|inception_v3|xception)|Gpt2Tiny\.LossFallsWithin50CpuSteps|Shards/Readme\.EveryCommandRunsAsWritten/[0-9]+|CheckmateAtScale\.(EqualsTheFullMilpWhereItProvesOptimality|TimeLimitHoldsUnderLoad|NeverWorseThanLpOrBaselinesAndBoundHolds|FindsWhatASmallerBudgetRounds)|MonotoneSweep\.CheckmateNeverCostsMoreAtALargerBudget|MilpMaxBatch\.(CheckmateReachesTheCheapDropsBatch|CheckmateOffloadFindsALargerBatchWhereCopiesAreFree)|DeeperSchedules\.CheckmateNeverCostsMoreThanEither)( |$)'
exclude=()
[ -n "${REMAT_ASAN_EXCLUDE-$default_asan_exclude}" ] && exclude=(-E "${REMAT_ASAN_EXCLUDE-$default_asan_exclude}")
if has_stage sanitize; then
  # allocator_may_return_null: the bad-input suite asks for more memory than exists and expects
  # a named error, not ASan's abort. Third-party leaks are suppressed by name in tools/scripts/lsan.supp.
  ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1:strict_string_checks=1 \
  LSAN_OPTIONS=suppressions=$PWD/tools/scripts/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$asan" --output-on-failure -j"$(nproc)" --timeout 900 "${exclude[@]}"
fi

if has_stage fuzz; then
  REMAT_ASAN_BUILD_DIR="$asan" bash tools/scripts/fuzz.sh "${REMAT_FUZZ_SECONDS:-10}"
fi
