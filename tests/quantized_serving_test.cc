// A model as users download it, served end to end: a llama3-shaped random model (untied
// embeddings, rope_freqs, theta 5e5, GQA 4:1) written in F16 by the GGUF writer,
// quantized to Q4_K_M by llama.cpp's own quantizer (the reference), then served by a
// whole local cluster (tests/cluster.h). The completion must be the same greedy tokens
// as Folio's CPU runner gives in-process on the same file, and GetModelInfo must report
// the stored type llama.cpp wrote (general.file_type 15: Q4_K_M).
#include <set>
#include <string>
#include <vector>

#include "folio/v1/folio.grpc.pb.h"
#include "gtest/gtest.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/test_models.h"
#include "services/worker/model/load_model.h"
#include "services/worker/model/random_model.h"
#include "tests/cluster.h"
#include "tests/reference/llama_ref.h"
#include "tests/served_model_test_env.h"

namespace folio::testing {
namespace {

namespace v1 = folio::v1;

constexpr int kSteps = 12;

class QuantizedServingTest : public ServedModelTest {};

TEST_F(QuantizedServingTest, LlamaCppQ4KMServesTheRunnersGreedyTokens) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  worker::RandomModelOptions o;
  o.name = "q4km-llama3";
  o.dtype = worker::DType::kF16;
  o.dim = 256;
  o.hidden_dim = 512;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 1;
  o.vocab_size = 1024;
  o.context_length = 256;
  o.rope_theta = 500000.0f;
  o.rope_freqs = true;
  o.tied_embeddings = false;  // tied, greedy from BOS repeats BOS: the input embedding dominates
  o.weight_std = 0.05f;
  o.embedding_std = 0.5f;
  const std::string f16 = dir_ + "/model-F16.gguf";
  const std::string q4 = dir_ + "/model-Q4_K_M.gguf";
  ASSERT_TRUE(worker::WriteRandomModel(o, f16).ok());
  absl::Status q = reference::Quantize(f16, q4, "Q4_K_M", 2);
  ASSERT_TRUE(q.ok()) << q;

  // In-process: the CPU runner on the quantized file.
  absl::StatusOr<std::unique_ptr<worker::ModelWeights>> w = worker::LoadModel(q4);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->config.stored_type, "Q4_K_M");
  worker::CpuModelRunnerOptions ro;
  ro.kv_cache_bytes = 8 << 20;
  ro.num_threads = 2;
  auto runner = worker::CpuModelRunner::Create(**w, ro);
  ASSERT_TRUE(runner.ok()) << runner.status();
  const int32_t bos = (*w)->vocab.bos_id;
  const std::vector<int32_t> want = worker::testing::GreedyFromBos(**runner, bos, kSteps, 3);
  // Not one token repeated: the comparison below must see the model's choices.
  EXPECT_GE(std::set<int32_t>(want.begin(), want.end()).size(), 4u) << ::testing::PrintToString(want);

  // Served.
  auto cluster = Serve(q4);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<v1::ModelInfo> info = ModelInfo(**cluster);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name(), "q4km-llama3");
  EXPECT_EQ(info->architecture(), "llama");
  EXPECT_EQ(info->stored_type(), "Q4_K_M");
  EXPECT_EQ(info->dim(), 256);
  v1::GenerateRequest req;
  req.add_prompt_token_ids(bos);
  req.mutable_sampling()->set_max_tokens(kSteps);
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_ignore_eos(true);
  v1::CompleteResponse resp;
  grpc::Status s = Complete(**cluster, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.finish_reason(), v1::FINISH_REASON_LENGTH);
  std::vector<int32_t> got = {bos};
  for (const v1::TokenInfo& t : resp.tokens()) got.push_back(t.token_id());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace folio::testing
