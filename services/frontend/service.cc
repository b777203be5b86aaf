#include "services/frontend/service.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/tokenizer/utf8.h"
#include "glog/logging.h"
#include "services/frontend/generate_call.h"
#include "services/frontend/chat/chat_template.h"

namespace folio::frontend {
namespace pb = folio::v1;
namespace ipb = folio::internal::v1;

namespace {

constexpr char kNotReady[] = "the frontend is starting: waiting for the scheduler's cluster info";

// A Generate reactor that finishes at once with `status` (used before the service is ready).
class FailedStream final : public grpc::ServerWriteReactor<pb::GenerateResponse> {
 public:
  explicit FailedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

FrontendService::FrontendService(FrontendOptions options,
                                 std::shared_ptr<grpc::ChannelInterface> scheduler,
                                 MetricsRegistry* registry)
    : options_(std::move(options)),
      scheduler_(ipb::Scheduler::NewStub(std::move(scheduler))),
      router_(options_.router != nullptr
                  ? options_.router
                  : std::make_shared<routing::StubRouter>(scheduler_.get())),
      metrics_(registry) {}

FrontendService::~FrontendService() {
  // A stream's last gRPC callback may still be running after its RPC finished.
  if (!calls_.WaitIdle(absl::Seconds(10))) {
    LOG(WARNING) << "frontend: " << calls_.live() << " scheduler streams still in gRPC at exit";
  }
}

absl::Status FrontendService::SetClusterInfo(ipb::ClusterInfo info) {
  // The template chat requests render with: --chat_template's, else the model's default
  // (tokenizer.chat_template, else its template named "default"). The one named
  // "tool_use" stays in named_chat_templates for requests with tools, unless
  // --chat_template replaces them all.
  ipb::TokenizerSpec* tok = info.mutable_tokenizer();
  if (!options_.chat_template.empty()) {
    tok->set_chat_template(options_.chat_template);
    tok->clear_named_chat_templates();
  } else {
    const std::map<std::string, std::string> named(tok->named_chat_templates().begin(),
                                                   tok->named_chat_templates().end());
    tok->set_chat_template(SelectChatTemplate(tok->chat_template(), named, /*has_tools=*/false));
  }
  absl::StatusOr<std::shared_ptr<const ModelContext>> model =
      ModelContext::Create(std::move(info), options_.validator);
  if (!model.ok()) return model.status();
  LOG(INFO) << "model " << (*model)->info().model().name() << ": vocab "
            << (*model)->tokenizer().vocab_size() << ", max_model_len "
            << (*model)->info().max_model_len();
  absl::MutexLock lock(&mu_);
  model_ = *std::move(model);
  return absl::OkStatus();
}

bool FrontendService::ready() const { return model() != nullptr; }

absl::Status FrontendService::Authenticate(const grpc::CallbackServerContext* ctx) const {
  if (!options_.api_keys.enabled()) return absl::OkStatus();
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  std::optional<std::string_view> value;
  if (it != metadata.end()) value = std::string_view(it->second.data(), it->second.size());
  return options_.api_keys.Check(value);
}

std::shared_ptr<const ModelContext> FrontendService::model() const {
  absl::MutexLock lock(&mu_);
  return model_;
}

grpc::ServerUnaryReactor* FrontendService::FinishLocal(grpc::CallbackServerContext* ctx,
                                                       const char* method, absl::Time start,
                                                       const absl::Status& status) {
  metrics_.RecordRequest(method, status.code(), absl::Now() - start);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerWriteReactor<pb::GenerateResponse>* FrontendService::Generate(
    grpc::CallbackServerContext* ctx, const pb::GenerateRequest* request) {
  if (absl::Status auth = Authenticate(ctx); !auth.ok()) {
    metrics_.RecordRequest("Generate", auth.code(), absl::ZeroDuration());
    return new FailedStream(ToGrpcStatus(auth));
  }
  std::shared_ptr<const ModelContext> model = this->model();
  if (model == nullptr) {
    metrics_.RecordRequest("Generate", absl::StatusCode::kUnavailable, absl::ZeroDuration());
    return new FailedStream(grpc::Status(grpc::StatusCode::UNAVAILABLE, kNotReady));
  }
  return StartGenerate(ctx, *request, CallEnv{std::move(model), router_.get(), &metrics_, options_.resume, &calls_});
}

grpc::ServerUnaryReactor* FrontendService::Complete(grpc::CallbackServerContext* ctx,
                                                    const pb::GenerateRequest* request,
                                                    pb::CompleteResponse* response) {
  if (absl::Status auth = Authenticate(ctx); !auth.ok()) {
    return FinishLocal(ctx, "Complete", absl::Now(), auth);
  }
  std::shared_ptr<const ModelContext> model = this->model();
  if (model == nullptr) {
    return FinishLocal(ctx, "Complete", absl::Now(), absl::UnavailableError(kNotReady));
  }
  return StartComplete(ctx, *request, response,
                       CallEnv{std::move(model), router_.get(), &metrics_, options_.resume, &calls_});
}

grpc::ServerUnaryReactor* FrontendService::Tokenize(grpc::CallbackServerContext* ctx,
                                                    const pb::TokenizeRequest* request,
                                                    pb::TokenizeResponse* response) {
  const absl::Time start = absl::Now();
  if (absl::Status auth = Authenticate(ctx); !auth.ok()) {
    return FinishLocal(ctx, "Tokenize", start, auth);
  }
  std::shared_ptr<const ModelContext> model = this->model();
  if (model == nullptr) {
    return FinishLocal(ctx, "Tokenize", start, absl::UnavailableError(kNotReady));
  }
  if (const size_t bad = utf8::FindInvalid(request->text()); bad != std::string_view::npos) {
    return FinishLocal(
        ctx, "Tokenize", start,
        absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 at byte offset ", bad)));
  }
  const Tokenizer& tokenizer = model->tokenizer();
  absl::StatusOr<std::vector<int32_t>> ids =
      tokenizer.Encode(request->text(),
                       !request->has_add_bos() ? AddBos::kVocabDefault
                       : request->add_bos()    ? AddBos::kYes
                                               : AddBos::kNo,
                       !request->has_parse_special() || request->parse_special()
                           ? ParseSpecial::kYes
                           : ParseSpecial::kNo);
  if (!ids.ok()) {
    return FinishLocal(ctx, "Tokenize", start,
                       absl::InvalidArgumentError(absl::StrCat("text: ", ids.status().message())));
  }
  for (int32_t id : *ids) {
    response->add_token_ids(id);
    absl::StatusOr<std::string_view> piece = tokenizer.TokenToPiece(id);
    response->add_pieces(piece.ok() ? std::string(*piece) : std::string());
  }
  return FinishLocal(ctx, "Tokenize", start, absl::OkStatus());
}

grpc::ServerUnaryReactor* FrontendService::GetModelInfo(grpc::CallbackServerContext* ctx,
                                                        const pb::GetModelInfoRequest* request,
                                                        pb::ModelInfo* response) {
  const absl::Time start = absl::Now();
  if (absl::Status auth = Authenticate(ctx); !auth.ok()) {
    return FinishLocal(ctx, "GetModelInfo", start, auth);
  }
  std::shared_ptr<const ModelContext> model = this->model();
  if (model == nullptr) {
    return FinishLocal(ctx, "GetModelInfo", start, absl::UnavailableError(kNotReady));
  }
  const ipb::ClusterInfo& info = model->info();
  response->set_name(info.model().name());
  response->set_architecture(info.model().architecture());
  response->set_vocab_size(model->tokenizer().vocab_size());
  response->set_max_model_len(info.max_model_len());
  response->set_bos_id(model->tokenizer().bos_id());
  response->set_eos_id(model->tokenizer().eos_id());
  for (int32_t id : model->tokenizer().eog_ids()) response->add_eog_ids(id);
  response->set_tokenizer_kind(model->tokenizer().kind() == TokenizerKind::kByteLevelBpe
                                   ? "byte_level_bpe"
                                   : "sentencepiece");
  response->set_num_layers(info.model().num_layers());
  response->set_dim(info.model().dim());
  response->set_block_size(info.block_size());
  response->set_num_kv_blocks(info.num_blocks());
  response->set_max_n(std::max(info.max_n(), 1));
  response->set_max_beam_width(info.max_beam_width());
  response->set_stored_type(info.model().stored_type());
  return FinishLocal(ctx, "GetModelInfo", start, absl::OkStatus());
}

}  // namespace folio::frontend
