#include "tools/bench/sse.h"

#include "absl/strings/match.h"

namespace folio::bench {

void SseParser::Feed(absl::string_view bytes, std::vector<SseEvent>* events) {
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the LF of a CRLF
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      Line(line_, events);
      line_.clear();
      continue;
    }
    line_.push_back(c);
    if (!started_ && line_.size() == 3) {
      started_ = true;
      if (line_ == "\xEF\xBB\xBF") line_.clear();
    }
  }
}

void SseParser::Line(absl::string_view line, std::vector<SseEvent>* events) {
  started_ = true;
  if (line.empty()) {
    if (has_data_) {
      if (!current_.data.empty() && current_.data.back() == '\n') current_.data.pop_back();
      events->push_back(std::move(current_));
    }
    current_ = SseEvent();
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;  // a comment
  const size_t colon = line.find(':');
  absl::string_view field = line.substr(0, colon);
  absl::string_view value;
  if (colon != absl::string_view::npos) {
    value = line.substr(colon + 1);
    if (absl::StartsWith(value, " ")) value.remove_prefix(1);
  }
  if (field == "data") {
    current_.data.append(value.data(), value.size());
    current_.data.push_back('\n');
    has_data_ = true;
  } else if (field == "event") {
    current_.event = std::string(value);
  } else if (field == "id") {
    current_.id = std::string(value);
  }  // "retry" and unknown fields are ignored
}

}  // namespace folio::bench
