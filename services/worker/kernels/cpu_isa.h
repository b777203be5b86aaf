// Which CPU instruction-set path the kernels use.
//
// The library is compiled for baseline x86-64 (or any other target); hot loops also have
// an AVX2+FMA+F16C version compiled with per-function target attributes, used only when
// the running CPU reports those features. Kernels take a CpuIsa so tests can run both
// paths on one machine. Stateless; thread-safe.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_CPU_ISA_H_
#define FOLIO_SERVICES_WORKER_KERNELS_CPU_ISA_H_

#include <vector>

namespace folio::worker::kernels {

enum class CpuIsa {
  kPortable,  // plain C++, auto-vectorised by the compiler for the baseline target
  kAvx2,      // AVX2 + FMA + F16C intrinsics
};

// The best path this CPU supports (checked once, then cached).
CpuIsa BestCpuIsa();

// Every path this CPU can run, portable first (tests run each).
std::vector<CpuIsa> SupportedCpuIsas();

// Whether the CPU converts between f16 and f32 in hardware (F16C).
bool HasF16c();

const char* CpuIsaName(CpuIsa isa);

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_CPU_ISA_H_
