#!/usr/bin/env bash
# The CUDA device check, on a machine with an NVIDIA GPU, from the folder that
# tests/gpu/prepare_device_check.sh made (default .devbuild/). Writes each result to
# $OUT (default ./device-check-out) as soon as it has it:
#   env.txt            GPU, driver, where cuBLAS was found
#   tests.txt          the CUDA kernel and runner tests (every kernel against its CPU
#                      reference, GPU vs CPU logits, the golden text on the GPU, TP=2
#                      against TP=1 on one device), the worker's --device=cuda factory,
#                      and two CUDA worker processes as one tensor-parallel group
#   bench.json/.txt    attention bandwidth against the device's copy bandwidth, paged vs
#                      contiguous attention, decode tokens/s at batch 1, 32 and 128
# Exit status: the tests' (the benchmark is informative).
#
#   tests/gpu/device_check.sh [devbuild-dir]
set -uo pipefail
DEV="$(cd "${1:-.devbuild}" && pwd)"
OUT="${OUT:-$PWD/device-check-out}"
mkdir -p "$OUT"
log() { echo "[device-check $(date +%T)] $*" | tee -a "$OUT/env.txt"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
  --format=csv >>"$OUT/env.txt" 2>&1
cublas=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
         /usr/lib/x86_64-linux-gnu; do
  if [ -e "$d/libcublas.so.13" ]; then cublas="$d"; break; fi
done
if [ -z "$cublas" ]; then
  cublas="$(dirname "$(find / -xdev -name 'libcublas.so.13' 2>/dev/null | head -1)" 2>/dev/null)"
fi
log "cuBLAS from: ${cublas:-not found}"
nccl=""
for d in "$cublas" /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
  if [ -e "$d/libnccl.so.2" ]; then nccl="$d"; break; fi
done
if [ -z "$nccl" ]; then
  nccl="$(dirname "$(find / -xdev -name 'libnccl.so.2' 2>/dev/null | head -1)" 2>/dev/null)"
fi
log "NCCL from: ${nccl:-not found}"
libpath="$DEV/lib:$cublas:$nccl:/usr/local/nvidia/lib64"
# The machine's own C library when it is new enough (NCCL and cuBLAS there are built
# against it), else the packed one with its loader.
run=(env LD_LIBRARY_PATH="$libpath")
if ! "${run[@]}" "$DEV/bin/folio_worker_cuda_test" --gtest_list_tests >/dev/null 2>>"$OUT/env.txt"; then
  log "the machine's C library is too old for the build: using the packed one"
  run=("$DEV/lib/sys/ld-linux-x86-64.so.2" --library-path "$DEV/lib/sys:$libpath:/usr/lib/x86_64-linux-gnu")
fi

models="$(mktemp -d)"
cp -r "$DEV/models/stories260K" "$models/"
# A model of bench-28m's shape (the file itself is too large to carry).
"${run[@]}" "$DEV/bin/folio-make-model" --out="$models/bench-28m-f16.gguf" --vocab=4096 --dim=512 \
  --layers=8 --heads=8 --kv_heads=4 --hidden_dim=1408 --context=4096 --dtype=f16 \
  --name=bench-28m-shaped >>"$OUT/env.txt" 2>&1
log "models in $models: $(ls "$models" | tr '\n' ' ')"

log "tests"
FOLIO_MODELS_DIR="$models" timeout 240 "${run[@]}" "$DEV/bin/folio_worker_cuda_test" \
  --gtest_brief=0 >"$OUT/tests.txt" 2>&1
tests_rc=$?
FOLIO_MODELS_DIR="$models" timeout 60 "${run[@]}" "$DEV/bin/worker_backend_test" >>"$OUT/tests.txt" 2>&1 || tests_rc=1
# Worker processes the test starts inherit the environment, so this needs the machine's
# own C library (the packed loader only reaches the test binary itself).
if [ "${run[0]}" = env ]; then
  FOLIO_MODELS_DIR="$models" FOLIO_BUILD_DIR="$DEV" LD_LIBRARY_PATH="$libpath" timeout 90 \
    "$DEV/bin/tp_worker_test" --gtest_filter='*Cuda*' >>"$OUT/tests.txt" 2>&1 || tests_rc=1
else
  log "tp_worker_test not run: its worker processes need the machine's C library"
fi
log "tests exit $tests_rc: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.txt" | tr '\n' ' ')"

log "benchmarks"
timeout 200 "${run[@]}" "$DEV/bin/cuda_bench" --benchmark_out="$OUT/bench.json" \
  --benchmark_out_format=json >"$OUT/bench.txt" 2>&1
log "bench exit $?"
exit "$tests_rc"
