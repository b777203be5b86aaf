// gRPC implementations of CacheClient and WorkerClient, and the conversions between the
// services' protobuf messages and the native step types. Every call carries a deadline,
// so a service that does not answer fails the step with UNAVAILABLE or
// DEADLINE_EXCEEDED instead of hanging. Restore()'s probes have a short deadline of
// their own (kProbeTimeout), so a recovery wait polls a stopped process quickly.
// Thread-compatible: one thread at a time calls them (the loop thread, or recovery's restore
// thread while no step runs); CancelRestore is thread-safe.
#ifndef FOLIO_SERVICES_SCHEDULER_GRPC_CLIENTS_H_
#define FOLIO_SERVICES_SCHEDULER_GRPC_CLIENTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "folio/internal/v1/cachemgr.grpc.pb.h"
#include "folio/internal/v1/worker.grpc.pb.h"
#include "services/scheduler/clients.h"

namespace folio::scheduler {

// Whether worker rank `rank` (`info`) can serve the scheduler's speculative decoding: it
// verifies proposed tokens when `verification`, and with `draft` it has a draft model, the
// same as rank 0's (`rank0`). Start-up and recovery both ask; `came_back` words the
// refusal for the latter. FAILED_PRECONDITION naming the rank and the remedy.
// Why a rank whose pool keeps the window layer groups `info.kv_windows` cannot serve a
// replica set up with `windows` (every rank's pool, and the cache manager, alike), or OK.
absl::Status CheckLayerGroups(const folio::internal::v1::WorkerInfo& info,
                              const std::vector<int32_t>& windows, int rank, bool came_back);
absl::Status CheckSpeculativeRank(const folio::internal::v1::WorkerInfo& info,
                                  const folio::internal::v1::WorkerInfo& rank0, int rank,
                                  bool verification, bool draft, bool came_back);

class GrpcCacheClient final : public CacheClient {
 public:
  GrpcCacheClient(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout);
  absl::StatusOr<cachemgr::StepResponse> Step(const cachemgr::StepRequest& request) override;
  absl::Status Reset() override;
  // Probes GetStats; a new incarnation (or an unconfigured pool) is configured again with
  // the start-up request, the same process is reset.
  absl::Status Restore() override;
  // Cancels the Restore in flight, and every later one (at shutdown). Thread-safe.
  void CancelRestore() override;

  // What start-up configured and the incarnation that answered (cluster_setup.cc).
  void SetConfiguration(const folio::internal::v1::ConfigureRequest& configure,
                        const std::string& incarnation_id);
  absl::Status SetTiers(const OffloadTiers& tiers) override;
  void NoteBadDiskBlocks(std::vector<std::pair<uint64_t, uint64_t>> blocks) override;

  folio::internal::v1::CacheManager::Stub& stub() { return *stub_; }

  // This scheduler's epoch, sent with Configure, Step and Reset (common/scheduler_epoch.h).
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }

 private:
  std::unique_ptr<folio::internal::v1::CacheManager::Stub> stub_;
  uint64_t epoch_ = 0;
  const absl::Duration timeout_;
  uint64_t next_step_ = 1;
  folio::internal::v1::ConfigureRequest configure_;
  std::string incarnation_id_;
  // The pool's policy takes a host tier (paged, prefix caching on): SetConfiguration.
  bool host_tier_allowed_ = false;
  // NoteBadDiskBlocks' blocks, sent with the next Reset (ResetRequest.bad_disk_blocks).
  absl::Mutex bad_mu_;
  std::vector<std::pair<uint64_t, uint64_t>> bad_disk_blocks_ ABSL_GUARDED_BY(bad_mu_);
  absl::Mutex cancel_mu_;
  bool cancelled_ ABSL_GUARDED_BY(cancel_mu_) = false;
  grpc::ClientContext* in_flight_ ABSL_GUARDED_BY(cancel_mu_) = nullptr;
  // Runs `call(ctx)` as a cancellable call of a Restore.
  // Reset under this client's epoch, cancellable; a fenced refusal as is, any other failure
  // UNAVAILABLE.
  absl::Status ResetPool(folio::internal::v1::ResetRequest request);
  template <typename Call>
  grpc::Status Cancellable(absl::Duration timeout, Call call);
};

// Sends each step to every rank at once and answers with rank 0's output.
//
// Tensor parallelism (several ranks): the ranks' Gloo group is formed by JoinGroup, at
// set-up and again in Restore whenever a rank came back as a new process (a new
// incarnation) or reports its group broken; each time with a newer generation, so the
// rendezvous never reads an old group's addresses. Every rank then allocates its KV cache
// again (its runner held the old group). The calls to the ranks run at once: a join
// returns only when every rank has joined, and a CUDA rank's allocation runs collectives.
class GrpcWorkerClient final : public WorkerClient {
 public:
  GrpcWorkerClient(std::vector<std::shared_ptr<grpc::Channel>> ranks, absl::Duration timeout);
  ~GrpcWorkerClient() override;  // a started step must have been finished
  absl::StatusOr<worker::StepOutput> Execute(const worker::StepInput& step,
                                             const std::vector<std::string>& request_ids) override;
  // Sends the step to every rank (asynchronous calls) and returns at once; Finish waits.
  void Start(const worker::StepInput& step, const std::vector<std::string>& request_ids) override;
  absl::StatusOr<worker::StepOutput> Finish() override;
  // Probes every rank's GetWorkerInfo. One rank: a new incarnation (or no pool) gets
  // AllocateKvCache with the start-up block count and size. Several: a new incarnation on
  // any rank, or a group not joined, forms the group again (JoinGroup) and allocates on
  // every rank. The join is bounded by min(timeout, kJoinTimeout), each call by `timeout`.
  absl::Status Restore() override;
  // Cancels the Restore in flight, and every later one (at shutdown). Thread-safe.
  void CancelRestore() override;

  // What start-up allocates and the incarnation of each rank (cluster_setup.cc).
  void SetAllocation(int32_t num_blocks, int32_t block_size,
                     std::vector<std::string> incarnation_ids,
                     std::vector<int32_t> windows = {});
  // Every rank joins the group of generation `newest` + 1 at once, where `newest` is the
  // newest generation the ranks reported or this client sent. The first failure, by rank.
  absl::Status FormGroup(int64_t newest, absl::Time deadline);
  // AllocateKvCache(SetAllocation's shape) on every rank at once.
  absl::Status AllocateEveryRank(absl::Time deadline);
  // The offload tiers the last allocation found (a tier is off unless every rank has it;
  // the disk tier also needs the same directory on every rank).
  OffloadTiers tiers() const override { return tiers_; }
  int64_t group_generation() const { return group_generation_; }

  folio::internal::v1::Worker::Stub& stub(int rank) { return *stubs_[rank]; }
  int num_ranks() const { return static_cast<int>(stubs_.size()); }

  // This scheduler's epoch, sent with JoinGroup, AllocateKvCache and ExecuteStep.
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }
  // Speculative decoding is on: Restore refuses a rank that does not verify proposed
  // tokens (a replacement on another backend, or an older binary).
  void set_requires_verification(bool required) { requires_verification_ = required; }
  // --speculative=draft: Restore refuses a rank that came back without a draft model.
  void set_requires_draft_model(bool required) { requires_draft_model_ = required; }

 private:
  struct StepCalls;  // a step sent to every rank (grpc_clients.cc)

  std::vector<std::unique_ptr<folio::internal::v1::Worker::Stub>> stubs_;
  std::unique_ptr<StepCalls> step_calls_;  // between Start and Finish
  uint64_t epoch_ = 0;
  const absl::Duration timeout_;
  uint64_t next_step_ = 1;
  int32_t num_blocks_ = 0;
  int32_t block_size_ = 0;
  std::vector<std::string> incarnation_ids_;  // by rank
  int64_t group_generation_ = 0;              // the group the ranks last formed
  OffloadTiers tiers_;
  int64_t last_generation_sent_ = 0;          // the newest JoinGroup sent
  bool requires_verification_ = false;
  bool requires_draft_model_ = false;
  std::vector<int32_t> windows_;  // the window layer groups set up (SetAllocation)

  // The calls of a Restore, so that CancelRestore can cancel them from another thread.
  absl::Mutex cancel_mu_;
  bool cancelled_ ABSL_GUARDED_BY(cancel_mu_) = false;
  std::vector<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(cancel_mu_);
  // Registers `ctx` (cancelled at once after CancelRestore); Untrack before it dies.
  void Track(grpc::ClientContext* ctx);
  void Untrack(grpc::ClientContext* ctx);
};

folio::internal::v1::ExecuteStepRequest ToProto(const worker::StepInput& step);
worker::StepOutput FromProto(const folio::internal::v1::ExecuteStepResponse& response);

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_GRPC_CLIENTS_H_
