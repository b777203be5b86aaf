// Test helpers: where llama.cpp's vocabulary files are (the reference source bundle:
// $FOLIO_REFERENCE_DIR, else <build>/reference, as tests/reference/llama_ref.h defines it).
#ifndef FOLIO_SERVICES_WORKER_MODEL_VOCAB_TEST_UTIL_H_
#define FOLIO_SERVICES_WORKER_MODEL_VOCAB_TEST_UTIL_H_

#include <cstdlib>
#include <string>

namespace folio::worker {

inline std::string VocabReferenceDir() {
  if (const char* dir = std::getenv("FOLIO_REFERENCE_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  return FOLIO_REFERENCE_DEFAULT_DIR;
}

// llama.cpp's models/ggml-vocab-<name>.gguf.
inline std::string VocabTestFile(const std::string& name) {
  return VocabReferenceDir() + "/llama.cpp/models/ggml-vocab-" + name + ".gguf";
}

inline std::string ReferenceHint() {
  return "the llama.cpp reference is not installed (./folio reference, or set "
         "FOLIO_REFERENCE_DIR)";
}

// $FOLIO_REQUIRE_REFERENCE=1 (./folio test) turns a missing reference into a failure.
inline bool ReferenceRequired() {
  const char* v = std::getenv("FOLIO_REQUIRE_REFERENCE");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_VOCAB_TEST_UTIL_H_
