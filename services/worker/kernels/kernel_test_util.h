// Inputs for the CPU kernels' tests.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_KERNEL_TEST_UTIL_H_
#define FOLIO_SERVICES_WORKER_KERNELS_KERNEL_TEST_UTIL_H_

#include <cstddef>
#include <random>
#include <vector>

namespace folio::worker::kernels::testing {

// n draws of N(0, 1) from `seed`.
inline std::vector<float> RandomNormal(size_t n, int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace folio::worker::kernels::testing

#endif  // FOLIO_SERVICES_WORKER_KERNELS_KERNEL_TEST_UTIL_H_
