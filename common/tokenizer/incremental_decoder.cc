#include "common/tokenizer/incremental_decoder.h"

#include "common/tokenizer/utf8.h"

namespace folio {

absl::StatusOr<std::string> IncrementalDecoder::Add(int32_t id) {
  absl::StatusOr<TokenSurface> surface = tokenizer_->Surface(id);
  if (!surface.ok()) return surface.status();

  std::string out;
  if (surface->kind == TokenSurface::Kind::kByte) {
    after_bos_ = false;
    pending_.push_back(static_cast<char>(surface->byte));
    Drain(/*at_end=*/false, &out);
    return out;
  }
  if (surface->kind == TokenSurface::Kind::kBytes) {
    // Byte-level BPE: a token's bytes may end or start inside a character.
    after_bos_ = false;
    pending_.append(surface->text);
    Drain(/*at_end=*/false, &out);
    return out;
  }
  // Any other token ends the byte run, so a held-back prefix can never complete.
  Drain(/*at_end=*/true, &out);
  if (surface->kind == TokenSurface::Kind::kControl) {
    if (id == tokenizer_->bos_id()) after_bos_ = true;
    return out;
  }
  std::string_view text = surface->text;
  if (after_bos_ && surface->leading_space_strippable) text.remove_prefix(1);
  after_bos_ = false;
  out.append(text);
  return out;
}

std::string IncrementalDecoder::Flush() {
  std::string out;
  Drain(/*at_end=*/true, &out);
  after_bos_ = false;
  return out;
}

void IncrementalDecoder::Drain(bool at_end, std::string* out) {
  size_t pos = 0;
  while (pos < pending_.size()) {
    const utf8::Prefix p = utf8::ClassifyPrefix(std::string_view(pending_).substr(pos));
    if (p.kind == utf8::Prefix::Kind::kComplete) {
      out->append(pending_, pos, p.length);
      pos += p.length;
    } else if (p.kind == utf8::Prefix::Kind::kInvalid || at_end) {
      out->append(utf8::kReplacementChar);
      pos += 1;
    } else {
      break;  // a valid start of a character: wait for more bytes
    }
  }
  pending_.erase(0, pos);
}

}  // namespace folio
