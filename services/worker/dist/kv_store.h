// KvStore: the rendezvous table of a tensor-parallel group, kept by rank 0. Ranks publish
// the addresses of their collective endpoints under keys and wait for each other's.
// Bounded (key count and value size), so a stray client cannot grow it without limit.
//
// LocalGlooStore adapts it to Gloo's rendezvous interface for the rank that holds it (rank
// 0, or every rank when all run in one process).
//
// Each generation of the group (WorkerService::JoinGroup) publishes under keys of its own,
// GroupKeyPrefix(generation), so a group formed again never reads the addresses of an
// older one; rank 0 drops the older generations' keys when it joins a new one.
//
// KvStore is thread-safe; LocalGlooStore is as thread-safe as its KvStore.
#ifndef FOLIO_SERVICES_WORKER_DIST_KV_STORE_H_
#define FOLIO_SERVICES_WORKER_DIST_KV_STORE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"

namespace folio::worker {

class KvStore {
 public:
  static constexpr int kMaxKeys = 4096;
  static constexpr int64_t kMaxKeyBytes = 256;
  static constexpr int64_t kMaxValueBytes = 1 << 20;

  // Stores (or replaces) key. InvalidArgument for an empty or oversized key or value,
  // ResourceExhausted when the table is full.
  absl::Status Set(const std::string& key, std::string value);
  // The value, or nullopt while the key is missing.
  std::optional<std::string> Get(const std::string& key) const;
  // Waits until every key is present; DeadlineExceeded naming the missing ones otherwise.
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) const;
  // Drops the keys of the groups older than `generation` (those under GroupKeyPrefix(g)
  // with g < generation); returns how many.
  int EraseGroupsBefore(int64_t generation);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

// "folio-tp/g<generation>": the prefix of the rendezvous keys of one group generation.
std::string GroupKeyPrefix(int64_t generation);

// Gloo's rendezvous store over a KvStore (not owned). Gloo's interface reports errors by
// exception: a wait that times out throws std::runtime_error.
class LocalGlooStore final : public gloo::rendezvous::Store {
 public:
  LocalGlooStore(KvStore* store, absl::Duration timeout) : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  KvStore* const store_;
  const absl::Duration timeout_;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_DIST_KV_STORE_H_
