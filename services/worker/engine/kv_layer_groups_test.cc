// Window layer groups in the worker (kv_layer_groups.h): the layers' planes and groups for
// Gemma 2 and 3 shapes, and a pool laid out in groups gives the logits of the dense
// layout bit for bit while the blocks a window has passed are given back and written by
// another sequence (any read of them would show). Steps whose window tables do not
// match the pool are refused.
#include "services/worker/engine/kv_layer_groups.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/test_models.h"

namespace folio::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ModelConfig Layers(std::vector<bool> local, int32_t window) {
  ModelConfig c;
  c.num_layers = static_cast<int32_t>(local.size());
  c.local_layers = std::move(local);
  c.sliding_window = window;
  return c;
}

TEST(KvLayerGroupsTest, GemmaShapes) {
  // Gemma 2: alternating, local first.
  const KvLayerGroups g2 = WindowLayerGroups(Layers({true, false, true, false}, 8));
  EXPECT_EQ(g2.num_planes, 2);
  EXPECT_THAT(g2.group, ElementsAre(1, 0, 1, 0));
  EXPECT_THAT(g2.plane, ElementsAre(0, 0, 1, 1));
  EXPECT_THAT(g2.windows, ElementsAre(8));
  // Gemma 3: five local per global; 8 layers here (2 global, 6 local in 3 groups of 2).
  const KvLayerGroups g3 =
      WindowLayerGroups(Layers({true, true, true, true, true, false, true, false}, 16));
  EXPECT_EQ(g3.num_planes, 2);
  EXPECT_THAT(g3.group, ElementsAre(1, 1, 2, 2, 3, 0, 3, 0));
  EXPECT_THAT(g3.plane, ElementsAre(0, 1, 0, 1, 0, 0, 1, 1));
  EXPECT_THAT(g3.windows, ElementsAre(16, 16, 16));
  // Nothing to gain: all full attention, or all local.
  EXPECT_EQ(WindowLayerGroups(Layers({false, false}, 8)).num_window_groups(), 0);
  EXPECT_EQ(WindowLayerGroups(Layers({true, true}, 8)).num_window_groups(), 0);
  EXPECT_EQ(WindowLayerGroups(Layers({true, true}, 8)).num_planes, 2);
}

RandomModelOptions Gemma(const std::string& arch, int32_t layers) {
  RandomModelOptions o;
  o.architecture = arch;
  o.dim = 64;
  o.hidden_dim = 96;
  o.num_layers = layers;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.vocab_size = 300;
  o.context_length = 256;
  o.weight_std = 0.2f;
  o.sliding_window = 6;
  o.tied_embeddings = true;
  return o;
}

std::unique_ptr<CpuModelRunner> Runner(const ModelWeights& w, bool groups) {
  CpuModelRunnerOptions o;
  o.block_size = 4;
  o.kv_cache_bytes = int64_t{8} << 20;
  o.max_num_blocks = 256;
  o.num_threads = 2;
  o.window_layer_groups = groups;
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(w, o);
  CHECK(r.ok()) << r.status();
  return *std::move(r);
}

// A block allocator over the pool, and a sequence's tables in it: the full-attention
// table, and one per window group whose blocks before the window of the next position
// go back to the free list (most recently freed reused first).
struct Tables {
  std::vector<int32_t> table;
  std::vector<WindowBlockTable> windows;
};
class Pool {
 public:
  explicit Pool(int32_t n) {
    for (int32_t b = n; b-- > 0;) free_.push_back(b);
  }
  int32_t Take() {
    CHECK(!free_.empty());
    const int32_t b = free_.back();
    free_.pop_back();
    if (std::find(given_back_.begin(), given_back_.end(), b) != given_back_.end()) ++reused_;
    return b;
  }
  // Grows `t` to cover `end` positions, first giving back what no query at `start` or
  // later sees.
  void Grow(Tables& t, const std::vector<int32_t>& windows, int32_t start, int32_t end) {
    const int32_t blocks = (end + 3) / 4;
    while (static_cast<int32_t>(t.table.size()) < blocks) t.table.push_back(Take());
    t.windows.resize(windows.size());
    for (size_t g = 0; g < windows.size(); ++g) {
      WindowBlockTable& w = t.windows[g];
      const int32_t first = std::max(0, start - windows[g] + 1) / 4;
      while (w.first_block < first) {
        free_.push_back(w.blocks.front());
        given_back_.push_back(w.blocks.front());
        w.blocks.erase(w.blocks.begin());
        ++w.first_block;
      }
      while (w.first_block + static_cast<int32_t>(w.blocks.size()) < blocks) {
        w.blocks.push_back(Take());
      }
    }
  }
  int32_t reused() const { return reused_; }
  int32_t in_use(int32_t n) const { return n - static_cast<int32_t>(free_.size()); }

 private:
  std::vector<int32_t> free_;
  std::vector<int32_t> given_back_;
  int32_t reused_ = 0;
};

struct Generation {
  std::vector<std::vector<float>> logits;  // sequence A's, one row per step
  int32_t reused = 0;
  int32_t blocks_in_use = 0;
};

// Sequence A: a 9-token prompt in one step, then 40 greedy decode steps; beside it,
// sequence B writes other tokens every step (its blocks taken from the same free list).
Generation Generate(CpuModelRunner& runner) {
  const std::vector<int32_t> windows = runner.layer_groups().windows;
  Pool pool(256);
  Tables a, b;
  std::vector<int32_t> next_a = {1, 17, 250, 3, 99, 42, 7, 180, 64};
  int32_t pos_a = 0;
  int32_t pos_b = 0;
  Generation run;
  for (int step = 0; step < 41; ++step) {
    StepInput in;
    SequenceStep sa;
    sa.seq_id = 1;
    sa.token_ids = next_a;
    sa.start_pos = pos_a;
    sa.sampling.temperature = 0.0f;
    sa.return_logits = true;
    pool.Grow(a, windows, pos_a, pos_a + static_cast<int32_t>(next_a.size()));
    sa.block_table = a.table;
    sa.window_tables = a.windows;
    SequenceStep sb;
    sb.seq_id = 2;
    sb.token_ids = {(step * 37 + 11) % 300};
    sb.start_pos = pos_b;
    sb.num_samples = 0;
    pool.Grow(b, windows, pos_b, pos_b + 1);
    sb.block_table = b.table;
    sb.window_tables = b.windows;
    in.seqs = {sa, sb};
    absl::StatusOr<StepOutput> out = runner.Execute(in);
    CHECK(out.ok()) << out.status();
    run.logits.push_back(out->seqs[0].logits);
    pos_a += static_cast<int32_t>(next_a.size());
    ++pos_b;
    next_a = {out->seqs[0].samples[0].token_id};
  }
  run.reused = pool.reused();
  run.blocks_in_use = pool.in_use(256);
  return run;
}

TEST(KvLayerGroupsTest, GroupedPoolsGiveTheDenseLogitsWhileOldBlocksAreReused) {
  for (const auto& [arch, layers] : {std::pair<std::string, int32_t>{"gemma2", 4},
                                     std::pair<std::string, int32_t>{"gemma3", 6}}) {
    SCOPED_TRACE(arch);
    std::unique_ptr<ModelWeights> w = testing::RandomModelOrDie(Gemma(arch, layers));
    std::unique_ptr<CpuModelRunner> dense = Runner(*w, false);
    std::unique_ptr<CpuModelRunner> grouped = Runner(*w, true);
    ASSERT_EQ(dense->layer_groups().num_window_groups(), 0);
    ASSERT_GE(grouped->layer_groups().num_window_groups(), 1);
    // A block of the grouped pool holds fewer layers.
    EXPECT_LT(grouped->kv_cache().bytes_per_block(), dense->kv_cache().bytes_per_block());
    const Generation d = Generate(*dense);
    const Generation g = Generate(*grouped);
    ASSERT_EQ(d.logits.size(), g.logits.size());
    for (size_t s = 0; s < d.logits.size(); ++s) {
      ASSERT_EQ(d.logits[s], g.logits[s]) << "step " << s;
    }
    EXPECT_EQ(d.reused, 0);
    EXPECT_GT(g.reused, 10) << "blocks given back should have been written by sequence B";
    // 49 positions for A and 41 for B: 13 + 11 full-attention blocks, and each window
    // group holds at most 3 blocks per sequence.
    EXPECT_EQ(d.blocks_in_use, 13 + 11);
    EXPECT_LE(g.blocks_in_use,
              13 + 11 + 2 * 3 * grouped->layer_groups().num_window_groups());
  }
}

TEST(KvLayerGroupsTest, StepsWhoseWindowTablesDoNotFitThePoolAreRefused) {
  std::unique_ptr<ModelWeights> w = testing::RandomModelOrDie(Gemma("gemma2", 2));
  std::unique_ptr<CpuModelRunner> grouped = Runner(*w, true);
  ASSERT_EQ(grouped->layer_groups().num_window_groups(), 1);
  auto refused = [&](const SequenceStep& s, const std::string& text) {
    StepInput in;
    in.seqs = {s};
    const absl::Status st = grouped->Execute(in).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(st.message(), HasSubstr(text));
  };
  SequenceStep s;
  s.seq_id = 1;
  s.token_ids = {5};
  s.start_pos = 12;
  s.sampling.temperature = 0.0f;
  s.block_table = {0, 1, 2, 3};
  refused(s, "0 window tables for a pool of 1 window layer groups");
  // Position 12 with a window of 6 sees keys from 7, in block 1: block 2 is too late.
  s.window_tables = {WindowBlockTable{.first_block = 2, .blocks = {10, 11}}};
  refused(s, "sees keys from position 7");
  s.window_tables = {WindowBlockTable{.first_block = 1, .blocks = {10, 11}}};
  refused(s, "outside window group 0's table");
  s.window_tables = {WindowBlockTable{.first_block = 1, .blocks = {10, 11, 9999}}};
  refused(s, "outside the pool");
  // Position 12's slot in block 3 of the full-attention table, and again here.
  s.window_tables = {WindowBlockTable{.first_block = 1, .blocks = {10, 11, 3}}};
  refused(s, "slot");
  s.window_tables = {WindowBlockTable{.first_block = 1, .blocks = {10, 11, 12}}};
  StepInput ok;
  ok.seqs = {s};
  EXPECT_TRUE(grouped->Execute(ok).ok());
}

}  // namespace
}  // namespace folio::worker
