// The chat templates published with Llama-2 chat, ChatML models, Llama-3 and Zephyr
// (testdata/), rendered by ChatTemplate and carried through a GGUF file written by
// folio-make-model's writer.
#include "services/frontend/chat/chat_template.h"

#include "services/frontend/chat/chat_template_input.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/frontend/chat/chat_template_input.h"
#include "services/worker/model/load_model.h"
#include "services/worker/model/random_model.h"

namespace folio::frontend {
namespace {

using ::testing::HasSubstr;

std::string ReadTemplate(const std::string& name) {
  std::ifstream in(std::string(FOLIO_CHAT_TEMPLATES_DIR) + "/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Render(const std::string& source, const std::vector<ChatMessage>& messages,
                   const std::string& bos = "<s>", const std::string& eos = "</s>",
                   bool add_generation_prompt = true) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Create(source, bos, eos);
  if (!t.ok()) return "CREATE ERROR: " + std::string(t.status().message());
  absl::StatusOr<std::string> out = t->Render(messages, add_generation_prompt);
  if (!out.ok()) return "RENDER ERROR: " + std::string(out.status().message());
  return *out;
}

TEST(ChatTemplateTest, Llama2Chat) {
  const std::string t = ReadTemplate("llama2_chat.jinja");
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(Render(t, {{"system", "You are terse."}, {"user", "Hello"}}),
            "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHello [/INST]");
  EXPECT_EQ(Render(t, {{"user", " Hi "}, {"assistant", "Hello!"}, {"user", "How are you?"}}),
            "<s>[INST] Hi [/INST] Hello! </s><s>[INST] How are you? [/INST]");
  EXPECT_THAT(Render(t, {{"user", "a"}, {"user", "b"}}),
              HasSubstr("Conversation roles must alternate user/assistant/user/assistant/..."));
}

TEST(ChatTemplateTest, ChatMl) {
  const std::string t = ReadTemplate("chatml.jinja");
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(Render(t, {{"system", "S"}, {"user", "U"}}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(Render(t, {{"user", "U"}}, "<s>", "</s>", /*add_generation_prompt=*/false),
            "<|im_start|>user\nU<|im_end|>\n");
}

TEST(ChatTemplateTest, Llama3) {
  const std::string t = ReadTemplate("llama3.jinja");
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(Render(t, {{"system", "Be brief. "}, {"user", " Hi"}}, "<|begin_of_text|>",
                   "<|eot_id|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateTest, ZephyrMultiLineTemplateUsesTrimAndLstripBlocks) {
  const std::string t = ReadTemplate("zephyr.jinja");
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(Render(t, {{"system", "S"}, {"user", "Hello"}}),
            "<|system|>\nS</s>\n<|user|>\nHello</s>\n<|assistant|>\n");
}

TEST(ChatTemplateTest, DefaultTemplateWhenTheModelHasNone) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Create("", "<s>", "</s>");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->is_default());
  absl::StatusOr<std::string> out = t->Render({{"system", "Be kind."}, {"user", "Hi"}}, true);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "system: Be kind.\nuser: Hi\nassistant:");
}

// The default template carries the openai SDK's whole tool loop: tools, an assistant
// message with content null and tool_calls, a tool result, a message without content.
TEST(ChatTemplateTest, DefaultTemplateRendersTheToolLoop) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Create("", "<s>", "</s>");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->tool_call_format(), ToolCallFormat::kHermes)
      << "a model without a template still gets a tool-call parser";
  absl::StatusOr<ChatInput> in = ParseChatInput(R"({
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "22 C"},
      {"role": "user", "content": [{"type": "text", "text": "And "}, {"type": "text", "text": "tomorrow?"}]},
      {"role": "user"}],
    "tools": [{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object"}}}]})");
  ASSERT_TRUE(in.ok()) << in.status();
  absl::StatusOr<std::string> out = t->Render(*in);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "system: You can call these functions. To call one, answer with <tool_call>"
            "{\"name\": <function name>, \"arguments\": <its arguments as a JSON object>}"
            "</tool_call>.\n"
            "{\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\"}}\n"
            "user: Weather in Paris?\n"
            "assistant: <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": "
            "\"Paris\"}}</tool_call>\n"
            "tool: 22 C\n"
            "user: And tomorrow?\n"
            "user: \n"
            "assistant:");
}

TEST(ChatTemplateTest, BadTemplateIsAnErrorWithTheLine) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Create("x\n{% for m in messages %}", "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("missing {% endfor %}"));
}

TEST(ChatTemplateTest, TemplatesTravelThroughGgufFiles) {
  for (const char* name : {"llama2_chat.jinja", "chatml.jinja", "llama3.jinja"}) {
    worker::RandomModelOptions o;
    o.vocab_size = 300;
    o.dim = 32;
    o.hidden_dim = 64;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    o.num_layers = 1;
    o.chat_template = ReadTemplate(name);
    const std::string path = ::testing::TempDir() + "/chat_" + name + ".gguf";
    ASSERT_TRUE(worker::WriteRandomModel(o, path).ok());
    absl::StatusOr<std::unique_ptr<worker::ModelWeights>> w = worker::LoadModel(path);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ((*w)->vocab.chat_template, o.chat_template) << name;
    std::remove(path.c_str());
  }
  // Named templates (tokenizer.chat_template.<name>) come along, and the tool_use one is
  // chosen for requests with tools.
  worker::RandomModelOptions named;
  named.vocab_size = 300;
  named.chat_template = "{{ 'default' }}";
  named.named_chat_templates = {{"tool_use", "{{ 'tools' }}"}, {"rag", "{{ 'rag' }}"}};
  const std::string named_path = ::testing::TempDir() + "/chat_named.gguf";
  ASSERT_TRUE(worker::WriteRandomModel(named, named_path).ok());
  absl::StatusOr<std::unique_ptr<worker::ModelWeights>> nw = worker::LoadModel(named_path);
  ASSERT_TRUE(nw.ok()) << nw.status();
  EXPECT_EQ((*nw)->vocab.named_chat_templates, named.named_chat_templates);
  const std::map<std::string, std::string> by_name((*nw)->vocab.named_chat_templates.begin(),
                                                   (*nw)->vocab.named_chat_templates.end());
  EXPECT_EQ(SelectChatTemplate((*nw)->vocab.chat_template, by_name, /*has_tools=*/true), "{{ 'tools' }}");
  EXPECT_EQ(SelectChatTemplate((*nw)->vocab.chat_template, by_name, /*has_tools=*/false), "{{ 'default' }}");
  EXPECT_EQ(SelectChatTemplate("", {{"default", "d"}}, /*has_tools=*/true), "d");
  EXPECT_EQ(SelectChatTemplate("", {}, /*has_tools=*/false), "");
  std::remove(named_path.c_str());
  // A model written without one has none.
  worker::RandomModelOptions plain;
  plain.vocab_size = 300;
  const std::string path = ::testing::TempDir() + "/chat_plain.gguf";
  ASSERT_TRUE(worker::WriteRandomModel(plain, path).ok());
  absl::StatusOr<std::unique_ptr<worker::ModelWeights>> w = worker::LoadModel(path);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->vocab.chat_template, "");
  std::remove(path.c_str());
}

class EncodeChatPromptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Tokenizer> t = Tokenizer::Create(worker::MakeRandomModelVocab(512));
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_.emplace(*std::move(t));
  }
  std::vector<int32_t> Plain(std::string_view text) {
    return *tokenizer_->Encode(text, AddBos::kNo);
  }
  std::optional<Tokenizer> tokenizer_;
};

TEST_F(EncodeChatPromptTest, ControlTokenPiecesBecomeTheirTokens) {
  absl::StatusOr<std::vector<int32_t>> ids =
      EncodeChatPrompt(*tokenizer_, "<s>[INST] hi [/INST] ok </s><s>[INST] again [/INST]");
  ASSERT_TRUE(ids.ok()) << ids.status();
  std::vector<int32_t> want = {tokenizer_->bos_id()};
  for (int32_t id : Plain("[INST] hi [/INST] ok ")) want.push_back(id);
  want.push_back(tokenizer_->eos_id());
  want.push_back(tokenizer_->bos_id());
  for (int32_t id : Plain("[INST] again [/INST]")) want.push_back(id);
  EXPECT_EQ(*ids, want);
}

TEST_F(EncodeChatPromptTest, BosIsAddedOnceWhenTheTemplateLeavesItOut) {
  absl::StatusOr<std::vector<int32_t>> ids = EncodeChatPrompt(*tokenizer_, "user: hi\nassistant:");
  ASSERT_TRUE(ids.ok()) << ids.status();
  std::vector<int32_t> want = {tokenizer_->bos_id()};
  for (int32_t id : Plain("user: hi\nassistant:")) want.push_back(id);
  EXPECT_EQ(*ids, want);
}

// Hugging Face tokenizes a rendered template with add_special_tokens=False (the template's
// BOS is the only one); llama.cpp's server strips one leading BOS text from the rendering
// when the vocabulary adds BOS, then lets the tokenizer add it. Folio does what llama.cpp
// does: for templates that write bos_token (all that need it) the three agree on one BOS.
TEST_F(EncodeChatPromptTest, TheTemplatesBosIsNotDoubled) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::Create(ReadTemplate("llama2_chat.jinja"), "<s>", "</s>");
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::string> text = t->Render({{"user", "hi"}}, true);
  ASSERT_TRUE(text.ok()) << text.status();
  ASSERT_EQ(text->rfind("<s>", 0), 0u) << *text;  // the template wrote BOS
  absl::StatusOr<std::vector<int32_t>> ids = EncodeChatPrompt(*tokenizer_, *text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GE(ids->size(), 2u);
  EXPECT_EQ((*ids)[0], tokenizer_->bos_id());
  EXPECT_NE((*ids)[1], tokenizer_->bos_id());
  EXPECT_EQ(std::count(ids->begin(), ids->end(), tokenizer_->bos_id()), 1);
  // llama.cpp strips one BOS and adds one: a rendering that opens with two keeps two.
  ids = EncodeChatPrompt(*tokenizer_, "<s><s>x");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(std::count(ids->begin(), ids->end(), tokenizer_->bos_id()), 2);
}

TEST(EncodeChatPromptNoBosTest, AVocabularyWithoutAddBosGetsOnlyTheTemplatesBos) {
  Vocab v = worker::MakeRandomModelVocab(512);
  v.add_bos = false;
  absl::StatusOr<Tokenizer> tok = Tokenizer::Create(v);
  ASSERT_TRUE(tok.ok()) << tok.status();
  absl::StatusOr<std::vector<int32_t>> ids = EncodeChatPrompt(*tok, "user: hi");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(std::count(ids->begin(), ids->end(), tok->bos_id()), 0);
  ids = EncodeChatPrompt(*tok, "<s>user: hi");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(std::count(ids->begin(), ids->end(), tok->bos_id()), 1);
}

TEST_F(EncodeChatPromptTest, InvalidUtf8IsAnError) {
  EXPECT_FALSE(EncodeChatPrompt(*tokenizer_, "bad \xff byte").ok());
}

}  // namespace
}  // namespace folio::frontend
