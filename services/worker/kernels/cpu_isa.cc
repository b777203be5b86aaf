#include "services/worker/kernels/cpu_isa.h"

namespace folio::worker::kernels {
namespace {

CpuIsa Detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    return CpuIsa::kAvx2;
  }
#endif
  return CpuIsa::kPortable;
}

}  // namespace

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

}  // namespace folio::worker::kernels
