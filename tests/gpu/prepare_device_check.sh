#!/usr/bin/env bash
# Builds what tests/gpu/device_check.sh runs on a GPU machine and packs it into one
# folder (default .devbuild/) that can be copied there: the CUDA tests, the CUDA
# benchmark, folio-make-model, and folio-worker with tp_worker_test (two CUDA ranks
# through the worker service), stripped, with every shared library they need except
# cuBLAS and NCCL (large; the GPU machine's CUDA installation provides them), plus
# stories260K. The folder is also written as OUT.tar.gz (about 30 MB; the folder itself
# is over 64 MiB, mostly OpenBLAS), the form to copy:
#
#   tests/gpu/prepare_device_check.sh [build-dir] [out-dir]
#   # on the GPU machine, from the repository root:
#   tar -xzf .devbuild.tar.gz && tests/gpu/device_check.sh .devbuild
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-$ROOT/build-cuda}"
OUT="${2:-$ROOT/.devbuild}"
MODELS="${FOLIO_MODELS_DIR:-$ROOT/../shared/models}"
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFOLIO_CUDA=ON
fi
cmake --build "$BUILD" -j "${FOLIO_JOBS:-$(nproc)}" --target folio_worker_cuda_test worker_backend_test cuda_bench folio-make-model folio-worker tp_worker_test
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib/sys" "$OUT/models"
for b in folio_worker_cuda_test worker_backend_test cuda_bench folio-make-model folio-worker tp_worker_test; do
  strip -o "$OUT/bin/$b" "$BUILD/bin/$b"
done
# Every library the binaries load but cuBLAS and NCCL (hundreds of MB; device_check.sh
# finds the GPU machine's own). The C and C++ runtime libraries go to lib/sys/, used only
# where the machine's own are older than the build's.
ldd "$OUT"/bin/* | awk '/=>/ {print $3} /ld-linux/ {print $1}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libcublas*|libnccl*) ;;
    ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++.so*|libgcc_s.so*)
      cp -L "$lib" "$OUT/lib/sys/" ;;
    *) cp -L "$lib" "$OUT/lib/" ;;
  esac
done
cp -r "$MODELS/stories260K" "$OUT/models/"
tar -C "$(dirname "$OUT")" -czf "$OUT.tar.gz" "$(basename "$OUT")"
du -sh "$OUT" "$OUT.tar.gz"
