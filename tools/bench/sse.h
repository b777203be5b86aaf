// A parser of server-sent events (the text/event-stream format of the HTML standard):
// bytes arrive in arbitrary pieces; lines end with LF, CRLF or CR; "data:" lines of one
// event are joined with LF; a blank line ends the event; lines starting with ':' are
// comments; one space after the field's colon is dropped.
#ifndef FOLIO_TOOLS_BENCH_SSE_H_
#define FOLIO_TOOLS_BENCH_SSE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace folio::bench {

struct SseEvent {
  std::string event;  // the "event:" field; empty means "message"
  std::string data;
  std::string id;
};

class SseParser {
 public:
  // Appends the events completed by `bytes` to `events`. An event with no data line is
  // not dispatched (as the standard says), nor is one still open when the stream ends.
  void Feed(absl::string_view bytes, std::vector<SseEvent>* events);

 private:
  void Line(absl::string_view line, std::vector<SseEvent>* events);

  std::string line_;         // the line being read
  bool after_cr_ = false;    // the last byte was CR: an LF next belongs to it
  bool started_ = false;     // past a leading byte-order mark
  SseEvent current_;
  bool has_data_ = false;
};

}  // namespace folio::bench

#endif  // FOLIO_TOOLS_BENCH_SSE_H_
