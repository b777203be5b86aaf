// FrontendService: folio.v1.TextGeneration, the public API, on the gRPC callback API.
//
// Generate and Complete run through a replica's scheduler (see generate_call.h), the one
// on the constructor's channel or the one FrontendOptions.router picks per attempt;
// Tokenize and GetModelInfo are answered locally from the scheduler's ClusterInfo. Until
// SetClusterInfo() has succeeded every RPC answers UNAVAILABLE, so the process can serve
// health checks (NOT_SERVING) while it waits for the scheduler.
//
// Thread-safe. Handlers never block: the model context is a shared_ptr<const> read under a
// short lock, and generation calls are asynchronous reactors.
#ifndef FOLIO_SERVICES_FRONTEND_SERVICE_H_
#define FOLIO_SERVICES_FRONTEND_SERVICE_H_

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "folio/v1/folio.grpc.pb.h"
#include "grpcpp/channel.h"
#include "services/frontend/api_keys.h"
#include "services/frontend/cluster_info.h"
#include "services/frontend/frontend_metrics.h"
#include "services/frontend/request_validator.h"
#include "services/frontend/call_tracker.h"
#include "services/frontend/resumable_stream.h"
#include "services/frontend/routing/stream_router.h"

namespace folio::frontend {

struct FrontendOptions {
  // Limits applied to every request; max_model_len is taken from the ClusterInfo.
  ValidatorOptions validator;
  // When keys are set, Generate, Complete, Tokenize and GetModelInfo need the metadata
  // "authorization: Bearer <key>" (UNAUTHENTICATED otherwise); health stays open.
  ApiKeys api_keys;
  // The chat template (Jinja source) every chat request renders with, in place of the
  // model's GGUF tokenizer.chat_template (--chat_template=FILE); empty: the model's.
  std::string chat_template;
  // How a stream whose scheduler is lost waits for one to continue it (resumable_stream.h).
  ResumeOptions resume;
  // Where generation streams go (routing/stream_router.h: a ReplicaSet with many
  // replicas); null: the scheduler on the channel given to the constructor.
  std::shared_ptr<routing::StreamRouter> router;
};

class FrontendService final : public folio::v1::TextGeneration::CallbackService {
 public:
  // `scheduler` is the channel to the replica's scheduler. `registry` must outlive the
  // service. The service must outlive the gRPC server it is registered with.
  FrontendService(FrontendOptions options, std::shared_ptr<grpc::ChannelInterface> scheduler,
                  MetricsRegistry* registry);
  // Waits (up to 10 s) until gRPC has let go of every scheduler stream the service started.
  ~FrontendService() override;

  // Adopts the scheduler's model description: builds the tokenizer and the validator.
  // InvalidArgument when the ClusterInfo is unusable (bad tokenizer, no max_model_len);
  // the previous state, if any, is then kept.
  absl::Status SetClusterInfo(folio::internal::v1::ClusterInfo info);
  bool ready() const;
  // The model context, or null before SetClusterInfo succeeded. The HTTP API shares it.
  std::shared_ptr<const ModelContext> model() const;
  // The frontend's metrics, which the HTTP API records into as well.
  FrontendMetrics* metrics() { return &metrics_; }

  grpc::ServerWriteReactor<folio::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* ctx, const folio::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Complete(grpc::CallbackServerContext* ctx,
                                     const folio::v1::GenerateRequest* request,
                                     folio::v1::CompleteResponse* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx,
                                     const folio::v1::TokenizeRequest* request,
                                     folio::v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx,
                                         const folio::v1::GetModelInfoRequest* request,
                                         folio::v1::ModelInfo* response) override;

 private:
  // OK, or UNAUTHENTICATED when API keys are set and the call carries none that matches.
  absl::Status Authenticate(const grpc::CallbackServerContext* ctx) const;
  // Finishes a locally answered RPC and records it.
  grpc::ServerUnaryReactor* FinishLocal(grpc::CallbackServerContext* ctx, const char* method,
                                        absl::Time start, const absl::Status& status);

  const FrontendOptions options_;
  const std::unique_ptr<folio::internal::v1::Scheduler::Stub> scheduler_;
  const std::shared_ptr<routing::StreamRouter> router_;  // options_.router or one on scheduler_
  FrontendMetrics metrics_;
  CallTracker calls_;  // the calls' scheduler streams (call_tracker.h)
  mutable absl::Mutex mu_;
  std::shared_ptr<const ModelContext> model_ ABSL_GUARDED_BY(mu_);
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_SERVICE_H_
