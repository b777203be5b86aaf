// The CPU runner's oneDNN path for BF16 projections (CpuModelRunnerOptions::bf16_gemm,
// kernels/onednn_gemm.h) on a random BF16 GGUF (Llama 3 shape of llama_logits_test,
// dim 256, tied embeddings):
//   - steps of >= onednn_min_rows rows (a prefill chunk; 8 sequences of 3 tokens) give
//     Folio's kernels' logits within bf16 rounding, with no weight bytes added;
//   - smaller steps take Folio's kernels: bit for bit the kFolio runner's logits when the
//     stored rows are read in place (bf16_blocked off); with the blocked copy, Folio's GEMV
//     on it within bf16 rounding, the same bits whatever the step's other rows;
//   - judged by llama.cpp (reference label): prefill logits of 11 prompts (8..48 tokens,
//     one step: 308 rows, LM head at 11 rows), all on the oneDNN path, within hf_pair_reference_test's BF16 tolerance (4e-3 of max|logit|) of
//     llama.cpp's on the same file;
//   - bad options are refused with InvalidArgument.
// Skipped (saying so) in a build without oneDNN or on a CPU it cannot run bf16 on.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/test_models.h"
#include "services/worker/model/random_model.h"
#include "tests/reference/llama_ref.h"

namespace folio::worker {
namespace {

namespace ref = folio::reference;

const std::string& Bf16ModelPath() {
  static const std::string* path = [] {
    RandomModelOptions o;
    o.dim = 256;
    o.hidden_dim = 512;
    o.num_layers = 2;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    o.vocab_size = 1024;
    o.context_length = 256;
    o.weight_std = 0.02f;
    o.embedding_std = 0.2f;
    o.seed = 17;
    o.rope_theta = 500000.0f;
    o.tied_embeddings = true;
    o.dtype = DType::kBF16;
    auto* p = new std::string(
        absl::StrCat(::testing::TempDir(), "/onednn_runner_test_bf16_", getpid(), ".gguf"));
    const absl::Status s = WriteRandomModel(o, *p);
    CHECK(s.ok()) << s;
    return p;
  }();
  return *path;
}

const ModelWeights& Weights() {
  static const ModelWeights* w = testing::LoadOrDie(Bf16ModelPath()).release();
  return *w;
}

// kFolio packs the BF16 projections into bf16 panels unless `panels` is off; then they are
// read in place by the typed bf16 kernel, as under oneDNN below its threshold when
// `blocked` is off (with it on, oneDNN's blocked copy and Folio's GEMV on it).
std::unique_ptr<CpuModelRunner> Runner(Bf16Gemm gemm, int32_t min_rows = kDefaultOnednnMinRows,
                                       bool panels = true, bool blocked = true) {
  CpuModelRunnerOptions o;
  o.kv_cache_bytes = 16 << 20;
  o.num_threads = 2;
  o.bf16_gemm = gemm;
  o.f16_panels = panels;
  o.bf16_blocked = blocked;
  o.onednn_min_rows = min_rows;
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(Weights(), o);
  CHECK(r.ok()) << r.status();
  return *std::move(r);
}

#define SKIP_WITHOUT_ONEDNN()                                                          \
  if (!kernels::OnednnAvailable()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)"; \
  if (auto e = kernels::OnednnGemm::Create(2); !e.ok()) GTEST_SKIP() << e.status().message();

std::vector<int32_t> Prompt(int n) {
  std::vector<int32_t> p = {1};
  for (int i = 1; i < n; ++i) p.push_back(3 + (i * 7919 + 13) % (1024 - 3));
  return p;
}

float WorstRelative(const std::vector<float>& got, const std::vector<float>& want) {
  float diff = 0;
  for (size_t v = 0; v < want.size(); ++v) diff = std::max(diff, std::abs(got[v] - want[v]));
  return diff / testing::MaxAbs(want);
}

TEST(OnednnRunnerTest, BatchedStepsMatchFolioKernelsWithoutExtraWeights) {
  SKIP_WITHOUT_ONEDNN();
  auto dnn = Runner(Bf16Gemm::kOnednn);
  auto folio = Runner(Bf16Gemm::kFolio);
  ASSERT_NE(dnn->onednn(), nullptr);
  EXPECT_EQ(folio->onednn(), nullptr);
  EXPECT_EQ(dnn->weight_bytes(), folio->weight_bytes());
  // A 40-token prefill chunk, then 8 sequences of 3 tokens (24 rows) in one step.
  const std::vector<std::vector<int32_t>> one = {Prompt(40)};
  std::vector<std::vector<int32_t>> eight_mut;
  for (int i = 0; i < 8; ++i) eight_mut.push_back({1, 5 + 11 * i, 900 - 7 * i});
  const std::vector<std::vector<int32_t>> eight = eight_mut;
  for (const std::vector<std::vector<int32_t>>* prompts : {&one, &eight}) {
    const auto a = testing::PrefillLastLogits(*dnn, *prompts);
    const auto b = testing::PrefillLastLogits(*folio, *prompts);
    ASSERT_EQ(a.size(), b.size());
    float worst = 0;
    for (size_t s = 0; s < a.size(); ++s) worst = std::max(worst, WorstRelative(a[s], b[s]));
    LOG(INFO) << a.size() << " sequence(s): oneDNN vs Folio's kernels, worst |diff| / max|logit| "
              << worst;
    for (size_t s = 0; s < a.size(); ++s) {
      // oneDNN rounds activations to bf16 on avx512_bf16; Folio's bf16 panels take them
      // in f32.
      EXPECT_LE(WorstRelative(a[s], b[s]), 1e-2f) << "sequence " << s << " of " << a.size();
      EXPECT_GT(testing::MaxAbs(a[s]), 0.1f) << "flat logits prove nothing";
    }
  }
  EXPECT_FALSE(dnn->onednn()->impl().empty());
  EXPECT_GT(dnn->onednn()->cached_primitives(), 0);
  LOG(INFO) << "oneDNN impl " << dnn->onednn()->impl();
}

TEST(OnednnRunnerTest, StepsBelowTheThresholdTakeFolioKernelsBitForBit) {
  SKIP_WITHOUT_ONEDNN();
  auto dnn = Runner(Bf16Gemm::kOnednn, /*min_rows=*/8, /*panels=*/true, /*blocked=*/false);
  auto folio = Runner(Bf16Gemm::kFolio, kDefaultOnednnMinRows, /*panels=*/false);
  EXPECT_EQ(dnn->blocked_bf16_bytes(), 0);
  for (int n : {1, 3, 7}) {
    const auto a = testing::PrefillLastLogits(*dnn, {Prompt(n)});
    const auto b = testing::PrefillLastLogits(*folio, {Prompt(n)});
    EXPECT_EQ(a, b) << n << " rows";
  }
  EXPECT_EQ(dnn->onednn()->cached_primitives(), 0) << "oneDNN ran below the threshold";
}

// With the blocked copy every BF16 projection (the tied LM head too: embeddings are looked
// up in it) is one copy in oneDNN's layout, no more bytes than the panels; steps below the
// threshold run Folio's GEMV on it (no oneDNN primitive), within bf16 rounding of the
// panels' logits, and a sequence's logits do not depend on the other rows of its step.
TEST(OnednnRunnerTest, BlockedCopyServesFewRowsByFolioGemv) {
  SKIP_WITHOUT_ONEDNN();
  auto dnn = Runner(Bf16Gemm::kOnednn, /*min_rows=*/8);
  auto folio = Runner(Bf16Gemm::kFolio);
  if (dnn->blocked_bf16_bytes() == 0) {
    GTEST_SKIP() << "oneDNN (" << dnn->onednn()->impl()
                 << ") keeps another bf16 weights layout on this CPU";
  }
  // Every projection and the LM head blocked: only the f32 norms (2 a layer and the final
  // one, dim 256) are outside.
  EXPECT_EQ(dnn->weight_bytes() - dnn->blocked_bf16_bytes(), (2 * 2 + 1) * 256 * 4);
  EXPECT_EQ(dnn->weight_bytes(), folio->weight_bytes());
  for (int n : {1, 3, 7}) {
    const auto a = testing::PrefillLastLogits(*dnn, {Prompt(n)});
    const auto b = testing::PrefillLastLogits(*folio, {Prompt(n)});
    ASSERT_EQ(a.size(), 1u);
    EXPECT_LE(WorstRelative(a[0], b[0]), 1e-2f) << n << " rows";
    EXPECT_GT(testing::MaxAbs(a[0]), 0.1f) << "flat logits prove nothing";
  }
  EXPECT_EQ(dnn->onednn()->cached_primitives(), 0) << "oneDNN ran below the threshold";
  // Three sequences of 2 tokens (6 rows) against each alone.
  std::vector<std::vector<int32_t>> three;
  for (int i = 0; i < 3; ++i) three.push_back({1, 40 + 97 * i});
  const auto together = testing::PrefillLastLogits(*dnn, three);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(testing::PrefillLastLogits(*dnn, {three[i]})[0], together[i]) << "sequence " << i;
  }
}

TEST(OnednnRunnerTest, BadOptionsAreRefused) {
  CpuModelRunnerOptions o;
  o.kv_cache_bytes = 16 << 20;
  o.num_threads = 1;
  o.bf16_gemm = Bf16Gemm::kOnednn;
  o.onednn_min_rows = 0;
  if (kernels::OnednnAvailable() && kernels::OnednnGemm::Create(1).ok()) {
    EXPECT_EQ(CpuModelRunner::Create(Weights(), o).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  o.onednn_min_rows = 8;
  o.isa = kernels::CpuIsa::kPortable;
  absl::Status s = CpuModelRunner::Create(Weights(), o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // kAuto falls back to Folio's kernels wherever oneDNN cannot run.
  o.bf16_gemm = Bf16Gemm::kAuto;
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(Weights(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->onednn(), nullptr);
}

TEST(OnednnRunnerTest, PrefillLogitsAgreeWithLlamaCpp) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  SKIP_WITHOUT_ONEDNN();
  absl::StatusOr<std::unique_ptr<ref::LlamaModel>> llama =
      ref::LlamaModel::Load(Bf16ModelPath(), ref::LlamaModelOptions{.n_ctx = 256});
  ASSERT_TRUE(llama.ok()) << llama.status();
  const std::vector<int32_t> prompt = Prompt(48);
  absl::StatusOr<std::vector<std::vector<float>>> want = (*llama)->Logits(prompt);
  ASSERT_TRUE(want.ok()) << want.status();
  // hf_pair_reference_test's BF16 limit: llama.cpp rounds activations to bf16 too.
  const float tol = std::getenv("FOLIO_LOGITS_TOL") ? std::atof(std::getenv("FOLIO_LOGITS_TOL"))
                                                    : 4e-3f;
  auto dnn = Runner(Bf16Gemm::kOnednn);
  auto folio = Runner(Bf16Gemm::kFolio);
  // The prefixes of 8, 12, .., 48 tokens as 11 sequences of one step: 308 rows through
  // the layers and 11 through the LM head, all on oneDNN.
  std::vector<std::vector<int32_t>> prefixes;
  for (int n = 8; n <= 48; n += 4) prefixes.emplace_back(prompt.begin(), prompt.begin() + n);
  const auto got_dnn = testing::PrefillLastLogits(*dnn, prefixes);
  const auto got_folio = testing::PrefillLastLogits(*folio, prefixes);
  float worst_dnn = 0, worst_folio = 0;
  int agree = 0, decisive = 0;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    const int n = static_cast<int>(prefixes[i].size());
    const std::vector<float>& w = (*want)[n - 1];
    const std::vector<float>& got = got_dnn[i];
    const float rel = WorstRelative(got, w);
    worst_dnn = std::max(worst_dnn, rel);
    worst_folio = std::max(worst_folio, WorstRelative(got_folio[i], w));
    EXPECT_LE(rel, tol) << n << " tokens";
    if (testing::Top2Margin(w) > tol * testing::MaxAbs(w)) {
      ++decisive;
      const int32_t g = static_cast<int32_t>(std::max_element(got.begin(), got.end()) - got.begin());
      const int32_t l = static_cast<int32_t>(std::max_element(w.begin(), w.end()) - w.begin());
      agree += g == l;
      EXPECT_EQ(g, l) << n << " tokens: argmax";
    }
  }
  EXPECT_GE(decisive, 6) << "too flat to judge the argmax";
  // Prefixes of 2 .. 7 tokens, each a step of its own: below the threshold (Folio's GEMV on
  // the blocked copy where oneDNN keeps that layout, else its in-place kernel).
  float worst_few = 0;
  for (int n = 2; n <= 7; ++n) {
    const std::vector<int32_t> prefix(prompt.begin(), prompt.begin() + n);
    const std::vector<float> got = testing::PrefillLastLogits(*dnn, {prefix})[0];
    const float rel = WorstRelative(got, (*want)[n - 1]);
    worst_few = std::max(worst_few, rel);
    EXPECT_LE(rel, tol) << n << " tokens, one step below the threshold";
  }
  LOG(INFO) << "prefill vs llama.cpp, worst |diff| / max|logit|: oneDNN " << worst_dnn
            << ", Folio's kernels " << worst_folio << ", steps below the threshold "
            << worst_few << " (tolerance " << tol << "); argmax " << agree << "/" << decisive;
}

}  // namespace
}  // namespace folio::worker
