// The worker's resident memory against its bound: a worker serving a model file keeps
// VmRSS <= file bytes + the KV pool it allocated + max(10% of the file, 256 MiB) (the
// allowance holds activations, logits and the runtime). VmRSS counts the mapped file's
// pages that are resident, so weights read in place count once, and a repacked copy
// must have released the pages it came from.
// Free functions and a plain struct; safe to call from any thread.
#ifndef FOLIO_SERVICES_WORKER_RESIDENT_MEMORY_H_
#define FOLIO_SERVICES_WORKER_RESIDENT_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace folio::worker {

struct ResidentMemory {
  int64_t peak_bytes = 0;      // VmHWM: the largest VmRSS so far (the load's peak)
  int64_t rss_bytes = 0;       // VmRSS
  int64_t rss_file_bytes = 0;  // RssFile: mapped file pages (the model's, libraries')
  int64_t rss_anon_bytes = 0;  // RssAnon: heap, KV pool, activations
};

// This process's figures from /proc/self/status; Unavailable where it cannot be read.
absl::StatusOr<ResidentMemory> ReadResidentMemory();

struct ResidentBound {
  int64_t file_bytes = 0;
  int64_t kv_bytes = 0;
  int64_t allowance_bytes() const;  // max(10% of the file, 256 MiB)
  int64_t limit_bytes() const { return file_bytes + kv_bytes + allowance_bytes(); }
};

// "VmRSS 812 MiB (file 700, anon 112) <= limit 1034 MiB (file 690 + KV 88 + allowance
// 256); peak 900 MiB <= limit", with "EXCEEDS" in place of "<=" when over.
std::string DescribeResident(const ResidentMemory& m, const ResidentBound& bound);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_RESIDENT_MEMORY_H_
