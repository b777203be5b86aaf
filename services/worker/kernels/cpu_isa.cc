#include "services/worker/kernels/cpu_isa.h"

#include <cstdint>
#include <cstdlib>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "glog/logging.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace folio::worker::kernels {
namespace {

#if defined(__x86_64__) || defined(__i386__)
bool Bit(unsigned int reg, int bit) { return (reg >> bit) & 1u; }

// XCR0, the state components the OS saves on context switches (0 without OSXSAVE).
uint64_t Xcr0() {
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !Bit(ecx, 27)) return 0;
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}
#endif

CpuFeatures Detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool fma = Bit(ecx, 12), f16c = Bit(ecx, 29);
  const uint64_t xcr0 = Xcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;             // SSE + AVX state
  const bool zmm_state = ymm_state && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM_Hi256 + Hi16_ZMM
  unsigned int b7 = 0, c7 = 0, d7 = 0, a7 = 0;
  if (!__get_cpuid_count(7, 0, &a7, &b7, &c7, &d7)) return f;
  unsigned int a71 = 0, b71 = 0, c71 = 0, d71 = 0;
  __get_cpuid_count(7, 1, &a71, &b71, &c71, &d71);
  f.avx2 = ymm_state && Bit(b7, 5) && fma && f16c;
  f.avx512 = f.avx2 && zmm_state && Bit(b7, 16) /*F*/ && Bit(b7, 30) /*BW*/ && Bit(b7, 31) /*VL*/;
  f.avx512_vnni = f.avx512 && Bit(c7, 11);
  f.avx512_bf16 = f.avx512 && Bit(a71, 5);
  f.avx_vnni = f.avx2 && Bit(a71, 4);
#endif
  return f;
}

}  // namespace

CpuFeatures DetectedCpuFeatures() {
  static const CpuFeatures f = Detect();
  return f;
}

CpuFeatures NarrowCpuFeatures(const CpuFeatures& detected, const std::string& list) {
  CpuFeatures allowed;
  for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    if (name == "avx2") {
      allowed.avx2 = true;
    } else if (name == "avx512") {
      allowed.avx512 = true;
    } else if (name == "avx512_vnni") {
      allowed.avx512_vnni = true;
    } else if (name == "avx512_bf16") {
      allowed.avx512_bf16 = true;
    } else if (name == "avx_vnni") {
      allowed.avx_vnni = true;
    } else if (name != "none" && name != "portable") {
      LOG(WARNING) << "FOLIO_CPU_FEATURES: unknown feature '" << name
                   << "' ignored (known: avx2, avx512, avx512_vnni, avx512_bf16, avx_vnni, none)";
    }
  }
  CpuFeatures f;
  f.avx2 = detected.avx2 && allowed.avx2;
  f.avx512 = f.avx2 && detected.avx512 && allowed.avx512;
  f.avx512_vnni = f.avx512 && detected.avx512_vnni && allowed.avx512_vnni;
  f.avx512_bf16 = f.avx512 && detected.avx512_bf16 && allowed.avx512_bf16;
  f.avx_vnni = f.avx2 && detected.avx_vnni && allowed.avx_vnni;
  return f;
}

CpuFeatures EnabledCpuFeatures() {
  static const CpuFeatures f = [] {
    const char* env = std::getenv("FOLIO_CPU_FEATURES");
    const CpuFeatures detected = DetectedCpuFeatures();
    if (env == nullptr) return detected;
    const CpuFeatures narrowed = NarrowCpuFeatures(detected, env);
    LOG(INFO) << "FOLIO_CPU_FEATURES=" << env << ": kernels use "
              << CpuFeaturesString(narrowed) << " of " << CpuFeaturesString(detected);
    return narrowed;
  }();
  return f;
}

std::string CpuFeaturesString(const CpuFeatures& f) {
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.avx_vnni, "avx_vnni");
  add(f.avx512, "avx512");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx512_bf16, "avx512_bf16");
  return s.empty() ? "none" : s;
}

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
  static const CpuIsa isa = EnabledCpuFeatures().avx2 ? CpuIsa::kAvx2 : CpuIsa::kPortable;
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

const char* SimdPathName(SimdPath path) {
  switch (path) {
    case SimdPath::kPortable:
      return "portable";
    case SimdPath::kAvx2:
      return "avx2";
    case SimdPath::kAvxVnni:
      return "avx_vnni";
    case SimdPath::kAvx512:
      return "avx512";
    case SimdPath::kAvx512Vnni:
      return "avx512_vnni";
    case SimdPath::kAvx512Bf16:
      return "avx512_bf16";
  }
  return "unknown";
}

std::vector<SimdPath> AllSimdPaths() {
  return {SimdPath::kPortable, SimdPath::kAvx2,       SimdPath::kAvxVnni,
          SimdPath::kAvx512,   SimdPath::kAvx512Vnni, SimdPath::kAvx512Bf16};
}

const char* MissingFeature(SimdPath path, const CpuFeatures& f) {
  switch (path) {
    case SimdPath::kPortable:
      return nullptr;
    case SimdPath::kAvx2:
      return f.avx2 ? nullptr : "avx2";
    case SimdPath::kAvxVnni:
      return !f.avx2 ? "avx2" : f.avx_vnni ? nullptr : "avx_vnni";
    case SimdPath::kAvx512:
      return !f.avx2 ? "avx2" : f.avx512 ? nullptr : "avx512";
    case SimdPath::kAvx512Vnni:
      return !f.avx2 ? "avx2" : !f.avx512 ? "avx512" : f.avx512_vnni ? nullptr : "avx512_vnni";
    case SimdPath::kAvx512Bf16:
      return !f.avx2 ? "avx2" : !f.avx512 ? "avx512" : f.avx512_bf16 ? nullptr : "avx512_bf16";
  }
  return "unknown path";
}

}  // namespace folio::worker::kernels
