// tool_choice "required" and a named function on a served model (a random-weight Llama on
// a whole local cluster): with llama.cpp's tool-use templates given by --chat_template
// (Hermes 2 Pro, Qwen2.5, Llama 3.1, Mistral Nemo), the structured-output grammar makes
// even this model return a call, streamed and not, whose arguments python3-jsonschema
// validates against the function's schema; and tool_choice "auto" constrains a call the
// model opens from its marker on (ToolChoiceAutoTest).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "services/worker/model/random_model.h"
#include "tests/cluster.h"
#include "tests/reference/llama_ref.h"

namespace folio::testing {
namespace {

using json = nlohmann::ordered_json;

const json& Tools() {
  static const auto* tools = new json(json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "The weather",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome", "Tokyo"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "get_time", "description": "The time",
      "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": false}}}])"));
  return *tools;
}

// python3-jsonschema's verdict on `instance` against `schema`; "" when valid.
std::string Validate(const json& schema, const std::string& instance) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/tool_args_", getpid(), ".json");
  std::ofstream(path) << json{{"schema", schema}, {"instance", instance}}.dump();
  const CommandResult r = RunCommand(absl::StrCat(
      "/usr/bin/python3 -c 'import json, sys, jsonschema\n"
      "d = json.load(open(sys.argv[1]))\n"
      "jsonschema.validate(json.loads(d[\"instance\"]), d[\"schema\"])' ",
      path, " 2>&1"));
  std::remove(path.c_str());
  return r.exit_code == 0 ? "" : r.output;
}

json Post(int port, const json& body) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(120, 0);
  httplib::Result r = client.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return nullptr;
  EXPECT_EQ(r->status, 200) << r->body;
  if (!body.value("stream", false)) return json::parse(r->body, nullptr, false);
  // Streamed: joined into the non-streamed shape.
  json message = {{"content", ""}, {"tool_calls", json::array()}};
  std::string finish;
  for (absl::string_view event : absl::StrSplit(r->body, "\n\n", absl::SkipEmpty())) {
    const std::string data(event.substr(6));
    if (data == "[DONE]") continue;
    const json chunk = json::parse(data);
    for (const json& choice : chunk["choices"]) {
      if (choice["finish_reason"].is_string()) finish = choice["finish_reason"];
      const json& d = choice["delta"];
      if (d.contains("content") && d["content"].is_string()) {
        message["content"] = message["content"].get<std::string>() + d["content"].get<std::string>();
      }
      for (const json& c : d.value("tool_calls", json::array())) {
        if (c.contains("id")) {
          message["tool_calls"].push_back({{"id", c["id"]},
                                           {"function", {{"name", c["function"]["name"]},
                                                         {"arguments", c["function"]["arguments"]}}}});
        } else {
          json& f = message["tool_calls"][c["index"].get<size_t>()]["function"];
          f["arguments"] = f["arguments"].get<std::string>() + c["function"]["arguments"].get<std::string>();
        }
      }
    }
  }
  return {{"choices", {{{"message", message}, {"finish_reason", finish}}}}};
}

class ToolChoiceTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ToolChoiceTest, RequiredAndNamedReturnAValidCall) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  if (RunCommand("/usr/bin/python3 -c 'import jsonschema'").exit_code != 0) {
    const char* why = "/usr/bin/python3 with jsonschema is missing (Debian: python3-jsonschema)";
    if (reference::ReferenceRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  const std::string model = absl::StrCat(::testing::TempDir(), "/tool_choice_", getpid(), ".gguf");
  worker::RandomModelOptions o;
  o.vocab_size = 1024;
  o.context_length = 4096;
  o.seed = 7;
  ASSERT_TRUE(worker::WriteRandomModel(o, model).ok());
  ClusterOptions options;
  options.model = model;
  options.worker_args = {"--kv_cache_bytes=64MiB", "--num_threads=1"};
  options.frontend_args = {absl::StrCat("--chat_template=", reference::LlamaCppSourceDir(),
                                        "/models/templates/", GetParam())};
  auto cluster = Cluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const int port = (*cluster)->frontend_process().http_port();

  const json messages = {{{"role", "user"}, {"content", "Weather in Paris for 3 days?"}}};
  struct Case {
    json tool_choice;
    bool stream;
  };
  const json named = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  for (const Case& c : {Case{"required", false}, Case{"required", true}, Case{named, false},
                        Case{named, true}}) {
    SCOPED_TRACE(absl::StrCat(c.tool_choice.dump(), c.stream ? " streamed" : ""));
    const json r = Post(port, {{"messages", messages}, {"tools", Tools()},
                               {"tool_choice", c.tool_choice}, {"parallel_tool_calls", false},
                               {"max_tokens", 300}, {"temperature", 0}, {"stream", c.stream}});
    ASSERT_TRUE(r.is_object());
    const json& choice = r["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.dump();
    const json& calls = choice["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), 1u) << r.dump();
    const std::string name = calls[0]["function"]["name"];
    if (c.tool_choice.is_object()) {
      EXPECT_EQ(name, "get_time");
    }
    const json* schema = nullptr;
    for (const json& t : Tools()) {
      if (t["function"]["name"] == name) schema = &t["function"]["parameters"];
    }
    ASSERT_NE(schema, nullptr) << name;
    EXPECT_EQ(Validate(*schema, calls[0]["function"]["arguments"]), "") << r.dump();
    if (!c.stream) std::cout << GetParam() << ": " << choice["message"].dump() << "\n";
  }
  // The control: without enforcement this model writes no call.
  const json free = Post(port, {{"messages", messages}, {"tools", Tools()}, {"max_tokens", 40},
                                {"temperature", 0}});
  ASSERT_TRUE(free.is_object());
  EXPECT_FALSE(free["choices"][0]["message"].contains("tool_calls")) << free.dump();
  cluster->reset();
  std::remove(model.c_str());
}

INSTANTIATE_TEST_SUITE_P(LlamaCppTemplates, ToolChoiceTest,
                         ::testing::Values("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
                                           "Qwen-Qwen2.5-7B-Instruct.jinja",
                                           "meta-llama-Llama-3.1-8B-Instruct.jinja",
                                           "mistralai-Mistral-Nemo-Instruct-2407.jinja"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           n = n.substr(0, n.find(".jinja"));
                           for (char& ch : n) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// tool_choice "auto" (the default): free text, but a call the model opens is held to the
// tools' grammar from its marker on (a lazy grammar the scheduler switches on per choice).
// The random model is forced into the marker by a logit bias on the marker's one token
// (llama.cpp's llama-bpe vocabulary, with Llama 3.0's reserved control tokens named as
// Llama 3.1 and Hermes 2 Pro use them): every one of the N sampled choices must then write
// a call that parses and validates against its tool's schema, streamed and not. Without
// the bias the same model writes no call.
struct AutoCase {
  const char* template_file;
  int32_t marker_id;
  const char* marker;
};

class ToolChoiceAutoTest : public ::testing::TestWithParam<AutoCase> {};

TEST_P(ToolChoiceAutoTest, ACallOpenedByTheModelIsConstrainedFromItsMarker) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  if (RunCommand("/usr/bin/python3 -c 'import jsonschema'").exit_code != 0) {
    const char* why = "/usr/bin/python3 with jsonschema is missing (Debian: python3-jsonschema)";
    if (reference::ReferenceRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  const AutoCase& p = GetParam();
  const std::string model = absl::StrCat(::testing::TempDir(), "/tool_auto_", getpid(), ".gguf");
  worker::RandomModelOptions o;
  o.vocab_from = reference::LlamaCppSourceDir() + "/models/ggml-vocab-llama-bpe.gguf";
  o.rename_tokens = {{128008, "<|eom_id|>"}, {p.marker_id, p.marker}};
  o.dtype = worker::DType::kF16;
  o.context_length = 4096;
  o.seed = 11;
  ASSERT_TRUE(worker::WriteRandomModel(o, model).ok());
  ClusterOptions options;
  options.model = model;
  options.worker_args = {"--kv_cache_bytes=64MiB", "--num_threads=1"};
  options.frontend_args = {absl::StrCat("--chat_template=", reference::LlamaCppSourceDir(),
                                        "/models/templates/", p.template_file)};
  auto cluster = Cluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const int port = (*cluster)->frontend_process().http_port();

  const json messages = {{{"role", "user"}, {"content", "Weather in Paris for 3 days?"}}};
  const json bias = {{std::to_string(p.marker_id), 100}};
  constexpr int kChoices = 4;
  auto check_call = [](const json& choice) {
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << choice.dump();
    const json& calls = choice["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), 1u) << choice.dump();
    const std::string name = calls[0]["function"]["name"];
    const json* schema = nullptr;
    for (const json& t : Tools()) {
      if (t["function"]["name"] == name) schema = &t["function"]["parameters"];
    }
    ASSERT_NE(schema, nullptr) << name;
    EXPECT_EQ(Validate(*schema, calls[0]["function"]["arguments"]), "") << choice.dump();
  };
  const json r = Post(port, {{"messages", messages}, {"tools", Tools()}, {"logit_bias", bias},
                             {"parallel_tool_calls", false}, {"n", kChoices},
                             {"temperature", 1.0}, {"seed", 5}, {"max_tokens", 200}});
  ASSERT_TRUE(r.is_object());
  ASSERT_EQ(r["choices"].size(), static_cast<size_t>(kChoices)) << r.dump();
  for (const json& choice : r["choices"]) {
    SCOPED_TRACE(absl::StrCat("choice ", choice.value("index", -1)));
    check_call(choice);
  }
  std::cout << p.template_file << ": " << r["choices"][0]["message"].dump() << "\n";
  for (int seed : {6, 7}) {
    SCOPED_TRACE(absl::StrCat("streamed, seed ", seed));
    const json s = Post(port, {{"messages", messages}, {"tools", Tools()}, {"logit_bias", bias},
                               {"parallel_tool_calls", false}, {"temperature", 1.0},
                               {"seed", seed}, {"max_tokens", 200}, {"stream", true}});
    ASSERT_TRUE(s.is_object());
    check_call(s["choices"][0]);
  }
  // The controls: unbiased, this model writes no call; biased into the marker but free
  // (tool_choice none: no grammar, no parsing), it writes no call's JSON after it.
  const json free = Post(port, {{"messages", messages}, {"tools", Tools()}, {"max_tokens", 40},
                                {"temperature", 0}});
  ASSERT_TRUE(free.is_object());
  EXPECT_FALSE(free["choices"][0]["message"].contains("tool_calls")) << free.dump();
  const json unconstrained = Post(port, {{"messages", messages}, {"tools", Tools()},
                                         {"logit_bias", bias}, {"tool_choice", "none"},
                                         {"max_tokens", 60}, {"temperature", 1.0}, {"seed", 5}});
  ASSERT_TRUE(unconstrained.is_object());
  const json& text = unconstrained["choices"][0]["message"]["content"];
  ASSERT_TRUE(text.is_string()) << unconstrained.dump();
  EXPECT_EQ(text.get<std::string>().find("{\"name\""), std::string::npos) << text;
  cluster->reset();
  std::remove(model.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    LlamaCppTemplates, ToolChoiceAutoTest,
    ::testing::Values(AutoCase{"meta-llama-Llama-3.1-8B-Instruct.jinja", 128010, "<|python_tag|>"},
                      AutoCase{"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", 128002,
                               "<tool_call>"}),
    [](const ::testing::TestParamInfo<AutoCase>& info) {
      return std::string(info.param.marker_id == 128010 ? "Llama31PythonTag" : "Hermes2ProToolCall");
    });

}  // namespace
}  // namespace folio::testing
