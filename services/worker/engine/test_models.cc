#include "services/worker/engine/test_models.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>

#include <unistd.h>

#include "common/test_models_dir.h"
#include "glog/logging.h"
#include "services/worker/model/load_model.h"
#include "services/worker/model/random_model.h"

namespace folio::worker::testing {

std::optional<std::string> ModelsDir() {
  return TestModelsDir();
}

std::unique_ptr<ModelWeights> LoadOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<ModelWeights>> m = LoadModel(path);
  CHECK(m.ok()) << m.status();
  return *std::move(m);
}

std::unique_ptr<ModelWeights> RandomModelOrDie(uint64_t seed) {
  RandomModelOptions o;
  o.dim = 64;
  o.hidden_dim = 96;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.vocab_size = 300;
  o.context_length = 256;
  o.seed = seed;
  o.weight_std = 0.2f;  // larger than the default so logits are not nearly flat
  return RandomModelOrDie(o);
}

std::unique_ptr<ModelWeights> RandomModelOrDie(const RandomModelOptions& o) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("folio_engine_test_" + std::to_string(::getpid()) + "_" +
                             o.architecture + "_" + std::to_string(o.seed) + ".gguf")).string();
  absl::Status s = WriteRandomModel(o, path);
  CHECK(s.ok()) << s;
  std::unique_ptr<ModelWeights> m = LoadOrDie(path);
  // The weights are converted to f32 copies by the runner, but the mapping must live as
  // long as `m`; the file itself can go once mapped.
  std::filesystem::remove(path);
  return m;
}

std::vector<int32_t> ScatteredBlocks(int32_t n, uint64_t seed) {
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

std::vector<int32_t> GreedyFromBos(ModelRunner& runner, int32_t bos_id, int steps,
                                   uint64_t table_seed) {
  SequenceStep seq;
  seq.seq_id = 1;
  seq.sampling.temperature = 0.0f;
  seq.block_table =
      ScatteredBlocks((steps + runner.block_size() - 1) / runner.block_size(), table_seed);
  std::vector<int32_t> ids = {bos_id};
  for (int pos = 0; pos < steps; ++pos) {
    seq.token_ids = {ids.back()};
    seq.start_pos = pos;
    StepInput step;
    step.seqs = {seq};
    absl::StatusOr<StepOutput> out = runner.Execute(step);
    CHECK(out.ok()) << "step at position " << pos << ": " << out.status();
    CHECK_EQ(out->seqs.size(), 1u);
    CHECK_EQ(out->seqs[0].samples.size(), 1u);
    ids.push_back(out->seqs[0].samples[0].token_id);
  }
  return ids;
}

std::vector<std::vector<float>> PromptAndDecodeLogits(const ModelWeights& w, int decode_steps) {
  CpuModelRunnerOptions o;
  o.kv_cache_bytes = 4 << 20;
  o.num_threads = 1;
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(w, o);
  CHECK(r.ok()) << r.status();
  SequenceStep seq;
  seq.seq_id = 1;
  seq.return_logits = true;
  seq.sampling.temperature = 0.0f;
  seq.block_table = ScatteredBlocks(2, 5);
  seq.token_ids = {1, 17, 260, 33, 99, 5, 301, 42, 7, 150, 11, 12};
  seq.start_pos = 0;
  StepInput step;
  step.seqs = {seq};
  absl::StatusOr<StepOutput> out = (*r)->Execute(step);
  CHECK(out.ok()) << out.status();
  std::vector<std::vector<float>> all = {out->seqs[0].logits};
  for (int i = 0; i < decode_steps; ++i) {
    seq.start_pos = static_cast<int32_t>(seq.start_pos + seq.token_ids.size());
    seq.token_ids = {out->seqs[0].samples[0].token_id};
    step.seqs = {seq};
    out = (*r)->Execute(step);
    CHECK(out.ok()) << out.status();
    all.push_back(out->seqs[0].logits);
  }
  return all;
}

FolioRun RunFolio(const ModelWeights& w, const std::vector<int32_t>& tokens,
                  kernels::KvDType kv_dtype) {
  CpuModelRunnerOptions o;
  o.kv_dtype = kv_dtype;
  o.kv_cache_bytes = 16 << 20;
  o.num_threads = 2;
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(w, o);
  CHECK(r.ok()) << r.status();
  SequenceStep seq;
  seq.seq_id = 1;
  seq.return_logits = true;
  seq.sampling.temperature = 0.0f;
  seq.block_table = ScatteredBlocks(static_cast<int32_t>(tokens.size() + 15) / 16, 11);
  FolioRun run;
  for (size_t i = 0; i < tokens.size(); ++i) {
    seq.token_ids = {tokens[i]};
    seq.start_pos = static_cast<int32_t>(i);
    StepInput step;
    step.seqs = {seq};
    absl::StatusOr<StepOutput> out = (*r)->Execute(step);
    CHECK(out.ok()) << out.status();
    run.logits.push_back(out->seqs[0].logits);
    run.argmax.push_back(out->seqs[0].samples[0].token_id);
  }
  return run;
}

std::vector<std::vector<float>> PrefillLastLogits(ModelRunner& r,
                                                  const std::vector<std::vector<int32_t>>& prompts) {
  StepInput step;
  int32_t next_block = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SequenceStep s;
    s.seq_id = i + 1;
    s.token_ids = prompts[i];
    s.return_logits = true;
    s.sampling.temperature = 0.0f;
    const int32_t blocks = (static_cast<int32_t>(prompts[i].size()) + 15) / 16;
    for (int32_t b = 0; b < blocks; ++b) s.block_table.push_back(next_block++);
    step.seqs.push_back(std::move(s));
  }
  absl::StatusOr<StepOutput> out = r.Execute(step);
  CHECK(out.ok()) << out.status();
  std::vector<std::vector<float>> logits;
  for (const auto& s : out->seqs) logits.push_back(s.logits);
  return logits;
}

float MaxAbs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

float Top2Margin(const std::vector<float>& v) {
  float a = -INFINITY, b = -INFINITY;
  for (float x : v) {
    if (x > a) {
      b = a;
      a = x;
    } else if (x > b) {
      b = x;
    }
  }
  return a - b;
}

}  // namespace folio::worker::testing
