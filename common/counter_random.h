// Counter-based randomness: a uniform draw that is a pure function of its key, so a draw
// is the same whatever batch, process or rank makes it (the sampler's per-position draws,
// speculative decoding's synthetic acceptance). Header-only; thread-safe.
#ifndef FOLIO_COMMON_COUNTER_RANDOM_H_
#define FOLIO_COMMON_COUNTER_RANDOM_H_

#include <cstdint>

namespace folio {

// SplitMix64's output function: a bijection with full avalanche.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) keyed by (seed, stream, counter).
inline double CounterUniform(uint64_t seed, uint32_t stream, int64_t counter) {
  uint64_t h = SplitMix64(seed);
  h = SplitMix64(h ^ stream);
  h = SplitMix64(h ^ static_cast<uint64_t>(counter));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

}  // namespace folio

#endif  // FOLIO_COMMON_COUNTER_RANDOM_H_
