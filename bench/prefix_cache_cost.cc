// Prefix caching's cost at a 0% hit rate, in instructions, for callgrind. Two parts:
//
//  * --part=cachemgr: KvCacheManager::Step driven the way the scheduler drives it, with
//    continuous batching of --seqs sequences whose prompts (--prompt_len random tokens,
//    none shared) are prefilled in one chunk and then decode --output_len tokens each; a
//    finished sequence is freed and a new one created in its slot. Every step commits what
//    the last one computed, so with prefix caching on each full block is hashed into the
//    index and each create looks its prompt up (and finds nothing). Only the Step calls
//    are measured: they run inside MeasuredCacheStep.
//  * --part=worker: the CPU runner's forward pass on the model for a decode step of the
//    same --seqs sequences at context --prompt_len, one thread; the steps run inside
//    MeasuredWorkerStep. The prompt's KV is not computed first (a prefill would take
//    minutes under callgrind): the step reads the pool as allocated, which changes the
//    values but not the work.
//
//   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*MeasuredCacheStep*'
//       build/bin/prefix_cache_cost --part=cachemgr --prefix_caching=true
//   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*MeasuredWorkerStep*'
//       build/bin/prefix_cache_cost --part=worker --model=.../bench-28m-f16.gguf
//
// callgrind's "Collected" instruction count over the steps printed here is the cost per
// step; tools/bench/prefix.py runs both and does the arithmetic. Run natively, the program
// does the same work and prints the same summary (useful as a check).
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "glog/logging.h"
#include "services/cachemgr/kv_cache_manager.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/model/load_model.h"

ABSL_FLAG(std::string, part, "cachemgr", "cachemgr or worker.");
ABSL_FLAG(bool, prefix_caching, true, "cachemgr: prefix caching on or off.");
ABSL_FLAG(int, seqs, 32, "Sequences decoding in each step.");
ABSL_FLAG(int, prompt_len, 128, "Prompt tokens of each sequence.");
ABSL_FLAG(int, output_len, 64, "cachemgr: tokens each sequence decodes before it is freed.");
ABSL_FLAG(int, steps, 2000, "Steps measured.");
ABSL_FLAG(int, block_size, 16, "Tokens per KV block.");
ABSL_FLAG(int, vocab_size, 32000, "cachemgr: prompt ids are drawn below this.");
ABSL_FLAG(std::string, model, "", "worker: the GGUF model file.");

namespace folio {
namespace {

__attribute__((noinline)) absl::StatusOr<cachemgr::StepResponse> MeasuredCacheStep(
    cachemgr::KvCacheManager& manager, const cachemgr::StepRequest& request) {
  return manager.Step(request);
}

__attribute__((noinline)) absl::StatusOr<worker::StepOutput> MeasuredWorkerStep(
    worker::CpuModelRunner& runner, const worker::StepInput& step) {
  return runner.Execute(step);
}

struct Live {
  cachemgr::SeqId id;
  int32_t pos = 0;   // tokens granted so far
  int32_t left = 0;  // decode tokens still to grant
};

int RunCacheManager() {
  const int seqs = absl::GetFlag(FLAGS_seqs), prompt_len = absl::GetFlag(FLAGS_prompt_len),
            output_len = absl::GetFlag(FLAGS_output_len), steps = absl::GetFlag(FLAGS_steps),
            block_size = absl::GetFlag(FLAGS_block_size);
  cachemgr::CacheConfig config;
  config.block_size = block_size;
  config.num_blocks = 2 * seqs * ((prompt_len + output_len) / block_size + 2);
  config.prefix_caching = absl::GetFlag(FLAGS_prefix_caching)
                              ? cachemgr::PagedPolicy::PrefixCaching::kEnabled
                              : cachemgr::PagedPolicy::PrefixCaching::kDisabled;
  auto manager = cachemgr::KvCacheManager::Create(config);
  CHECK(manager.ok()) << manager.status();
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int32_t> token(3, absl::GetFlag(FLAGS_vocab_size) - 1);
  uint64_t next_id = 1;
  std::vector<Live> live;
  std::vector<cachemgr::CommitOp> commits;
  std::vector<cachemgr::SeqId> frees;
  int64_t granted_tokens = 0, cached_tokens = 0, creates = 0;
  for (int step = 0; step < steps; ++step) {
    cachemgr::StepRequest request;
    request.commits = std::move(commits);
    request.frees = std::move(frees);
    commits.clear();
    frees.clear();
    for (Live& s : live) request.grants.push_back({s.id, s.pos, {token(rng)}});
    const size_t first_new = live.size();
    while (static_cast<int>(live.size()) < seqs) {
      Live s{cachemgr::SeqId{next_id++}, prompt_len,
             // The first wave ends staggered, so later steps mix prefills and decodes.
             step == 0 ? 1 + static_cast<int32_t>(live.size()) * output_len / seqs : output_len};
      cachemgr::CreateOp create{.seq = s.id, .max_len = prompt_len + output_len + 1};
      for (int i = 0; i < prompt_len; ++i) create.prompt.push_back(token(rng));
      request.grants.push_back({s.id, 0, create.prompt});
      request.creates.push_back(std::move(create));
      live.push_back(s);
    }
    absl::StatusOr<cachemgr::StepResponse> response = MeasuredCacheStep(**manager, request);
    CHECK(response.ok()) << response.status();
    for (const cachemgr::SeqResult& r : response->creates) cached_tokens += r.num_cached_tokens;
    for (const cachemgr::SeqResult& r : response->grants) {
      CHECK(r.status == cachemgr::SeqStatus::kOk) << "pool too small";
    }
    creates += live.size() - first_new;
    std::vector<Live> still;
    for (size_t i = 0; i < live.size(); ++i) {
      Live s = live[i];
      if (i < first_new) {
        ++s.pos;
        --s.left;
        ++granted_tokens;
      } else {
        granted_tokens += prompt_len;
      }
      commits.push_back({s.id, s.pos});
      if (s.left <= 0) {
        frees.push_back(s.id);
      } else {
        still.push_back(s);
      }
    }
    live = std::move(still);
  }
  const cachemgr::CacheStats stats = (*manager)->Stats();
  std::printf("part=cachemgr prefix_caching=%d steps=%d creates=%lld granted_tokens=%lld "
              "prefix_query_tokens=%lld prefix_hit_tokens=%lld cached_tokens=%lld\n",
              absl::GetFlag(FLAGS_prefix_caching) ? 1 : 0, steps,
              static_cast<long long>(creates), static_cast<long long>(granted_tokens),
              static_cast<long long>(stats.prefix_query_tokens),
              static_cast<long long>(stats.prefix_hit_tokens),
              static_cast<long long>(cached_tokens));
  return 0;
}

int RunWorker() {
  const int seqs = absl::GetFlag(FLAGS_seqs), prompt_len = absl::GetFlag(FLAGS_prompt_len),
            steps = absl::GetFlag(FLAGS_steps), block_size = absl::GetFlag(FLAGS_block_size);
  auto weights = worker::LoadModel(absl::GetFlag(FLAGS_model));
  CHECK(weights.ok()) << weights.status();
  const int blocks_per_seq = (prompt_len + steps + block_size) / block_size + 1;
  worker::CpuModelRunnerOptions o;
  o.block_size = block_size;
  o.num_threads = 1;
  o.max_num_blocks = int64_t{seqs} * blocks_per_seq;
  auto runner = worker::CpuModelRunner::Create(**weights, o);
  CHECK(runner.ok()) << runner.status();
  const int vocab = (*runner)->config().vocab_size;
  worker::StepInput step;
  for (int s = 0; s < seqs; ++s) {
    worker::SequenceStep seq;
    seq.seq_id = s;
    for (int b = 0; b < blocks_per_seq; ++b) seq.block_table.push_back(s * blocks_per_seq + b);
    seq.sampling.temperature = 0;
    seq.start_pos = prompt_len;
    seq.token_ids = {3 + (s * 131) % (vocab - 3)};
    step.seqs.push_back(seq);
  }
  for (int i = 0; i < steps; ++i) {
    absl::StatusOr<worker::StepOutput> out = MeasuredWorkerStep(**runner, step);
    CHECK(out.ok()) << out.status();
    for (size_t s = 0; s < step.seqs.size(); ++s) {
      step.seqs[s].token_ids[0] = out->seqs[s].samples[0].token_id;
      ++step.seqs[s].start_pos;
    }
  }
  std::printf("part=worker steps=%d seqs=%d context=%d\n", steps, seqs, prompt_len);
  return 0;
}

}  // namespace
}  // namespace folio

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string part = absl::GetFlag(FLAGS_part);
  if (part == "cachemgr") return folio::RunCacheManager();
  if (part == "worker") {
    if (absl::GetFlag(FLAGS_model).empty()) {
      std::fprintf(stderr, "prefix_cache_cost: --part=worker needs --model=FILE\n");
      return 2;
    }
    return folio::RunWorker();
  }
  std::fprintf(stderr, "prefix_cache_cost: --part must be cachemgr or worker, not %s\n",
               part.c_str());
  return 2;
}
