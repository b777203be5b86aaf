// Reasoning output on real chat templates (llama.cpp's models/templates): the scheduler
// plays a reasoning model's output and the client gets the reasoning apart from the
// answer, streamed and not, under both field names, with its token count in the usage;
// the template decides where the output starts (Qwen3 leaves <think> to the model,
// DeepSeek-R1's distills open it in the prompt, as llama.cpp's copy of the template does
// with enable_thinking set), and a constrained answer is held to the
// text after the reasoning. The fixtures: chat_tools_test_env.h.
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/frontend/http/chat_tools_test_env.h"

namespace folio::frontend::testing {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr char kDeepSeekR1[] = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja";

struct Split {
  std::string reasoning;
  std::string content;
};

// What a reasoning parser must make of `said` (the decoded output), written out directly:
// the text between the tags (or from the start, when the prompt opened the block) is the
// reasoning, the rest after the end tag's whitespace the content.
Split Expected(const std::string& said, bool starts_inside) {
  size_t open = 0;
  if (!starts_inside) {
    open = said.find("<think>");
    EXPECT_NE(open, std::string::npos) << said;
    open += 7;
  }
  const size_t close = said.find("</think>", open);
  EXPECT_NE(close, std::string::npos) << said;
  size_t after = close + 8;
  while (after < said.size() && (said[after] == ' ' || said[after] == '\n')) ++after;
  return {said.substr(open, close - open), said.substr(after)};
}

class ReasoningTest : public ToolCallsTest {
 protected:
  void UseTemplate(const char* name) {
    const std::string source = ReadFileOrEmpty(TemplatePath(name));
    ASSERT_FALSE(source.empty()) << TemplatePath(name);
    info_.mutable_tokenizer()->set_chat_template(source);
    ASSERT_NO_FATAL_FAILURE(StartFrontend(FrontendOptions{}));
  }
  static ordered_json Chat(const ordered_json& extra = ordered_json::object()) {
    ordered_json body = {{"messages", {{{"role", "user"}, {"content", "2+2?"}}}},
                         {"max_tokens", 200}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    return body;
  }
  // Posts `body` with the model writing `output`, streamed and not: both must split the
  // same way, as `want`; returns the non-streamed response.
  ordered_json ExpectSplit(const ordered_json& body, const std::string& output, const Split& want) {
    Play(Encode(output));
    auto [status, r] = Post(body);
    EXPECT_EQ(status, 200) << r.dump();
    const ordered_json message = r["choices"][0]["message"];
    EXPECT_EQ(message.value("reasoning_content", ""), want.reasoning) << r.dump();
    EXPECT_EQ(message.value("reasoning", ""), want.reasoning) << r.dump();
    EXPECT_EQ(message["content"], want.content) << r.dump();

    std::string reasoning, reasoning_too, content;
    ordered_json stream_body = body;
    stream_body["stream_options"] = {{"include_usage", true}};
    ordered_json usage;
    for (const ordered_json& chunk : Stream(stream_body)) {
      if (chunk.contains("usage") && !chunk["usage"].is_null()) usage = chunk["usage"];
      for (const ordered_json& c : chunk["choices"]) {
        const ordered_json& d = c["delta"];
        if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
        if (d.contains("reasoning")) reasoning_too += d["reasoning"].get<std::string>();
        if (d.contains("content") && d["content"].is_string()) {
          content += d["content"].get<std::string>();
        }
      }
    }
    EXPECT_EQ(reasoning, want.reasoning);
    EXPECT_EQ(reasoning_too, want.reasoning);
    EXPECT_EQ(content, want.content);
    EXPECT_EQ(usage, r["usage"]) << "streamed and whole usage differ";
    return r;
  }
  // The number of output tokens up to the one that completes </think>.
  int32_t TokensThroughEndTag(const std::string& output) {
    const std::vector<int32_t> ids = Encode(output);
    for (size_t i = 1; i <= ids.size(); ++i) {
      std::vector<int32_t> prefix(ids.begin(), ids.begin() + static_cast<long>(i));
      if (Decode(prefix).find("</think>") != std::string::npos) return static_cast<int32_t>(i);
    }
    ADD_FAILURE() << "no </think> in " << output;
    return 0;
  }
  std::string LastGrammar() {
    std::vector<FakeScheduler::CallRecord> calls = fake_->calls();
    EXPECT_FALSE(calls.empty());
    return calls.empty() ? "" : calls.back().request.grammar();
  }
};

TEST_F(ReasoningTest, Qwen3WritesItsThinkBlockAndTheAnswerFollows) {
  ASSERT_NO_FATAL_FAILURE(UseTemplate(kQwen3));
  const std::string output = "<think>\nTwo and two make four.\n</think>\n\nIt is four.";
  ordered_json r = ExpectSplit(Chat(), output, Expected(Said(output), false));
  EXPECT_EQ(r["usage"]["completion_tokens_details"]["reasoning_tokens"],
            TokensThroughEndTag(output))
      << r.dump();
  EXPECT_EQ(r["usage"]["completion_tokens"], Encode(output).size());

  // Cut inside the reasoning (no end tag): all of it is reasoning, and no content.
  const std::string cut = "<think>\nTwo and two";
  Play(Encode(cut));
  auto [status, cut_r] = Post(Chat());
  ASSERT_EQ(status, 200) << cut_r.dump();
  const std::string said_cut = Said(cut);
  EXPECT_EQ(cut_r["choices"][0]["message"]["reasoning_content"],
            said_cut.substr(said_cut.find("<think>") + 7))
      << cut_r.dump();
  EXPECT_TRUE(cut_r["choices"][0]["message"]["content"].is_null() ||
              cut_r["choices"][0]["message"]["content"] == "")
      << cut_r.dump();
}

TEST_F(ReasoningTest, Qwen3WithThinkingOffAnswersWithoutReasoning) {
  ASSERT_NO_FATAL_FAILURE(UseTemplate(kQwen3));
  const ordered_json body = Chat({{"chat_template_kwargs", {{"enable_thinking", false}}}});
  Play(Encode("It is four."));
  auto [status, r] = Post(body);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], Said("It is four.")) << r.dump();
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content")) << r.dump();
  EXPECT_EQ(r["usage"]["completion_tokens_details"]["reasoning_tokens"], 0) << r.dump();
}

TEST_F(ReasoningTest, DeepSeekR1OpensTheBlockInThePromptSoTheOutputStartsInside) {
  ASSERT_NO_FATAL_FAILURE(UseTemplate(kDeepSeekR1));
  const std::string output = "Two and two make four.\n</think>\n\nIt is four.";
  // This template closes the block at once unless enable_thinking is set.
  const ordered_json thinking = {{"chat_template_kwargs", {{"enable_thinking", true}}}};
  ordered_json r = ExpectSplit(Chat(thinking), output, Expected(Said(output), true));
  EXPECT_EQ(r["usage"]["completion_tokens_details"]["reasoning_tokens"],
            TokensThroughEndTag(output))
      << r.dump();
}

TEST_F(ReasoningTest, AConstrainedAnswerStartsAfterTheReasoning) {
  const ordered_json json_object = {{"response_format", {{"type", "json_object"}}},
                                    {"chat_template_kwargs", {{"enable_thinking", true}}}};
  // DeepSeek-R1: inside from the first byte, so the grammar opens with the reasoning.
  ASSERT_NO_FATAL_FAILURE(UseTemplate(kDeepSeekR1));
  Play(Encode("Fine.\n</think>\n\n{}"));
  auto [status, r] = Post(Chat(json_object));
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_TRUE(LastGrammar().starts_with("root ::= reasoning-think-0 ")) << LastGrammar();
  EXPECT_NE(LastGrammar().find("reasoning-answer ::="), std::string::npos) << LastGrammar();
}

TEST_F(ReasoningTest, AConstrainedAnswerMayFollowAThinkBlockTheModelOpens) {
  ASSERT_NO_FATAL_FAILURE(UseTemplate(kQwen3));
  const ordered_json json_object = {{"response_format", {{"type", "json_object"}}}};
  Play(Encode("<think>\nFine.\n</think>\n\n{}"));
  auto [status, r] = Post(Chat(json_object));
  ASSERT_EQ(status, 200) << r.dump();
  // Qwen3: the answer at once, or a think block first.
  EXPECT_TRUE(LastGrammar().starts_with("root ::= reasoning-answer | ")) << LastGrammar();
}

TEST_F(ReasoningTest, WithTheParserOffTheGrammarIsTheAnswersAlone) {
  const std::string source = ReadFileOrEmpty(TemplatePath(kQwen3));
  ASSERT_FALSE(source.empty());
  info_.mutable_tokenizer()->set_chat_template(source);
  OpenAiServerOptions off;
  off.reasoning_parser = ReasoningParserMode::kNone;
  ASSERT_NO_FATAL_FAILURE(StartFrontend(FrontendOptions{}, off));
  Play(Encode("{}"));
  auto [status, r] = Post(Chat({{"response_format", {{"type", "json_object"}}}}));
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_FALSE(LastGrammar().empty());
  EXPECT_EQ(LastGrammar().find("reasoning-"), std::string::npos) << LastGrammar();
  EXPECT_FALSE(r["usage"].contains("completion_tokens_details")) << r.dump();
}

}  // namespace
}  // namespace folio::frontend::testing
