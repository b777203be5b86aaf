// The model facts folio-bench needs (vocabulary size, context length, special token ids)
// read from the model file itself, for servers whose API does not tell them.
#ifndef FOLIO_TOOLS_BENCH_MODEL_FILE_H_
#define FOLIO_TOOLS_BENCH_MODEL_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "tools/bench/backend.h"

namespace folio::bench {

// Loads `path` (GGUF or llama2.c, as the worker does; the weights are mapped, not read)
// and returns its vocab_size, context length as max_model_len, and unknown / BOS / EOS
// ids; the name is the file name. The loader's error (naming the file) otherwise.
absl::StatusOr<ModelFacts> ReadModelFile(const std::string& path);

}  // namespace folio::bench

#endif  // FOLIO_TOOLS_BENCH_MODEL_FILE_H_
