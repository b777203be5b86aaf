// LoadModel's answer for files it does not take: the kind is named, with what is supported.
#include "services/worker/model/load_model.h"

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace folio::worker {
namespace {

using ::testing::HasSubstr;

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

struct Case {
  const char* name;
  std::string bytes;
  const char* says;
};

TEST(LoadModelTest, AFileOfAnotherKindIsNamedWithWhatIsSupported) {
  const std::string padding(64, '\0');
  const Case cases[] = {
      {"pytorch_model.bin", std::string("PK\x03\x04", 4) + padding, "zip archive"},
      {"old.pt", std::string("\x80\x02}q\x00(X", 7) + padding, "pickle"},  // protocol 2, a dict
      {"ggjt.bin", "tjgg" + padding, "older than GGUF"},
      {"model.safetensors", std::string("\x20\0\0\0\0\0\0\0", 8) + "{\"a\": 1}" + padding,
       "safetensors file alone"},
      {"config.json", "{\"architectures\": [\"LlamaForCausalLM\"]}" + padding, "text file"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(WriteFile(c.name, c.bytes));
    ASSERT_FALSE(w.ok()) << c.name;
    EXPECT_EQ(w.status().code(), absl::StatusCode::kUnimplemented) << c.name;
    EXPECT_THAT(w.status().message(), HasSubstr(c.name));
    EXPECT_THAT(w.status().message(), HasSubstr(c.says)) << w.status();
    EXPECT_THAT(w.status().message(), HasSubstr("supported: a GGUF file")) << w.status();
  }
}

// llama2.c headers whose first bytes look like another kind's magic (dim 640 = 80 02 00 00,
// a pickle's first two bytes; dim 60 = '<'; 123 layers = '{' at byte 8) are still read as
// llama2.c: the error is the llama2.c loader's, not a misnamed kind.
TEST(LoadModelTest, Llama2cHeadersAreNotTakenForOtherKinds) {
  auto header = [](int32_t dim, int32_t hidden, int32_t layers) {
    const int32_t h[7] = {dim, hidden, layers, 8, 8, 0, 64};  // vocab 0: rejected by the loader
    return std::string(reinterpret_cast<const char*>(h), sizeof(h)) + std::string(64, '\0');
  };
  for (const auto& [dim, layers] : {std::pair{640, 4}, std::pair{60, 4}, std::pair{768, 123}}) {
    absl::StatusOr<std::unique_ptr<ModelWeights>> w =
        LoadModel(WriteFile("llama2c.bin", header(dim, 1536, layers)));
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().code(), absl::StatusCode::kUnimplemented) << w.status();
    EXPECT_THAT(w.status().message(), HasSubstr("llama2.c")) << w.status();
  }
}

TEST(LoadModelTest, BytesOfNoKnownKindSayWhyAndWhatIsSupported) {
  // Zero sizes in what would be a llama2.c header.
  absl::StatusOr<std::unique_ptr<ModelWeights>> w =
      LoadModel(WriteFile("zeros.bin", std::string(256, '\0')));
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(), HasSubstr("zeros.bin: not a model file Folio knows"));
  EXPECT_THAT(w.status().message(), HasSubstr("sizes must be positive"));
  EXPECT_THAT(w.status().message(), HasSubstr("supported: a GGUF file"));
}

TEST(LoadModelTest, AMissingPathIsNamed) {
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel("/nonexistent/folio/model.gguf");
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr("/nonexistent/folio/model.gguf"));
}

}  // namespace
}  // namespace folio::worker
