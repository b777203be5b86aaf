// Sharing blocks end to end: parallel sampling and beam search through the four services.
// Beam search is checked against a plain beam search written here, which recomputes every
// candidate from scratch (a fresh prefill of the whole beam per candidate list, no shared
// blocks) on the worker's CpuModelRunner in process.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <thread>
#include <tuple>

#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/test_models.h"
#include "tests/cluster.h"

namespace folio {
namespace {

using ::testing::HasSubstr;
using testing::Cluster;
using testing::ClusterOptions;
namespace v1 = folio::v1;

constexpr int32_t kBlockSize = 16;

int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }

// --- The plain beam search -------------------------------------------------------------

struct PlainBeam {
  std::vector<int32_t> tokens;
  double cum_logprob = 0.0;
  double score = 0.0;
};

// The top `k` next tokens after `tokens`, computed from scratch: the whole sequence is
// prefilled into blocks [0, n) of the runner's pool, overwriting whatever was there.
std::vector<worker::TokenLogprob> TopCandidates(worker::CpuModelRunner& runner,
                                                const std::vector<int32_t>& tokens, int32_t k) {
  worker::StepInput input;
  worker::SequenceStep seq;
  seq.seq_id = 1;
  seq.token_ids = tokens;
  seq.start_pos = 0;
  for (int32_t b = 0; b < CeilDiv(static_cast<int32_t>(tokens.size()), kBlockSize); ++b) {
    seq.block_table.push_back(b);
  }
  seq.num_samples = 0;
  seq.num_candidates = k;
  input.seqs.push_back(seq);
  absl::StatusOr<worker::StepOutput> out = runner.Execute(input);
  CHECK(out.ok()) << out.status();
  return out->seqs.at(0).candidates;
}

// Beam search as the scheduler documents it (services/scheduler/beam_search.h), written
// out plainly: every step each beam's top 2k candidates, ranked by cumulative log-prob
// (ties: lower token id, then lower parent); ending tokens among the first k ranks
// finish; k continue; the best k finished kept by score (ties: smaller token list);
// stop when no beam is live or k finished and no live beam can beat the worst of them.
std::vector<PlainBeam> PlainBeamSearch(worker::CpuModelRunner& runner,
                                       const std::vector<int32_t>& prompt, int32_t k,
                                       int32_t n, int32_t max_tokens, int32_t eos,
                                       double length_penalty) {
  auto score = [&](double cum, size_t len) {
    return cum / std::pow(static_cast<double>(len), length_penalty);
  };
  std::vector<PlainBeam> live = {PlainBeam{}};
  std::vector<PlainBeam> finished;
  auto keep = [&](PlainBeam b) {
    b.score = score(b.cum_logprob, b.tokens.size());
    finished.push_back(std::move(b));
    std::sort(finished.begin(), finished.end(), [](const PlainBeam& a, const PlainBeam& b) {
      return a.score != b.score ? a.score > b.score : a.tokens < b.tokens;
    });
    if (static_cast<int32_t>(finished.size()) > k) finished.resize(k);
  };
  for (int32_t step = 1; step <= max_tokens && !live.empty(); ++step) {
    struct Cand {
      double cum;
      int32_t token;
      int32_t parent;
    };
    std::vector<Cand> all;
    for (size_t p = 0; p < live.size(); ++p) {
      std::vector<int32_t> seq = prompt;
      seq.insert(seq.end(), live[p].tokens.begin(), live[p].tokens.end());
      for (const worker::TokenLogprob& c : TopCandidates(runner, seq, 2 * k)) {
        all.push_back({live[p].cum_logprob + c.logprob, c.token_id, static_cast<int32_t>(p)});
      }
    }
    std::sort(all.begin(), all.end(), [](const Cand& a, const Cand& b) {
      if (a.cum != b.cum) return a.cum > b.cum;
      return std::tie(a.token, a.parent) < std::tie(b.token, b.parent);
    });
    std::vector<PlainBeam> next;
    for (size_t rank = 0; rank < all.size() && static_cast<int32_t>(next.size()) < k; ++rank) {
      PlainBeam b = live[all[rank].parent];
      b.tokens.push_back(all[rank].token);
      b.cum_logprob = all[rank].cum;
      if (all[rank].token == eos) {
        if (static_cast<int32_t>(rank) < k) keep(std::move(b));
        continue;
      }
      next.push_back(std::move(b));
    }
    if (step == max_tokens) {
      for (PlainBeam& b : next) keep(std::move(b));
      next.clear();
    }
    live = std::move(next);
    if (static_cast<int32_t>(finished.size()) == k) {
      bool can_win = false;
      for (const PlainBeam& b : live) {
        const size_t reach = length_penalty > 0 ? max_tokens : b.tokens.size();
        can_win = can_win || score(b.cum_logprob, reach) > finished.back().score;
      }
      if (!can_win) break;
    }
  }
  if (static_cast<int32_t>(finished.size()) > n) finished.resize(n);
  return finished;
}

// --- Through the cluster -----------------------------------------------------------------

struct Choice {
  std::string text;
  std::vector<int32_t> token_ids;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  double cumulative_logprob = 0.0;
};

struct Result {
  grpc::Status status;
  std::map<int32_t, Choice> choices;
  v1::Usage usage;
  int usage_messages = 0;
};

Result Stream(v1::TextGeneration::Stub& stub, const v1::GenerateRequest& req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  Result r;
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    Choice& c = r.choices[resp.index()];
    c.text += resp.text();
    for (const auto& t : resp.tokens()) c.token_ids.push_back(t.token_id());
    if (resp.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      c.finish = resp.finish_reason();
      c.cumulative_logprob = resp.cumulative_logprob();
    }
    if (resp.has_usage()) {
      r.usage = resp.usage();
      ++r.usage_messages;
    }
  }
  r.status = reader->Finish();
  return r;
}

class SharingE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::ModelsDir();
    if (!dir_) GTEST_SKIP() << testing::kModelsDirHelp;
    model_ = *dir_ + "/stories260K/stories260K.gguf";
    ClusterOptions options;
    options.model = model_;
    options.scheduler_args = {"--block_size=16"};
    auto cluster = Cluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }

  std::vector<int32_t> Tokenize(const std::string& text) {
    grpc::ClientContext ctx;
    v1::TokenizeRequest req;
    req.set_text(text);
    req.set_add_bos(true);
    v1::TokenizeResponse resp;
    EXPECT_TRUE(cluster_->frontend().Tokenize(&ctx, req, &resp).ok());
    return {resp.token_ids().begin(), resp.token_ids().end()};
  }

  std::optional<std::string> dir_;
  std::string model_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(SharingE2eTest, BeamSearchEqualsAPlainBeamSearchThatRecomputesEverything) {
  const std::vector<int32_t> prompt = Tokenize("Once upon a time, there was a little dog");
  const int32_t kWidth = 4, kMaxTokens = 32;
  v1::GenerateRequest req;
  req.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
  req.mutable_sampling()->set_max_tokens(kMaxTokens);
  req.mutable_sampling()->set_beam_width(kWidth);
  req.mutable_sampling()->set_n(kWidth);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::CompleteResponse resp;
  grpc::Status status = cluster_->frontend().Complete(&ctx, req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();

  auto weights = worker::testing::LoadOrDie(model_);
  worker::CpuModelRunnerOptions ro;
  ro.block_size = kBlockSize;
  ro.kv_cache_bytes = int64_t{16} << 20;
  ro.max_num_blocks = 64;
  ro.num_threads = 1;
  auto runner = worker::CpuModelRunner::Create(*weights, ro);
  ASSERT_TRUE(runner.ok()) << runner.status();
  const std::vector<PlainBeam> plain = PlainBeamSearch(**runner, prompt, kWidth, kWidth,
                                                       kMaxTokens, weights->vocab.eos_id, 1.0);

  ASSERT_EQ(resp.choices_size(), static_cast<int>(plain.size()));
  for (int i = 0; i < resp.choices_size(); ++i) {
    const v1::Choice& c = resp.choices(i);
    EXPECT_EQ(c.index(), i);
    std::vector<int32_t> ids;
    for (const auto& t : c.tokens()) ids.push_back(t.token_id());
    EXPECT_EQ(ids, plain[i].tokens) << "beam " << i;
    EXPECT_NEAR(c.cumulative_logprob(), plain[i].cum_logprob, 5e-3) << "beam " << i;
  }
  EXPECT_EQ(resp.text(), resp.choices(0).text());

  // The beams shared their blocks: the pool never held what unshared beams would.
  const int32_t unshared = kWidth * CeilDiv(static_cast<int32_t>(prompt.size()) + kMaxTokens,
                                            kBlockSize);
  const auto stats = cluster_->CacheStats();
  EXPECT_GT(stats.num_forks(), 0);
  EXPECT_GT(stats.num_blocks_used_peak(), 0);
  EXPECT_LT(stats.num_blocks_used_peak(), unshared);
  EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));
  EXPECT_EQ(cluster_->CacheStats().num_shared_block_refs(), 0);
}

TEST_F(SharingE2eTest, FourSamplesStreamWithTheirIndexAndCountThePromptOnce) {
  v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.mutable_sampling()->set_max_tokens(40);
  req.mutable_sampling()->set_temperature(0.9f);
  req.mutable_sampling()->set_seed(77);
  req.mutable_sampling()->set_n(4);
  Result first = Stream(cluster_->frontend(), req);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_EQ(first.choices.size(), 4u);
  int32_t completion = 0;
  for (const auto& [i, c] : first.choices) {
    EXPECT_NE(c.finish, v1::FINISH_REASON_UNSPECIFIED) << "choice " << i;
    EXPECT_FALSE(c.text.empty());
    completion += static_cast<int32_t>(c.token_ids.size());
  }
  EXPECT_EQ(first.usage_messages, 1);
  EXPECT_EQ(first.usage.prompt_tokens(), static_cast<int32_t>(Tokenize("Once upon a time").size()));
  EXPECT_EQ(first.usage.completion_tokens(), completion);
  EXPECT_GT(cluster_->CacheStats().num_forks(), 0);
  EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));

  Result second = Stream(cluster_->frontend(), req);
  ASSERT_TRUE(second.status.ok());
  for (const auto& [i, c] : first.choices) {
    EXPECT_EQ(second.choices[i].text, c.text) << "same seed, same text, choice " << i;
  }
  EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));
}

TEST_F(SharingE2eTest, CancellingMidBeamFreesEveryBlock) {
  v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.mutable_sampling()->set_max_tokens(400);
  req.mutable_sampling()->set_beam_width(4);
  req.mutable_sampling()->set_ignore_eos(true);
  grpc::ClientContext ctx;
  std::thread client([&] {
    v1::CompleteResponse resp;
    grpc::Status s = cluster_->frontend().Complete(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
  });
  // Cancel once the beams are running (several sequences live), however long that takes.
  bool forked = false;
  for (int i = 0; i < 2000 && !forked; ++i) {
    forked = cluster_->CacheStats().num_sequences() >= 2;
    if (!forked) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(forked);
  ctx.TryCancel();
  client.join();
  EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));
  EXPECT_EQ(cluster_->CacheStats().num_shared_block_refs(), 0);
}

TEST_F(SharingE2eTest, BadSharingRequestsAreInvalidArgument) {
  auto expect = [&](int n, int beam, const std::string& text) {
    v1::GenerateRequest req;
    req.set_prompt("Once");
    req.mutable_sampling()->set_n(n);
    if (beam >= 0) req.mutable_sampling()->set_beam_width(beam);
    Result r = Stream(cluster_->frontend(), req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << text;
    EXPECT_THAT(r.status.error_message(), HasSubstr(text));
  };
  expect(0, -1, "n is 0; it must be in [1, 16]");
  expect(17, -1, "n is 17");
  expect(5, 4, "n must not exceed it");
  expect(1, 9, "beam_width is 9; it must be in [0, 8]");
}

TEST_F(SharingE2eTest, CliPrintsEveryChoice) {
  const std::string cli = testing::BinDir() + "/folio-cli --timeout_s=60 --server=" +
                          cluster_->frontend_process().address();
  testing::CommandResult n4 = testing::RunCommand(
      cli + " generate 'Once upon a time' --n=4 --temperature=0.8 --seed=3 --max_tokens=20");
  ASSERT_EQ(n4.exit_code, 0) << n4.output;
  for (const char* tag : {"[0] ", "[1] ", "[2] ", "[3] "}) {
    EXPECT_THAT(n4.output, HasSubstr(tag)) << n4.output;
  }
  testing::CommandResult beam = testing::RunCommand(
      cli + " generate 'Once upon a time' --beam=4 --n=4 --max_tokens=20");
  ASSERT_EQ(beam.exit_code, 0) << beam.output;
  for (const char* tag : {"[0] (cumulative logprob ", "[1] (", "[2] (", "[3] ("}) {
    EXPECT_THAT(beam.output, HasSubstr(tag)) << beam.output;
  }
  testing::CommandResult json_out = testing::RunCommand(
      cli + " generate 'Once upon a time' --beam=2 --max_tokens=10 --json --unary");
  ASSERT_EQ(json_out.exit_code, 0) << json_out.output;
  const nlohmann::json j = nlohmann::json::parse(json_out.output);
  ASSERT_EQ(j["choices"].size(), 1u) << "n defaults to 1";
  EXPECT_LT(j["choices"][0]["cumulative_logprob"].get<double>(), 0.0);
  EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));
}

}  // namespace
}  // namespace folio
