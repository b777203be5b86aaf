#include "services/frontend/stop_matcher.h"

#include <algorithm>
#include <utility>

#include "glog/logging.h"

namespace folio::frontend {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& stop : stops_) {
    CHECK(!stop.empty()) << "empty stop string";
    max_stop_len_ = std::max(max_stop_len_, stop.size());
  }
}

StopMatcher::Result StopMatcher::Add(std::string_view delta) {
  Result result;
  if (stopped_) {
    result.stopped = true;
    return result;
  }
  held_.append(delta);
  if (stops_.empty()) {
    result.text = std::move(held_);
    held_.clear();
    return result;
  }
  // The stop completed first wins: the occurrence that ends earliest (at equal ends, the
  // longer one, which starts earlier). That is what a byte-by-byte stream would find, so
  // the result does not depend on how the text is cut into deltas. For one stop string
  // its first occurrence is also the one that ends first.
  size_t best_pos = std::string::npos;
  size_t best_end = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& stop : stops_) {
    const size_t pos = held_.find(stop);
    if (pos == std::string::npos) continue;
    const size_t end = pos + stop.size();
    if (end < best_end || (end == best_end && pos < best_pos)) {
      best_pos = pos;
      best_end = end;
      best = &stop;
    }
  }
  if (best != nullptr) {
    stopped_ = true;
    matched_stop_ = *best;
    result.stopped = true;
    result.text = held_.substr(0, best_pos);
    held_.clear();
    return result;
  }
  const size_t keep = LongestPartialSuffix();
  result.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return result;
}

std::string StopMatcher::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

size_t StopMatcher::LongestPartialSuffix() const {
  // Stop strings are at most a few hundred bytes and a request has at most a few of them,
  // so the direct check (each suffix length, each stop) is cheap enough per delta.
  const size_t limit = std::min(held_.size(), max_stop_len_ - 1);
  const std::string_view held(held_);
  for (size_t len = limit; len > 0; --len) {
    const std::string_view suffix = held.substr(held.size() - len);
    for (const std::string& stop : stops_) {
      if (stop.size() > len && std::string_view(stop).substr(0, len) == suffix) return len;
    }
  }
  return 0;
}

}  // namespace folio::frontend
