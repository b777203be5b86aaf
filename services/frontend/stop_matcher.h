// StopMatcher: finds stop strings in generated text while it streams.
//
// Text arrives in deltas (from IncrementalDecoder). The matcher emits text as soon as it
// cannot be part of a stop string, and holds back the longest suffix that could still
// start one. When a stop string appears, the text before it is emitted and the matcher
// reports the stop; the stop string and everything after it are dropped. When several
// stop strings occur, the one completed first (the occurrence that ends earliest; at equal
// ends the longer) wins, as if the text arrived one byte at a time, so the outcome does
// not depend on how the text is cut into deltas.
//
// Invariant: every match starts inside the held-back text, because text is only emitted
// once no stop string can begin in it. With valid UTF-8 input and valid UTF-8 stop strings
// (RequestValidator ensures both) every emitted piece is valid UTF-8: a held-back suffix
// starts with the first byte of a stop string, which is never a continuation byte.
//
// One matcher per sequence; thread-compatible.
#ifndef FOLIO_SERVICES_FRONTEND_STOP_MATCHER_H_
#define FOLIO_SERVICES_FRONTEND_STOP_MATCHER_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace folio::frontend {

class StopMatcher {
 public:
  // `stops` must not contain empty strings (CHECKed). No stops: text passes straight through.
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string text;      // safe to emit now (possibly empty)
    bool stopped = false;  // a stop string matched; `text` ends just before it
  };

  // Feeds the next piece of text. After a stop has been reported, further input is
  // ignored and yields empty results with stopped = true.
  Result Add(std::string_view delta);

  // The end of the text (no stop matched): returns whatever was held back.
  std::string Flush();

  bool stopped() const { return stopped_; }
  // Bytes currently held back.
  size_t num_held_bytes() const { return held_.size(); }
  // The stop string that matched; empty when none has.
  const std::string& matched_stop() const { return matched_stop_; }

 private:
  // Length of the longest suffix of held_ that is a proper prefix of some stop string.
  size_t LongestPartialSuffix() const;

  const std::vector<std::string> stops_;
  size_t max_stop_len_ = 0;
  std::string held_;  // text received but not yet emitted
  bool stopped_ = false;
  std::string matched_stop_;
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_STOP_MATCHER_H_
