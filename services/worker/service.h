// WorkerService: the gRPC face of one worker rank (folio.internal.v1.Worker). It maps
// protobuf messages onto the engine's native step types (engine/step.h) and back, maps
// Status to gRPC codes, and keeps the worker's metrics. The model math lives in the
// engine (engine/model_runner.h); nothing here computes.
//
// Life cycle, as the scheduler drives it:
//   1. main() loads the model and builds the service; GetWorkerInfo answers at once
//      (shape, tokenizer, KV bytes per token, the KV byte budget).
//   2. AllocateKvCache(num_blocks, block_size) builds the model runner with a pool of
//      exactly num_blocks blocks; the serving callback then reports SERVING. It may be
//      called again to re-allocate (the old pool is released first; a failed
//      re-allocation leaves no pool and reports NOT_SERVING).
//   3. ExecuteStep runs one batch on the runner.
//
// Tensor parallelism (tp_size > 1): a rank joins no group at start-up. JoinGroup(g), which
// the scheduler sends to every rank at once (at set-up, and again when a rank came back as
// a new process or the group broke), drops the rank's runner and old communicator on the
// step thread and joins the group of generation g through the connector given to
// SetGroupConnector; AllocateKvCache then builds a runner over it, holding only this rank's
// shard and KV heads. GetWorkerInfo reports the group (generation, joined or why not) and
// answers while a join blocks. Every rank must run the same steps in the same order, so a
// rank of a group runs a step even when its caller has given up (a single rank skips it):
// the scheduler sends each step to every rank.
//
// Threading: the model runner is owned by one step thread, which runs allocations and
// steps in arrival order and finishes their reactors; gRPC callback threads only parse,
// post and return, so they never block on the model. GetWorkerInfo answers on the
// callback thread from immutable data plus a mutex-guarded pool shape. Thread-safe.
// The service owns the loaded weights for its whole life, so the pool can be rebuilt.
#ifndef FOLIO_SERVICES_WORKER_SERVICE_H_
#define FOLIO_SERVICES_WORKER_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "common/scheduler_epoch.h"
#include "common/service_runner.h"
#include "folio/internal/v1/worker.grpc.pb.h"
#include "services/worker/dist/communicator.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/kv_layer_groups.h"
#include "services/worker/engine/model_runner.h"
#include "services/worker/resident_memory.h"
#include "services/worker/step_proto.h"
#include "services/worker/engine/runner_factory.h"
#include "services/worker/engine/step.h"
#include "services/worker/kernels/kv_cache_view.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

struct WorkerServiceOptions {
  RunnerFactory make_runner;                            // empty: the CPU backend
  kernels::KvDType kv_dtype = kernels::KvDType::kF16;  // KV cache element type
  int64_t kv_cache_budget_bytes = int64_t{256} << 20;   // most bytes the KV pool may take
  int32_t num_threads = 0;                              // kernels and OpenBLAS; 0 = all cores
  int32_t tp_rank = 0;                                  // this rank (tensor parallelism)
  int32_t tp_size = 1;                                  // ranks in the replica
  // The CPU backend's BF16 projections at >= onednn_min_rows rows (--bf16_gemm,
  // --onednn_min_rows) and quantized ones at >= dequant_min_rows rows
  // (--dequant_gemm_min_rows): CpuModelRunnerOptions' fields of the same names.
  Bf16Gemm bf16_gemm = Bf16Gemm::kFolio;
  int32_t onednn_min_rows = kDefaultOnednnMinRows;
  int32_t dequant_min_rows = 0;
  // The KV offload tier in host memory (host_kv_segment.h): its byte budget (0: none) and
  // the shared-memory segment's name (/dev/shm/<name>), which must stay the same across
  // restarts of this rank for the tier to outlive them. CPU backend only.
  int64_t kv_host_bytes = 0;
  std::string kv_host_name;
  // The KV offload tier on disk below it (kv_disk_store.h): the root directory (empty:
  // none) and this rank's byte budget; needs the host tier. model_content_identity names
  // the model by its content (ModelContentIdentity), for the files' namespace.
  std::string kv_disk_dir;
  int64_t kv_disk_bytes = 0;
  std::string model_content_identity;
  // What names the model file beyond its contents' shape (its path, size, inode and
  // modification time): part of the segment's fingerprint, so that another file with the
  // same name and size never reads this one's blocks.
  std::string model_identity;
  // Speculative decoding's draft model (--draft_model, drafting_runner.h): its weights, or
  // null for none. CPU backend, one rank. Its KV pool has the model's block ids, and its
  // bytes per token count in kv_bytes_per_token and the budget.
  std::shared_ptr<const ModelWeights> draft_weights;
  // Sliding-window layers in window layer groups of their own (engine/kv_layer_groups.h),
  // so the cache manager gives their old blocks back (--window_layer_groups). Taken only
  // on the CPU backend without a host tier (the offload tiers hold whole blocks of every
  // layer) or a draft model (its dense pool shares the block ids: every window block
  // would hold the draft's bytes too); a model without both local and full-attention
  // layers has one group anyway.
  bool window_layer_groups = true;
};

// The layer groups the worker's pool keeps for `config` under `options` (see
// WorkerServiceOptions::window_layer_groups).
KvLayerGroups PoolLayerGroups(const ModelConfig& config, const WorkerServiceOptions& options);

// Parses a byte count: a non-negative integer ("268435456") or a number with a unit,
// binary (KiB, MiB, GiB, TiB: powers of 1024) or decimal (B, KB, MB, GB, TB: powers of
// 1000), case-insensitive, optionally with a space ("512MiB", "2 GiB", "1.5GB").
// Fractions of a byte are dropped. InvalidArgument for anything else or an overflow.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// What tells two draft models apart (the ranks of a group must draft alike, and a host
// KV segment holds one draft's KV): its name, shape and file size.
std::string DraftModelIdentity(const ModelWeights& draft);

class WorkerService final : public folio::internal::v1::Worker::CallbackService {
 public:
  // `weights` is the loaded model (owned). `registry` must outlive the service.
  WorkerService(std::unique_ptr<ModelWeights> weights, const WorkerServiceOptions& options,
                MetricsRegistry* registry);
  // Runs whatever is still queued (finishing every reactor), then stops the step thread.
  ~WorkerService() override;

  WorkerService(const WorkerService&) = delete;
  WorkerService& operator=(const WorkerService&) = delete;

  // Called on the step thread after each allocation: kServing once a pool exists,
  // kNotServing if a re-allocation failed. Set it before the server starts.
  void SetServingCallback(std::function<void(ServingState)> callback);

  // The gRPC port the server bound: the host tier's segment is named after it when
  // options.kv_host_name is empty. Call once the server listens (before any allocation).
  void SetListenPort(int port) { listen_port_.store(port); }

  // K and V bytes one token takes in every layer on this rank, for options.kv_dtype (the
  // draft model's included).
  int64_t kv_bytes_per_token() const { return kv_bytes_per_token_; }

  // tp_size > 1 only: how this rank joins the group of `generation` (rendezvous keys of
  // that generation only), blocking at most `timeout` until every rank has joined. Run on
  // the step thread by JoinGroup. Set it before the server starts.
  using ConnectFn = absl::AnyInvocable<absl::StatusOr<std::unique_ptr<Communicator>>(
      int64_t generation, absl::Duration timeout)>;
  void SetGroupConnector(ConnectFn connect);

  grpc::ServerUnaryReactor* GetWorkerInfo(
      grpc::CallbackServerContext* ctx, const folio::internal::v1::GetWorkerInfoRequest* request,
      folio::internal::v1::WorkerInfo* response) override;
  grpc::ServerUnaryReactor* AllocateKvCache(
      grpc::CallbackServerContext* ctx,
      const folio::internal::v1::AllocateKvCacheRequest* request,
      folio::internal::v1::AllocateKvCacheResponse* response) override;
  grpc::ServerUnaryReactor* ExecuteStep(grpc::CallbackServerContext* ctx,
                                        const folio::internal::v1::ExecuteStepRequest* request,
                                        folio::internal::v1::ExecuteStepResponse* response) override;
  // tp_size > 1: forms the group again (see above). The join is bounded by the call's
  // deadline. FailedPrecondition on a single rank or for a generation not newer than the
  // last one taken; the connector's error when the join fails (the rank then has no group).
  grpc::ServerUnaryReactor* JoinGroup(grpc::CallbackServerContext* ctx,
                                      const folio::internal::v1::JoinGroupRequest* request,
                                      folio::internal::v1::JoinGroupResponse* response) override;

 private:
  struct Metrics {
    explicit Metrics(MetricsRegistry* registry);
    Histogram& step_duration;
    Histogram& step_gap;
    Histogram& step_tokens;
    Histogram& step_sequences;
    Counter& steps;
    Counter& tokens;
    Counter& sampled_tokens;
    Family<Counter>& step_errors;
    Gauge& kv_cache_bytes;
    Gauge& kv_cache_blocks;
    Gauge& kv_block_size;
    Gauge& weight_bytes;
    Gauge& resident_bytes;
    Gauge& resident_peak_bytes;
    Gauge& resident_limit_bytes;
    Gauge& model_file_bytes;
    Family<Counter>& collectives;
    Gauge& host_bytes;
    Family<Counter>& host_transfers;
    Gauge& disk_blocks;
    Family<Counter>& disk_files;
    Family<Counter>& disk_bytes;
    Counter& disk_load_seconds;
  };

  // Reads VmRSS and VmHWM into the resident gauges; logs it against the bound when `log`.
  void UpdateResident(bool log);
  // --kv_host_bytes (offload_tiers.cc): opens the host segment for the runner's blocks
  // (ModelRunner::host_bytes_per_block: a draft model's KV too), or keeps the one open,
  // and the disk store under it for the model's blocks of `bytes_per_block`, and gives
  // them to the runner. On an error the caller drops the runner.
  absl::Status AttachOffloadTiers(int64_t bytes_per_block, int32_t block_size);
  // --kv_disk_dir: opens the disk store for blocks of this shape (or keeps the one open)
  // and gives it to the runner.
  absl::Status AttachDiskStore(int64_t bytes_per_block, int32_t block_size);
  // Adds what the disk store did since the last call to the metrics (step thread).
  void ReportDisk();

  // A FIFO of tasks run by one thread: the only thread that touches runner_.
  class StepThread {
   public:
    StepThread();
    ~StepThread();  // runs the tasks still queued, then joins
    void Post(absl::AnyInvocable<void()> task);

   private:
    void Loop();
    absl::Mutex mu_;
    std::deque<absl::AnyInvocable<void()>> tasks_ ABSL_GUARDED_BY(mu_);
    bool stopping_ ABSL_GUARDED_BY(mu_) = false;
    std::thread thread_;
  };

  // Step thread only.
  absl::StatusOr<int64_t> Allocate(int32_t num_blocks, int32_t block_size);
  // Wraps the runner just built for `request` with the draft model's (options_.
  // draft_weights), counting its KV and weight bytes in.
  absl::Status AddDraftModel(RunnerResources* target, const RunnerRequest& request);
  absl::Status RunStep(const folio::internal::v1::ExecuteStepRequest& request,
                       folio::internal::v1::ExecuteStepResponse* response);
  absl::Status Join(int64_t generation, absl::Time deadline);
  // Drops the runner: no pool, NOT_SERVING if there was one.
  void DropRunner();
  void SetGroupInfo(int64_t generation, const absl::Status& status);

  // Checks an AllocateKvCache request against the model and the budget.
  absl::Status CheckAllocation(int32_t num_blocks, int32_t block_size) const;

  const std::unique_ptr<ModelWeights> weights_;
  const WorkerServiceOptions options_;
  const int64_t kv_bytes_per_token_;
  std::atomic<int> listen_port_{0};  // SetListenPort
  const folio::internal::v1::WorkerInfo static_info_;  // everything but the pool shape
  Metrics metrics_;
  std::function<void(ServingState)> serving_callback_;

  // The pool shape GetWorkerInfo reports; written by the step thread.
  absl::Mutex info_mu_;
  int32_t num_blocks_ ABSL_GUARDED_BY(info_mu_) = 0;
  int32_t block_size_ ABSL_GUARDED_BY(info_mu_) = 0;
  int64_t weight_bytes_ ABSL_GUARDED_BY(info_mu_) = 0;
  int64_t layer_weight_bytes_ ABSL_GUARDED_BY(info_mu_) = 0;
  int32_t host_blocks_ ABSL_GUARDED_BY(info_mu_) = 0;
  std::string host_segment_id_ ABSL_GUARDED_BY(info_mu_);
  std::string disk_dir_ ABSL_GUARDED_BY(info_mu_);
  int32_t disk_blocks_ ABSL_GUARDED_BY(info_mu_) = 0;
  folio::internal::v1::TensorParallelGroup group_ ABSL_GUARDED_BY(info_mu_);

  // Refuses AllocateKvCache and ExecuteStep from a scheduler older than the newest one
  // seen (common/scheduler_epoch.h); checked on the step thread, in order with the steps.
  EpochFence fence_;

  // Owned by the step thread: created, used and destroyed only by its tasks.
  ConnectFn connect_;                           // tp_size > 1; set before serving
  int64_t group_generation_ = 0;                // the last JoinGroup taken
  std::unique_ptr<Communicator> communicator_;  // tp_size > 1, once joined
  absl::Status communicator_status_;            // why there is none (tp_size > 1)
  CollectiveCounts reported_counts_;            // already added to the metrics
  // --kv_host_bytes, once allocated; the runner points to it, so it is declared first.
  std::unique_ptr<HostKvSegment> host_;
  std::unique_ptr<KvDiskStore> disk_;           // --kv_disk_dir, once allocated
  KvDiskStoreStats reported_disk_;              // step thread: already in the metrics
  std::unique_ptr<ModelRunner> runner_;         // uses communicator_: declared after it
  ResidentBound resident_bound_;                // step thread: set at KV allocation
  int32_t steps_since_resident_ = 0;            // step thread
  absl::Time last_step_end_ = absl::InfinitePast();  // step thread: the last step's end

  // Last member: destroyed first, so queued tasks still see everything above.
  StepThread step_thread_;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_SERVICE_H_
