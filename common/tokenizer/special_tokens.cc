#include "common/tokenizer/special_tokens.h"

#include <algorithm>
#include <span>

namespace folio {
namespace {

// Texts llama.cpp treats as end of generation (llama_vocab::impl::load, special_eog_ids).
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>",    "<|im_end|>",        "<|end|>",          "<|return|>",
    "<|call|>",      "<|flush|>",         "<|calls|>",        "<end_of_turn>",
    "<|endoftext|>", "</s>",              "<|eom_id|>",       "<EOT>",
    "_<EOT>",        "[EOT]",             "[EOS]",            "<|end_of_text|>",
    "<end_of_utterance>", "<eos>",        "<turn|>",          "<|tool_response>",
    "<｜end▁of▁sentence｜>",  // DeepSeek
    "[e~[",
};

// Fill-in-the-middle padding, repository and file-separator tokens, which llama.cpp also
// stops on: the first (lowest id) token with one of each group's texts.
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                             "[PAD]"};
constexpr std::string_view kFimRepoTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                              "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};

// C's isspace in the "C" locale, as llama.cpp strips.
bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

bool IsOneOf(std::string_view piece, std::span<const std::string_view> texts) {
  return std::find(texts.begin(), texts.end(), piece) != texts.end();
}

}  // namespace

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const TokenType t = vocab.types[id];
    if (t != TokenType::kControl && t != TokenType::kUserDefined && t != TokenType::kUnknown) {
      continue;
    }
    if (vocab.pieces[id].empty()) continue;
    tokens_.push_back({vocab.pieces[id], id, t != TokenType::kUserDefined,
                       std::binary_search(vocab.rstrip_ids.begin(), vocab.rstrip_ids.end(), id),
                       std::binary_search(vocab.lstrip_ids.begin(), vocab.lstrip_ids.end(), id)});
  }
  std::stable_sort(tokens_.begin(), tokens_.end(), [](const Special& a, const Special& b) {
    return a.piece.size() > b.piece.size();
  });
}

void SpecialTokenSplitter::Split(std::string_view text, ParseSpecial parse_special,
                                 std::vector<TextFragment>* fragments) const {
  std::vector<TextFragment> current = {{text, -1}};
  std::vector<TextFragment> next;
  for (const Special& s : tokens_) {
    if (s.control && parse_special == ParseSpecial::kNo) continue;
    bool found = false;
    for (const TextFragment& f : current) {
      if (f.id < 0 && f.text.find(s.piece) != std::string_view::npos) {
        found = true;
        break;
      }
    }
    if (!found) continue;
    next.clear();
    for (const TextFragment& f : current) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      std::string_view rest = f.text;
      for (size_t at; (at = rest.find(s.piece)) != std::string_view::npos;) {
        std::string_view before = rest.substr(0, at);
        while (s.lstrip && !before.empty() && IsAsciiSpace(before.back())) before.remove_suffix(1);
        if (!before.empty()) next.push_back({before, -1});
        next.push_back({rest.substr(at, s.piece.size()), s.id});
        rest.remove_prefix(at + s.piece.size());
        while (s.rstrip && !rest.empty() && IsAsciiSpace(rest.front())) rest.remove_prefix(1);
      }
      if (!rest.empty()) next.push_back({rest, -1});
    }
    current.swap(next);
  }
  for (const TextFragment& f : current) {
    if (f.id >= 0 || !f.text.empty()) fragments->push_back(f);
  }
}

std::vector<int32_t> FindEndOfGenerationIds(Vocab* vocab, const std::vector<int32_t>& extra_ids) {
  std::vector<int32_t> ids;
  auto add = [&](int32_t id) {
    if (id >= 0 && id < vocab->size()) ids.push_back(id);
  };
  auto make_control = [&](int32_t id) { vocab->types[id] = TokenType::kControl; };
  add(vocab->eos_id);
  for (int32_t id : extra_ids) add(id);
  for (std::span<const std::string_view> group :
       {std::span<const std::string_view>(kFimPadTexts),
        std::span<const std::string_view>(kFimRepoTexts),
        std::span<const std::string_view>(kFimSepTexts)}) {
    for (int32_t id = 0; id < vocab->size(); ++id) {
      if (IsOneOf(vocab->pieces[id], group)) {
        ids.push_back(id);
        make_control(id);
        break;
      }
    }
  }
  int32_t end_id = -1;
  bool has_return = false, has_call = false;
  for (int32_t id = 0; id < vocab->size(); ++id) {
    const std::string& piece = vocab->pieces[id];
    if (piece.empty() || piece.size() > 32 || (piece[0] != '<' && piece[0] != '_' && piece[0] != '[')) {
      continue;
    }
    if (!IsOneOf(piece, kEndOfGenerationTexts)) continue;
    ids.push_back(id);
    make_control(id);
    if (piece == "<|end|>") end_id = id;
    has_return |= piece == "<|return|>";
    has_call |= piece == "<|call|>";
  }
  // As llama.cpp: with <|return|> and <|call|> (o200k_harmony), <|end|> ends a message,
  // not the generation.
  if (end_id >= 0 && has_return && has_call) {
    ids.erase(std::remove(ids.begin(), ids.end(), end_id), ids.end());
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace folio
