// Where tests find their models, for every test layer: $FOLIO_MODELS_DIR when
// set (a folder laid out like ../shared/models), else the build tree's
// test-models/ folder, which the build fills with the repository's embedded
// stories260K and the models it generates (bench-28m's shape from a fixed seed;
// see models/CMakeLists.txt). ctest passes FOLIO_BUILD_DIR to every test;
// without either variable there is no folder. Also the one helper every test layer
// reads its files (expected outputs, templates, fixtures) with. Header-only; stateless.
#ifndef FOLIO_COMMON_TEST_MODELS_DIR_H_
#define FOLIO_COMMON_TEST_MODELS_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace folio {

inline std::optional<std::string> TestModelsDir() {
  if (const char* dir = std::getenv("FOLIO_MODELS_DIR"); dir != nullptr && *dir != '\0') {
    return std::string(dir);
  }
  if (const char* build = std::getenv("FOLIO_BUILD_DIR"); build != nullptr && *build != '\0') {
    std::string dir = std::string(build) + "/test-models";
    if (std::filesystem::is_directory(dir)) return dir;
  }
  return std::nullopt;
}

// The bytes of the file at `path`, or "" when it cannot be read (a test comparing them
// with what it expects fails there).
inline std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace folio

#endif  // FOLIO_COMMON_TEST_MODELS_DIR_H_
