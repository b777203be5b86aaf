#include "common/tokenizer/llama2c_vocab.h"

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"

namespace folio {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the llama2.c format is little-endian; add byte swapping");

// Sequential little-endian reader over the file's bytes that reports where it is.
class Reader {
 public:
  Reader(absl::string_view data, const std::string& path) : data_(data), path_(path) {}

  size_t offset() const { return offset_; }
  size_t remaining() const { return data_.size() - offset_; }

  // Reads a trivially copyable value: `field` of token `token`, or of the header
  // when `token` < 0 (both only for the error message).
  template <typename T>
  absl::Status Read(absl::string_view field, int32_t token, T* value) {
    if (remaining() < sizeof(T)) return Truncated(field, token, sizeof(T));
    std::memcpy(value, data_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status ReadBytes(int32_t token, size_t n, std::string* out) {
    if (remaining() < n) return Truncated("bytes", token, n);
    out->assign(data_.data() + offset_, n);
    offset_ += n;
    return absl::OkStatus();
  }

  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama2.c tokenizer file ", path_, ": ", message, " (at byte offset ", offset_,
        " of ", data_.size(), ")"));
  }

 private:
  absl::Status Truncated(absl::string_view field, int32_t token, size_t n) const {
    const std::string what =
        token < 0 ? absl::StrCat("header ", field) : absl::StrCat("token ", token, " ", field);
    return Error(absl::StrCat("truncated: ", what, " needs ", n, " bytes but ",
                              remaining(), " remain"));
  }

  absl::string_view data_;
  const std::string& path_;
  size_t offset_ = 0;
};

bool IsBytePiece(absl::string_view piece) {
  auto is_hex = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
  };
  return piece.size() == 6 && piece.substr(0, 3) == "<0x" && is_hex(piece[3]) &&
         is_hex(piece[4]) && piece[5] == '>';
}

}  // namespace

absl::StatusOr<Vocab> LoadLlama2cVocab(const std::string& path, int32_t vocab_size) {
  if (vocab_size < 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama2.c tokenizer file ", path, ": vocab_size ", vocab_size,
        " is too small (ids 0..2 are <unk>, <s>, </s>)"));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat("cannot open llama2.c tokenizer file ", path, ": ",
                     std::strerror(errno)));
  }
  const std::string data((std::istreambuf_iterator<char>(file)),
                         std::istreambuf_iterator<char>());
  if (file.bad()) {
    return absl::DataLossError(absl::StrCat("error reading llama2.c tokenizer file ", path));
  }

  Reader reader(data, path);
  int32_t max_token_length = 0;
  if (absl::Status s = reader.Read("max_token_length", -1, &max_token_length); !s.ok()) {
    return s;
  }
  if (max_token_length <= 0) {
    return reader.Error(absl::StrCat("max_token_length is ", max_token_length,
                                     ", want a positive length"));
  }

  Vocab vocab;
  vocab.pieces.reserve(vocab_size);
  vocab.scores.reserve(vocab_size);
  vocab.types.reserve(vocab_size);
  for (int32_t id = 0; id < vocab_size; ++id) {
    float score = 0;
    int32_t length = 0;
    std::string bytes;
    if (absl::Status s = reader.Read("score", id, &score); !s.ok()) {
      return s;
    }
    if (std::isnan(score)) return reader.Error(absl::StrCat("token ", id, " has a NaN score"));
    if (absl::Status s = reader.Read("length", id, &length); !s.ok()) {
      return s;
    }
    if (length < 0 || length > max_token_length) {
      return reader.Error(absl::StrCat("token ", id, " has length ", length,
                                       ", want 0..max_token_length ", max_token_length));
    }
    if (absl::Status s = reader.ReadBytes(id, length, &bytes); !s.ok()) {
      return s;
    }

    TokenType type = TokenType::kNormal;
    if (id == 0) {
      type = TokenType::kUnknown;
      bytes = "<unk>";
    } else if (id == 1 || id == 2) {
      type = TokenType::kControl;
      bytes = id == 1 ? "<s>" : "</s>";
    } else if (IsBytePiece(bytes)) {
      type = TokenType::kByte;
    } else {
      bytes = absl::StrReplaceAll(bytes, {{" ", "\xE2\x96\x81"}});
    }
    vocab.pieces.push_back(std::move(bytes));
    vocab.scores.push_back(score);
    vocab.types.push_back(type);
  }
  if (reader.remaining() != 0) {
    return reader.Error(absl::StrCat(reader.remaining(), " bytes left after token ",
                                     vocab_size - 1, "; is vocab_size ", vocab_size,
                                     " right?"));
  }
  vocab.bos_id = 1;
  vocab.eos_id = 2;
  vocab.unk_id = 0;
  vocab.add_bos = true;
  vocab.add_dummy_prefix = true;
  return vocab;
}

}  // namespace folio
