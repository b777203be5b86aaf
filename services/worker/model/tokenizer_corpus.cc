#include "services/worker/model/tokenizer_corpus.h"

#include "absl/strings/str_cat.h"

namespace folio::worker::testing {

const std::vector<std::string>& Corpus() {
  static const auto* corpus = new std::vector<std::string>{
      "The quick brown fox jumps over the lazy dog.",
      "  leading spaces, trailing spaces   ",
      "tabs\tand\t\tnewlines\n\n\nand\r\nCRLF\r\n",
      "          ten spaces then text",
      "\n\n\n\n",
      "Numbers: 0 7 42 1234 12345678 3.14159 -17 1,000,000 2024-12-01 0x1F",
      "Deutsch: Größenwahn, Äpfel, Straße. Français : l'été, où ça ? Español: ¿Qué tal? ñandú",
      "Русский текст: Съешь же ещё этих мягких французских булок.",
      "中文：我能吞下玻璃而不伤身体。日本語：私はガラスを食べられます。한국어: 나는 유리를 먹을 수 있어요.",
      "العربية: أنا قادر على أكل الزجاج. עברית: אני יכול לאכול זכוכית. हिन्दी: मैं काँच खा सकता हूँ।",
      "Tiếng Việt: Cửa Việt, Đà Nẵng. ελληνικά: Μπορώ να φάω σπασμένα γυαλιά.",
      "Emoji: 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️ 🦙 🤷‍♀️ 1️⃣",
      "int main(int argc, char** argv) {\n  std::vector<int> v{1, 2, 3};\n  return v[0] + 0x2A;\n}\n",
      "def f(x):\n    return [i ** 2 for i in range(x) if i % 3 == 0]  # comment\n",
      "<div class=\"x\">&amp; &lt;tag&gt;</div> {\"key\": [1, 2.5e-3, null, true]}",
      "I'm sure you'll see they'd've DONE it; it's OK'd. 'quoted' \"double\"",
      "mixedCASEWords camelCaseIdentifier snake_case_name SCREAMING_CASE HTTPServerError",
      "a\u00a0non-breaking space, a\u2009thin space, zero\u200bwidth, soft\u00adhyphen",
      "combining: e\u0301 a\u0308 n\u0303 (decomposed) vs é ä ñ",
      "",
      " ",
      "!!!??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}}",
  };
  return *corpus;
}

std::vector<std::string> SpecialTexts(const Vocab& v) {
  std::vector<std::string> specials;
  int control = 0, user = 0;
  for (int32_t id = 0; id < v.size(); ++id) {
    if (v.types[id] == TokenType::kControl && control < 4) {
      specials.push_back(v.pieces[id]);
      ++control;
    } else if (v.types[id] == TokenType::kUserDefined && user < 4) {
      specials.push_back(v.pieces[id]);
      ++user;
    }
  }
  for (const char* marker : {"<|im_start|>", "<|im_end|>", "<|eot_id|>", "<|endoftext|>",
                             "<|begin_of_text|>", "<s>", "</s>", "<unk>"}) {
    specials.emplace_back(marker);
  }
  std::vector<std::string> texts;
  for (const std::string& s : specials) {
    texts.push_back(absl::StrCat(s, "user\nHello", s, " world ", s, s, "\n"));
    texts.push_back(absl::StrCat("x", s, "y ", s));
  }
  return texts;
}

}  // namespace folio::worker::testing
