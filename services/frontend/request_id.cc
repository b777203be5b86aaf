#include "services/frontend/request_id.h"

#include <cstdint>

#include "absl/random/random.h"
#include "absl/strings/str_format.h"

namespace folio::frontend {

std::string NewRequestId() {
  // A thread-local generator: seeded once per thread from the OS, no lock needed.
  thread_local absl::BitGen gen;
  const uint64_t hi = absl::Uniform<uint64_t>(gen);
  const uint64_t lo = absl::Uniform<uint64_t>(gen);
  return absl::StrFormat("%016x%016x", hi, lo);
}

}  // namespace folio::frontend
