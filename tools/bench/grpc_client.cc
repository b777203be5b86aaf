#include "tools/bench/grpc_client.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/finish_reason.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace folio::bench {
namespace {

namespace pb = folio::v1;

}  // namespace

GrpcBackend::GrpcBackend(std::string server)
    : server_(std::move(server)),
      stub_(pb::TextGeneration::NewStub(
          grpc::CreateChannel(server_, grpc::InsecureChannelCredentials()))) {}

absl::StatusOr<ModelFacts> GrpcBackend::Connect() {
  pb::ModelInfo info;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::Status status = stub_->GetModelInfo(&ctx, pb::GetModelInfoRequest(), &info);
  if (!status.ok()) {
    const absl::Status s = FromGrpcStatus(status);
    return absl::Status(s.code(), absl::StrCat("GetModelInfo at ", server_, " failed: ",
                                               absl::StatusCodeToString(s.code()), ": ",
                                               status.error_message()));
  }
  return ModelFacts{info.name(), info.vocab_size(), info.max_model_len(),
                    {0, info.bos_id(), info.eos_id()}};
}

absl::Status GrpcBackend::CanSend(const BenchRequest&) const { return absl::OkStatus(); }

void GrpcBackend::Run(const BenchRequest& req, std::optional<Clock::time_point> deadline,
                      RequestResult* out) {
  pb::GenerateRequest request;
  request.mutable_prompt_token_ids()->Assign(req.prompt_token_ids.begin(),
                                             req.prompt_token_ids.end());
  pb::SamplingOptions* s = request.mutable_sampling();
  s->set_max_tokens(req.output_len);
  s->set_ignore_eos(true);
  s->set_temperature(req.temperature);
  if (req.temperature > 0) s->set_seed(req.sampling_seed);
  if (req.n > 1) s->set_n(req.n);
  if (req.beam_width > 0) s->set_beam_width(req.beam_width);
  grpc::ClientContext ctx;
  if (deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::system_clock::duration>(
        *deadline - Clock::now());
    ctx.set_deadline(std::chrono::system_clock::now() + left);
  }
  out->sent = true;
  out->prompt_tokens = static_cast<int>(req.prompt_token_ids.size());
  out->requested_output = req.output_len;
  out->n = req.n;
  out->beam_width = req.beam_width;
  const Clock::time_point start = Clock::now();
  Clock::time_point last;
  auto reader = stub_->Generate(&ctx, request);
  pb::GenerateResponse response;
  std::vector<std::string> reasons(std::max(req.n, 1));  // by choice index
  while (reader->Read(&response)) {
    if (response.tokens_size() > 0) {
      const Clock::time_point now = Clock::now();
      if (out->output_tokens == 0) {
        out->ttft_s = Seconds(now - start);
      } else {
        out->itl_s.push_back(Seconds(now - last));
      }
      last = now;
      out->output_tokens += response.tokens_size();
    }
    if (response.finish_reason() != pb::FINISH_REASON_UNSPECIFIED && response.index() >= 0 &&
        response.index() < static_cast<int>(reasons.size())) {
      reasons[response.index()] = FinishReasonName(response.finish_reason());
    }
  }
  out->finish_reason = CombineFinishReasons(reasons);
  const grpc::Status status = reader->Finish();
  out->e2e_s = Seconds(Clock::now() - start);
  out->ok = status.ok();
  out->status = absl::StatusCodeToString(FromGrpcStatus(status).code());
  if (!status.ok()) out->error_message = status.error_message();
}

}  // namespace folio::bench
