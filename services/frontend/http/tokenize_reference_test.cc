// Tokenize through the frontend's gRPC call and HTTP's POST /tokenize on llama.cpp's own
// vocabularies (models/ggml-vocab-*.gguf, read by Folio's GGUF reader): with no add_bos
// given, the ids are llama.cpp's llama_tokenize(add_special = true, parse_special = true):
// Qwen2's file says no BOS, Llama 3's says BOS. An explicit add_bos still wins, and
// /detokenize gives the text back. The fixtures: chat_tools_test_env.h.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "services/frontend/http/chat_tools_test_env.h"
#include "services/worker/model/gguf_vocab.h"
#include "services/worker/service.h"
#include "tests/reference/llama_ref.h"

namespace folio::frontend::testing {
namespace {

using ordered_json = nlohmann::ordered_json;

class TokenizeReferenceTest : public ChatToolsTest,
                              public ::testing::WithParamInterface<const char*> {};

TEST_P(TokenizeReferenceTest, DefaultIdsAreLlamaCppsWithItsSpecialTokens) {
  const std::string path =
      absl::StrCat(reference::LlamaCppSourceDir(), "/models/ggml-vocab-", GetParam(), ".gguf");
  absl::StatusOr<Vocab> vocab = worker::LoadGgufVocab(path);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  *info_.mutable_tokenizer() = worker::TokenizerSpecFromVocab(*vocab);
  info_.mutable_model()->set_vocab_size(vocab->size());
  ASSERT_TRUE(service_->SetClusterInfo(info_).ok());  // the gRPC frontend's model
  ASSERT_NO_FATAL_FAILURE(StartFrontend(FrontendOptions{}));
  absl::StatusOr<std::unique_ptr<reference::LlamaModel>> llama =
      reference::LlamaModel::Load(path, reference::LlamaModelOptions{.vocab_only = true});
  ASSERT_TRUE(llama.ok()) << llama.status();

  for (const std::string text : {"The capital of France is", " Hello world\n\n<|im_end|> ok",
                                 "def f(x):\n    return x * 2  # \xc3\xa9t\xc3\xa9"}) {
    absl::StatusOr<std::vector<int32_t>> want = (*llama)->Tokenize(
        text, reference::TokenizeOptions{.add_special = true, .parse_special = true});
    ASSERT_TRUE(want.ok()) << want.status();

    folio::v1::TokenizeRequest request;
    request.set_text(text);
    folio::v1::TokenizeResponse response;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Tokenize(&ctx, request, &response).ok());
    EXPECT_EQ(std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end()),
              *want)
        << GetParam() << " gRPC: " << text;

    httplib::Client client("127.0.0.1", http_->port());
    httplib::Result r =
        client.Post("/tokenize", ordered_json{{"prompt", text}}.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const ordered_json body = ordered_json::parse(r->body);
    EXPECT_EQ(body["tokens"].get<std::vector<int32_t>>(), *want) << GetParam() << " HTTP: " << text;
    EXPECT_EQ(body["count"], want->size());

    // The explicit choice wins over the file's.
    request.set_add_bos(!vocab->add_bos);
    grpc::ClientContext ctx2;
    folio::v1::TokenizeResponse flipped;
    ASSERT_TRUE(stub_->Tokenize(&ctx2, request, &flipped).ok());
    EXPECT_EQ(flipped.token_ids_size(), response.token_ids_size() + (vocab->add_bos ? -1 : 1));

    // /detokenize of the ids without BOS gives the text back (control tokens are not text).
    if (text.find("<|") != std::string::npos) continue;
    std::vector<int32_t> ids = *want;
    if (vocab->add_bos && !ids.empty()) ids.erase(ids.begin());
    httplib::Result d =
        client.Post("/detokenize", ordered_json{{"tokens", ids}}.dump(), "application/json");
    ASSERT_TRUE(d);
    ASSERT_EQ(d->status, 200) << d->body;
    EXPECT_EQ(ordered_json::parse(d->body)["prompt"], text) << GetParam();
  }
}

// Qwen2's file says add_bos_token = false; Llama 3's (llama-bpe) says true.
INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizeReferenceTest,
                         ::testing::Values("qwen2", "llama-bpe"));

}  // namespace
}  // namespace folio::frontend::testing
