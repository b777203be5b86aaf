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
// The test prints a table of identical templates per model family. Two more tests check
// the prompt token ids of the same renderings against llama.cpp's tokenizer: on a
// SentencePiece vocab (a random-weight Llama model's) and on llama.cpp's llama-bpe vocab
// (Llama 3's byte-level BPE, read by Folio's GGUF reader).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "common/test_models_dir.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "common/tokenizer/tokenizer.h"
#include "services/frontend/chat/chat_template.h"
#include "services/worker/model/gguf_vocab.h"
#include "services/worker/model/random_model.h"
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

// The templates' files, sorted, and Jinja2's renderings of every conversation with them.
struct ReferenceRun {
  std::vector<std::string> files;
  ordered_json reference;  // {template: {conversation: {"ok", "text" | "error"}}}
  ordered_json fixtures;   // conversations.json
};

// `bos` / `eos` non-empty: the conversations are rendered with those bos_token / eos_token
// texts instead of conversations.json's ("<s>", "</s>").
void RunReference(ReferenceRun* run, const std::string& bos = "", const std::string& eos = "") {
  const std::string templates_dir = reference::LlamaCppSourceDir() + "/models/templates";
  ASSERT_TRUE(std::filesystem::is_directory(templates_dir)) << templates_dir;
  bool ok = false;
  RunCommand("/usr/bin/python3 -c 'import jinja2' 2>/dev/null", &ok);
  if (!ok) {
    const char* why = "/usr/bin/python3 with jinja2 is missing (Debian: python3-jinja2)";
    if (reference::ReferenceRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  for (const auto& entry : std::filesystem::directory_iterator(templates_dir)) {
    if (entry.path().extension() == ".jinja") run->files.push_back(entry.path().string());
  }
  std::sort(run->files.begin(), run->files.end());
  ASSERT_GE(run->files.size(), 60u) << templates_dir;
  std::string conversations_path = std::string(FOLIO_CHAT_TEMPLATES_DIR) + "/conversations.json";
  run->fixtures = ordered_json::parse(ReadFileOrEmpty(conversations_path));
  if (!bos.empty()) {
    run->fixtures["bos_token"] = bos;
    run->fixtures["eos_token"] = eos;
    conversations_path = absl::StrCat(::testing::TempDir(), "/conversations_", getpid(), ".json");
    std::ofstream(conversations_path) << run->fixtures.dump();
  }
  std::string command = absl::StrCat("/usr/bin/python3 ", FOLIO_CHAT_TEMPLATES_DIR,
                                     "/hf_render.py --conversations ", conversations_path,
                                     " --date ", kPinnedDate);
  for (const std::string& f : run->files) absl::StrAppend(&command, " '", f, "'");
  const std::string reference_text = RunCommand(command, &ok);
  if (!bos.empty()) std::remove(conversations_path.c_str());
  ASSERT_TRUE(ok) << "hf_render.py failed: " << command;
  run->reference = ordered_json::parse(reference_text);
  ASSERT_GE(run->fixtures["conversations"].size(), 10u);
}

ChatInput InputOf(const ordered_json& conv) {
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
  return input;
}

jinja::RenderOptions PinnedOptions() {
  const absl::CivilDay day(2026, 7, 26);  // kPinnedDate
  jinja::RenderOptions options;
  options.now = absl::FromCivil(day, absl::UTCTimeZone());
  return options;
}

TEST(JinjaReferenceTest, RealTemplatesRenderAsJinja2Does) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  ReferenceRun run;
  RunReference(&run);
  if (HasFatalFailure() || IsSkipped()) return;
  const std::vector<std::string>& files = run.files;
  const ordered_json& reference = run.reference;
  const ordered_json& fixtures = run.fixtures;
  const jinja::RenderOptions options = PinnedOptions();

  struct Tally { int identical = 0, refused = 0, total = 0; };
  std::map<std::string, Tally> families;
  Tally all;
  int renders_compared = 0;
  for (const std::string& path : files) {
    const std::string name = std::filesystem::path(path).filename().string();
    SCOPED_TRACE(name);
    const bool on_refuse_list = Refused().count(name) > 0;
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Create(
        ReadFileOrEmpty(path), fixtures["bos_token"].get<std::string>(),
        fixtures["eos_token"].get<std::string>());
    bool identical = t.ok();
    bool folio_failed_some = !t.ok();
    if (!t.ok() && !on_refuse_list) ADD_FAILURE() << "does not parse: " << t.status();
    for (const ordered_json& conv : fixtures["conversations"]) {
      if (!t.ok()) break;
      const std::string conv_name = conv["name"];
      SCOPED_TRACE(conv_name);
      const ordered_json& want = reference.at(name).at(conv_name);
      const ChatInput input = InputOf(conv);
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

// For every template and conversation Jinja2 renders: Folio's rendering encoded by
// EncodeChatPrompt with `tok` equals Jinja2's rendering tokenized by llama.cpp as its server
// does (one leading BOS text stripped, then add_special and parse_special). Returns how
// many were compared; `per_llama3` (when given) counts them per Llama 3.x template.
int ComparePromptIds(const ReferenceRun& run, const Tokenizer& tok,
                     reference::LlamaModel& llama, std::map<std::string, int>* per_llama3) {
  const std::string bos = run.fixtures["bos_token"].get<std::string>();
  const std::string eos = run.fixtures["eos_token"].get<std::string>();
  const jinja::RenderOptions options = PinnedOptions();
  int compared = 0;
  for (const std::string& file : run.files) {
    const std::string name = std::filesystem::path(file).filename().string();
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Create(ReadFileOrEmpty(file), bos, eos);
    EXPECT_TRUE(t.ok()) << name << ": " << t.status();
    if (!t.ok()) continue;
    for (const ordered_json& conv : run.fixtures["conversations"]) {
      const ordered_json& want = run.reference.at(name).at(conv["name"].get<std::string>());
      if (!want["ok"].get<bool>()) continue;
      std::string jinja2_text = want["text"].get<std::string>();
      if (jinja2_text.rfind(bos, 0) == 0) jinja2_text.erase(0, bos.size());
      absl::StatusOr<std::vector<int32_t>> llama_ids = llama.Tokenize(
          jinja2_text, reference::TokenizeOptions{.add_special = true, .parse_special = true});
      EXPECT_TRUE(llama_ids.ok()) << llama_ids.status();
      absl::StatusOr<std::string> text = t->Render(InputOf(conv), options);
      EXPECT_TRUE(text.ok()) << name << " " << conv["name"] << ": " << text.status();
      if (!llama_ids.ok() || !text.ok()) continue;
      absl::StatusOr<std::vector<int32_t>> ids = EncodeChatPrompt(tok, *text);
      EXPECT_TRUE(ids.ok()) << ids.status();
      if (!ids.ok()) continue;
      EXPECT_EQ(*ids, *llama_ids) << name << " " << conv["name"];
      ++compared;
      if (per_llama3 != nullptr && Family(name) == "Llama 3.x") {
        ++(*per_llama3)[name];
        // What makes these about the chat prompt: one BOS, first (the template writes
        // bos_token and the vocab adds BOS), and the header markers as single tokens.
        const auto& pieces = tok.vocab().pieces;
        const int32_t header = static_cast<int32_t>(
            std::find(pieces.begin(), pieces.end(), "<|start_header_id|>") - pieces.begin());
        EXPECT_EQ(ids->front(), tok.bos_id()) << name << " " << conv["name"];
        EXPECT_EQ(std::count(ids->begin(), ids->end(), tok.bos_id()), 1) << name;
        EXPECT_NE(std::find(ids->begin(), ids->end(), header), ids->end()) << name;
      }
    }
  }
  return compared;
}

// The prompt token ids of a chat request: Folio's rendering encoded by EncodeChatPrompt
// with Folio's tokenizer, against Jinja2's rendering tokenized by llama.cpp as its server
// does (one leading BOS text stripped when the vocabulary adds BOS, then add_special and
// parse_special), on a random-weight Llama model's SentencePiece vocabulary (BOS "<s>", EOS
// "</s>"), for every template and conversation Jinja2 renders.
TEST(JinjaReferenceTest, PromptIdsEqualLlamaCppsOnJinja2sRendering) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  ReferenceRun run;
  RunReference(&run);
  if (HasFatalFailure() || IsSkipped()) return;
  worker::RandomModelOptions o;
  o.vocab_size = 4096;
  o.dim = 32;
  o.hidden_dim = 64;
  o.num_layers = 1;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  const std::string path = ::testing::TempDir() + "/chat_prompt_ids.gguf";
  ASSERT_TRUE(worker::WriteRandomModel(o, path).ok());
  absl::StatusOr<std::unique_ptr<reference::LlamaModel>> llama =
      reference::LlamaModel::Load(path, reference::LlamaModelOptions{.vocab_only = true});
  ASSERT_TRUE(llama.ok()) << llama.status();
  absl::StatusOr<Tokenizer> tok = Tokenizer::Create(worker::MakeRandomModelVocab(o.vocab_size));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string bos(*tok->TokenToPiece(tok->bos_id()));
  const std::string eos(*tok->TokenToPiece(tok->eos_id()));
  ASSERT_EQ(bos, run.fixtures["bos_token"].get<std::string>());
  ASSERT_EQ(eos, run.fixtures["eos_token"].get<std::string>());
  const int compared = ComparePromptIds(run, *tok, **llama, nullptr);
  std::cout << compared << " chat prompts tokenized as llama.cpp tokenizes Jinja2's rendering\n";
  EXPECT_GT(compared, 500);
  std::remove(path.c_str());
}

// The same on llama.cpp's models/ggml-vocab-llama-bpe.gguf (Llama 3's byte-level BPE, BOS
// "<|begin_of_text|>", EOS "<|end_of_text|>"), read by Folio's GGUF vocabulary reader, the
// conversations rendered with those bos_token / eos_token texts: every template, and at
// least every rendering of the Llama 3.x templates.
TEST(JinjaReferenceTest, PromptIdsOnTheLlamaBpeVocabEqualLlamaCpps) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const std::string path = reference::LlamaCppSourceDir() + "/models/ggml-vocab-llama-bpe.gguf";
  absl::StatusOr<Vocab> vocab = worker::LoadGgufVocab(path);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  absl::StatusOr<Tokenizer> tok = Tokenizer::Create(*vocab);
  ASSERT_TRUE(tok.ok()) << tok.status();
  absl::StatusOr<std::unique_ptr<reference::LlamaModel>> llama =
      reference::LlamaModel::Load(path, reference::LlamaModelOptions{.vocab_only = true});
  ASSERT_TRUE(llama.ok()) << llama.status();
  const std::string bos(*tok->TokenToPiece(tok->bos_id()));
  const std::string eos(*tok->TokenToPiece(tok->eos_id()));
  ASSERT_EQ(bos, "<|begin_of_text|>");
  ReferenceRun run;
  RunReference(&run, bos, eos);
  if (HasFatalFailure() || IsSkipped()) return;
  std::map<std::string, int> llama3;
  const int compared = ComparePromptIds(run, *tok, **llama, &llama3);
  std::cout << compared << " chat prompts on the llama-bpe vocab tokenized as llama.cpp "
            << "tokenizes Jinja2's rendering; Llama 3.x:";
  for (const auto& [name, n] : llama3) std::cout << " " << name << " " << n;
  std::cout << "\n";
  EXPECT_GT(compared, 500);
  ASSERT_EQ(llama3.size(), 3u);
  for (const auto& [name, n] : llama3) EXPECT_GE(n, 10) << name;
}

}  // namespace
}  // namespace folio::frontend
