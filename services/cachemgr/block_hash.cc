#include "services/cachemgr/block_hash.h"

#include <algorithm>

namespace folio::cachemgr {
namespace {

// The 64-bit finalizer of SplitMix64: a bijection with full avalanche.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

BlockHash HashBlock(const BlockHash& parent, absl::Span<const int32_t> tokens) {
  // Two independent 64-bit lanes, each absorbing the parent and every token, give a
  // 128-bit digest; the token count is absorbed too so blocks of different sizes differ.
  uint64_t hi = Mix(parent.hi ^ 0x9e3779b97f4a7c15ULL);
  uint64_t lo = Mix(parent.lo ^ 0xc2b2ae3d27d4eb4fULL);
  for (int32_t token : tokens) {
    const uint64_t t = static_cast<uint32_t>(token);
    hi = Mix(hi + t + 0x632be59bd9b4e019ULL);
    lo = Mix((lo ^ t) * 0xff51afd7ed558ccdULL + 1);
  }
  hi = Mix(hi ^ tokens.size());
  lo = Mix(lo + tokens.size());
  return BlockHash{hi, lo};
}

std::vector<BlockHash> HashFullBlocks(absl::Span<const int32_t> tokens, int32_t block_size,
                                      int32_t max_blocks) {
  std::vector<BlockHash> hashes;
  if (block_size <= 0) return hashes;
  const size_t n = std::min<size_t>(tokens.size() / block_size, std::max(max_blocks, 0));
  hashes.reserve(n);
  BlockHash parent = kRootBlockHash;
  for (size_t i = 0; i < n; ++i) {
    parent = HashBlock(parent, tokens.subspan(i * block_size, block_size));
    hashes.push_back(parent);
  }
  return hashes;
}

}  // namespace folio::cachemgr
