// A served random-weight Llama 3-shaped model with llama.cpp's llama-bpe vocabulary (its
// tokenizer.* keys copied into the GGUF, Llama 3.1's chat template as the model's own)
// behind a whole local cluster: the prompt of a POST /v1/chat/completions must be exactly
// llama.cpp's tokenization (Tokenize with parse_special) of what Python's Jinja2 renders
// for the same messages with the same template (services/frontend/chat/testdata/
// hf_render.py, Hugging Face's environment), for a plain conversation and one with tools, a
// tool call and its result.
//
// What is observed of the served prompt: usage.prompt_tokens, and the model's own reading
// of it: the chat's greedy tokens with their log-probs (top 5 at every step) must equal
// those of POST /v1/completions given llama.cpp's token ids as the prompt, while a prompt
// one token off must not (so the comparison sees a difference of one token).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "common/test_models_dir.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "services/worker/model/random_model.h"
#include "tests/cluster.h"
#include "tests/openai_tools.h"
#include "tests/reference/llama_ref.h"

namespace folio::testing {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr char kTemplate[] = "meta-llama-Llama-3.1-8B-Instruct.jinja";
constexpr char kBos[] = "<|begin_of_text|>";
constexpr int kSteps = 6;

std::string TemplatePath() {
  return reference::LlamaCppSourceDir() + "/models/templates/" + kTemplate;
}

// Conversations as a client sends them (tool-call arguments as JSON text).
ordered_json Conversations() {
  return ordered_json::parse(R"([
    {"name": "plain", "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Hello! What's 2+2? Answer in «French», please."}]},
    {"name": "tools", "tools": true, "messages": [
      {"role": "system", "content": "You are a weather bot."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 21}"}]}])");
}

// Jinja2's rendering of each conversation ({name: text}); arguments as objects, as
// transformers gets them.
std::map<std::string, std::string> Jinja2(const ordered_json& conversations, const std::string& eos) {
  ordered_json fixtures = ordered_json::array();
  for (const ordered_json& c : conversations) {
    ordered_json messages = c["messages"];
    for (ordered_json& m : messages) {
      if (!m.contains("tool_calls")) continue;
      for (ordered_json& call : m["tool_calls"]) {
        call["function"]["arguments"] =
            ordered_json::parse(call["function"]["arguments"].get<std::string>());
      }
    }
    ordered_json context = {{"messages", messages}, {"add_generation_prompt", true}};
    if (c.value("tools", false)) context["tools"] = WeatherTools();
    fixtures.push_back({{"name", c["name"]}, {"context", context}});
  }
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/llama3_chat_", getpid(), ".json");
  std::ofstream(path) << ordered_json{{"bos_token", kBos}, {"eos_token", eos},
                                      {"conversations", fixtures}}
                             .dump();
  const CommandResult run = RunCommand(absl::StrCat(
      "/usr/bin/python3 ", FOLIO_CHAT_TEMPLATES_DIR, "/hf_render.py --conversations ", path,
      " --date 2026-07-26 '", TemplatePath(), "'"));
  std::remove(path.c_str());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  std::map<std::string, std::string> out;
  const ordered_json parsed = ordered_json::parse(run.output, nullptr, false);
  if (!parsed.is_object() || !parsed.contains(kTemplate)) {
    ADD_FAILURE() << run.output;
    return out;
  }
  for (const auto& [name, r] : parsed[kTemplate].items()) {
    EXPECT_TRUE(r.at("ok").get<bool>()) << name << ": " << r.dump();
    if (r.at("ok").get<bool>()) out[name] = r.at("text").get<std::string>();
  }
  return out;
}

ordered_json Post(int port, const std::string& path, const ordered_json& body) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(120, 0);
  httplib::Result r = client.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return nullptr;
  EXPECT_EQ(r->status, 200) << r->body;
  return ordered_json::parse(r->body, nullptr, false);
}

// The greedy steps as (token, logprob, top-5 {token: logprob}) from either endpoint's
// logprobs.
struct Step {
  std::string token;
  double logprob = 0;
  std::map<std::string, double> top;
};
std::vector<Step> ChatSteps(const ordered_json& r) {
  std::vector<Step> out;
  for (const ordered_json& t : r["choices"][0]["logprobs"]["content"]) {
    Step s{t["token"], t["logprob"], {}};
    for (const ordered_json& top : t["top_logprobs"]) s.top[top["token"]] = top["logprob"];
    out.push_back(std::move(s));
  }
  return out;
}
std::vector<Step> CompletionSteps(const ordered_json& r) {
  std::vector<Step> out;
  const ordered_json& lp = r["choices"][0]["logprobs"];
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    Step s{lp["tokens"][i], lp["token_logprobs"][i], {}};
    for (const auto& [token, value] : lp["top_logprobs"][i].items()) s.top[token] = value;
    out.push_back(std::move(s));
  }
  return out;
}
bool SameSteps(const std::vector<Step>& a, const std::vector<Step>& b, std::string* why) {
  if (a.size() != b.size()) {
    *why = absl::StrCat(a.size(), " steps vs ", b.size());
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    bool same = a[i].token == b[i].token && std::abs(a[i].logprob - b[i].logprob) < 1e-4 &&
                a[i].top.size() == b[i].top.size();
    for (const auto& [token, value] : a[i].top) {
      auto it = b[i].top.find(token);
      same = same && it != b[i].top.end() && std::abs(it->second - value) < 1e-4;
    }
    if (!same) {
      *why = absl::StrCat("step ", i, ": '", a[i].token, "' ", a[i].logprob, " vs '", b[i].token,
                          "' ", b[i].logprob);
      return false;
    }
  }
  return true;
}

TEST(Llama3ChatPromptTest, ServedChatPromptIsLlamaCppsTokensOfJinja2sRendering) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  if (RunCommand("/usr/bin/python3 -c 'import jinja2'").exit_code != 0) {
    const char* why = "/usr/bin/python3 with jinja2 is missing (Debian: python3-jinja2)";
    if (reference::ReferenceRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  const std::string dir = absl::StrCat(::testing::TempDir(), "/llama3-chat-", getpid());
  std::filesystem::create_directories(dir);
  const std::string model = dir + "/llama3-bpe.gguf";
  worker::RandomModelOptions o;
  o.name = "llama3-bpe";
  o.vocab_from = reference::LlamaCppSourceDir() + "/models/ggml-vocab-llama-bpe.gguf";
  o.chat_template = ReadFileOrEmpty(TemplatePath());
  ASSERT_FALSE(o.chat_template.empty());
  o.dtype = worker::DType::kF16;
  o.dim = 64;
  o.hidden_dim = 128;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 1;
  o.context_length = 1024;
  o.rope_theta = 500000.0f;
  o.rope_freqs = true;
  o.weight_std = 0.05f;
  o.embedding_std = 0.5f;
  ASSERT_TRUE(worker::WriteRandomModel(o, model).ok());

  // llama.cpp reads the file's vocabulary as its own.
  absl::StatusOr<std::unique_ptr<reference::LlamaModel>> ref =
      reference::LlamaModel::Load(model, {.vocab_only = true});
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ((*ref)->n_vocab(), 128256);
  ASSERT_EQ((*ref)->TokenToPiece((*ref)->bos(), {}), kBos);
  const std::string eos = (*ref)->TokenToPiece((*ref)->eos(), {});

  ClusterOptions options;
  options.model = model;
  options.worker_args = {"--kv_cache_bytes=32MiB", "--num_threads=1"};
  auto cluster = Cluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const int port = (*cluster)->frontend_process().http_port();

  const ordered_json conversations = Conversations();
  const std::map<std::string, std::string> jinja2 = Jinja2(conversations, eos);
  ASSERT_EQ(jinja2.size(), conversations.size());
  for (const ordered_json& c : conversations) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    std::string text = jinja2.at(name);
    // What the template renders for tools: the definitions, the call and its result.
    if (name == "tools") {
      ASSERT_TRUE(absl::StrContains(text, "\"get_weather\"")) << text;
      ASSERT_TRUE(absl::StrContains(text, "<|start_header_id|>ipython<|end_header_id|>")) << text;
      ASSERT_TRUE(absl::StrContains(text, "temp_c")) << text;
    }
    // llama.cpp's server rule (as Folio's): the tokenizer adds BOS, one written BOS goes.
    ASSERT_TRUE(absl::StartsWith(text, kBos)) << text;
    text.erase(0, std::strlen(kBos));
    absl::StatusOr<std::vector<int32_t>> ids =
        (*ref)->Tokenize(text, {.add_special = true, .parse_special = true});
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_GT(ids->size(), 30u);

    ordered_json chat_body = {{"messages", c["messages"]}, {"max_tokens", kSteps},
                              {"temperature", 0}, {"ignore_eos", true}, {"logprobs", true},
                              {"top_logprobs", 5}};
    if (c.value("tools", false)) {
      chat_body["tools"] = WeatherTools();
      chat_body["tool_choice"] = "none";  // the random model's text is not parsed
    }
    const ordered_json chat = Post(port, "/v1/chat/completions", chat_body);
    ASSERT_TRUE(chat.is_object());
    EXPECT_EQ(chat["usage"]["prompt_tokens"], ids->size());

    auto complete = [&](const std::vector<int32_t>& prompt) {
      return Post(port, "/v1/completions",
                  {{"prompt", prompt}, {"max_tokens", kSteps}, {"temperature", 0},
                   {"ignore_eos", true}, {"logprobs", 5}});
    };
    const ordered_json same = complete(*ids);
    ASSERT_TRUE(same.is_object());
    EXPECT_EQ(same["usage"]["prompt_tokens"], ids->size());
    // The second request found the first's prompt blocks in the prefix cache (keyed by
    // the token ids): another sign the ids are the same.
    EXPECT_GT(same["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
    const std::vector<Step> chat_steps = ChatSteps(chat);
    ASSERT_EQ(chat_steps.size(), static_cast<size_t>(kSteps));
    std::string why;
    EXPECT_TRUE(SameSteps(chat_steps, CompletionSteps(same), &why)) << why;
    EXPECT_EQ(chat["choices"][0]["message"]["content"], same["choices"][0]["text"]);

    // One token off, near the end: the model reads a different prompt.
    std::vector<int32_t> off = *ids;
    off[off.size() - 3] = off[off.size() - 3] == 1000 ? 1001 : 1000;
    const ordered_json other = complete(off);
    ASSERT_TRUE(other.is_object());
    EXPECT_FALSE(SameSteps(chat_steps, CompletionSteps(other), &why))
        << "a prompt one token off reads the same: the comparison cannot see the prompt";
  }
  cluster->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace folio::testing
