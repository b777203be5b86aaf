#include "common/incarnation.h"

#include <cstdint>
#include <random>

#include "absl/strings/str_format.h"

namespace folio {

std::string NewIncarnationId() {
  // std::random_device reads the OS's entropy source (getrandom on Linux), so two
  // processes started in the same microsecond still differ.
  std::random_device device;
  uint64_t words[2] = {0, 0};
  for (uint64_t& w : words) w = (uint64_t{device()} << 32) ^ device();
  return absl::StrFormat("%016x%016x", words[0], words[1]);
}

}  // namespace folio
