#!/usr/bin/env bash
# Builds a fuzz target with clang (libFuzzer + ASan) in its own build dir and runs it on
# a scratch copy of its committed seed corpus: the GGUF parser (default) or the OpenAI
# request parser and validator.
#
#   tools/run_fuzz.sh [max_total_time_seconds (default 30)] [gguf|openai]
#
# Environment: FOLIO_FUZZ_BUILD_DIR (default <repo>/build-fuzz), JOBS (default 2).
# Crashes are written to $FOLIO_FUZZ_BUILD_DIR/fuzz-artifacts/; the committed corpus is
# never modified.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FOLIO_FUZZ_BUILD_DIR:-$repo/build-fuzz}"
seconds="${1:-30}"
case "${2:-gguf}" in
  gguf) target=gguf_fuzz; seeds="$repo/services/worker/model/fuzz_corpus" ;;
  openai) target=openai_request_fuzz; seeds="$repo/services/frontend/http/fuzz_corpus" ;;
  *) echo "run_fuzz.sh: unknown target ${2} (gguf or openai)" >&2; exit 1 ;;
esac
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
cmake --build "$build" --target "$target" -j "$jobs"

corpus="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
rm -rf "$corpus"
mkdir -p "$corpus" "$artifacts"
cp "$seeds"/* "$corpus"/

"$build/bin/$target" "$corpus" \
  -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=512 \
  -artifact_prefix="$artifacts/" -print_final_stats=1
