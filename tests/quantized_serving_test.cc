// A model as users download it, served end to end: a llama3-shaped random model (untied
// embeddings, rope_freqs, theta 5e5, GQA 4:1) written in F16 by the GGUF writer,
// quantized to Q4_K_M by llama.cpp's own quantizer (the reference), then served by a
// whole local cluster (tests/cluster.h). The completion must be the same greedy tokens
// as Folio's CPU runner gives in-process on the same file, and GetModelInfo must report
// the stored type llama.cpp wrote (general.file_type 15: Q4_K_M). The same for a
// Qwen3-MoE-shaped mixture of experts and a Gemma 3-shaped model.
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

class QuantizedServingTest : public ServedModelTest {
 protected:
  // Writes `o` in F16, quantizes it to Q4_K_M with llama.cpp, then compares the served
  // greedy completion from BOS with the in-process runner's on the same file.
  void ServesTheRunnersGreedyTokens(worker::RandomModelOptions o) {
    o.dtype = worker::DType::kF16;
    const std::string f16 = dir_ + "/" + o.name + "-F16.gguf";
    const std::string q4 = dir_ + "/" + o.name + "-Q4_K_M.gguf";
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
    EXPECT_GE(std::set<int32_t>(want.begin(), want.end()).size(), 4u)
        << ::testing::PrintToString(want);

    // Served.
    auto cluster = Serve(q4);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    absl::StatusOr<v1::ModelInfo> info = ModelInfo(**cluster);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->name(), o.name);
    EXPECT_EQ(info->architecture(), o.architecture);
    EXPECT_EQ(info->stored_type(), "Q4_K_M");
    EXPECT_EQ(info->dim(), o.dim);
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
};

worker::RandomModelOptions Llama3Shape() {
  worker::RandomModelOptions o;
  o.name = "q4km-llama3";
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
  return o;
}

TEST_F(QuantizedServingTest, LlamaCppQ4KMServesTheRunnersGreedyTokens) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  ServesTheRunnersGreedyTokens(Llama3Shape());
}

// A Qwen3-MoE-shaped file (Q/K norms, 8 experts of 256, top-2) in llama.cpp's Q4_K_M:
// the experts go through the whole cluster (the worker's grouped path, the scheduler's
// steps) as they do in process.
TEST_F(QuantizedServingTest, LlamaCppQ4KMMixtureOfExpertsServesTheRunnersGreedyTokens) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  worker::RandomModelOptions o = Llama3Shape();
  o.name = "q4km-qwen3moe";
  o.architecture = "qwen3moe";
  o.rope_freqs = false;
  o.rope_theta = 1000000.0f;
  o.num_kv_heads = 2;
  o.head_dim = 128;
  o.num_experts = 8;
  o.num_experts_used = 2;
  o.expert_hidden_dim = 256;
  ServesTheRunnersGreedyTokens(o);
}

// A Gemma 3-shaped file (post-norms, GeGLU, Q/K norms, 6 layers of which 5 local with a
// window of 8, shorter than the 13 tokens generated).
TEST_F(QuantizedServingTest, LlamaCppQ4KMGemma3ServesTheRunnersGreedyTokens) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  worker::RandomModelOptions o = Llama3Shape();
  o.name = "q4km-gemma3";
  o.architecture = "gemma3";
  o.rope_freqs = false;
  o.rope_theta = 1000000.0f;
  o.num_layers = 6;
  o.num_kv_heads = 2;
  o.head_dim = 128;
  o.sliding_window = 8;
  o.rope_theta_local = 10000.0f;
  o.tied_embeddings = false;  // gemma3's output.weight is optional; tied repeats BOS here
  ServesTheRunnersGreedyTokens(o);
}

}  // namespace
}  // namespace folio::testing
