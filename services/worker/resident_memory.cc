#include "services/worker/resident_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace folio::worker {

absl::StatusOr<ResidentMemory> ReadResidentMemory() {
  std::ifstream in("/proc/self/status");
  if (!in) return absl::UnavailableError("cannot read /proc/self/status");
  ResidentMemory m;
  bool found = false;
  std::string line;
  while (std::getline(in, line)) {
    // "VmRSS:	  123456 kB"
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(':', 1));
    int64_t* field = kv.first == "VmHWM"     ? &m.peak_bytes
                     : kv.first == "VmRSS"   ? &m.rss_bytes
                     : kv.first == "RssFile" ? &m.rss_file_bytes
                     : kv.first == "RssAnon" ? &m.rss_anon_bytes
                                             : nullptr;
    if (field == nullptr) continue;
    absl::string_view v = absl::StripAsciiWhitespace(kv.second);
    absl::ConsumeSuffix(&v, " kB");
    int64_t kib = 0;
    if (!absl::SimpleAtoi(v, &kib)) continue;
    *field = kib * 1024;
    found |= field == &m.rss_bytes;
  }
  if (!found) return absl::UnavailableError("/proc/self/status has no VmRSS line");
  return m;
}

int64_t ResidentBound::allowance_bytes() const {
  return std::max<int64_t>(file_bytes / 10, int64_t{256} << 20);
}

std::string DescribeResident(const ResidentMemory& m, const ResidentBound& b) {
  auto mib = [](int64_t bytes) { return bytes >> 20; };
  return absl::StrCat("VmRSS ", mib(m.rss_bytes), " MiB (file ", mib(m.rss_file_bytes),
                      ", anon ", mib(m.rss_anon_bytes), ") ",
                      m.rss_bytes <= b.limit_bytes() ? "<=" : "EXCEEDS", " limit ",
                      mib(b.limit_bytes()), " MiB (model file ", mib(b.file_bytes), " + KV ",
                      mib(b.kv_bytes), " + allowance ", mib(b.allowance_bytes()), "); peak ",
                      mib(m.peak_bytes), " MiB ",
                      m.peak_bytes <= b.limit_bytes() ? "<=" : "EXCEEDS", " limit");
}

}  // namespace folio::worker
