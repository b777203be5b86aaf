// Window layer groups through a whole cluster (cachemgr paged_policy.h, worker
// kv_layer_groups.h, the scheduler's window tables): a Gemma 3-shaped model served with
// its local layers in window groups writes the same text as with every layer in every
// block (--window_layer_groups=false), long past its window, greedy and sampled with n = 2
// (forks), and again from the prefix cache; its pool gives blocks back as the window
// passes them and holds fewer at its peak.
#include <iostream>
#include <string>
#include <vector>

#include "folio/v1/folio.grpc.pb.h"
#include "gtest/gtest.h"
#include "services/worker/model/random_model.h"
#include "tests/served_model_test_env.h"

namespace folio::testing {
namespace {

namespace v1 = folio::v1;

struct Served {
  std::vector<std::vector<int32_t>> greedy;   // the same prompt twice: computed, then cached
  std::vector<int32_t> cached_prompt_tokens;  // of each greedy run
  std::vector<std::vector<int32_t>> sampled;  // n = 2, seeded
  internal::v1::CacheStats stats;
};

class WindowGroupsServingTest : public ServedModelTest {
 protected:
  static Served ServeAndGenerate(const std::string& model,
                                 const std::vector<std::string>& worker_args);
  // The model of these tests, written into dir_.
  std::string WriteGemma3();
};

Served WindowGroupsServingTest::ServeAndGenerate(const std::string& model,
                                                 const std::vector<std::string>& worker_args) {
  Served out;
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Serve(model, worker_args);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return out;
  v1::GenerateRequest req;
  for (int i = 0; i < 40; ++i) req.add_prompt_token_ids(3 + (i * 97) % 500);
  req.mutable_sampling()->set_max_tokens(90);
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_ignore_eos(true);
  for (int run = 0; run < 2; ++run) {
    v1::CompleteResponse resp;
    grpc::Status s = Complete(**cluster, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<int32_t>& tokens = out.greedy.emplace_back();
    for (const v1::TokenInfo& t : resp.tokens()) tokens.push_back(t.token_id());
    out.cached_prompt_tokens.push_back(resp.usage().cached_prompt_tokens());
  }
  req.mutable_sampling()->set_temperature(0.8f);
  req.mutable_sampling()->set_seed(7);
  req.mutable_sampling()->set_n(2);
  v1::CompleteResponse resp;
  grpc::Status s = Complete(**cluster, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  for (const v1::Choice& c : resp.choices()) {
    std::vector<int32_t>& tokens = out.sampled.emplace_back();
    for (const v1::TokenInfo& t : c.tokens()) tokens.push_back(t.token_id());
  }
  EXPECT_TRUE((*cluster)->WaitForEmptyPool(absl::Seconds(10)));
  out.stats = (*cluster)->CacheStats();
  return out;
}

std::string WindowGroupsServingTest::WriteGemma3() {
  worker::RandomModelOptions o;
  o.name = "window-gemma3";
  o.architecture = "gemma3";
  o.dim = 128;
  o.hidden_dim = 256;
  o.num_layers = 6;  // 5 local layers and a global one
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.head_dim = 64;
  o.vocab_size = 512;
  o.context_length = 512;
  o.sliding_window = 8;
  o.rope_theta_local = 10000.0f;
  o.weight_std = 0.05f;
  o.embedding_std = 0.5f;
  o.dtype = worker::DType::kF16;
  const std::string model = dir_ + "/window-gemma3.gguf";
  EXPECT_TRUE(worker::WriteRandomModel(o, model).ok());
  return model;
}

TEST_F(WindowGroupsServingTest, Gemma3WritesTheSameTextAndGivesBlocksBack) {
  const std::string model = WriteGemma3();
  const Served grouped = ServeAndGenerate(model, {});
  const Served dense = ServeAndGenerate(model, {"--window_layer_groups=false"});
  ASSERT_EQ(grouped.greedy.size(), 2u);
  ASSERT_EQ(dense.greedy.size(), 2u);
  EXPECT_EQ(grouped.greedy[0].size(), 90u);
  EXPECT_EQ(grouped.greedy[0], dense.greedy[0]);
  EXPECT_EQ(grouped.greedy[1], dense.greedy[1]);
  EXPECT_EQ(grouped.greedy[1], grouped.greedy[0]);  // from the prefix cache, the same text
  EXPECT_EQ(grouped.cached_prompt_tokens[1], 32);   // two blocks of 16 and their window
  EXPECT_EQ(grouped.sampled, dense.sampled);
  ASSERT_EQ(grouped.sampled.size(), 2u);
  EXPECT_NE(grouped.sampled[0], grouped.sampled[1]);
  EXPECT_GT(grouped.stats.num_window_releases(), 5 * 4);
  EXPECT_EQ(dense.stats.num_window_releases(), 0);
  // Both pools have the same bytes; a grouped block holds one layer (the global one's
  // plane), a dense one all six, so the grouped pool has six times the blocks. At its peak
  // (two sequences of up to 130 tokens sharing a 40-token prompt) the grouped pool held
  // 16 full-attention blocks and about two per window group and sequence (a window of 8
  // spans two blocks of 16 while the next is granted): 36 one-layer blocks, against 16
  // blocks of six layers dense, 2.7 times as many bytes. Longer sequences save more.
  const double grouped_share = static_cast<double>(grouped.stats.num_blocks_used_peak()) /
                               grouped.stats.num_blocks_total();
  const double dense_share = static_cast<double>(dense.stats.num_blocks_used_peak()) /
                             dense.stats.num_blocks_total();
  EXPECT_NEAR(grouped.stats.num_blocks_total(), 6 * dense.stats.num_blocks_total(), 6);
  EXPECT_LT(grouped_share * 2, dense_share)
      << "peak " << grouped.stats.num_blocks_used_peak() << " of "
      << grouped.stats.num_blocks_total() << " blocks grouped, "
      << dense.stats.num_blocks_used_peak() << " of " << dense.stats.num_blocks_total()
      << " dense";
  std::cout << "KV at the peak: " << grouped.stats.num_blocks_used_peak() << " of "
            << grouped.stats.num_blocks_total() << " blocks grouped, "
            << dense.stats.num_blocks_used_peak() << " of " << dense.stats.num_blocks_total()
            << " dense\n";
}

// A pool of 440 KiB holds 146 tokens of the dense model (3,072 bytes a token: 6 layers, 2
// heads of 64, f16) but 55 blocks of 16 one-layer tokens grouped: a 448-token sequence,
// three times what the dense pool could hold, runs in it with the text the dense model
// writes in a large pool (the same scheduler flags: steps of 16 tokens, so the window
// tables hold 4 blocks a group at most and one sequence needs 28 + 5 * 4 blocks).
TEST_F(WindowGroupsServingTest, ASequenceThreeTimesWhatTheDensePoolHoldsRuns) {
  const std::string model = WriteGemma3();
  const std::vector<std::string> scheduler = {"--max_num_batched_tokens=16",
                                              "--max_model_len=448"};
  v1::GenerateRequest req;
  for (int i = 0; i < 40; ++i) req.add_prompt_token_ids(3 + (i * 61) % 500);
  req.mutable_sampling()->set_max_tokens(408);
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_ignore_eos(true);
  std::vector<std::vector<int32_t>> texts;
  for (const std::vector<std::string>& workers :
       {std::vector<std::string>{"--window_layer_groups=false"},
        std::vector<std::string>{"--kv_cache_bytes=440KiB"}}) {
    absl::StatusOr<std::unique_ptr<Cluster>> cluster = Serve(model, workers, scheduler);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    v1::CompleteResponse resp;
    grpc::Status s = Complete(**cluster, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    std::vector<int32_t>& tokens = texts.emplace_back();
    for (const v1::TokenInfo& t : resp.tokens()) tokens.push_back(t.token_id());
    if (texts.size() == 2) {
      const internal::v1::CacheStats stats = (*cluster)->CacheStats();
      EXPECT_EQ(stats.num_blocks_total(), 55);
      EXPECT_LE(stats.num_blocks_used_peak(), 28 + 5 * 4);
    }
  }
  ASSERT_EQ(texts[0].size(), 408u);
  EXPECT_EQ(texts[1], texts[0]);
}

}  // namespace
}  // namespace folio::testing
