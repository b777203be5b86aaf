#include "services/frontend/fake_scheduler.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace folio::frontend::testing {
namespace ipb = folio::internal::v1;

Script TokensScript(const std::vector<int32_t>& tokens, ipb::FinishReason finish,
                    int32_t num_prompt_tokens, int32_t num_cached_prompt_tokens) {
  Script script;
  for (size_t i = 0; i < tokens.size(); ++i) {
    ipb::ScheduleEvent event;
    event.add_tokens()->set_token_id(tokens[i]);
    event.set_num_prompt_tokens(num_prompt_tokens);
    event.set_num_cached_prompt_tokens(num_cached_prompt_tokens);
    if (i + 1 == tokens.size()) event.set_finish_reason(finish);
    script.events.push_back(std::move(event));
  }
  return script;
}

std::unique_ptr<FakeScheduler> FakeScheduler::Start(ipb::ClusterInfo info, int port) {
  std::unique_ptr<FakeScheduler> fake(new FakeScheduler(std::move(info)));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(),
                           &fake->port_);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(fake.get());
  fake->server_ = builder.BuildAndStart();
  if (fake->server_ == nullptr || fake->port_ == 0) return nullptr;
  return fake;
}

FakeScheduler::~FakeScheduler() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
}

std::string FakeScheduler::address() const { return absl::StrCat("127.0.0.1:", port_); }

void FakeScheduler::SetScript(Script script) {
  absl::MutexLock lock(&mu_);
  script_ = std::move(script);
}

void FakeScheduler::QueueScript(Script script) {
  absl::MutexLock lock(&mu_);
  queued_.push_back(std::move(script));
}

std::vector<FakeScheduler::CallRecord> FakeScheduler::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

bool FakeScheduler::WaitForDoneCalls(int n, absl::Duration timeout) const {
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int done = 0;
    for (const CallRecord& c : calls_) done += c.done ? 1 : 0;
    return done >= n;
  };
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

void FakeScheduler::MarkDone(size_t index, bool cancelled) {
  absl::MutexLock lock(&mu_);
  calls_[index].cancelled = cancelled;
  calls_[index].done = true;
}

grpc::Status FakeScheduler::GetClusterInfo(grpc::ServerContext* ctx,
                                           const ipb::GetClusterInfoRequest* request,
                                           ipb::ClusterInfo* response) {
  *response = info_;
  return grpc::Status::OK;
}

grpc::Status FakeScheduler::Generate(grpc::ServerContext* ctx, const ipb::ScheduleRequest* request,
                                     grpc::ServerWriter<ipb::ScheduleEvent>* writer) {
  Script script;
  size_t index;
  {
    absl::MutexLock lock(&mu_);
    if (queued_.empty()) {
      script = script_;
    } else {
      script = std::move(queued_.front());
      queued_.pop_front();
    }
    CallRecord record;
    record.request = *request;
    if (ctx->deadline() != std::chrono::system_clock::time_point::max()) {
      record.deadline = absl::FromChrono(ctx->deadline());
    }
    index = calls_.size();
    calls_.push_back(std::move(record));
  }
  // Sleeps in slices, watching for cancellation. Returns false once cancelled.
  auto wait = [ctx](absl::Duration d) {
    const absl::Time until = absl::Now() + d;
    while (absl::Now() < until) {
      if (ctx->IsCancelled()) return false;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return !ctx->IsCancelled();
  };
  for (size_t i = 0; i < script.events.size(); ++i) {
    if (i > 0 && !wait(script.delay_between_events)) {
      MarkDone(index, true);
      return grpc::Status::CANCELLED;
    }
    if (!writer->Write(script.events[i])) {
      MarkDone(index, true);
      return grpc::Status::CANCELLED;
    }
  }
  if (script.hang_after_events) {
    wait(absl::Seconds(30));
    MarkDone(index, ctx->IsCancelled());
    return grpc::Status::CANCELLED;
  }
  MarkDone(index, ctx->IsCancelled());
  return script.final_status;
}

void FakeScheduler::SetReplicaState(int32_t num_running, int32_t num_waiting,
                                    int64_t num_tokens_pending,
                                    std::shared_ptr<grpc::ChannelInterface> cachemgr) {
  absl::MutexLock lock(&mu_);
  load_.set_num_running(num_running);
  load_.set_num_waiting(num_waiting);
  load_.set_num_tokens_pending(num_tokens_pending);
  cachemgr_ = cachemgr == nullptr ? nullptr : ipb::CacheManager::NewStub(std::move(cachemgr));
}

grpc::Status FakeScheduler::GetReplicaState(grpc::ServerContext* ctx,
                                            const ipb::ReplicaStateRequest* request,
                                            ipb::ReplicaState* response) {
  std::shared_ptr<ipb::CacheManager::Stub> cachemgr;
  {
    absl::MutexLock lock(&mu_);
    *response = load_;
    cachemgr = cachemgr_;
  }
  if (cachemgr == nullptr) {
    response->set_block_events_error("no cache manager");
    return grpc::Status::OK;
  }
  grpc::ClientContext call;
  call.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  grpc::Status s = cachemgr->GetBlockEvents(&call, request->block_events(),
                                            response->mutable_block_events());
  if (!s.ok()) {
    response->clear_block_events();
    response->set_block_events_error(s.error_message());
  }
  return grpc::Status::OK;
}

}  // namespace folio::frontend::testing
