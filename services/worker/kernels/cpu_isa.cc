#include "services/worker/kernels/cpu_isa.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace folio::worker::kernels {
namespace {

CpuIsa Detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c()) {
    return CpuIsa::kAvx2;
  }
#endif
  return CpuIsa::kPortable;
}

}  // namespace

bool HasF16c() {
#if defined(__x86_64__) || defined(__i386__)
  // CPUID leaf 1, ECX bit 29. Read directly: not every compiler's
  // __builtin_cpu_supports knows "f16c".
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
#else
  return false;
#endif
}

CpuIsa BestCpuIsa() {
  static const CpuIsa isa = Detect();
  return isa;
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable:
      return "portable";
    case CpuIsa::kAvx2:
      return "avx2";
  }
  return "unknown";
}

std::vector<CpuIsa> SupportedCpuIsas() {
  std::vector<CpuIsa> isas = {CpuIsa::kPortable};
  if (BestCpuIsa() == CpuIsa::kAvx2) isas.push_back(CpuIsa::kAvx2);
  return isas;
}

}  // namespace folio::worker::kernels
