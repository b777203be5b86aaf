#include "common/tokenizer/test_util.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>

#include "common/test_models_dir.h"
#include "gtest/gtest.h"
#include "sentencepiece_processor.h"

namespace folio::testing {

std::optional<std::string> ModelPath(std::string_view relative) {
  const std::optional<std::string> dir = TestModelsDir();
  if (!dir) return std::nullopt;
  std::string path = *dir + "/" + std::string(relative);
  if (!std::filesystem::exists(path)) return std::nullopt;
  return path;
}

SentencePieceReference::SentencePieceReference(
    std::unique_ptr<sentencepiece::SentencePieceProcessor> sp)
    : sp_(std::move(sp)) {}

SentencePieceReference::~SentencePieceReference() = default;

std::unique_ptr<SentencePieceReference> SentencePieceReference::LoadLlama2() {
  const std::optional<std::string> path = ModelPath("llama2-tokenizer/tokenizer.model");
  if (!path) return nullptr;
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->Load(*path);
  if (!status.ok()) {
    ADD_FAILURE() << "loading " << *path << ": " << status.ToString();
    return nullptr;
  }
  return std::unique_ptr<SentencePieceReference>(new SentencePieceReference(std::move(sp)));
}

Vocab SentencePieceReference::ToVocab() const {
  Vocab vocab;
  for (int id = 0; id < sp_->GetPieceSize(); ++id) {
    vocab.pieces.push_back(sp_->IdToPiece(id));
    vocab.scores.push_back(sp_->GetScore(id));
    TokenType type = TokenType::kNormal;
    if (sp_->IsControl(id)) type = TokenType::kControl;
    if (sp_->IsUnknown(id)) type = TokenType::kUnknown;
    if (sp_->IsByte(id)) type = TokenType::kByte;
    if (sp_->IsUnused(id)) type = TokenType::kUnused;
    vocab.types.push_back(type);
  }
  vocab.bos_id = sp_->bos_id();
  vocab.eos_id = sp_->eos_id();
  vocab.unk_id = sp_->unk_id();
  vocab.add_bos = true;
  vocab.add_dummy_prefix = true;  // Llama 2's normalizer_spec.add_dummy_prefix
  return vocab;
}

std::vector<int32_t> SentencePieceReference::Encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceReference::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  const auto status = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return text;
}

int32_t SentencePieceReference::bos_id() const { return sp_->bos_id(); }
int32_t SentencePieceReference::size() const { return sp_->GetPieceSize(); }
bool SentencePieceReference::IsControl(int32_t id) const { return sp_->IsControl(id); }
int32_t SentencePieceReference::PieceToId(const std::string& piece) const {
  return sp_->PieceToId(piece);
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (b0 < 0x80) {
      ++i;
      continue;
    } else if ((b0 & 0xE0) == 0xC0) {
      n = 2;
      cp = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
      n = 3;
      cp = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
      n = 4;
      cp = b0 & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

}  // namespace folio::testing
