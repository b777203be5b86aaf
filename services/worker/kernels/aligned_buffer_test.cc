#include "services/worker/kernels/aligned_buffer.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace folio::worker::kernels {
namespace {

// The VmFlags line of the mapping of /proc/self/smaps that holds `p` ("" if none).
std::string VmFlagsOf(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(AlignedBufferTest, ZeroedAndAligned) {
  for (size_t alignment : {size_t{64}, size_t{4096}, kHugePageBytes}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{3} << 20}) {
      AlignedBuffer<uint16_t> b = MakeHugePaged<uint16_t>(count, alignment);
      ASSERT_NE(b, nullptr) << count << " values aligned to " << alignment;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % alignment, 0u) << alignment;
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(b[i], 0) << i;
      // The whole rounded-up allocation is ours to write.
      b[0] = 1;
      if (count > 0) b[count - 1] = 2;
    }
  }
}

TEST(AlignedBufferTest, AsksForHugePages) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  if (!thp) GTEST_SKIP() << "this kernel has no transparent huge pages";
  // 8 MiB at 2 MiB alignment: its own mapping, marked MADV_HUGEPAGE ("hg" in VmFlags).
  AlignedBuffer<uint8_t> b = MakeHugePaged<uint8_t>(size_t{8} << 20, kHugePageBytes);
  ASSERT_NE(b, nullptr);
  const std::string flags = VmFlagsOf(b.get() + (size_t{4} << 20));
  ASSERT_FALSE(flags.empty()) << "no mapping holds the buffer in /proc/self/smaps";
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
}

}  // namespace
}  // namespace folio::worker::kernels
