// Test-only: token ids for the cache manager's tests.
#ifndef FOLIO_SERVICES_CACHEMGR_TEST_TOKENS_H_
#define FOLIO_SERVICES_CACHEMGR_TEST_TOKENS_H_

#include <cstdint>
#include <numeric>
#include <vector>

namespace folio::cachemgr {

// n distinct token ids from `start` up.
inline std::vector<int32_t> Iota(int32_t n, int32_t start = 100) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_TEST_TOKENS_H_
