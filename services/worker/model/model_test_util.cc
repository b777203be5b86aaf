#include "services/worker/model/model_test_util.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include <glog/logging.h>
#include "common/test_models_dir.h"

namespace folio::worker::testing {

std::optional<std::string> ModelPath(const std::string& relative) {
  const std::optional<std::string> dir = TestModelsDir();
  if (!dir) return std::nullopt;
  std::string path = (std::filesystem::path(*dir) / relative).string();
  if (!std::filesystem::exists(path)) return std::nullopt;
  return path;
}

std::vector<uint8_t> ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  CHECK(f) << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void WriteFileBytes(const std::string& path, const void* data, size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  CHECK(f) << "cannot write " << path;
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  CHECK(f) << "write failed: " << path;
}

std::string MakeTempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(base ? base : "/tmp") /
                              ("folio_model_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace folio::worker::testing
