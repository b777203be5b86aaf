#include "common/tokenizer/special_tokens.h"

#include <algorithm>

namespace folio {
namespace {

// Texts llama.cpp treats as end of generation (llama_vocab::impl::load, special_eog_ids).
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>",      "<|im_end|>",  "<|end|>",          "<|return|>", "<|call|>",
    "<end_of_turn>",   "<|endoftext|>", "<|eom_id|>",     "<EOT>",      "_<EOT>",
    "<|end_of_text|>", "<end_of_utterance>", "<｜end▁of▁sentence｜>",  // DeepSeek
};

}  // namespace

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const TokenType t = vocab.types[id];
    if (t != TokenType::kControl && t != TokenType::kUserDefined && t != TokenType::kUnknown) {
      continue;
    }
    if (vocab.pieces[id].empty()) continue;
    tokens_.push_back({vocab.pieces[id], id, t != TokenType::kUserDefined});
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
        if (at > 0) next.push_back({rest.substr(0, at), -1});
        next.push_back({rest.substr(at, s.piece.size()), s.id});
        rest.remove_prefix(at + s.piece.size());
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
  add(vocab->eos_id);
  for (int32_t id : extra_ids) add(id);
  for (int32_t id = 0; id < vocab->size(); ++id) {
    const std::string& piece = vocab->pieces[id];
    if (piece.empty() || piece.size() > 32 || (piece[0] != '<' && piece[0] != '_')) continue;
    for (std::string_view text : kEndOfGenerationTexts) {
      if (piece != text) continue;
      ids.push_back(id);
      if (vocab->types[id] != TokenType::kControl) vocab->types[id] = TokenType::kControl;
      break;
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace folio
