#include "services/worker/service.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/incarnation.h"
#include "common/grpc_status.h"
#include "glog/logging.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/drafting_runner.h"
#include "services/worker/engine/kv_cache.h"

namespace folio::worker {
namespace pb = folio::internal::v1;

namespace {

// WorkerServiceOptions::window_layer_groups, where the worker takes it.
bool UsesWindowGroups(const WorkerServiceOptions& options) {
  return options.window_layer_groups && !options.make_runner && options.kv_host_bytes == 0 &&
         options.draft_weights == nullptr;
}

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// The KV cache shape of one rank of `tp_size` (each holds num_kv_heads / tp_size heads),
// its layers in `groups`' planes (null: a plane each).
KvCacheShape ShapeFor(const ModelConfig& config, int32_t tp_size, kernels::KvDType dtype,
                      int32_t block_size, const KvLayerGroups* groups = nullptr) {
  KvCacheShape shape;
  if (groups != nullptr && groups->num_window_groups() > 0) shape.layer_plane = groups->plane;
  shape.num_layers = config.num_layers;
  shape.num_kv_heads = config.num_kv_heads / std::max(1, tp_size);
  shape.head_dim = config.head_dim;
  shape.block_size = block_size;
  shape.dtype = dtype;
  return shape;
}

// KV bytes a block of `block_size` tokens takes on this rank: the model's and, with a
// draft model, the draft's (its pool has the same blocks).
int64_t PoolBytesPerBlock(const ModelConfig& config, const WorkerServiceOptions& options,
                          int32_t block_size) {
  const KvLayerGroups groups = PoolLayerGroups(config, options);
  int64_t bytes = KvBytesPerBlock(
      ShapeFor(config, options.tp_size, options.kv_dtype, block_size, &groups));
  if (options.draft_weights != nullptr) {
    bytes += KvBytesPerBlock(ShapeFor(options.draft_weights->config, 1, options.kv_dtype,
                                      block_size));
  }
  return bytes;
}

// `pool`: the thread pool to share (a draft model runs on its target's); null: its own.
// `window_groups`: CpuModelRunnerOptions::window_layer_groups.
absl::StatusOr<RunnerResources> MakeCpuRunner(
    const ModelWeights& weights, const RunnerRequest& request,
    const WorkerServiceOptions& service, bool window_groups,
    std::shared_ptr<kernels::ThreadPool> pool = nullptr) {
  CpuModelRunnerOptions options;
  options.window_layer_groups = window_groups;
  options.pool = std::move(pool);
  options.bf16_gemm = service.bf16_gemm;
  options.onednn_min_rows = service.onednn_min_rows;
  options.dequant_min_rows = service.dequant_min_rows;
  options.communicator = request.communicator;
  options.block_size = request.block_size;
  options.kv_dtype = request.kv_dtype;
  options.kv_cache_bytes = request.kv_cache_bytes;
  options.max_num_blocks = request.num_blocks;
  options.num_threads = request.num_threads;
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> runner = CpuModelRunner::Create(weights, options);
  if (!runner.ok()) return runner.status();
  RunnerResources r;
  r.kv_cache_bytes = (*runner)->kv_cache().size_bytes();
  r.weight_bytes = (*runner)->weight_bytes();
  r.layer_weight_bytes = (*runner)->layer_weight_bytes();
  r.runner = *std::move(runner);
  return r;
}

pb::WorkerInfo MakeStaticInfo(const ModelWeights& weights, const WorkerServiceOptions& options,
                              int64_t kv_bytes_per_token) {
  pb::WorkerInfo info;
  info.set_incarnation_id(NewIncarnationId());
  const ModelConfig& c = weights.config;
  pb::ModelSpec* model = info.mutable_model();
  model->set_name(c.name);
  model->set_architecture(c.architecture);
  model->set_vocab_size(c.vocab_size);
  model->set_dim(c.dim);
  model->set_hidden_dim(c.hidden_dim);
  model->set_num_layers(c.num_layers);
  model->set_num_heads(c.num_heads);
  model->set_num_kv_heads(c.num_kv_heads);
  model->set_head_dim(c.head_dim);
  model->set_max_seq_len(c.max_seq_len);
  model->set_stored_type(c.stored_type);

  *info.mutable_tokenizer() = TokenizerSpecFromVocab(weights.vocab);

  info.set_kv_bytes_per_token(kv_bytes_per_token);
  info.set_kv_cache_budget_bytes(options.kv_cache_budget_bytes);
  info.set_kv_dtype(kernels::KvDTypeName(options.kv_dtype));
  info.set_tp_rank(options.tp_rank);
  info.set_tp_size(options.tp_size);
  info.set_verifies_drafts(!options.make_runner);  // the CPU backend's CpuModelRunner
  if (options.draft_weights != nullptr) {
    info.set_draft_model(DraftModelIdentity(*options.draft_weights));
  }
  info.set_kv_host_bytes(options.kv_host_bytes);
  for (int32_t w : PoolLayerGroups(c, options).windows) info.add_kv_windows(w);
  info.set_num_kv_heads(c.num_kv_heads / std::max(1, options.tp_size));
  return info;
}

// "request ids [a, b]" for log lines about a step.
std::string DescribeRequests(const pb::ExecuteStepRequest& request) {
  std::vector<std::string> ids;
  for (const pb::StepSequence& s : request.sequences()) {
    ids.push_back(absl::StrCat(s.request_id().empty() ? "-" : s.request_id(), "/seq ",
                               s.seq_id()));
  }
  return absl::StrCat("requests [", absl::StrJoin(ids, ", "), "]");
}

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  const absl::string_view input = absl::StripAsciiWhitespace(text);
  size_t split = 0;
  while (split < input.size() &&
         (absl::ascii_isdigit(static_cast<unsigned char>(input[split])) || input[split] == '.')) {
    ++split;
  }
  const absl::string_view number = input.substr(0, split);
  const std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(input.substr(split)));
  const auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot parse byte size \"", text,
        "\": expected a number of bytes, optionally with a unit (B, KB, MB, GB, TB, KiB, "
        "MiB, GiB, TiB), e.g. 512MiB or 2GiB"));
  };
  if (number.empty()) return bad();
  double multiplier = 0;
  if (unit.empty() || unit == "b") {
    multiplier = 1;
  } else if (unit == "kb") {
    multiplier = 1e3;
  } else if (unit == "mb") {
    multiplier = 1e6;
  } else if (unit == "gb") {
    multiplier = 1e9;
  } else if (unit == "tb") {
    multiplier = 1e12;
  } else if (unit == "kib") {
    multiplier = 0x1p10;
  } else if (unit == "mib") {
    multiplier = 0x1p20;
  } else if (unit == "gib") {
    multiplier = 0x1p30;
  } else if (unit == "tib") {
    multiplier = 0x1p40;
  } else {
    return bad();
  }
  if (number.find('.') == absl::string_view::npos) {
    // Integers stay exact (a double loses bytes above 2^53).
    uint64_t n = 0;
    if (!absl::SimpleAtoi(number, &n)) return bad();
    const uint64_t m = static_cast<uint64_t>(multiplier);
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / m) return bad();
    return static_cast<int64_t>(n * m);
  }
  double value = 0;
  if (!absl::SimpleAtod(number, &value) || !std::isfinite(value)) return bad();
  const double bytes = std::floor(value * multiplier);
  if (bytes >= 0x1p63) return bad();
  return static_cast<int64_t>(bytes);
}

// ------------------------------------------------------------------------ StepThread

WorkerService::StepThread::StepThread() : thread_([this] { Loop(); }) {}

WorkerService::StepThread::~StepThread() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void WorkerService::StepThread::Post(absl::AnyInvocable<void()> task) {
  absl::MutexLock lock(&mu_);
  CHECK(!stopping_) << "a task was posted to a stopped step thread";
  tasks_.push_back(std::move(task));
}

void WorkerService::StepThread::Loop() {
  while (true) {
    absl::AnyInvocable<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](StepThread* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
            return t->stopping_ || !t->tasks_.empty();
          },
          this));
      // Queued tasks still run after a stop: each one owes its reactor a Finish.
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

// --------------------------------------------------------------------------- Metrics

WorkerService::Metrics::Metrics(MetricsRegistry* r)
    : step_duration(r->AddHistogram("folio_worker_step_duration_seconds",
                                    "Time to run one ExecuteStep on the model, in seconds.",
                                    ExponentialBuckets(1e-4, 2, 18))),
      step_gap(r->AddHistogram(
          "folio_worker_step_gap_seconds",
          "Time the model sat idle between the end of one step and the start of the next "
          "(the step protocol's share while busy; idle periods land in the top buckets).",
          ExponentialBuckets(1e-5, 2, 24))),
      step_tokens(r->AddHistogram("folio_worker_step_tokens",
                                  "Tokens computed per step (prefill and decode together).",
                                  ExponentialBuckets(1, 2, 14))),
      step_sequences(r->AddHistogram("folio_worker_step_sequences",
                                     "Sequences per step (batch size).",
                                     ExponentialBuckets(1, 2, 10))),
      steps(r->AddCounter("folio_worker_steps_total", "Steps executed successfully.")),
      tokens(r->AddCounter("folio_worker_tokens_total",
                           "Tokens computed (their K/V written) by successful steps.")),
      sampled_tokens(r->AddCounter("folio_worker_sampled_tokens_total",
                                   "Tokens sampled by successful steps.")),
      step_errors(r->AddCounterFamily("folio_worker_step_errors_total",
                                      "ExecuteStep calls that failed, by gRPC status code.",
                                      {"code"})),
      kv_cache_bytes(r->AddGauge("folio_worker_kv_cache_bytes",
                                 "Bytes of the allocated KV pool (0 before AllocateKvCache).")),
      kv_cache_blocks(r->AddGauge("folio_worker_kv_cache_blocks",
                                  "Blocks in the allocated KV pool (0 before AllocateKvCache).")),
      kv_block_size(r->AddGauge("folio_worker_kv_cache_block_size_tokens",
                                "Tokens per KV block (0 before AllocateKvCache).")),
      weight_bytes(r->AddGauge("folio_worker_weight_bytes",
                               "Bytes of model weights this rank holds (its tensor-parallel "
                               "shard; 0 before AllocateKvCache).")),
      resident_bytes(r->AddGauge("folio_worker_resident_bytes",
                                 "This worker's resident memory (VmRSS, mapped model pages "
                                 "included), read at KV allocation and every 64 steps.")),
      resident_peak_bytes(r->AddGauge("folio_worker_resident_peak_bytes",
                                      "This worker's peak resident memory so far (VmHWM: "
                                      "the weights' load included), read with "
                                      "folio_worker_resident_bytes.")),
      resident_limit_bytes(r->AddGauge(
          "folio_worker_resident_limit_bytes",
          "The bound on folio_worker_resident_bytes: model file + KV pool + max(10% of the "
          "file, 256 MiB); 0 before AllocateKvCache.")),
      model_file_bytes(r->AddGauge("folio_worker_model_file_bytes",
                                   "Bytes of the model file this worker maps.")),
      collectives(r->AddCounterFamily("folio_worker_collectives_total",
                                      "Tensor-parallel collectives this rank issued, by "
                                      "operation (all_reduce, gather).",
                                      {"op"})),
      host_bytes(r->AddGauge("folio_worker_kv_host_bytes",
                             "Bytes of the host-memory KV tier's shared-memory segment on this "
                             "rank (0: no tier).")),
      host_transfers(r->AddCounterFamily("folio_worker_kv_host_transfers_total",
                                         "KV blocks copied between the pool and the host-memory "
                                         "tier, by direction (store: pool to host; load: host "
                                         "to pool).",
                                         {"direction"})),
      disk_blocks(r->AddGauge("folio_worker_kv_disk_blocks",
                              "Block files the disk KV tier's budget holds on this rank (0: "
                              "no tier).")),
      disk_files(r->AddCounterFamily("folio_worker_kv_disk_files_total",
                                     "Disk KV tier block files this rank handled, by outcome "
                                     "(spill: written; load: read back; spill_failed: a "
                                     "write failed, and writes stopped; spill_skipped: not "
                                     "written after that; load_failed: missing, damaged or "
                                     "foreign at a load, the step refused).",
                                     {"outcome"})),
      disk_bytes(r->AddCounterFamily("folio_worker_kv_disk_bytes_total",
                                     "Bytes of disk KV tier block files this rank wrote and "
                                     "read, by direction (written, read).",
                                     {"direction"})),
      disk_load_seconds(r->AddCounter("folio_worker_kv_disk_load_seconds_total",
                                      "Seconds this rank spent reading and checking disk KV "
                                      "tier block files.")) {}

// --------------------------------------------------------------------- WorkerService

WorkerService::WorkerService(std::unique_ptr<ModelWeights> weights,
                             const WorkerServiceOptions& options, MetricsRegistry* registry)
    : weights_(std::move(weights)),
      options_(options),
      kv_bytes_per_token_(PoolBytesPerBlock(weights_->config, options, 1)),
      static_info_(MakeStaticInfo(*weights_, options_, kv_bytes_per_token_)),
      metrics_(registry),
      fence_(absl::StrCat("worker rank ", options.tp_rank)),
      communicator_status_(options.tp_size > 1
                               ? absl::FailedPreconditionError(
                                     "this tensor-parallel rank has not joined a group yet "
                                     "(the scheduler sends JoinGroup at set-up)")
                               : absl::OkStatus()) {
  LOG(INFO) << "worker rank " << options_.tp_rank << " incarnation "
            << static_info_.incarnation_id();
}

WorkerService::~WorkerService() = default;

void WorkerService::SetGroupConnector(ConnectFn connect) { connect_ = std::move(connect); }

void WorkerService::SetGroupInfo(int64_t generation, const absl::Status& status) {
  absl::MutexLock lock(&info_mu_);
  if (generation != group_.generation()) group_.clear_last_step_id();
  group_.set_generation(generation);
  group_.set_joined(status.ok());
  group_.set_error(std::string(status.message()));
}

void WorkerService::DropRunner() {
  const bool had_pool = runner_ != nullptr;
  runner_.reset();
  {
    absl::MutexLock lock(&info_mu_);
    num_blocks_ = 0;
    block_size_ = 0;
    weight_bytes_ = 0;
    layer_weight_bytes_ = 0;
  }
  metrics_.kv_cache_bytes.Set(0);
  metrics_.kv_cache_blocks.Set(0);
  metrics_.kv_block_size.Set(0);
  if (had_pool && serving_callback_) serving_callback_(ServingState::kNotServing);
}

absl::Status WorkerService::Join(int64_t generation, absl::Time deadline) {
  if (generation <= group_generation_) {
    return absl::FailedPreconditionError(
        absl::StrCat("JoinGroup: generation ", generation, " is not newer than generation ",
                     group_generation_, ", which this rank took already"));
  }
  if (!connect_) {
    return absl::FailedPreconditionError("JoinGroup: this worker has no group connector");
  }
  group_generation_ = generation;
  // The runner uses the communicator: it goes first.
  DropRunner();
  communicator_.reset();
  reported_counts_ = {};
  communicator_status_ = absl::FailedPreconditionError(
      absl::StrCat("joining the group of generation ", generation));
  SetGroupInfo(generation, communicator_status_);
  const absl::Duration timeout = deadline - absl::Now();
  if (timeout <= absl::ZeroDuration()) {
    communicator_status_ = absl::DeadlineExceededError(absl::StrCat(
        "JoinGroup (generation ", generation, "): the call's deadline passed before it ran"));
    SetGroupInfo(generation, communicator_status_);
    return communicator_status_;
  }
  LOG(INFO) << "tensor-parallel rank " << options_.tp_rank << " of " << options_.tp_size
            << ": joining the group of generation " << generation;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = connect_(generation, timeout);
  if (!comm.ok()) {
    communicator_status_ = comm.status();
    SetGroupInfo(generation, communicator_status_);
    LOG(ERROR) << "tensor-parallel rank " << options_.tp_rank << " could not join generation "
               << generation << ": " << comm.status();
    return comm.status();
  }
  communicator_ = *std::move(comm);
  communicator_status_ = absl::OkStatus();
  SetGroupInfo(generation, absl::OkStatus());
  LOG(INFO) << "tensor-parallel rank " << options_.tp_rank << " of " << options_.tp_size
            << " joined the group of generation " << generation;
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* WorkerService::JoinGroup(grpc::CallbackServerContext* ctx,
                                                   const pb::JoinGroupRequest* request,
                                                   pb::JoinGroupResponse* response) {
  if (options_.tp_size <= 1) {
    return Finish(ctx, absl::FailedPreconditionError(
                           "JoinGroup: this worker is not a tensor-parallel rank (--tp_size=1)"));
  }
  const int64_t generation = request->generation();
  if (generation <= 0) {
    return Finish(ctx, absl::InvalidArgumentError(absl::StrCat(
                           "JoinGroup: generation must be positive, got ", generation)));
  }
  const absl::Time deadline = ctx->deadline() == std::chrono::system_clock::time_point::max()
                                  ? absl::InfiniteFuture()
                                  : absl::FromChrono(ctx->deadline());
  const uint64_t epoch = request->scheduler_epoch();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // Fenced on the step thread, in order with AllocateKvCache and steps; a refused call
  // leaves the group (and the runner) as they were.
  step_thread_.Post([this, reactor, generation, deadline, epoch] {
    if (absl::Status fenced = fence_.Admit(epoch, "JoinGroup"); !fenced.ok()) {
      LOG(WARNING) << fenced;
      reactor->Finish(ToGrpcStatus(fenced));
      return;
    }
    reactor->Finish(ToGrpcStatus(Join(generation, deadline)));
  });
  return reactor;
}

void WorkerService::SetServingCallback(std::function<void(ServingState)> callback) {
  serving_callback_ = std::move(callback);
}

KvLayerGroups PoolLayerGroups(const ModelConfig& config, const WorkerServiceOptions& options) {
  return UsesWindowGroups(options) ? WindowLayerGroups(config)
                                   : DenseLayerGroups(config.num_layers);
}

std::string DraftModelIdentity(const ModelWeights& draft) {
  const ModelConfig& d = draft.config;
  return absl::StrCat(d.name.empty() ? "unnamed draft model" : d.name, " (", d.num_layers,
                      " layers, dim ", d.dim, ", context ", d.max_seq_len, ", ",
                      draft.file_bytes(), " bytes)");
}

grpc::ServerUnaryReactor* WorkerService::GetWorkerInfo(grpc::CallbackServerContext* ctx,
                                                       const pb::GetWorkerInfoRequest* request,
                                                       pb::WorkerInfo* response) {
  *response = static_info_;
  absl::MutexLock lock(&info_mu_);
  response->set_num_blocks(num_blocks_);
  response->set_block_size(block_size_);
  response->set_weight_bytes(weight_bytes_);
  response->set_layer_weight_bytes(layer_weight_bytes_);
  response->set_kv_host_blocks(host_blocks_);
  response->set_kv_host_segment_id(host_segment_id_);
  response->set_kv_disk_dir(disk_dir_);
  response->set_kv_disk_blocks(disk_blocks_);
  response->set_scheduler_epoch(fence_.current());
  if (options_.tp_size > 1) *response->mutable_group() = group_;
  return Finish(ctx, absl::OkStatus());
}

absl::Status WorkerService::CheckAllocation(int32_t num_blocks, int32_t block_size) const {
  const int32_t max_seq_len = weights_->config.max_seq_len;
  if (block_size <= 0 || block_size > max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("block_size must be in [1, ", max_seq_len,
                                                   "] (the model's context), got ", block_size));
  }
  if (num_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_blocks must be positive, got ", num_blocks));
  }
  const int64_t bytes_per_block = PoolBytesPerBlock(weights_->config, options_, block_size);
  const int64_t bytes = int64_t{num_blocks} * bytes_per_block;
  if (bytes > options_.kv_cache_budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        num_blocks, " blocks of ", block_size, " tokens need ", bytes, " bytes (",
        bytes_per_block, " per block, ", kernels::KvDTypeName(options_.kv_dtype),
        "), but this worker's KV budget is ", options_.kv_cache_budget_bytes,
        " bytes, which holds at most ", options_.kv_cache_budget_bytes / bytes_per_block,
        " such blocks"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> WorkerService::Allocate(int32_t num_blocks, int32_t block_size) {
  // Release the old pool first: the budget is sized for one pool, not two.
  DropRunner();
  if (options_.tp_size > 1 && communicator_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot build tensor-parallel rank ", options_.tp_rank, " of ", options_.tp_size,
        " without its group: ", communicator_status_.message()));
  }
  RunnerRequest request;
  request.num_blocks = num_blocks;
  request.block_size = block_size;
  const KvLayerGroups groups = PoolLayerGroups(weights_->config, options_);
  const int64_t bytes_per_block = KvBytesPerBlock(
      ShapeFor(weights_->config, options_.tp_size, options_.kv_dtype, block_size, &groups));
  request.kv_cache_bytes = int64_t{num_blocks} * bytes_per_block;
  request.kv_dtype = options_.kv_dtype;
  request.num_threads = options_.num_threads;
  request.communicator = communicator_.get();
  absl::StatusOr<RunnerResources> runner = options_.make_runner
                                               ? options_.make_runner(*weights_, request)
                                               : MakeCpuRunner(*weights_, request, options_,
                                                               UsesWindowGroups(options_));
  if (!runner.ok()) return runner.status();
  CHECK_EQ(runner->runner->num_blocks(), num_blocks) << "the pool is sized to the request";
  if (options_.draft_weights != nullptr) {
    if (absl::Status s = AddDraftModel(&*runner, request); !s.ok()) return s;
  }
  const int64_t bytes = runner->kv_cache_bytes;
  const int64_t weight_bytes = runner->weight_bytes;
  const int64_t layer_weight_bytes = runner->layer_weight_bytes;
  runner_ = std::move(runner->runner);
  if (absl::Status s = AttachOffloadTiers(bytes_per_block, block_size); !s.ok()) {
    runner_.reset();
    return s;
  }
  {
    absl::MutexLock lock(&info_mu_);
    num_blocks_ = num_blocks;
    block_size_ = block_size;
    host_blocks_ = host_ == nullptr ? 0 : host_->num_slots();
    host_segment_id_ = host_ == nullptr ? "" : host_->id();
    disk_dir_ = disk_ == nullptr ? "" : disk_->dir();
    disk_blocks_ = disk_ == nullptr ? 0 : disk_->num_blocks();
    weight_bytes_ = weight_bytes;
    layer_weight_bytes_ = layer_weight_bytes;
  }
  metrics_.weight_bytes.Set(static_cast<double>(weight_bytes));
  metrics_.kv_cache_bytes.Set(static_cast<double>(bytes));
  metrics_.kv_cache_blocks.Set(num_blocks);
  metrics_.kv_block_size.Set(block_size);
  LOG(INFO) << "KV cache allocated: " << num_blocks << " blocks of " << block_size
            << " tokens, " << bytes << " bytes (" << kernels::KvDTypeName(options_.kv_dtype)
            << ")";
  resident_bound_ = ResidentBound{
      weights_->file_bytes() +
          (options_.draft_weights == nullptr ? 0 : options_.draft_weights->file_bytes()),
      bytes};
  metrics_.model_file_bytes.Set(static_cast<double>(resident_bound_.file_bytes));
  metrics_.resident_limit_bytes.Set(static_cast<double>(resident_bound_.limit_bytes()));
  UpdateResident(/*log=*/true);
  if (serving_callback_) serving_callback_(ServingState::kServing);
  return bytes;
}

absl::Status WorkerService::AddDraftModel(RunnerResources* target, const RunnerRequest& request) {
  const ModelWeights& draft = *options_.draft_weights;
  RunnerRequest d = request;
  d.communicator = nullptr;
  d.kv_cache_bytes = int64_t{request.num_blocks} *
                     KvBytesPerBlock(ShapeFor(draft.config, 1, request.kv_dtype, request.block_size));
  // The CPU backend (the worker refuses a draft model on another): one pool for both.
  auto* cpu = dynamic_cast<CpuModelRunner*>(target->runner.get());
  absl::StatusOr<RunnerResources> runner =
      MakeCpuRunner(draft, d, options_, /*window_groups=*/false,
                    cpu == nullptr ? nullptr : cpu->thread_pool());
  if (!runner.ok()) {
    return absl::Status(runner.status().code(),
                        absl::StrCat("draft model: ", runner.status().message()));
  }
  absl::StatusOr<std::unique_ptr<DraftingRunner>> drafting =
      DraftingRunner::Create(std::move(target->runner), std::move(runner->runner),
                             request.communicator);
  if (!drafting.ok()) return drafting.status();
  target->runner = *std::move(drafting);
  target->kv_cache_bytes += runner->kv_cache_bytes;
  target->weight_bytes += runner->weight_bytes;
  target->layer_weight_bytes += runner->layer_weight_bytes;
  LOG(INFO) << "draft model " << draft.config.name << ": " << draft.config.num_layers
            << " layers, dim " << draft.config.dim << ", KV " << runner->kv_cache_bytes
            << " bytes beside the model's";
  return absl::OkStatus();
}

void WorkerService::UpdateResident(bool log) {
  steps_since_resident_ = 0;
  absl::StatusOr<ResidentMemory> m = ReadResidentMemory();
  if (!m.ok()) {
    if (log) LOG(WARNING) << "resident memory: " << m.status();
    return;
  }
  metrics_.resident_bytes.Set(static_cast<double>(m->rss_bytes));
  metrics_.resident_peak_bytes.Set(static_cast<double>(m->peak_bytes));
  if (log) LOG(INFO) << "resident memory: " << DescribeResident(*m, resident_bound_);
}

grpc::ServerUnaryReactor* WorkerService::AllocateKvCache(grpc::CallbackServerContext* ctx,
                                                         const pb::AllocateKvCacheRequest* request,
                                                         pb::AllocateKvCacheResponse* response) {
  const int32_t num_blocks = request->num_blocks();
  const int32_t block_size = request->block_size();
  if (absl::Status s = CheckAllocation(num_blocks, block_size); !s.ok()) {
    LOG(WARNING) << "AllocateKvCache rejected: " << s;
    return Finish(ctx, s);
  }
  // Allocation zeroes the pool (and converts the weights): the step thread does it, in
  // order with the steps.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const uint64_t epoch = request->scheduler_epoch();
  step_thread_.Post([this, reactor, num_blocks, block_size, epoch, response] {
    if (absl::Status fenced = fence_.Admit(epoch, "AllocateKvCache"); !fenced.ok()) {
      LOG(WARNING) << fenced;
      reactor->Finish(ToGrpcStatus(fenced));
      return;
    }
    absl::StatusOr<int64_t> bytes = Allocate(num_blocks, block_size);
    if (bytes.ok()) {
      response->set_kv_cache_bytes(*bytes);
      if (host_ != nullptr) {
        response->set_kv_host_blocks(host_->num_slots());
        response->set_kv_host_segment_id(host_->id());
      }
      if (disk_ != nullptr) {
        response->set_kv_disk_dir(disk_->dir());
        response->set_kv_disk_blocks(disk_->num_blocks());
      }
    } else {
      LOG(ERROR) << "AllocateKvCache(" << num_blocks << " blocks of " << block_size
                 << ") failed: " << bytes.status();
    }
    reactor->Finish(ToGrpcStatus(bytes.status()));
  });
  return reactor;
}

absl::Status WorkerService::RunStep(const pb::ExecuteStepRequest& request,
                                    pb::ExecuteStepResponse* response) {
  if (absl::Status fenced = fence_.Admit(request.scheduler_epoch(), "ExecuteStep");
      !fenced.ok()) {
    return fenced;
  }
  if (runner_ == nullptr) {
    return absl::FailedPreconditionError(
        "the KV cache is not allocated yet; call AllocateKvCache first");
  }
  absl::StatusOr<NativeStep> step = StepFromProto(request);
  if (!step.ok()) return step.status();
  const absl::Time start = absl::Now();
  if (last_step_end_ != absl::InfinitePast()) {
    metrics_.step_gap.Observe(absl::ToDoubleSeconds(start - last_step_end_));
  }
  if (!step->input.host_transfers.empty() && host_ == nullptr) {
    // Every backend, not only those that check: a load that did not run leaves a block the
    // cache manager counts as cached holding nothing.
    return absl::FailedPreconditionError(
        "the step carries host KV transfers, but this worker has no host tier "
        "(--kv_host_bytes)");
  }
  absl::StatusOr<StepOutput> output = runner_->Execute(step->input);
  last_step_end_ = absl::Now();
  if (output.ok() && !step->input.host_transfers.empty()) {
    int64_t stores = 0;
    int64_t loads = 0;
    for (const HostTransfer& t : step->input.host_transfers) {
      stores += t.kind == HostTransfer::Kind::kStore ? 1 : 0;
      loads += t.kind == HostTransfer::Kind::kLoad ? 1 : 0;
    }
    metrics_.host_transfers.WithLabels({"store"}).Increment(static_cast<double>(stores));
    metrics_.host_transfers.WithLabels({"load"}).Increment(static_cast<double>(loads));
  }
  if (disk_ != nullptr) ReportDisk();
  const double seconds = absl::ToDoubleSeconds(last_step_end_ - start);
  if (communicator_ != nullptr) {
    const CollectiveCounts counts = communicator_->counts();
    metrics_.collectives.WithLabels({"all_reduce"})
        .Increment(static_cast<double>(counts.all_reduces - reported_counts_.all_reduces));
    metrics_.collectives.WithLabels({"gather"})
        .Increment(static_cast<double>(counts.gathers - reported_counts_.gathers));
    reported_counts_ = counts;
    if (absl::Status broken = communicator_->broken(); !broken.ok()) {
      SetGroupInfo(group_generation_, broken);
    }
  }
  if (!output.ok()) return output.status();
  StepToProto(*output, *step, response);
  response->set_compute_seconds(seconds);

  int64_t num_tokens = 0;
  int64_t num_sampled = 0;
  for (const pb::StepSequence& s : request.sequences()) num_tokens += s.token_ids_size();
  for (const pb::SequenceOutput& o : response->outputs()) num_sampled += o.samples_size();
  metrics_.step_duration.Observe(seconds);
  metrics_.step_tokens.Observe(static_cast<double>(num_tokens));
  metrics_.step_sequences.Observe(request.sequences_size());
  metrics_.steps.Increment();
  if (++steps_since_resident_ >= 64) UpdateResident(/*log=*/false);
  metrics_.tokens.Increment(static_cast<double>(num_tokens));
  metrics_.sampled_tokens.Increment(static_cast<double>(num_sampled));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* WorkerService::ExecuteStep(grpc::CallbackServerContext* ctx,
                                                     const pb::ExecuteStepRequest* request,
                                                     pb::ExecuteStepResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  step_thread_.Post([this, ctx, reactor, request, response] {
    // A step whose caller gave up before it started is not run: nothing is written, and
    // the scheduler (which sees CANCELLED or DEADLINE_EXCEEDED) owns the retry. A rank of
    // a tensor-parallel group runs it anyway: its peers may have, and skipping it would
    // pair their next collectives with this rank's next step.
    if (options_.tp_size > 1 && communicator_ != nullptr) {
      absl::MutexLock lock(&info_mu_);
      group_.set_last_step_id(request->step_id());
    }
    absl::Status status = ctx->IsCancelled() && options_.tp_size == 1
                              ? absl::CancelledError("the step was cancelled before it ran")
                              : RunStep(*request, response);
    if (!status.ok()) {
      metrics_.step_errors.WithLabels({absl::StatusCodeToString(status.code())}).Increment();
      LOG(WARNING) << "step " << request->step_id() << " failed (" << DescribeRequests(*request)
                   << "): " << status;
      response->Clear();
    }
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

}  // namespace folio::worker
