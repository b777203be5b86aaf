// Helpers shared by the model loader tests: locating the shared test models and
// reading files. Test-only.
#ifndef FOLIO_SERVICES_WORKER_MODEL_MODEL_TEST_UTIL_H_
#define FOLIO_SERVICES_WORKER_MODEL_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace folio::worker::testing {

// $FOLIO_MODELS_DIR/<relative>, or nullopt when the variable is unset.
std::optional<std::string> ModelPath(const std::string& relative);

// Message for GTEST_SKIP when FOLIO_MODELS_DIR is unset.
inline constexpr char kNoModelsDir[] =
    "no test models: run under ctest (it passes FOLIO_BUILD_DIR, whose test-models/ the "
    "build fills), or set FOLIO_MODELS_DIR to a folder laid out like models/";

// The whole file (CHECK-fails if it cannot be read).
std::vector<uint8_t> ReadFileBytes(const std::string& path);
void WriteFileBytes(const std::string& path, const void* data, size_t size);

// A fresh empty directory under the test temp dir.
std::string MakeTempDir(const std::string& name);

}  // namespace folio::worker::testing

// Skips the test when FOLIO_MODELS_DIR is unset, else sets `var` to the model path.
#define FOLIO_MODEL_OR_SKIP(var, relative)                                        \
  std::string var;                                                                \
  do {                                                                            \
    auto folio_model_path = ::folio::worker::testing::ModelPath(relative);        \
    if (!folio_model_path) GTEST_SKIP() << ::folio::worker::testing::kNoModelsDir; \
    var = *folio_model_path;                                                      \
  } while (0)

#endif  // FOLIO_SERVICES_WORKER_MODEL_MODEL_TEST_UTIL_H_
