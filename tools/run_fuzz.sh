#!/usr/bin/env bash
# Builds the fuzz targets with clang (libFuzzer + ASan) in their own build dir and runs
# each on a scratch copy of its committed seed corpus:
#   gguf_fuzz            the GGUF parser, the weight builder and the vocabulary loader
#   bpe_fuzz             the byte-level BPE encoder
#   openai_request_fuzz  the OpenAI request parser and validator
#   jinja_fuzz           chat template parsing and rendering (plus llama.cpp's real
#                        templates as seeds when the reference is installed)
#   safetensors_fuzz     the safetensors header parser (Hugging Face weights)
#   hf_tokenizer_fuzz    the tokenizer.json / tokenizer_config / generation_config and
#                        config.json readers, and the tokenizer a tokenizer.json builds
#   grammar_fuzz         the GBNF grammar parser, the regex compiler and the token matcher
#   json_schema_fuzz     the JSON Schema -> grammar compiler
#   tool_call_fuzz       the tool-call output parsers (whole = streamed, no call = the text)
#   reasoning_fuzz       the <think> reasoning splitter (whole = streamed, the rules, nothing
#                        but the tags and whitespace around them dropped)
#   kv_block_file_fuzz   the disk KV tier's block-file reader (an accepted file is exactly
#                        what the writer writes) and the disk blocks a refusal carries
#
#   tools/run_fuzz.sh [max_total_time_seconds_per_target] [target...]
#   (default 30; targets default to all; gguf, bpe, openai, jinja, safetensors,
#   hf_tokenizer, grammar, json_schema, tools and reasoning name them too)
#
# Environment: FOLIO_FUZZ_BUILD_DIR (default <repo>/build-fuzz), JOBS (default 2),
# FOLIO_REFERENCE_DIR (default <repo>/build/reference).
# Crashes are written to $FOLIO_FUZZ_BUILD_DIR/fuzz-artifacts/; the committed corpus is
# never modified.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FOLIO_FUZZ_BUILD_DIR:-$repo/build-fuzz}"
seconds="${1:-30}"
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
shift || true
targets=()
for t in "$@"; do
  case "$t" in
    gguf) targets+=(gguf_fuzz) ;;
    bpe) targets+=(bpe_fuzz) ;;
    openai) targets+=(openai_request_fuzz) ;;
    jinja) targets+=(jinja_fuzz) ;;
    safetensors) targets+=(safetensors_fuzz) ;;
    hf_tokenizer) targets+=(hf_tokenizer_fuzz) ;;
    grammar) targets+=(grammar_fuzz) ;;
    json_schema) targets+=(json_schema_fuzz) ;;
    tools) targets+=(tool_call_fuzz) ;;
    reasoning) targets+=(reasoning_fuzz) ;;
    routing) targets+=(routing_fuzz) ;;
    kv_block_file) targets+=(kv_block_file_fuzz) ;;
    *) targets+=("$t") ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(gguf_fuzz bpe_fuzz openai_request_fuzz jinja_fuzz safetensors_fuzz
                                     hf_tokenizer_fuzz grammar_fuzz json_schema_fuzz tool_call_fuzz routing_fuzz
                                     reasoning_fuzz kv_block_file_fuzz)

seed_dir() {
  case "$1" in
    gguf_fuzz) echo "$repo/services/worker/model/fuzz_corpus" ;;
    bpe_fuzz) echo "$repo/common/tokenizer/fuzz_corpus" ;;
    openai_request_fuzz) echo "$repo/services/frontend/http/fuzz_corpus" ;;
    jinja_fuzz) echo "$repo/services/frontend/jinja/jinja_fuzz_corpus" ;;
    safetensors_fuzz) echo "$repo/services/worker/model/safetensors_fuzz_corpus" ;;
    hf_tokenizer_fuzz) echo "$repo/services/worker/model/hf_tokenizer_fuzz_corpus" ;;
    grammar_fuzz) echo "$repo/common/structured/grammar_fuzz_corpus" ;;
    json_schema_fuzz) echo "$repo/common/structured/json_schema_fuzz_corpus" ;;
    tool_call_fuzz) echo "$repo/services/frontend/chat/tool_call_fuzz_corpus" ;;
    reasoning_fuzz) echo "$repo/services/frontend/chat/reasoning_fuzz_corpus" ;;
    routing_fuzz) echo "$repo/services/frontend/routing/fuzz_corpus" ;;
    kv_block_file_fuzz) echo "$repo/common/kv_block_file_fuzz_corpus" ;;
    *) echo "run_fuzz.sh: unknown target $1" >&2; exit 1 ;;
  esac
}
for target in "${targets[@]}"; do seed_dir "$target" >/dev/null; done
cmake --build "$build" --target "${targets[@]}" -j "$jobs"

for target in "${targets[@]}"; do
  corpus="$build/fuzz-corpus/$target"
  artifacts="$build/fuzz-artifacts/$target"
  rm -rf "$corpus"
  mkdir -p "$corpus" "$artifacts"
  cp "$(seed_dir "$target")"/* "$corpus"/
  extra=()
  if [ "$target" = jinja_fuzz ]; then
    templates="${FOLIO_REFERENCE_DIR:-$repo/build/reference}/llama.cpp/models/templates"
    if [ -d "$templates" ]; then cp "$templates"/*.jinja "$corpus"/; fi
    extra=(-dict="$repo/services/frontend/jinja/jinja_fuzz.dict" -max_len=65536)
  fi
  echo "== $target (${seconds} s)"
  "$build/bin/$target" "$corpus" "${extra[@]}" \
    -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 \
    -artifact_prefix="$artifacts/" -print_final_stats=1
done
