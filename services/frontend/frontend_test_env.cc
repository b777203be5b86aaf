#include "services/frontend/frontend_test_env.h"

#include <cstdlib>

#include "common/test_models_dir.h"
#include "common/tokenizer/llama2c_vocab.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace folio::frontend::testing {
namespace ipb = folio::internal::v1;
namespace pb = folio::v1;

void FrontendTestEnv::SetUp() {
  const std::optional<std::string> dir = TestModelsDir();
  if (!dir) {
    GTEST_SKIP() << "no test models: run under ctest (build/test-models), or set "
                    "FOLIO_MODELS_DIR to a folder holding stories260K/tok512.bin";
  }
  absl::StatusOr<Vocab> vocab = LoadLlama2cVocab(*dir + "/stories260K/tok512.bin", 512);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(*vocab);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  tokenizer_.emplace(*std::move(tokenizer));

  ipb::ModelSpec* model = info_.mutable_model();
  model->set_name("stories260K");
  model->set_architecture("llama");
  model->set_vocab_size(512);
  model->set_dim(64);
  model->set_hidden_dim(172);
  model->set_num_layers(5);
  model->set_num_heads(8);
  model->set_num_kv_heads(4);
  model->set_head_dim(8);
  model->set_max_seq_len(512);
  model->set_stored_type("Q8_0");  // not the real file's F32: shows the field is passed on
  ipb::TokenizerSpec* spec = info_.mutable_tokenizer();
  for (size_t i = 0; i < vocab->pieces.size(); ++i) {
    spec->add_pieces(vocab->pieces[i]);
    spec->add_scores(vocab->scores[i]);
    spec->add_types(static_cast<int32_t>(vocab->types[i]));
  }
  spec->set_bos_id(vocab->bos_id);
  spec->set_eos_id(vocab->eos_id);
  spec->set_unk_id(vocab->unk_id);
  spec->set_add_bos(vocab->add_bos);
  spec->set_add_dummy_prefix(vocab->add_dummy_prefix);
  info_.set_max_model_len(kMaxModelLen);
  info_.set_block_size(16);
  info_.set_num_blocks(100);
  info_.set_tp_size(1);
  info_.set_max_n(4);
  info_.set_max_beam_width(4);

  fake_ = FakeScheduler::Start(info_);
  ASSERT_NE(fake_, nullptr);
  // Resuming broken streams is off here, so that the fake's error statuses reach the
  // client as they are; service_test.cc starts a frontend with it on.
  FrontendOptions frontend_options = frontend_options_;
  frontend_options.resume.recovery_timeout = absl::ZeroDuration();
  service_ = std::make_unique<FrontendService>(frontend_options,
                                               MakeSchedulerChannel(fake_->address()), &registry_);
  ASSERT_TRUE(service_->SetClusterInfo(info_).ok());
  ServerOptions options{.service_name = "folio.v1.TextGeneration",
                        .shutdown_grace = absl::ZeroDuration(),
                        .drain_timeout = absl::Seconds(2)};
  absl::StatusOr<std::unique_ptr<ServiceRunner>> runner =
      ServiceRunner::Start(options, {service_.get()}, &registry_);
  ASSERT_TRUE(runner.ok()) << runner.status();
  runner_ = *std::move(runner);
  runner_->SetServing(ServingState::kServing);
  stub_ = pb::TextGeneration::NewStub(
      grpc::CreateChannel(runner_->address(), grpc::InsecureChannelCredentials()));
}

void FrontendTestEnv::TearDown() {
  if (runner_ != nullptr) runner_->Shutdown();
}

std::vector<int32_t> FrontendTestEnv::Encode(const std::string& text) const {
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(text, AddBos::kNo);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

std::string FrontendTestEnv::Decode(const std::vector<int32_t>& ids) const {
  absl::StatusOr<std::string> text = tokenizer_->Decode(ids);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string();
}

pb::GenerateRequest FrontendTestEnv::Request(const std::string& prompt, int max_tokens) {
  pb::GenerateRequest request;
  request.set_prompt(prompt);
  request.mutable_sampling()->set_max_tokens(max_tokens);
  request.mutable_sampling()->set_temperature(0);
  return request;
}

StreamResult FrontendTestEnv::Generate(const pb::GenerateRequest& request,
                                       std::optional<absl::Duration> deadline,
                                       int cancel_after_messages) {
  StreamResult result;
  grpc::ClientContext ctx;
  if (deadline.has_value()) ctx.set_deadline(absl::ToChronoTime(absl::Now() + *deadline));
  std::unique_ptr<grpc::ClientReader<pb::GenerateResponse>> reader = stub_->Generate(&ctx, request);
  pb::GenerateResponse response;
  while (reader->Read(&response)) {
    result.text += response.text();
    for (const pb::TokenInfo& t : response.tokens()) result.token_ids.push_back(t.token_id());
    result.messages.push_back(response);
    if (cancel_after_messages > 0 &&
        static_cast<int>(result.messages.size()) == cancel_after_messages) {
      ctx.TryCancel();
    }
  }
  result.status = reader->Finish();
  return result;
}

grpc::Status FrontendTestEnv::Complete(const pb::GenerateRequest& request,
                                       pb::CompleteResponse* response) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  return stub_->Complete(&ctx, request, response);
}

}  // namespace folio::frontend::testing
