#include "services/frontend/completion_text.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/utf8.h"

namespace folio::frontend {

CompletionText::CompletionText(const Tokenizer& tokenizer, std::vector<std::string> stops,
                               std::span<const int32_t> prompt, std::vector<int32_t> preserved)
    : tokenizer_(tokenizer),
      decoder_(tokenizer),
      matcher_(std::move(stops)),
      preserved_(std::move(preserved)) {
  if (!prompt.empty() && prompt.back() == tokenizer.bos_id()) {
    // BOS decodes to nothing; it only arms the decoder's leading-space rule.
    (void)decoder_.Add(prompt.back());
  }
}

absl::StatusOr<CompletionText::Delta> CompletionText::AddTokens(std::span<const int32_t> ids) {
  Delta delta;
  if (matcher_.stopped()) {
    delta.stopped = true;
    return delta;
  }
  // Check every id first so that a bad one leaves the decoder untouched.
  for (int32_t id : ids) {
    if (id < 0 || id >= tokenizer_.vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", id, " is outside the vocabulary [0, ", tokenizer_.vocab_size(), ")"));
    }
  }
  for (int32_t id : ids) {
    absl::StatusOr<std::string> text;
    if (std::find(preserved_.begin(), preserved_.end(), id) != preserved_.end()) {
      // Its piece, after what the decoder held (as any control token ends a byte run).
      std::string t = decoder_.Flush();
      t.append(*tokenizer_.TokenToPiece(id));
      text = std::move(t);
    } else {
      text = decoder_.Add(id);
    }
    if (!text.ok()) return text.status();  // unreachable: ids were checked above
    ++delta.num_tokens_used;
    ++num_tokens_;
    StopMatcher::Result r = matcher_.Add(*text);
    delta.text += r.text;
    if (r.stopped) {
      delta.stopped = true;
      break;
    }
  }
  return delta;
}

CompletionText::Delta CompletionText::Finish() {
  Delta delta;
  if (matcher_.stopped()) {
    delta.stopped = true;
    return delta;
  }
  StopMatcher::Result r = matcher_.Add(decoder_.Flush());
  delta.text = std::move(r.text);
  delta.stopped = r.stopped;
  if (!r.stopped) delta.text += matcher_.Flush();
  return delta;
}

std::string TokenDisplayText(const Tokenizer& tokenizer, int32_t id) {
  absl::StatusOr<TokenSurface> surface = tokenizer.Surface(id);
  if (!surface.ok()) return absl::StrCat("<invalid id ", id, ">");
  std::string_view raw = surface->text;
  if (surface->kind != TokenSurface::Kind::kText &&
      surface->kind != TokenSurface::Kind::kBytes) {
    absl::StatusOr<std::string_view> piece = tokenizer.TokenToPiece(id);
    raw = piece.ok() ? *piece : std::string_view();
  }
  // Vocab pieces are UTF-8 in every format we load, but the client must never get
  // anything else, so replace what is not.
  std::string out;
  utf8::AppendWithReplacement(raw, &out);
  return out;
}

}  // namespace folio::frontend
