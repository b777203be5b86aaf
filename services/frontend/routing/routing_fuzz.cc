// libFuzzer target: what the router parses from outside. Input: one byte L, then L bytes
// of a --replicas flag (ParseReplicaTargets), then a stream of block-event batches, as a
// replica's GetReplicaState would relay them, applied to a PrefixIndex. Checks, beyond not
// crashing: a parsed flag has addresses or a DNS name, never both or neither; a refused
// batch (kResync) leaves the index empty and asking for a snapshot; an applied one leaves
// its cursor at the batch's pool and last event, every hash the batch stored last (and did
// not remove after) held and every one it removed last not held; Match never exceeds the
// hashes it is given and agrees with what is held. Built only with -DFOLIO_FUZZ=ON (clang);
// see tools/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "services/frontend/routing/prefix_index.h"
#include "services/frontend/routing/replica_set.h"

namespace {

using folio::frontend::routing::BlockEventBatch;
using folio::frontend::routing::BlockHash;
using folio::frontend::routing::PrefixIndex;

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "routing_fuzz: %s\n", what);
    abort();
  }
}

BlockHash HashOf(uint8_t id) { return BlockHash{id, static_cast<uint64_t>(id) * 0x9e37u}; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t flag_len = std::min<size_t>(data[0], size - 1);
  const std::string flag(reinterpret_cast<const char*>(data + 1), flag_len);
  auto targets = folio::frontend::routing::ParseReplicaTargets(flag);
  if (targets.ok()) {
    Check(targets->addresses.empty() != targets->dns_name.empty(),
          "a parsed --replicas names a list or a DNS name");
  }
  size_t at = 1 + flag_len;
  PrefixIndex index(/*max_blocks=*/64);
  // Each batch: [flags][pool][last_seq delta][count] then count events of [kind|hash][seq delta].
  while (at + 4 <= size) {
    BlockEventBatch batch;
    const uint8_t flags = data[at];
    batch.snapshot = flags & 1;
    batch.pool_id = std::string(1, static_cast<char>('a' + data[at + 1] % 3));
    const uint64_t base = index.cursor().after_seq;
    const size_t count = data[at + 3] % 80;
    at += 4;
    uint64_t seq = base;
    for (size_t i = 0; i < count && at + 2 <= size; ++i, at += 2) {
      seq += (data[at + 1] % 8 == 0) ? 2 : 1;  // mostly in order, sometimes a gap
      batch.events.push_back(BlockEventBatch::Event{
          .seq = batch.snapshot ? base : seq, .stored = (data[at] & 0x80) == 0 || batch.snapshot,
          .hash = HashOf(data[at] & 0x3f)});
    }
    // A snapshot stands at any point; an incremental batch's last_seq is its last event's,
    // or (flag bit 1) one past it, which the index must refuse.
    batch.last_seq = batch.snapshot ? base + (flags >> 2) % 4 : (flags & 2 ? seq + 1 : seq);
    batch.block_size = 16;
    const auto result = index.Apply(batch);
    if (result == PrefixIndex::ApplyResult::kResync) {
      Check(index.size() == 0, "a refused batch empties the index");
      Check(index.cursor().pool_id.empty(), "a refused batch asks for a snapshot");
      continue;
    }
    Check(index.cursor().pool_id == batch.pool_id, "an applied batch sets the pool");
    Check(index.cursor().after_seq == batch.last_seq, "an applied batch sets the cursor");
    std::map<uint8_t, bool> last;  // hash id -> stored by its last event
    for (const auto& e : batch.events) last[static_cast<uint8_t>(e.hash.hi)] = e.stored;
    for (const auto& [id, stored] : last) {
      const BlockHash h = HashOf(id);
      Check(index.Match(absl::MakeConstSpan(&h, 1)) == (stored ? 1 : 0),
            "the index holds what the batch stored last, not what it removed last");
    }
    if (batch.snapshot) Check(index.size() == static_cast<int64_t>(last.size()), "snapshot size");
    std::vector<BlockHash> probe;
    for (uint8_t id = 0; id < 8; ++id) probe.push_back(HashOf(id));
    const int32_t m = index.Match(probe);
    Check(m >= 0 && m <= static_cast<int32_t>(probe.size()), "Match within its input");
    for (int32_t i = 0; i < m; ++i) {
      Check(index.Match(absl::MakeConstSpan(&probe[i], 1)) == 1, "a matched prefix is held");
    }
  }
  return 0;
}
