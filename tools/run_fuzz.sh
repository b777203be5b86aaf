#!/usr/bin/env bash
# Builds the fuzz targets with clang (libFuzzer + ASan) in their own build dir and runs
# each on a scratch copy of its committed seed corpus:
#   gguf_fuzz   GGUF parsing and weight building (services/worker/model/fuzz_corpus)
#   jinja_fuzz  chat template parsing and rendering (services/frontend/http/fuzz_corpus,
#               plus llama.cpp's real templates when the reference is installed)
#
#   tools/run_fuzz.sh [max_total_time_seconds] [target...]   (default 30, all targets)
#
# Environment: FOLIO_FUZZ_BUILD_DIR (default <repo>/build-fuzz), JOBS (default 2),
# FOLIO_REFERENCE_DIR (default <repo>/build/reference).
# Crashes are written to $FOLIO_FUZZ_BUILD_DIR/fuzz-artifacts/; the committed corpus is
# never modified.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FOLIO_FUZZ_BUILD_DIR:-$repo/build-fuzz}"
seconds="${1:-30}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf_fuzz jinja_fuzz)
jobs="${JOBS:-2}"

for tool in clang clang++ cmake ninja; do
  command -v "$tool" >/dev/null || { echo "run_fuzz.sh: $tool not found" >&2; exit 1; }
done

# Instrument every object (-fsanitize=fuzzer-no-link) so the parser library gives the
# fuzzer coverage feedback; only the fuzz target links libFuzzer's main.
cmake -S "$repo" -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer" \
  -DFOLIO_FUZZ=ON -DFOLIO_BUILD_BENCHMARKS=OFF -DFOLIO_CUDA=OFF >/dev/null
cmake --build "$build" --target "${targets[@]}" -j "$jobs"

for target in "${targets[@]}"; do
  corpus="$build/fuzz-corpus/$target"
  artifacts="$build/fuzz-artifacts/$target"
  rm -rf "$corpus"
  mkdir -p "$corpus" "$artifacts"
  extra=()
  case "$target" in
    gguf_fuzz)
      cp "$repo"/services/worker/model/fuzz_corpus/* "$corpus"/ ;;
    jinja_fuzz)
      cp "$repo"/services/frontend/http/fuzz_corpus/* "$corpus"/
      templates="${FOLIO_REFERENCE_DIR:-$repo/build/reference}/llama.cpp/models/templates"
      if [ -d "$templates" ]; then cp "$templates"/*.jinja "$corpus"/; fi
      extra=(-dict="$repo/services/frontend/http/jinja_fuzz.dict" -max_len=65536) ;;
    *) echo "run_fuzz.sh: unknown target $target" >&2; exit 1 ;;
  esac
  echo "run_fuzz.sh: $target for ${seconds}s" >&2
  "$build/bin/$target" "$corpus" "${extra[@]}" \
    -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 \
    -artifact_prefix="$artifacts/" -print_final_stats=1
done
