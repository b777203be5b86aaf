// folio-run: generate text from a prompt in one process, on the CPU engine, like
// llama2.c's `run`. It goes through the same code paths as the served worker: the
// cachemgr's KvCacheManager as an in-process block pool (create a sequence, grant slots
// for each step, copy-on-write copies passed along), the CpuModelRunner's step API and
// kernels, the shared tokenizer and its incremental decoder.
//
// Prints the prompt, then the generated text as it streams; stops at EOS, at BOS (which
// separates stories in llama2.c's training data, so llama2.c's runner stops there too)
// or after --max_tokens; then prints a newline, and the speed on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model_lookup.h"
#include "common/process.h"
#include "common/tokenizer/incremental_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "glog/logging.h"
#include "services/cachemgr/kv_cache_manager.h"
#include "services/worker/dist/in_process_tp_runner.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/model/load_model.h"

ABSL_FLAG(std::string, model, "",
          "Model: a GGUF file, a Hugging Face checkpoint folder (config.json, safetensors, "
          "tokenizer.json), or a llama2.c checkpoint with its tokenizer (tok<N>.bin or "
          "tokenizer.bin) beside it. Default: $FOLIO_MODEL, else "
          "$FOLIO_MODELS_DIR/stories260K/, else the embedded stories260K beside the binary.");
ABSL_FLAG(std::string, prompt, "", "Prompt text; empty starts from BOS alone.");
ABSL_FLAG(int, max_tokens, 256,
          "Most tokens to generate (capped so prompt + output fit the model's context).");
ABSL_FLAG(double, temperature, 1.0, "Sampling temperature; 0 is greedy (argmax).");
ABSL_FLAG(double, top_p, 0.9, "Nucleus sampling: keep the most likely tokens up to this mass; 1 = off.");
ABSL_FLAG(int, top_k, 0, "Keep only the k most likely tokens; 0 = off.");
ABSL_FLAG(double, min_p, 0.0, "Drop tokens below min_p times the top token's probability; 0 = off.");
ABSL_FLAG(uint64_t, seed, 0, "Sampling seed; 0 picks one from the clock (printed on stderr).");
ABSL_FLAG(int, block_size, 16, "Tokens per KV block.");
ABSL_FLAG(int64_t, kv_cache_bytes, int64_t{256} << 20, "Bytes for the KV block pool.");
ABSL_FLAG(std::string, kv_dtype, "f16", "KV cache element type: f16, f32 or q8_0.");
ABSL_FLAG(int, threads, 0,
          "Threads for kernels and OpenBLAS, per tensor-parallel rank; 0 = all cores, shared "
          "out over the ranks.");
ABSL_FLAG(int, tp, 1,
          "Tensor-parallel degree: the model is split over this many ranks, run in this "
          "process on threads and joined by Gloo over loopback TCP. Must divide the model's "
          "KV head count.");

namespace folio::worker {
namespace {

using Clock = std::chrono::steady_clock;

// Grants slots for `tokens` at `start_pos` and applies the answer to the table mirror.
absl::Status Grant(cachemgr::KvCacheManager& cache, cachemgr::SeqId seq, int32_t start_pos,
                   const std::vector<int32_t>& tokens, std::vector<int32_t>* table,
                   std::vector<BlockCopy>* copies) {
  cachemgr::StepRequest req;
  req.grants.push_back({seq, start_pos, tokens});
  absl::StatusOr<cachemgr::StepResponse> resp = cache.Step(req);
  if (!resp.ok()) return resp.status();
  const cachemgr::SeqResult& r = resp->grants.at(0);
  if (r.status == cachemgr::SeqStatus::kNoRoom) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the KV pool has no room for position ", start_pos + tokens.size() - 1,
        "; raise --kv_cache_bytes"));
  }
  table->resize(r.table_offset);
  for (cachemgr::BlockId b : r.entries) table->push_back(b.value);
  copies->clear();
  for (const cachemgr::BlockCopy& c : r.copies) copies->push_back({c.src.value, c.dst.value});
  return absl::OkStatus();
}

int Run() {
  absl::StatusOr<std::string> resolved = folio::ResolveModelPath(absl::GetFlag(FLAGS_model));
  if (!resolved.ok()) {
    LOG(ERROR) << resolved.status().message();
    return 2;
  }
  const std::string path = *resolved;
  CpuModelRunnerOptions options;
  options.block_size = absl::GetFlag(FLAGS_block_size);
  options.kv_cache_bytes = absl::GetFlag(FLAGS_kv_cache_bytes);
  const int tp = absl::GetFlag(FLAGS_tp);
  if (tp < 1) {
    LOG(ERROR) << "--tp must be at least 1, got " << tp;
    return 2;
  }
  options.num_threads = absl::GetFlag(FLAGS_threads);
  if (options.num_threads <= 0 && tp > 1) {
    options.num_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / tp);
  }
  const std::string kv_dtype = absl::GetFlag(FLAGS_kv_dtype);
  if (!kernels::ParseKvDType(kv_dtype.c_str(), &options.kv_dtype)) {
    LOG(ERROR) << "--kv_dtype must be f16, f32 or q8_0, got " << kv_dtype;
    return 2;
  }
  SamplingParams sampling;
  sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  sampling.top_k = absl::GetFlag(FLAGS_top_k);
  sampling.min_p = static_cast<float>(absl::GetFlag(FLAGS_min_p));
  sampling.seed = absl::GetFlag(FLAGS_seed);
  ExitIfCheckingFlags();

  absl::StatusOr<std::unique_ptr<ModelWeights>> weights = LoadModel(path);
  if (!weights.ok()) {
    LOG(ERROR) << weights.status();
    return 1;
  }
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create((*weights)->vocab);
  if (!tokenizer.ok()) {
    LOG(ERROR) << "tokenizer: " << tokenizer.status();
    return 1;
  }
  absl::StatusOr<std::unique_ptr<ModelRunner>> runner;
  if (tp == 1) {
    runner = CpuModelRunner::Create(**weights, options);
  } else {
    InProcessTpOptions tp_options;
    tp_options.tp_size = tp;
    tp_options.runner = options;
    runner = InProcessTpRunner::Create(**weights, tp_options);
  }
  if (!runner.ok()) {
    LOG(ERROR) << runner.status();
    return 1;
  }
  const ModelConfig& config = (*runner)->config();
  // The runner reads the weights in place (typed views into the mapped file): keep them.

  cachemgr::CacheConfig cache_config;
  cache_config.num_blocks = static_cast<int32_t>((*runner)->num_blocks());
  cache_config.block_size = (*runner)->block_size();
  cache_config.prefix_caching = cachemgr::PagedPolicy::PrefixCaching::kDisabled;
  absl::StatusOr<std::unique_ptr<cachemgr::KvCacheManager>> cache =
      cachemgr::KvCacheManager::Create(cache_config);
  if (!cache.ok()) {
    LOG(ERROR) << cache.status();
    return 1;
  }

  absl::StatusOr<std::vector<int32_t>> prompt =
      tokenizer->Encode(absl::GetFlag(FLAGS_prompt), AddBos::kYes);
  if (!prompt.ok()) {
    LOG(ERROR) << "--prompt: " << prompt.status();
    return 2;
  }
  if (static_cast<int64_t>(prompt->size()) >= config.max_seq_len) {
    LOG(ERROR) << "the prompt has " << prompt->size() << " tokens; the model's context is "
               << config.max_seq_len;
    return 2;
  }
  const int32_t max_tokens = std::min<int32_t>(
      std::max(0, absl::GetFlag(FLAGS_max_tokens)),
      config.max_seq_len - static_cast<int32_t>(prompt->size()));

  if (sampling.seed == 0) {
    sampling.seed = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    if (sampling.temperature > 0) {
      fprintf(stderr, "seed: %llu\n", static_cast<unsigned long long>(sampling.seed));
    }
  }

  const cachemgr::SeqId seq_id{1};
  cachemgr::StepRequest create;
  create.creates.push_back({seq_id, static_cast<int32_t>(prompt->size()) + max_tokens, {}});
  if (absl::StatusOr<cachemgr::StepResponse> r = (*cache)->Step(create);
      !r.ok() || r->creates.at(0).status != cachemgr::SeqStatus::kOk) {
    LOG(ERROR) << "cannot create the sequence: "
               << (r.ok() ? "the KV pool is too small; raise --kv_cache_bytes"
                          : r.status().ToString());
    return 1;
  }

  // Echo the prompt as the tokenizer decodes it.
  IncrementalDecoder decoder(*tokenizer);
  auto emit = [&](int32_t id) {
    absl::StatusOr<std::string> piece = decoder.Add(id);
    CHECK(piece.ok()) << piece.status();
    fputs(piece->c_str(), stdout);
    fflush(stdout);
  };
  for (int32_t id : *prompt) emit(id);

  SequenceStep seq;
  seq.seq_id = seq_id.value;
  seq.sampling = sampling;
  std::vector<int32_t> pending = *prompt;  // tokens whose KV is not computed yet
  int32_t pos = 0;
  int32_t generated = 0;
  const Clock::time_point start = Clock::now();
  Clock::time_point first_token_time = start;
  while (generated < max_tokens) {
    StepInput step;
    if (absl::Status s = Grant(**cache, seq_id, pos, pending, &seq.block_table, &step.block_copies);
        !s.ok()) {
      LOG(ERROR) << s;
      return 1;
    }
    seq.token_ids = pending;
    seq.start_pos = pos;
    step.seqs = {seq};
    absl::StatusOr<StepOutput> out = (*runner)->Execute(step);
    if (!out.ok()) {
      LOG(ERROR) << out.status();
      return 1;
    }
    pos += static_cast<int32_t>(pending.size());
    const int32_t next = out->seqs.at(0).samples.at(0).token_id;
    if (generated == 0) first_token_time = Clock::now();
    ++generated;
    if (tokenizer->IsEndOfGeneration(next) || next == tokenizer->bos_id()) break;
    emit(next);
    pending = {next};
  }
  fputs(decoder.Flush().c_str(), stdout);
  fputs("\n", stdout);
  fflush(stdout);

  const Clock::time_point end = Clock::now();
  const double prefill_s = std::chrono::duration<double>(first_token_time - start).count();
  const double decode_s = std::chrono::duration<double>(end - first_token_time).count();
  fprintf(stderr, "prompt: %zu tokens in %.3f s (%.1f tok/s)\n", prompt->size(), prefill_s,
          prompt->size() / std::max(prefill_s, 1e-9));
  if (generated > 1) {
    fprintf(stderr, "achieved tok/s: %f\n", (generated - 1) / std::max(decode_s, 1e-9));
  }
  return 0;
}

}  // namespace
}  // namespace folio::worker

int main(int argc, char** argv) {
  folio::InitProcess(argc, argv,
                     "generate text from a prompt on the CPU engine (offline, one process).\n"
                     "Usage: folio-run --model=PATH [--prompt=TEXT] [--max_tokens=N] "
                     "[--temperature=T] [--top_p=P] [--top_k=K] [--seed=S]");
  return folio::worker::Run();
}
