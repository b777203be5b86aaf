// libFuzzer target: the byte-level BPE encoder on arbitrary bytes. The first byte picks
// the pre-tokenizer (every supported one) and whether control tokens are parsed; the
// rest is the text. Encoding must return a Status (InvalidArgument for bad UTF-8), never
// crash; every id must be in range; valid text must decode back to itself (unless it
// held a control token, which decodes to nothing), and streamed
// decoding must add up to Decode. Built only with -DFOLIO_FUZZ=ON (clang); see
// tools/run_fuzz.sh.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/byte_unicode.h"
#include "common/tokenizer/incremental_decoder.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"

namespace {

// All 256 mapped bytes, merges for every pair of lowercase letters and for "Ġ" + a
// letter, their three-letter follow-ups "Ġab"+c for a few, and two special tokens.
folio::Vocab MakeVocab(const std::string& pre_tokenizer) {
  folio::Vocab v;
  v.kind = folio::TokenizerKind::kByteLevelBpe;
  for (int b = 0; b < 256; ++b) v.pieces.emplace_back(folio::byte_unicode::ByteToUtf8(b));
  const auto id_of = [&](int b) { return static_cast<int32_t>(b); };
  const std::string sp(folio::byte_unicode::ByteToUtf8(' '));
  for (char a = 'a'; a <= 'z'; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) {
      v.merges.emplace_back(id_of(a), id_of(b));
      v.pieces.push_back(std::string{a, b});
    }
    v.merges.emplace_back(id_of(' '), id_of(a));
    v.pieces.push_back(sp + a);
  }
  v.pieces.push_back("<|endoftext|>");
  v.pieces.push_back("<tool_call>");
  v.types.assign(v.pieces.size(), folio::TokenType::kNormal);
  v.types[v.pieces.size() - 2] = folio::TokenType::kControl;
  v.types[v.pieces.size() - 1] = folio::TokenType::kUserDefined;
  v.scores.assign(v.pieces.size(), 0.0f);
  v.bos_id = v.eos_id = static_cast<int32_t>(v.pieces.size() - 2);
  v.unk_id = -1;
  v.add_bos = false;
  v.pre_tokenizer = pre_tokenizer;
  v.ignore_merges = pre_tokenizer == "llama-bpe";
  return v;
}

const std::vector<std::unique_ptr<folio::Tokenizer>>& Tokenizers() {
  static const auto* all = [] {
    auto* t = new std::vector<std::unique_ptr<folio::Tokenizer>>;
    for (const std::string& name : folio::PreTokenizer::SupportedNames()) {
      absl::StatusOr<folio::Tokenizer> tok = folio::Tokenizer::Create(MakeVocab(name));
      if (!tok.ok()) std::abort();
      t->push_back(std::make_unique<folio::Tokenizer>(*std::move(tok)));
    }
    return t;
  }();
  return *all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& tokenizers = Tokenizers();
  const folio::Tokenizer& t = *tokenizers[data[0] % tokenizers.size()];
  const auto parse = (data[0] & 0x80) ? folio::ParseSpecial::kYes : folio::ParseSpecial::kNo;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<std::vector<int32_t>> ids = t.Encode(text, folio::AddBos::kNo, parse);
  if (!ids.ok()) {
    if (folio::utf8::FindInvalid(text) == std::string_view::npos) std::abort();
    return 0;
  }
  for (int32_t id : *ids) {
    if (id < 0 || id >= t.vocab_size()) std::abort();
  }
  absl::StatusOr<std::string> back = t.Decode(*ids);
  if (!back.ok()) std::abort();
  // Control tokens decode to nothing; everything else comes back byte for byte.
  const bool has_control = std::find(ids->begin(), ids->end(), t.eos_id()) != ids->end();
  if (!has_control && *back != text) std::abort();
  folio::IncrementalDecoder decoder(t);
  std::string streamed;
  for (int32_t id : *ids) streamed += *decoder.Add(id);
  streamed += decoder.Flush();
  if (streamed != *back) std::abort();
  return 0;
}
