// Every chat template in llama.cpp's models/templates/ (the reference's source bundle),
// rendered with the conversations of testdata/conversations.json by Folio's ChatTemplate
// and by Python's Jinja2 set up as Hugging Face sets it up (testdata/hf_render.py, run
// with Debian's /usr/bin/python3 and python3-jinja2): the outputs must be byte-identical.
//
// Per (template, conversation):
//   - Jinja2 renders, Folio renders: the same bytes, always.
//   - Jinja2 raises (the template rejects the conversation, e.g. "System role not
//     supported", or cannot take a content-part list): Folio must fail too.
//   - Jinja2 renders, Folio fails: allowed only for a template on kRefused, with the reason.
// A template Folio renders differently from Jinja2 fails the test whatever the list says.
// The test prints a table of identical templates per model family.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/frontend/http/chat_template.h"
#include "tests/reference/llama_ref.h"

namespace folio::frontend {
namespace {

using nlohmann::ordered_json;

// Templates Folio refuses with an error (for the conversations it cannot render), and why.
// Empty: every template renders every conversation as Jinja2 does.
const std::map<std::string, std::string>& Refused() {
  static const auto* refused = new std::map<std::string, std::string>{};
  return *refused;
}

constexpr char kPinnedDate[] = "2026-07-26";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `command`, returning its stdout (empty on failure, with `*ok` false).
std::string RunCommand(const std::string& command, bool* ok) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) {
    *ok = false;
    return out;
  }
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *ok = pclose(p) == 0;
  return out;
}

std::string Family(const std::string& name) {
  static const std::vector<std::pair<std::string, std::regex>> kFamilies = {
      {"Llama 3.x", std::regex("^meta-llama-Llama-3")},
      {"Qwen2.5/3", std::regex("^(Qwen|Qwen3)")},
      {"Mistral", std::regex("(mistral|Mistral|Ministral|Devstral)")},
      {"Gemma", std::regex("gemma")},
      {"Phi", std::regex("Phi-")},
      {"DeepSeek", std::regex("(deepseek|DeepSeek)")},
      {"SmolLM3", std::regex("SmolLM3")},
      {"Granite", std::regex("granite")},
      {"Hermes", std::regex("Hermes")},
  };
  for (const auto& [family, re] : kFamilies) {
    if (std::regex_search(name, re)) return family;
  }
  return "other";
}

// Where two texts first differ, with some context, for a failure message.
std::string Diff(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 60 ? i - 60 : 0;
  return absl::StrCat("first difference at byte ", i, "\n  jinja2: ", ordered_json(want.substr(from, 140)).dump(),
                      "\n  folio:  ", ordered_json(got.substr(from, 140)).dump());
}

TEST(JinjaReferenceTest, RealTemplatesRenderAsJinja2Does) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const std::string templates_dir = reference::LlamaCppSourceDir() + "/models/templates";
  ASSERT_TRUE(std::filesystem::is_directory(templates_dir)) << templates_dir;
  bool ok = false;
  RunCommand("/usr/bin/python3 -c 'import jinja2' 2>/dev/null", &ok);
  if (!ok) {
    const char* why = "/usr/bin/python3 with jinja2 is missing (Debian: python3-jinja2)";
    if (reference::ReferenceRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }

  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(templates_dir)) {
    if (entry.path().extension() == ".jinja") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 60u) << templates_dir;

  const std::string conversations_path = std::string(FOLIO_CHAT_TEMPLATES_DIR) + "/conversations.json";
  std::string command = absl::StrCat("/usr/bin/python3 ", FOLIO_CHAT_TEMPLATES_DIR,
                                     "/hf_render.py --conversations ", conversations_path,
                                     " --date ", kPinnedDate);
  for (const std::string& f : files) absl::StrAppend(&command, " '", f, "'");
  const std::string reference_text = RunCommand(command, &ok);
  ASSERT_TRUE(ok) << "hf_render.py failed: " << command;
  const ordered_json reference = ordered_json::parse(reference_text);
  const ordered_json fixtures = ordered_json::parse(ReadFile(conversations_path));
  ASSERT_GE(fixtures["conversations"].size(), 10u);

  absl::CivilDay day;
  ASSERT_TRUE(absl::ParseCivilTime(kPinnedDate, &day));
  jinja::RenderOptions options;
  options.now = absl::FromCivil(day, absl::UTCTimeZone());

  struct Tally { int identical = 0, refused = 0, total = 0; };
  std::map<std::string, Tally> families;
  Tally all;
  int renders_compared = 0;
  for (const std::string& path : files) {
    const std::string name = std::filesystem::path(path).filename().string();
    SCOPED_TRACE(name);
    const bool on_refuse_list = Refused().count(name) > 0;
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Create(
        ReadFile(path), fixtures["bos_token"].get<std::string>(),
        fixtures["eos_token"].get<std::string>());
    bool identical = t.ok();
    bool folio_failed_some = !t.ok();
    if (!t.ok() && !on_refuse_list) ADD_FAILURE() << "does not parse: " << t.status();
    for (const ordered_json& conv : fixtures["conversations"]) {
      if (!t.ok()) break;
      const std::string conv_name = conv["name"];
      SCOPED_TRACE(conv_name);
      const ordered_json& want = reference.at(name).at(conv_name);
      ChatInput input;
      for (const auto& [k, v] : conv["context"].items()) {
        if (k == "messages") {
          input.messages = jinja::Value::FromJson(v);
        } else if (k == "tools") {
          input.tools = jinja::Value::FromJson(v);
        } else if (k == "add_generation_prompt") {
          input.add_generation_prompt = v.get<bool>();
        } else {
          input.extra.emplace_back(k, jinja::Value::FromJson(v));
        }
      }
      absl::StatusOr<std::string> got = t->Render(input, options);
      if (want["ok"].get<bool>()) {
        ++renders_compared;
        if (!got.ok()) {
          folio_failed_some = true;
          identical = false;
          if (!on_refuse_list) ADD_FAILURE() << "Jinja2 renders it, Folio fails: " << got.status();
        } else if (*got != want["text"].get<std::string>()) {
          identical = false;
          ADD_FAILURE() << "renders differently from Jinja2: " << Diff(want["text"], *got);
        }
      } else if (got.ok()) {
        identical = false;
        ADD_FAILURE() << "Jinja2 raises (" << want["error"].get<std::string>()
                      << ") but Folio renders: " << ordered_json(got->substr(0, 200)).dump();
      }
    }
    if (on_refuse_list && !folio_failed_some) {
      ADD_FAILURE() << "on the refuse list but renders every conversation: take it off";
    }
    Tally& fam = families[Family(name)];
    for (Tally* tally : {&fam, &all}) {
      ++tally->total;
      if (identical) ++tally->identical;
      if (on_refuse_list) ++tally->refused;
    }
  }
  std::cout << "chat templates identical to Jinja2 (" << fixtures["conversations"].size()
            << " conversations each, " << renders_compared << " renders compared):\n";
  for (const auto& [family, tally] : families) {
    std::cout << "  " << family << ": " << tally.identical << "/" << tally.total
              << (tally.refused ? absl::StrCat(" (", tally.refused, " refused)") : "") << "\n";
  }
  std::cout << "  all: " << all.identical << "/" << all.total << "\n";
}

}  // namespace
}  // namespace folio::frontend
