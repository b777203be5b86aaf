// CompletionText: the text side of one completion. Generated token ids go in, text deltas
// safe to send to the client come out: decoded incrementally (never half a UTF-8
// character, see IncrementalDecoder) and cut at the first stop string (see StopMatcher).
//
// Holds a reference to the Tokenizer, which must outlive it. One per sequence;
// thread-compatible.
#ifndef FOLIO_SERVICES_FRONTEND_COMPLETION_TEXT_H_
#define FOLIO_SERVICES_FRONTEND_COMPLETION_TEXT_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/incremental_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "services/frontend/stop_matcher.h"

namespace folio::frontend {

class CompletionText {
 public:
  // `prompt` is the prompt the completion follows: when it ends with BOS, the
  // completion's first leading space is dropped, as decoding BOS plus the completion would
  // drop it (SentencePiece's rule), so "" + "Once upon" reads "Once upon".
  //
  // `preserved` are control tokens that decode to their piece text here rather than to
  // nothing (the markers a tool-call parser reads, such as "<|python_tag|>"), as
  // llama.cpp's server keeps its chat format's preserved tokens.
  CompletionText(const Tokenizer& tokenizer, std::vector<std::string> stops,
                 std::span<const int32_t> prompt = {}, std::vector<int32_t> preserved = {});

  struct Delta {
    std::string text;             // new text to emit (possibly empty)
    int32_t num_tokens_used = 0;  // leading tokens of the input that were consumed
    bool stopped = false;         // a stop string matched; later tokens are ignored
  };

  // Feeds the next generated tokens, in order. Tokens after the one that completes a stop
  // string are not consumed (num_tokens_used tells how many were). Once stopped, every
  // call returns an empty delta with stopped = true. InvalidArgument naming the id when a
  // token is outside the vocabulary (nothing from this call is consumed then).
  absl::StatusOr<Delta> AddTokens(std::span<const int32_t> ids);

  // The sequence ended without a stop string so far: flushes the decoder (a trailing
  // incomplete character becomes U+FFFD) and the held-back text. The flushed text may
  // still complete a stop string, which `stopped` then reports.
  Delta Finish();

  bool stopped() const { return matcher_.stopped(); }
  // Tokens consumed so far.
  int32_t num_tokens() const { return num_tokens_; }

 private:
  const Tokenizer& tokenizer_;
  IncrementalDecoder decoder_;
  StopMatcher matcher_;
  std::vector<int32_t> preserved_;  // few: a linear search
  int32_t num_tokens_ = 0;
};

// A token's text for log-prob reports: its surface text for text pieces ("▁the" ->
// " the"), the raw piece for byte and control tokens ("<0xE6>", "</s>"). Always valid
// UTF-8. "<invalid id N>" when `id` is outside the vocabulary.
std::string TokenDisplayText(const Tokenizer& tokenizer, int32_t id);

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_COMPLETION_TEXT_H_
