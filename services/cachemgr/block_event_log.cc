#include "services/cachemgr/block_event_log.h"

#include <algorithm>

#include "glog/logging.h"

namespace folio::cachemgr {

BlockEventLog::BlockEventLog(int32_t capacity) : capacity_(capacity), ring_(capacity) {
  CHECK_GT(capacity, 0);
}

void BlockEventLog::Append(BlockEvent::Kind kind, const BlockHash& hash) {
  ring_[(next_seq_ - 1) % capacity_] = BlockEvent{next_seq_, kind, hash};
  ++next_seq_;
}

std::optional<std::vector<BlockEvent>> BlockEventLog::ReadAfter(uint64_t after_seq,
                                                                int32_t max_events) const {
  const uint64_t last = last_seq();
  if (after_seq > last) return std::nullopt;
  const uint64_t oldest_kept = last >= static_cast<uint64_t>(capacity_) ? last - capacity_ + 1 : 1;
  if (after_seq + 1 < oldest_kept) return std::nullopt;
  const uint64_t count = std::min<uint64_t>(last - after_seq, std::max(max_events, 0));
  std::vector<BlockEvent> events;
  events.reserve(count);
  for (uint64_t s = after_seq + 1; s <= after_seq + count; ++s) {
    events.push_back(ring_[(s - 1) % capacity_]);
  }
  return events;
}

}  // namespace folio::cachemgr
