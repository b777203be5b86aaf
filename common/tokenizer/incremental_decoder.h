// IncrementalDecoder: turns a stream of generated token ids into text deltas that
// are safe to send to a client as they arrive.
//
// The concatenation of all deltas (including Flush()) equals Tokenizer::Decode of
// the whole sequence, and every delta is valid UTF-8: bytes from byte-fallback
// tokens are held back until they complete a character, and bytes that can no
// longer complete one (a non-byte token arrived, an impossible byte followed, or
// Flush()) become U+FFFD, one per byte. The space-after-BOS rule of
// Tokenizer::Decode applies too.
//
// Holds a reference to the Tokenizer, which must outlive it. One decoder per
// sequence; thread-compatible (not safe for concurrent use without locking).
#ifndef FOLIO_COMMON_TOKENIZER_INCREMENTAL_DECODER_H_
#define FOLIO_COMMON_TOKENIZER_INCREMENTAL_DECODER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/tokenizer/tokenizer.h"

namespace folio {

class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  // Feeds the next token and returns the text it makes safe to emit (possibly
  // empty). OutOfRange if `id` is not in the vocabulary; the decoder is then
  // unchanged and may be fed again.
  absl::StatusOr<std::string> Add(int32_t id);

  // Ends the sequence: returns U+FFFD for each byte still held back (an incomplete
  // character at the very end) and resets the decoder for a new sequence.
  std::string Flush();

  // Number of bytes held back waiting for the rest of a character (0..3).
  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  // Emits every complete character at the front of pending_ into `out`; with
  // `at_end`, incomplete ones too, as replacement characters.
  void Drain(bool at_end, std::string* out);

  const Tokenizer* tokenizer_;
  // Bytes of the current byte-token run not yet emitted; always a proper prefix of
  // a valid UTF-8 character between calls.
  std::string pending_;
  // The last visible-or-BOS token was BOS: the next text token loses its "▁" space.
  bool after_bos_ = false;
};

}  // namespace folio

#endif  // FOLIO_COMMON_TOKENIZER_INCREMENTAL_DECODER_H_
