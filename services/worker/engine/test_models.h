// Test helpers: where the test models live, and a runner over them.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_TEST_MODELS_H_
#define FOLIO_SERVICES_WORKER_ENGINE_TEST_MODELS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/test_models_dir.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/model_runner.h"
#include "services/worker/model/random_model.h"
#include "services/worker/model/weights.h"

namespace folio::worker::testing {

// $FOLIO_MODELS_DIR, or nullopt when unset.
std::optional<std::string> ModelsDir();

// Message for GTEST_SKIP when FOLIO_MODELS_DIR is unset.
inline constexpr char kModelsDirHelp[] =
    "no test models: run under ctest (it passes FOLIO_BUILD_DIR, whose test-models/ the "
    "build fills), or set FOLIO_MODELS_DIR to a folder laid out like models/";

// Loads the model at path; CHECK-fails on error.
std::unique_ptr<ModelWeights> LoadOrDie(const std::string& path);

// A small random Llama model (GGUF written to a temp file and loaded back), for tests
// that need no model files: dim 64, 4 heads / 2 kv heads, 2 layers, vocab 300.
std::unique_ptr<ModelWeights> RandomModelOrDie(uint64_t seed);
// The model `options` describe, written to a temp file and loaded back.
std::unique_ptr<ModelWeights> RandomModelOrDie(const RandomModelOptions& options);

// Block table 0..n-1 shuffled with `seed` (scattered over the pool).
std::vector<int32_t> ScatteredBlocks(int32_t n, uint64_t seed);

// The golden run's tokens: from `bos_id` with an empty prompt, `steps` greedy decode
// steps of one sequence (block table ScatteredBlocks(..., table_seed)). Returns BOS
// followed by the sampled ids; CHECK-fails if a step fails.
std::vector<int32_t> GreedyFromBos(ModelRunner& runner, int32_t bos_id, int steps,
                                   uint64_t table_seed);

// The file's bytes, or "" when it cannot be read (common/test_models_dir.h's).
using ::folio::ReadFileOrEmpty;

// The logits of a fixed 12-token prompt's last position on a fresh one-thread CPU runner
// over `w`, then those of `decode_steps` greedy decode steps after it: 1 + decode_steps
// rows. Two loadings of the same weights (split and whole, say) must give equal rows.
std::vector<std::vector<float>> PromptAndDecodeLogits(const ModelWeights& w, int decode_steps);

// Folio's logits for each token of `tokens` (fed one decode step at a time on a fresh
// two-thread CPU runner over `w`, its KV cache in `kv_dtype`), and its greedy pick at each.
struct FolioRun {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> argmax;
};
FolioRun RunFolio(const ModelWeights& w, const std::vector<int32_t>& tokens,
                  kernels::KvDType kv_dtype = kernels::KvDType::kF16);

// One step prefilling each prompt as its own sequence (fresh block tables, 16-token
// blocks numbered in order): the logits after each prompt's last token. CHECK-fails if
// the step fails.
std::vector<std::vector<float>> PrefillLastLogits(ModelRunner& runner,
                                                  const std::vector<std::vector<int32_t>>& prompts);

// max |v[i]|, and the gap between the two largest values of `v`.
float MaxAbs(const std::vector<float>& v);
float Top2Margin(const std::vector<float>& v);

}  // namespace folio::worker::testing

#endif  // FOLIO_SERVICES_WORKER_ENGINE_TEST_MODELS_H_
