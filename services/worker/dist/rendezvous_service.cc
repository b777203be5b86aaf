#include "services/worker/dist/rendezvous_service.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"

namespace folio::worker {
namespace pb = folio::internal::v1;

grpc::ServerUnaryReactor* RendezvousService::SetKey(grpc::CallbackServerContext* ctx,
                                                    const pb::SetKeyRequest* request,
                                                    pb::SetKeyResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(store_->Set(request->key(), request->value())));
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousService::GetKey(grpc::CallbackServerContext* ctx,
                                                    const pb::GetKeyRequest* request,
                                                    pb::GetKeyResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::optional<std::string> value = store_->Get(request->key());
  if (value) {
    response->set_value(*std::move(value));
    reactor->Finish(grpc::Status::OK);
  } else {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                 absl::StrCat("rendezvous key \"", request->key(),
                                              "\" is not published yet")));
  }
  return reactor;
}

GrpcRendezvousStore::GrpcRendezvousStore(std::shared_ptr<grpc::Channel> channel,
                                         absl::Duration timeout)
    : stub_(pb::Rendezvous::NewStub(std::move(channel))), timeout_(timeout) {}

void GrpcRendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(true);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  pb::SetKeyRequest req;
  req.set_key(key);
  req.set_value(std::string(data.begin(), data.end()));
  pb::SetKeyResponse resp;
  grpc::Status s = stub_->SetKey(&ctx, req, &resp);
  if (!s.ok()) {
    throw std::runtime_error(absl::StrCat("rendezvous: publishing ", key, " at rank 0 failed: ",
                                          s.error_message(), " (code ", s.error_code(), ")"));
  }
}

std::string GrpcRendezvousStore::Poll(const std::string& key, absl::Time deadline) {
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(absl::ToChronoTime(deadline));
    pb::GetKeyRequest req;
    req.set_key(key);
    pb::GetKeyResponse resp;
    grpc::Status s = stub_->GetKey(&ctx, req, &resp);
    if (s.ok()) return resp.value();
    if (s.error_code() != grpc::StatusCode::NOT_FOUND || absl::Now() >= deadline) {
      throw std::runtime_error(absl::StrCat("rendezvous: waiting for ", key, " at rank 0 failed: ",
                                            s.error_message(), " (code ", s.error_code(), ")"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::vector<char> GrpcRendezvousStore::get(const std::string& key) {
  const std::string value = Poll(key, absl::Now() + timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void GrpcRendezvousStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
}

void GrpcRendezvousStore::wait(const std::vector<std::string>& keys,
                               const std::chrono::milliseconds& timeout) {
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
  for (const std::string& key : keys) Poll(key, deadline);
}

}  // namespace folio::worker
