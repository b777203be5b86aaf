// folio-worker: one worker rank of a model replica, served over gRPC. Loads the model,
// answers GetWorkerInfo at once, reports SERVING once the scheduler's AllocateKvCache
// has built the KV pool, then runs steps.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/model_lookup.h"
#include "common/process.h"
#include "common/server_flags.h"
#include "common/service_runner.h"
#include "common/tls.h"
#include "glog/logging.h"
#include "grpcpp/create_channel.h"
#include "services/worker/dist/gloo_communicator.h"
#include "services/worker/dist/kv_store.h"
#include "services/worker/dist/rendezvous_service.h"
#include "services/worker/engine/cpu_weights.h"
#include "services/worker/engine/drafting_runner.h"
#include "services/worker/kernels/onednn_gemm.h"
#include "services/worker/model/load_model.h"
#include "services/worker/backend.h"
#include "services/worker/engine/host_kv_segment.h"
#include "services/worker/service.h"

ABSL_FLAG(int, port, 0, "gRPC port; 0 picks a free one (see --port_file).");
ABSL_FLAG(std::string, model, "",
          "Model: a GGUF file, a Hugging Face checkpoint folder (config.json, "
          "model.safetensors or its sharded index, tokenizer.json), or a llama2.c checkpoint "
          "with its tokenizer (tok<N>.bin or tokenizer.bin) beside it. Default: $FOLIO_MODEL, else "
          "$FOLIO_MODELS_DIR/stories260K/, else the embedded stories260K beside the binary.");
ABSL_FLAG(std::string, kv_cache_bytes, "auto",
          "Bytes this worker may give the KV cache (reported to the scheduler, which sizes "
          "the pool from it): a number of bytes or a size with a unit, e.g. 512MiB, 2GiB, 1.5GB. "
          "auto: 256MiB on the CPU; on CUDA, measured at start-up from "
          "--gpu_memory_utilization after the weights and one profiling step.");
ABSL_FLAG(double, gpu_memory_utilization, 0.9,
          "--device=cuda with --kv_cache_bytes=auto: the share of the device's memory the "
          "worker may fill (weights, activations and KV cache together), in (0, 1].");
ABSL_FLAG(std::string, kv_host_bytes, "0",
          "The KV offload tier in host memory: bytes of a shared-memory segment "
          "(/dev/shm/<--kv_host_name>) that holds a copy of every computed full KV block, so "
          "prefixes evicted from the pool, or lost with a restarted worker, load back instead "
          "of being recomputed. 0 (default): no tier. Same units as --kv_cache_bytes. "
          "With --draft_model a slot also holds the draft's KV of its block (fewer blocks "
          "in the same bytes). --device=cpu only.");
ABSL_FLAG(bool, window_layer_groups, true,
          "Keep a model's sliding-window layers (Gemma 2/3's local layers) in KV blocks of "
          "their own, so that the blocks a sequence's window has passed go back to the pool "
          "(a long Gemma 3 context holds about a sixth of the KV of a dense one). Off: every "
          "block holds every layer. Not with --kv_host_bytes (the offload tiers hold whole "
          "blocks), --draft_model or --device=cuda: off there.");
ABSL_FLAG(std::string, kv_host_name, "",
          "The host tier's shared-memory segment name; it must stay the same across restarts "
          "of this rank for the tier to survive them, and differ between ranks on one machine. "
          "Default: folio-kv-<the gRPC port it listens on>-rank<tp_rank>.");
ABSL_FLAG(std::string, kv_disk_dir, "",
          "The KV offload tier on disk, below the host tier (needs --kv_host_bytes): the "
          "directory the block files go in, one file per block and rank under a "
          "subdirectory named by the model's content and KV shape, so replicas of one model "
          "sharing the directory (a shared volume) load each other's blocks, and cached "
          "prompts survive a restart of the whole cluster. The cache manager must see it "
          "too. Empty (default): no disk tier.");
ABSL_FLAG(std::string, kv_disk_bytes, "0",
          "--kv_disk_dir: the most bytes this rank's block files may take (same units as "
          "--kv_cache_bytes; 0: no disk tier).");
ABSL_FLAG(std::string, draft_model, "",
          "Speculative decoding's draft model (a GGUF file or Hugging Face folder with the "
          "model's tokenizer): it proposes tokens for the scheduler's --speculative=draft, "
          "in this worker, its KV in a pool of the model's blocks (counted in "
          "--kv_cache_bytes). It computes every step's rows whatever the scheduler's "
          "--speculative: give it only with --speculative=draft. CPU backend; with "
          "--tp_size > 1 give every rank the same file (rank 0 drafts). Empty: none.");
ABSL_FLAG(std::string, kv_dtype, "f16",
          "KV cache element type: f16, f32 or q8_0 (8-bit: int8 values and an f32 scale per "
          "token and kv head, about half the bytes of f16; --device=cpu only).");
ABSL_FLAG(int, num_threads, 0, "Threads for the kernels and OpenBLAS; 0 = all cores.");
ABSL_FLAG(int, tp_size, 1,
          "Tensor-parallel degree: how many folio-worker ranks split this model replica. "
          "Must divide the model's KV head count.");
ABSL_FLAG(int, tp_rank, 0, "This worker's rank in [0, --tp_size). Rank 0 hosts the rendezvous.");
ABSL_FLAG(std::string, tp_rendezvous, "",
          "Ranks above 0: rank 0's gRPC address (HOST:PORT), where the group's rendezvous "
          "table is served. Not used by rank 0.");
ABSL_FLAG(std::string, tp_host, "",
          "Address this rank's collective (Gloo TCP) endpoint listens on and the other ranks "
          "connect to; empty = --host (which must then not be a wildcard like 0.0.0.0).");
ABSL_FLAG(int, tp_timeout_ms, 20000,
          "A collective that a peer rank does not join within this long fails the step and "
          "breaks the group (the scheduler then forms it again: JoinGroup). It also bounds "
          "how long a surviving rank may wait on a dead one (a Gloo send that waits for the "
          "dead peer's receive is failed only by this timeout), so keep the scheduler's "
          "--recovery_timeout_ms (default 60 s) well above it. Ranks join, allocate and "
          "step together, so a healthy peer is late only by a step's imbalance.");
ABSL_FLAG(int, tp_rendezvous_timeout_s, 300,
          "The longest a JoinGroup waits for every rank of the group to join (the "
          "scheduler's call deadline may cut it shorter).");
ABSL_FLAG(std::string, device, "cpu",
          "Backend: cpu, or cuda (the CUDA backend on --cuda_device; needs a build with CUDA).");
ABSL_FLAG(int, cuda_device, 0, "CUDA device index for --device=cuda.");
ABSL_FLAG(std::string, cuda_collectives, "nccl",
          "--device=cuda with --tp_size > 1: nccl (each rank on its own device), or host (the "
          "ranks' Gloo group through pinned host memory; slower, but ranks may share a device).");
ABSL_FLAG(std::string, dtype, "f16",
          "--device=cuda: weight and GEMM input type on the device: f16, bf16 or f32.");
ABSL_FLAG(int, max_num_batched_tokens, 2048,
          "--device=cuda: the largest step in new tokens; buffers are sized and profiled for "
          "it at start-up. Keep it at least the scheduler's --max_num_batched_tokens.");
ABSL_FLAG(int, max_num_seqs, 256,
          "--device=cuda: the largest step in sequences. Keep it at least the scheduler's "
          "--max_num_seqs.");

ABSL_FLAG(std::string, bf16_gemm, "auto",
          "--device=cpu: who multiplies BF16 weights in steps of at least --onednn_min_rows "
          "token rows (prefill chunks, batched decode). onednn: oneDNN's bf16 matmul (needs "
          "a build with libdnnl-dev and an AVX-512 CPU, else the worker exits saying why); "
          "the BF16 projections are then copied once into oneDNN's blocked layout where it "
          "keeps one (the file's pages released: the same bytes), which Folio's own GEMV "
          "also reads for smaller steps; folio: Folio's own kernels (the BF16 projections "
          "repacked into bf16 panels, the same bytes: slower long prefills than onednn); "
          "auto: onednn where it can run, else folio. Smaller steps always take Folio's "
          "kernels. With onednn a row's "
          "logits can differ in the last bits between a step above and below the threshold "
          "(oneDNN sums in another order); folio keeps them identical.");
ABSL_FLAG(int, onednn_min_rows, folio::worker::kDefaultOnednnMinRows,
          "--bf16_gemm=onednn/auto: the fewest token rows in a step for oneDNN to take its "
          "BF16 matmuls (>= 1).");
ABSL_FLAG(int, dequant_gemm_min_rows, folio::worker::kDefaultDequantMinRows,
          "--device=cpu: quantized weights (q8_0, q4_0 ... q6_K) in steps of at least this "
          "many token rows are dequantized to bf16 a chunk of rows per thread at a time "
          "(nothing more resident) and multiplied by oneDNN's bf16 matmul, which reuses "
          "each weight across the rows faster than Folio's integer kernels (needs a build "
          "with libdnnl-dev and an AVX-512 CPU; else Folio's kernels, logged); on AVX-512 "
          "VNNI, q4_K and q6_K rows skip the bf16 copy and run Folio's int8 GEMMs "
          "(kernels/kquant_gemm.h). 0: always Folio's kernels, whose sums do not depend on "
          "the batch.");

namespace {

// libdnnl runs on libgomp, which reads OMP_WAIT_POLICY once, when it loads (before
// main): unless it is passive, its idle threads spin beside the kernels' pool and the
// other services of a local cluster. The launchers (./folio serve, tools/serve.py) set
// it; a worker started any other way without it re-executes itself once with it set.
// An explicit value (e.g. active) is kept.
void EnsurePassiveOpenMp(char** argv) {
  if (!folio::worker::kernels::OnednnAvailable() || std::getenv("OMP_WAIT_POLICY") != nullptr) {
    return;
  }
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);
  // execv failed: carry on (the threads then spin); main logs the policy.
}

// Where a draft model can run (checked before the backend starts and the model loads).
// Under tensor parallelism rank 0 drafts for the group (drafting_runner.h).
absl::Status CheckDraftPlacement(const std::string& device) {
  if (device != "cpu") {
    return absl::InvalidArgumentError("a draft model runs on the CPU backend only (--device=cpu)");
  }
  return absl::OkStatus();
}

// The draft model of --draft_model, checked against the model it drafts for.
absl::StatusOr<std::shared_ptr<const folio::worker::ModelWeights>> LoadDraftModel(
    const std::string& flag, const folio::worker::ModelWeights& target) {
  absl::StatusOr<std::string> path = folio::ResolveModelPath(flag);
  if (!path.ok()) return path.status();
  absl::StatusOr<std::unique_ptr<folio::worker::ModelWeights>> draft =
      folio::worker::LoadModel(*path);
  if (!draft.ok()) {
    return absl::Status(draft.status().code(),
                        absl::StrCat("cannot load ", *path, ": ", draft.status().message()));
  }
  if (absl::Status s = folio::worker::CheckDraftVocabulary(target, **draft); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(*path, ": ", s.message()));
  }
  const folio::worker::ModelConfig& c = (*draft)->config;
  LOG(INFO) << "draft model " << (c.name.empty() ? *path : c.name) << ": " << c.num_layers
            << " layers, dim " << c.dim << ", vocab " << c.vocab_size;
  return std::shared_ptr<const folio::worker::ModelWeights>(*std::move(draft));
}

}  // namespace

int main(int argc, char** argv) {
  EnsurePassiveOpenMp(argv);
  folio::CatchTerminationSignals();
  folio::InitProcess(argc, argv,
                     "one worker rank: holds the model weights and the KV cache and runs "
                     "steps for the scheduler.\n"
                     "Usage: folio-worker --model=PATH [--kv_cache_bytes=auto|256MiB] [--device=cpu|cuda] "
                     "[--kv_dtype=f16|f32|q8_0] [--port=N] ...\n"
                     "Tensor parallelism: start --tp_size ranks; rank 0 with --tp_rank=0, the "
                     "others with --tp_rank=R --tp_rendezvous=RANK0_HOST:PORT.");
  using folio::worker::WorkerServiceOptions;

  absl::StatusOr<std::string> resolved = folio::ResolveModelPath(absl::GetFlag(FLAGS_model));
  if (!resolved.ok()) {
    LOG(ERROR) << resolved.status().message();
    return 2;
  }
  const std::string model_path = *resolved;

  WorkerServiceOptions options;
  {
    // The host tier's fingerprint names the file, not just its shape (service.h).
    struct stat st {};
    options.model_identity = model_path;
    if (stat(model_path.c_str(), &st) == 0) {
      absl::StrAppend(&options.model_identity, ";size=", st.st_size, ";inode=", st.st_ino,
                      ";mtime=", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
    }
  }
  const std::string kv_dtype = absl::GetFlag(FLAGS_kv_dtype);
  if (!folio::worker::kernels::ParseKvDType(kv_dtype.c_str(), &options.kv_dtype)) {
    LOG(ERROR) << "--kv_dtype must be f16, f32 or q8_0, got \"" << kv_dtype << "\"";
    return 2;
  }
  // "auto" on CUDA: measured once the weights are loaded (below).
  const bool measure_budget =
      absl::GetFlag(FLAGS_kv_cache_bytes) == "auto" && absl::GetFlag(FLAGS_device) == "cuda";
  absl::StatusOr<int64_t> budget = folio::worker::ParseByteSize(
      absl::GetFlag(FLAGS_kv_cache_bytes) == "auto" ? "256MiB" : absl::GetFlag(FLAGS_kv_cache_bytes));
  if (!budget.ok()) {
    LOG(ERROR) << "--kv_cache_bytes: " << budget.status().message();
    return 2;
  }
  if (*budget <= 0) {
    LOG(ERROR) << "--kv_cache_bytes must be positive";
    return 2;
  }
  options.kv_cache_budget_bytes = *budget;
  absl::StatusOr<int64_t> host_bytes = folio::worker::ParseByteSize(absl::GetFlag(FLAGS_kv_host_bytes));
  if (!host_bytes.ok()) {
    LOG(ERROR) << "--kv_host_bytes: " << host_bytes.status().message();
    return 2;
  }
  options.kv_host_bytes = *host_bytes;
  options.kv_host_name = absl::GetFlag(FLAGS_kv_host_name);
  options.window_layer_groups = absl::GetFlag(FLAGS_window_layer_groups);
  // A segment named after a port picked at random is found by no later start: it is
  // removed when this process stops cleanly, and the tier does not outlive a crash.
  const bool host_segment_is_ours =
      options.kv_host_bytes > 0 && options.kv_host_name.empty() && absl::GetFlag(FLAGS_port) == 0;
  if (options.kv_host_bytes > 0) {
    if (absl::GetFlag(FLAGS_device) != "cpu") {
      LOG(ERROR) << "--kv_host_bytes: the host KV tier is built for --device=cpu only so far";
      return 2;
    }
    if (host_segment_is_ours) {
      LOG(WARNING) << "--kv_host_bytes without --kv_host_name or a fixed --port: the segment "
                      "is named after a port picked now, so a restarted worker will not find "
                      "it; it is removed when this worker stops";
    }
  }
  absl::StatusOr<int64_t> disk_bytes =
      folio::worker::ParseByteSize(absl::GetFlag(FLAGS_kv_disk_bytes));
  if (!disk_bytes.ok()) {
    LOG(ERROR) << "--kv_disk_bytes: " << disk_bytes.status().message();
    return 2;
  }
  options.kv_disk_dir = absl::GetFlag(FLAGS_kv_disk_dir);
  options.kv_disk_bytes = *disk_bytes;
  if (options.kv_disk_bytes > 0 && options.kv_disk_dir.empty()) {
    LOG(ERROR) << "--kv_disk_bytes: the disk KV tier needs a directory, --kv_disk_dir";
    return 2;
  }
  if (options.kv_disk_bytes == 0 && !options.kv_disk_dir.empty()) {
    LOG(INFO) << "--kv_disk_dir without --kv_disk_bytes: no disk KV tier";
    options.kv_disk_dir.clear();
  }
  if (options.kv_disk_bytes > 0) {
    if (options.kv_host_bytes <= 0) {
      LOG(ERROR) << "--kv_disk_dir: the disk KV tier lies below the host tier; give "
                    "--kv_host_bytes too";
      return 2;
    }
  }
  options.num_threads = absl::GetFlag(FLAGS_num_threads);
  if (options.num_threads < 0) {
    LOG(ERROR) << "--num_threads must be >= 0 (0 = all cores)";
    return 2;
  }
  options.tp_size = absl::GetFlag(FLAGS_tp_size);
  options.tp_rank = absl::GetFlag(FLAGS_tp_rank);
  if (options.tp_size < 1 || options.tp_rank < 0 || options.tp_rank >= options.tp_size) {
    LOG(ERROR) << "--tp_rank must lie in [0, --tp_size) and --tp_size be at least 1; got rank "
               << options.tp_rank << " of " << options.tp_size;
    return 2;
  }
  const std::string tp_host =
      absl::GetFlag(FLAGS_tp_host).empty() ? absl::GetFlag(FLAGS_host) : absl::GetFlag(FLAGS_tp_host);
  if (options.tp_size > 1) {
    if (options.tp_rank > 0 && absl::GetFlag(FLAGS_tp_rendezvous).empty()) {
      LOG(ERROR) << "--tp_rendezvous is required on ranks above 0: rank 0's gRPC address";
      return 2;
    }
    if (tp_host == "0.0.0.0" || tp_host == "::" || tp_host == "[::]") {
      LOG(ERROR) << "--tp_host must be an address the other ranks can reach (--host is "
                 << tp_host << ")";
      return 2;
    }
    if (absl::GetFlag(FLAGS_tp_timeout_ms) <= 0 || absl::GetFlag(FLAGS_tp_rendezvous_timeout_s) <= 0) {
      LOG(ERROR) << "--tp_timeout_ms and --tp_rendezvous_timeout_s must be positive";
      return 2;
    }
  }
  const std::string bf16_gemm = absl::GetFlag(FLAGS_bf16_gemm);
  if (bf16_gemm == "auto") {
    options.bf16_gemm = folio::worker::Bf16Gemm::kAuto;
  } else if (bf16_gemm == "onednn") {
    options.bf16_gemm = folio::worker::Bf16Gemm::kOnednn;
  } else if (bf16_gemm == "folio") {
    options.bf16_gemm = folio::worker::Bf16Gemm::kFolio;
  } else {
    LOG(ERROR) << "--bf16_gemm must be auto, onednn or folio, got \"" << bf16_gemm << "\"";
    return 2;
  }
  options.onednn_min_rows = absl::GetFlag(FLAGS_onednn_min_rows);
  if (options.onednn_min_rows < 1) {
    LOG(ERROR) << "--onednn_min_rows must be >= 1, got " << options.onednn_min_rows;
    return 2;
  }
  options.dequant_min_rows = absl::GetFlag(FLAGS_dequant_gemm_min_rows);
  if (options.dequant_min_rows < 0) {
    LOG(ERROR) << "--dequant_gemm_min_rows must be >= 0, got " << options.dequant_min_rows;
    return 2;
  }
  if (options.bf16_gemm == folio::worker::Bf16Gemm::kOnednn &&
      absl::GetFlag(FLAGS_device) == "cpu") {
    // Say at once, not when the scheduler allocates the KV pool.
    absl::StatusOr<std::unique_ptr<folio::worker::kernels::OnednnGemm>> probe =
        folio::worker::kernels::OnednnGemm::Create(1);
    if (!probe.ok()) {
      LOG(ERROR) << "--bf16_gemm=onednn: " << probe.status().message();
      return 2;
    }
  }
  if (folio::worker::kernels::OnednnAvailable() &&
      (options.bf16_gemm != folio::worker::Bf16Gemm::kFolio || options.dequant_min_rows > 0)) {
    LOG(INFO) << "oneDNN's OpenMP threads: OMP_WAIT_POLICY "
              << folio::worker::kernels::OpenMpWaitPolicy();
  }
  if (!absl::GetFlag(FLAGS_draft_model).empty()) {
    if (absl::Status s = CheckDraftPlacement(absl::GetFlag(FLAGS_device)); !s.ok()) {
      LOG(ERROR) << "--draft_model: " << s.message();
      return 2;
    }
  }
  folio::worker::BackendOptions backend;
  backend.device = absl::GetFlag(FLAGS_device);
  backend.cuda_device = absl::GetFlag(FLAGS_cuda_device);
  backend.cuda_collectives = absl::GetFlag(FLAGS_cuda_collectives);
  backend.dtype = absl::GetFlag(FLAGS_dtype);
  backend.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  backend.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  backend.kv_dtype = options.kv_dtype;
  backend.tp_size = options.tp_size;
  backend.gpu_memory_utilization = absl::GetFlag(FLAGS_gpu_memory_utilization);
  absl::StatusOr<folio::worker::RunnerFactory> factory = folio::worker::MakeRunnerFactory(backend);
  if (!factory.ok()) {
    LOG(ERROR) << factory.status().message();
    return 2;
  }
  options.make_runner = *std::move(factory);
  folio::ExitIfCheckingFlags();
  if (options.kv_disk_bytes > 0) {
    // Blocks are named by what the model computes, not by where its file lies, so
    // replicas on other machines (or after a redeploy) share them.
    absl::StatusOr<std::string> content = folio::worker::ModelContentIdentity(model_path);
    if (!content.ok()) {
      LOG(ERROR) << "--kv_disk_dir: cannot read the model's content: " << content.status();
      return 2;
    }
    options.model_content_identity = *content;
  }

  // From here a signal exits at once until the worker serves (a large model loads for
  // minutes), and a taken port is said before the load rather than after it.
  folio::TerminationSignals& signals = folio::TerminationSignals::Start();
  for (int port : {absl::GetFlag(FLAGS_port), absl::GetFlag(FLAGS_metrics_port)}) {
    if (absl::Status s = folio::CheckPortFree(absl::GetFlag(FLAGS_host), port); !s.ok()) {
      LOG(ERROR) << s.message();
      return 1;
    }
  }

  const absl::Time load_start = absl::Now();
  absl::StatusOr<std::unique_ptr<folio::worker::ModelWeights>> weights =
      folio::worker::LoadModel(model_path);
  const absl::Duration load_time = absl::Now() - load_start;
  if (!weights.ok()) {
    LOG(ERROR) << "cannot load --model=" << model_path << ": " << weights.status();
    return 2;
  }
  const folio::worker::ModelConfig config = (*weights)->config;
  if (absl::Status s = folio::worker::CheckTpShard(
          config, {.rank = options.tp_rank, .size = options.tp_size});
      !s.ok()) {
    LOG(ERROR) << "--tp_size=" << options.tp_size << ": " << s.message();
    return 2;
  }

  if (!absl::GetFlag(FLAGS_draft_model).empty()) {
    absl::StatusOr<std::shared_ptr<const folio::worker::ModelWeights>> draft =
        LoadDraftModel(absl::GetFlag(FLAGS_draft_model), **weights);
    if (!draft.ok()) {
      LOG(ERROR) << "--draft_model: " << draft.status().message();
      return 2;
    }
    options.draft_weights = *std::move(draft);
  }

  if (measure_budget) {
    absl::StatusOr<int64_t> measured = folio::worker::MeasureKvBudget(**weights, backend);
    if (!measured.ok()) {
      LOG(ERROR) << "cannot size the KV cache on --cuda_device=" << backend.cuda_device << ": "
                 << measured.status().message();
      return 2;
    }
    options.kv_cache_budget_bytes = *measured;
  }

  folio::MetricsRegistry registry;
  // Outlives the service: its step thread may still be joining the group through it.
  folio::worker::KvStore rendezvous_table;
  registry
      .AddGauge("folio_worker_model_load_seconds",
                "Time this worker took to load its model at start-up, in seconds.")
      .Set(absl::ToDoubleSeconds(load_time));
  folio::worker::WorkerService service(*std::move(weights), options, &registry);
  LOG(INFO) << "model " << (config.name.empty() ? model_path : config.name) << ": "
            << config.num_layers << " layers, dim " << config.dim << ", vocab "
            << config.vocab_size << ", context " << config.max_seq_len << "; KV "
            << service.kv_bytes_per_token() << " bytes per token (" << kv_dtype
            << "), budget " << options.kv_cache_budget_bytes << " bytes";

  folio::ServerOptions server_options =
      folio::ServerOptionsFromFlags("folio.internal.v1.Worker", absl::GetFlag(FLAGS_port));
  // An AllocateKvCache may finish before Start() returns (the port file is written
  // first): the state waits here until the runner exists. After Shutdown() the
  // callback does nothing.
  absl::Mutex serving_mu;
  folio::ServiceRunner* serving_runner = nullptr;
  std::optional<folio::ServingState> pending_state;
  service.SetServingCallback([&](folio::ServingState state) {
    absl::MutexLock lock(&serving_mu);
    if (serving_runner != nullptr) {
      serving_runner->SetServing(state);
    } else {
      pending_state = state;
    }
  });
  if (options.tp_size > 1) {
    folio::worker::GlooCommunicatorOptions comm;
    comm.rank = options.tp_rank;
    comm.world_size = options.tp_size;
    comm.hostname = tp_host;
    comm.timeout = absl::Milliseconds(absl::GetFlag(FLAGS_tp_timeout_ms));
    const absl::Duration join_timeout = absl::Seconds(absl::GetFlag(FLAGS_tp_rendezvous_timeout_s));
    const std::string rendezvous_address = absl::GetFlag(FLAGS_tp_rendezvous);
    // The scheduler's JoinGroup runs this: at set-up, and whenever it forms the group again.
    service.SetGroupConnector(
        [comm, join_timeout, rendezvous_address, &rendezvous_table](
            int64_t generation,
            absl::Duration timeout) -> absl::StatusOr<std::unique_ptr<folio::worker::Communicator>> {
          folio::worker::GlooCommunicatorOptions o = comm;
          o.rendezvous_timeout = std::min(join_timeout, timeout);
          o.key_prefix = folio::worker::GroupKeyPrefix(generation);
          absl::StatusOr<std::unique_ptr<folio::worker::GlooCommunicator>> joined;
          if (o.rank == 0) {
            rendezvous_table.EraseGroupsBefore(generation);
            folio::worker::LocalGlooStore store(&rendezvous_table, o.rendezvous_timeout);
            joined = folio::worker::GlooCommunicator::Create(o, store);
          } else {
            folio::worker::GrpcRendezvousStore store(
                folio::MakeChannel(rendezvous_address, folio::TlsConfigFromFlagsOrExit()).value(),
                o.rendezvous_timeout);
            joined = folio::worker::GlooCommunicator::Create(o, store);
          }
          if (!joined.ok()) return joined.status();
          return std::unique_ptr<folio::worker::Communicator>(*std::move(joined));
        });
  }
  // Rank 0 of a group serves the rendezvous table on its own gRPC port.
  folio::worker::RendezvousService rendezvous(&rendezvous_table);
  std::vector<grpc::Service*> services = {&service};
  if (options.tp_size > 1 && options.tp_rank == 0) services.push_back(&rendezvous);
  auto runner = folio::ServiceRunner::Start(server_options, services, &registry);
  if (!runner.ok()) {
    LOG(ERROR) << runner.status();
    return 1;
  }
  // The host tier's default segment name: the bound port's, so a rank restarted on its
  // port (Kubernetes, ./folio serve, a test's restart) opens its segment again.
  service.SetListenPort((*runner)->port());
  {
    absl::MutexLock lock(&serving_mu);
    serving_runner = runner->get();
    if (pending_state) serving_runner->SetServing(*pending_state);
  }
  signals.MarkSetUp();
  const int sig = signals.Wait();
  LOG(INFO) << "signal " << sig << ", shutting down";
  {
    // Shutdown() reports NOT_SERVING; a late allocation must not flip it back.
    absl::MutexLock lock(&serving_mu);
    serving_runner = nullptr;
  }
  (*runner)->Shutdown();
  if (host_segment_is_ours) {
    const std::string name = absl::StrCat("folio-kv-", (*runner)->port(), "-rank", options.tp_rank);
    if (absl::Status s = folio::worker::HostKvSegment::Unlink(name); !s.ok()) LOG(WARNING) << s;
  }
  return 0;
}
