// Test helpers: llama.cpp's vocabulary files in the reference source bundle
// (tests/reference/llama_ref.h: $FOLIO_REFERENCE_DIR, else <build>/reference).
#ifndef FOLIO_SERVICES_WORKER_MODEL_VOCAB_TEST_UTIL_H_
#define FOLIO_SERVICES_WORKER_MODEL_VOCAB_TEST_UTIL_H_

#include <string>

#include "tests/reference/llama_ref.h"

namespace folio::worker {

// llama.cpp's models/ggml-vocab-<name>.gguf.
inline std::string VocabTestFile(const std::string& name) {
  return reference::LlamaCppSourceDir() + "/models/ggml-vocab-" + name + ".gguf";
}

inline std::string ReferenceHint() {
  return "the llama.cpp reference is not installed (./folio reference, or set "
         "FOLIO_REFERENCE_DIR)";
}

// $FOLIO_REQUIRE_REFERENCE=1 (./folio test) turns a missing reference into a failure.
inline bool ReferenceRequired() { return reference::ReferenceRequired(); }

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_VOCAB_TEST_UTIL_H_
