// The KV offload tier on disk (tier 2, issue #50): one file per full KV block and worker
// rank, named by the block's chained hash, inside a directory named by the model's
// identity (its namespace). Workers write and read the files; the cache manager, which
// owns the tier's index, reads their headers and removes them. Both sides use this
// format, and nothing else touches the bytes.
//
// Layout (little-endian, as the machines Folio runs on):
//   KvBlockFileHeader (72 bytes) | int32 tokens[block_size] | payload (one rank's block:
//   every layer's K then V rows, KvCache::CopyBlockOut's layout)
// The header carries a checksum of itself and the tokens, and one of the payload. A file
// is written under a temporary name and renamed, so a reader sees a whole file or none;
// a file cut short, flipped or written for another model is detected and treated as a
// miss. Several replicas may share the directory: a file's name and contents depend only
// on the namespace, the block's tokens and their prefix.
#ifndef FOLIO_COMMON_KV_BLOCK_FILE_H_
#define FOLIO_COMMON_KV_BLOCK_FILE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace folio {

inline constexpr char kKvBlockFileMagic[8] = {'F', 'O', 'L', 'I', 'O', 'K', 'V', '1'};

struct KvBlockFileHeader {
  char magic[8];
  uint64_t namespace_hash;
  uint64_t hash_hi;
  uint64_t hash_lo;
  uint32_t rank;
  uint32_t num_ranks;
  uint32_t block_size;
  uint32_t reserved;
  uint64_t payload_bytes;
  uint64_t payload_checksum;
  uint64_t header_checksum;  // of the bytes above and the tokens
};
static_assert(sizeof(KvBlockFileHeader) == 72);

// FNV-1a over 64-bit words (the tail bytewise): fast enough to check a block as it is
// read, and it catches any flipped or missing byte a truncation or bad sector leaves.
uint64_t KvChecksum(absl::Span<const uint8_t> bytes);

// The namespace of a model's blocks: a hash of `identity` (what makes two workers' blocks
// interchangeable: the model's content, its KV shape and dtype, the block size, the
// number of ranks), and the directory under `root` that holds them.
uint64_t KvNamespaceHash(absl::string_view identity);
std::string KvNamespaceDir(absl::string_view root, uint64_t namespace_hash);
// The namespace hash a KvNamespaceDir path ends in; InvalidArgument otherwise.
absl::StatusOr<uint64_t> ParseKvNamespaceDir(absl::string_view dir);

// "<hi><lo>.r<rank>.kv", 32 hex digits then the rank.
std::string KvBlockFileName(uint64_t hash_hi, uint64_t hash_lo, int32_t rank);
// The hash a rank-0 file name holds; false for any other name.
bool ParseKvBlockFileName(absl::string_view name, uint64_t* hash_hi, uint64_t* hash_lo);
int64_t KvBlockFileBytes(int32_t block_size, int64_t payload_bytes);

// The blocks (chained hashes as (hi, lo)) a worker could not load from disk, carried by
// its DATA_LOSS refusal as a payload of the status (kKvDiskBlocksPayload: 16 bytes a
// block, hi then lo, little-endian), which crosses gRPC in the status details
// (common/grpc_status.h); the scheduler tells the cache manager which to drop.
// WithKvDiskBlocks adds `blocks` to those `status` names already (each once; a refusal of
// several ranks gathers theirs); KvDiskBlocksOf reads them (none without the payload, or
// from one whose length is not a whole number of blocks).
inline constexpr absl::string_view kKvDiskBlocksPayload = "type.folio.dev/folio.KvDiskBlocks";
absl::Status WithKvDiskBlocks(absl::Status status,
                              absl::Span<const std::pair<uint64_t, uint64_t>> blocks);
std::vector<std::pair<uint64_t, uint64_t>> KvDiskBlocksOf(const absl::Status& status);
// `status` with the disk blocks every one of `refusals` names (a group's ranks' refusals
// gathered into the one the group answers).
absl::Status WithKvDiskBlocksOf(absl::Status status, absl::Span<const absl::Status> refusals);

struct KvBlockFileKey {
  uint64_t namespace_hash = 0;
  uint64_t hash_hi = 0;
  uint64_t hash_lo = 0;
  int32_t rank = 0;
  int32_t num_ranks = 1;
};

// Writes the file for `key` in `dir` (a temporary name, then a rename over any file of
// the same name, whose contents are the same by construction).
absl::Status WriteKvBlockFile(absl::string_view dir, const KvBlockFileKey& key,
                              absl::Span<const int32_t> tokens,
                              absl::Span<const uint8_t> payload);

// The tokens a file's header holds, its header checked against `key` (DataLoss when it
// does not match or is damaged, NotFound when there is no file, Unavailable when it could
// not be opened for another reason: descriptors, permissions). Reads the header only.
absl::StatusOr<std::vector<int32_t>> ReadKvBlockFileTokens(absl::string_view dir,
                                                           const KvBlockFileKey& key,
                                                           int32_t block_size);

// Reads the whole file into `payload` (its size is the expected payload size), checking
// header, tokens' checksum and payload checksum: DataLoss for any mismatch, NotFound when
// there is no file, Unavailable as above.
absl::Status ReadKvBlockFile(absl::string_view dir, const KvBlockFileKey& key,
                             int32_t block_size, absl::Span<uint8_t> payload);

}  // namespace folio

#endif  // FOLIO_COMMON_KV_BLOCK_FILE_H_
