// Split GGUF models as llama.cpp's own tools write them: gguf-py's GGUFWriter
// (split_max_tensors, run by Debian's python3 with gguf-py from the reference bundle)
// splits a random q4_K qwen2 model into shards; Folio, loading the first shard, must
// give exactly the unsplit model's logits.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/test_models.h"
#include "services/worker/model/load_model.h"
#include "services/worker/model/random_model.h"
#include "tests/reference/llama_ref.h"

namespace folio::worker {
namespace {

TEST(SplitModelReferenceTest, GgufPySplitGivesExactlyTheUnsplitLogits) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = (std::filesystem::path(base != nullptr ? base : "/tmp") /
                           absl::StrCat("folio-split-ref-", ::getpid()))
                              .string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  RandomModelOptions o;
  o.architecture = "qwen2";
  o.dim = 256;
  o.hidden_dim = 512;
  o.num_layers = 2;
  o.dtype = DType::kQ4_K;
  o.vocab_size = 320;
  const std::string model = dir + "/model.gguf";
  ASSERT_TRUE(WriteRandomModel(o, model).ok());
  const std::string python =
      std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const std::string cmd =
      absl::StrCat("PYTHONPATH='", reference::LlamaCppSourceDir(), "/gguf-py' ", python, " '",
                   FOLIO_GGUF_PY_SPLIT, "' '", model, "' '", dir, "/split.gguf' 8 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << cmd << "\n" << out;
  // 27 tensors (3 + 12 per layer), at most 8 a shard: 4 shards.
  const std::string first = dir + "/split-00001-of-00004.gguf";
  ASSERT_TRUE(std::filesystem::exists(first)) << "gguf-py wrote another shard count:\n" << out;
  ASSERT_TRUE(std::filesystem::exists(dir + "/split-00004-of-00004.gguf"));

  absl::StatusOr<std::unique_ptr<ModelWeights>> whole = LoadModel(model);
  ASSERT_TRUE(whole.ok()) << whole.status();
  absl::StatusOr<std::unique_ptr<ModelWeights>> split = LoadModel(first);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ((*split)->config.stored_type, "Q4_K_M");  // folio-make-model's file_type 15
  const std::vector<std::vector<float>> want = testing::PromptAndDecodeLogits(**whole, 0);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(testing::PromptAndDecodeLogits(**split, 0), want);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace folio::worker
