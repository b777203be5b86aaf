// libFuzzer target: the Hugging Face tokenizer readers (tokenizer.json,
// tokenizer_config.json, generation_config.json) and config.json on arbitrary text must
// return a Status, never crash or throw; a tokenizer.json they accept must build a
// Tokenizer that encodes a fixed text into ids of the vocabulary and decodes them. The
// seeds include a byte-level and a SentencePiece-style tokenizer.json (spm_tokenizer.json:
// byte fallback, the Prepend/Replace normalizer; metaspace_tokenizer.json: the same in the
// Metaspace form, prepend_scheme "first"). Built only with -DFOLIO_FUZZ=ON (clang);
// see tools/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "absl/strings/string_view.h"

#include "common/tokenizer/tokenizer.h"
#include "services/worker/model/hf_config.h"
#include "services/worker/model/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  (void)folio::worker::ParseHfConfig(text, "config.json");
  absl::StatusOr<folio::Vocab> vocab = folio::worker::ParseHfTokenizerJson(text, "tokenizer.json");
  if (!vocab.ok()) return 0;
  (void)folio::worker::ApplyHfTokenizerConfig(text, "tokenizer_config.json", &*vocab);
  (void)folio::worker::ApplyHfGenerationConfig(text, "generation_config.json", &*vocab);
  absl::StatusOr<folio::Tokenizer> t = folio::Tokenizer::Create(*vocab);
  if (!t.ok()) return 0;
  constexpr std::string_view kText = " Hello,  world! e\u0301 \xe4\xb8\xad 123 <|eot_id|></s>";
  // Special tokens as text and parsed (where the Metaspace "first" rule bites).
  for (const folio::ParseSpecial special : {folio::ParseSpecial::kNo, folio::ParseSpecial::kYes}) {
    absl::StatusOr<std::vector<int32_t>> ids =
        t->Encode(kText, folio::AddBos::kVocabDefault, special);
    if (!ids.ok()) std::abort();
    for (int32_t id : *ids) {
      if (id < 0 || id >= t->vocab_size()) std::abort();
    }
    (void)t->Decode(*ids);
  }
  return 0;
}
