// MappedFile::ReleasePages: which pages leave this process's resident set (the "present"
// bit of /proc/self/pagemap) and the page cache (mincore), over ranges that share pages
// with each other and with ranges not listed, one that ends at the end of the file, and
// ones outside the mapping; the contents read back unchanged.
#include "services/worker/model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/model/model_test_util.h"

namespace folio::worker {
namespace {

constexpr uint32_t kTmpfsMagic = 0x01021994;

size_t PageSize() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

// Whether the page at `p` is mapped in this process (pagemap bit 63: present).
bool Present(const void* p) {
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  uint64_t entry = 0;
  const off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(p) / PageSize() * 8);
  const ssize_t n = ::pread(fd, &entry, sizeof(entry), at);
  ::close(fd);
  return n == sizeof(entry) && (entry >> 63) != 0;
}

// Whether the page at `p` of a file mapping is in the page cache.
bool Cached(const void* p) {
  unsigned char v = 0;
  if (::mincore(const_cast<void*>(p), PageSize(), &v) != 0) return false;
  return (v & 1) != 0;
}

// A file of `pages` pages, byte i = i * 7 mod 251, written one page per write() and
// synced: clean pages, each its own page-cache folio (one large write can make large
// folios, which the kernel drops from the cache only when a released range covers the
// whole folio; the resident-set part of ReleasePages is per page either way).
std::string WriteTestFile(const std::string& dir, size_t pages) {
  const size_t page = PageSize();
  std::vector<uint8_t> bytes(pages * page);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 % 251);
  const std::string path = dir + "/pages.bin";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EXPECT_GE(fd, 0) << path;
  if (fd < 0) return path;
  for (size_t p = 0; p < pages; ++p) {
    EXPECT_EQ(::write(fd, bytes.data() + p * page, page), static_cast<ssize_t>(page));
  }
  EXPECT_EQ(::fsync(fd), 0);
  ::close(fd);
  return path;
}

TEST(MappedFileTest, ReleasePagesDropsWholePagesOfTheUnion) {
  constexpr size_t kPages = 16;
  const size_t page = PageSize();
  const std::string path = WriteTestFile(testing::MakeTempDir("mapped_release"), kPages);
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const uint8_t* d = (*file)->data();
  ASSERT_EQ((*file)->size(), kPages * page);
  uint64_t sum = 0;
  for (size_t i = 0; i < kPages * page; i += 64) sum += d[i];  // fault every page in
  for (size_t p = 0; p < kPages; ++p) ASSERT_TRUE(Present(d + p * page)) << "page " << p;

  auto at = [&](size_t p, size_t offset) { return d + p * page + offset; };
  std::vector<MappedFile::Range> ranges = {
      // Two tensors sharing page 4, 32 bytes of padding apart: one union, pages 2..5.
      {at(1, 100), 3 * page - 50},
      {at(4, 82), 3 * page - 92},
      // Alone, sharing page 12 with a tensor not listed: only page 11.
      {at(10, 8), 2 * page},
      // Up to the end of the file: page 15 (the partial page at 14 stays).
      {at(14, 4), 2 * page - 4},
      // Outside the mapping (ignored), and empty.
      {&sum, sizeof(sum)},
      {at(8, 0), 0},
  };
  (*file)->ReleasePages(ranges);

  const std::vector<size_t> released = {2, 3, 4, 5, 11, 15};
  for (size_t p = 0; p < kPages; ++p) {
    const bool gone = std::find(released.begin(), released.end(), p) != released.end();
    EXPECT_EQ(Present(d + p * page), !gone) << "page " << p;
  }
  // The page cache too, where the kernel can drop pages (not on tmpfs).
  struct statfs fs;
  ASSERT_EQ(::statfs(path.c_str(), &fs), 0);
  if (static_cast<uint32_t>(fs.f_type) != kTmpfsMagic) {
    for (size_t p : released) EXPECT_FALSE(Cached(d + p * page)) << "page " << p;
  }
  // Reading a released page faults it back in from the file, unchanged.
  for (size_t i = 0; i < kPages * page; ++i) {
    ASSERT_EQ(d[i], static_cast<uint8_t>(i * 7 % 251)) << "byte " << i;
  }
  EXPECT_TRUE(Present(d + 3 * page));
}

TEST(MappedFileTest, ReleasingTensorsOneByOneKeepsTheirSharedPage) {
  const size_t page = PageSize();
  const std::string path = WriteTestFile(testing::MakeTempDir("mapped_release_one"), 8);
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const uint8_t* d = (*file)->data();
  for (size_t p = 0; p < 8; ++p) ASSERT_NE(d[p * page], 0xff);  // fault in (never 0xff)
  // [page 1, page 3 + 100) and [page 3 + 132, page 6): page 3 is shared.
  (*file)->ReleasePages(d + page, 2 * page + 100);
  EXPECT_FALSE(Present(d + page));
  EXPECT_FALSE(Present(d + 2 * page));
  EXPECT_TRUE(Present(d + 3 * page));
  (*file)->ReleasePages(d + 3 * page + 132, 3 * page - 132);
  EXPECT_TRUE(Present(d + 3 * page));  // each call alone leaves the shared page
  EXPECT_FALSE(Present(d + 4 * page));
  EXPECT_FALSE(Present(d + 5 * page));
  // Both together release it.
  (*file)->ReleasePages({{d + page, 2 * page + 100}, {d + 3 * page + 132, 3 * page - 132}});
  EXPECT_FALSE(Present(d + 3 * page));
  EXPECT_TRUE(Present(d + 6 * page));
}

}  // namespace
}  // namespace folio::worker
