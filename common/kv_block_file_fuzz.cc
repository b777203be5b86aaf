// libFuzzer target: the disk KV tier's block-file reader (kv_block_file.h) on arbitrary
// bytes must return a Status, never crash or read past the file; a file it accepts must be
// exactly the file WriteKvBlockFile writes for the tokens and payload it returned (the
// format has one spelling, so a damaged file is never taken for a good one). The same
// bytes also go through the reader of the disk blocks a refusal carries. Built only
// with -DFOLIO_FUZZ=ON (clang); see tools/run_fuzz.sh.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "common/kv_block_file.h"

namespace {

constexpr int32_t kBlockSize = 4;
constexpr size_t kPayloadBytes = 64;
const folio::KvBlockFileKey kKey{.namespace_hash = 1, .hash_hi = 2, .hash_lo = 3, .rank = 0,
                                 .num_ranks = 1};

const std::string& Dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/kv_block_file_fuzz.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    return std::string(tmpl);
  }();
  return dir;
}

std::string Path(const std::string& dir) {
  return dir + "/" + folio::KvBlockFileName(kKey.hash_hi, kKey.hash_lo, kKey.rank);
}

std::vector<uint8_t> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

// The same bytes as the disk blocks a refusal carries (WithKvDiskBlocks' payload): read
// back only as whole blocks, and written again to the same bytes when they name each
// block once.
void CheckDiskBlocksPayload(const uint8_t* data, size_t size) {
  absl::Status refused = absl::DataLossError("fuzz");
  refused.SetPayload(folio::kKvDiskBlocksPayload,
                     absl::Cord(absl::string_view(reinterpret_cast<const char*>(data), size)));
  const std::vector<std::pair<uint64_t, uint64_t>> blocks = folio::KvDiskBlocksOf(refused);
  if (size % 16 != 0) {
    if (!blocks.empty()) std::abort();
    return;
  }
  if (blocks.size() != size / 16) std::abort();
  std::vector<std::pair<uint64_t, uint64_t>> distinct;
  for (const auto& b : blocks) {
    if (std::find(distinct.begin(), distinct.end(), b) == distinct.end()) distinct.push_back(b);
  }
  const absl::Status again = folio::WithKvDiskBlocks(absl::DataLossError("fuzz"), blocks);
  if (folio::KvDiskBlocksOf(again) != distinct) std::abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CheckDiskBlocksPayload(data, size);
  const std::string& dir = Dir();
  {
    std::ofstream out(Path(dir), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  absl::StatusOr<std::vector<int32_t>> tokens =
      folio::ReadKvBlockFileTokens(dir, kKey, kBlockSize);
  std::vector<uint8_t> payload(kPayloadBytes);
  const absl::Status read = folio::ReadKvBlockFile(dir, kKey, kBlockSize, absl::MakeSpan(payload));
  if (!read.ok()) return 0;
  if (!tokens.ok() || tokens->size() != static_cast<size_t>(kBlockSize)) std::abort();
  // Accepted: the writer's bytes for what was read must be the input, byte for byte.
  const std::string again = dir + "/again";
  mkdir(again.c_str(), 0755);
  if (!folio::WriteKvBlockFile(again, kKey, *tokens, payload).ok()) std::abort();
  if (ReadWhole(Path(again)) != std::vector<uint8_t>(data, data + size)) std::abort();
  return 0;
}
