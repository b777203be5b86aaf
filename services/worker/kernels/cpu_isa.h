// Which CPU instruction-set paths the kernels use.
//
// The library is compiled for baseline x86-64 (or any other target); hot loops also have
// vector versions compiled with per-function target attributes, used only when the
// running CPU reports the features they need, so one binary runs on a plain x86-64 and
// uses AVX-512 where it is there.
//
// Two views of the same CPUID facts:
//   - CpuIsa: the path of the f32 kernels (packed GEMM, attention, SwiGLU, cache ops):
//     portable or AVX2 + FMA + F16C.
//   - CpuFeatures / SimdPath: the feature set the typed-weight matmuls (typed_gemm.h)
//     pick their per-type path from: AVX2 + FMA + F16C, AVX-512 F/BW/VL, AVX-512 VNNI,
//     AVX-512 BF16, AVX-VNNI. CPUID is read once (XGETBV too: the OS must save the
//     YMM/ZMM state for AVX/AVX-512 to count).
//
// Override: the environment variable FOLIO_CPU_FEATURES, read once at first use, narrows
// what the kernels use to the listed features (comma-separated names from
// CpuFeatureNames(), e.g. "avx2" or "avx2,avx512"; "none" or "portable" for plain C++);
// features the CPU lacks stay off. Tests instead pass a SimdPath to the kernels directly
// and skip paths whose MissingFeature() is non-null. Stateless after the first call;
// thread-safe.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_CPU_ISA_H_
#define FOLIO_SERVICES_WORKER_KERNELS_CPU_ISA_H_

#include <string>
#include <vector>

namespace folio::worker::kernels {

enum class CpuIsa {
  kPortable,  // plain C++, auto-vectorised by the compiler for the baseline target
  kAvx2,      // AVX2 + FMA + F16C intrinsics
};

// The best f32-kernel path this CPU supports under FOLIO_CPU_FEATURES (cached).
CpuIsa BestCpuIsa();

// Every f32-kernel path the kernels may use here, portable first (tests run each).
std::vector<CpuIsa> SupportedCpuIsas();

// Whether the CPU converts between f16 and f32 in hardware (F16C).
bool HasF16c();

const char* CpuIsaName(CpuIsa isa);

struct CpuFeatures {
  bool avx2 = false;         // AVX2 + FMA + F16C, YMM state enabled by the OS
  bool avx512 = false;       // AVX-512 F + BW + VL, ZMM/opmask state enabled by the OS
  bool avx512_vnni = false;  // AVX-512 VNNI (vpdpbusd on zmm); implies avx512
  bool avx512_bf16 = false;  // AVX-512 BF16 (vdpbf16ps, vcvtne2ps2bf16); implies avx512
  bool avx_vnni = false;     // AVX-VNNI (VEX vpdpbusd on ymm); implies avx2

  bool operator==(const CpuFeatures& o) const {
    return avx2 == o.avx2 && avx512 == o.avx512 && avx512_vnni == o.avx512_vnni &&
           avx512_bf16 == o.avx512_bf16 && avx_vnni == o.avx_vnni;
  }
};

// What CPUID and XGETBV report, ignoring FOLIO_CPU_FEATURES (cached).
CpuFeatures DetectedCpuFeatures();
// DetectedCpuFeatures() narrowed by FOLIO_CPU_FEATURES: what production kernels use.
CpuFeatures EnabledCpuFeatures();
// `detected` narrowed by an override list as FOLIO_CPU_FEATURES spells it (exposed for
// tests); unknown names are ignored with a warning.
CpuFeatures NarrowCpuFeatures(const CpuFeatures& detected, const std::string& list);
// No vector feature at all (the portable paths).
inline CpuFeatures NoCpuFeatures() { return CpuFeatures{}; }
// "avx2 avx512 avx512_vnni avx512_bf16" for logs ("none" when empty).
std::string CpuFeaturesString(const CpuFeatures& f);

// One vector path of the typed matmuls, named by the feature it needs.
enum class SimdPath {
  kPortable,    // plain C++: the reference every other path is tested against
  kAvx2,        // AVX2 + FMA + F16C, 8 lanes
  kAvxVnni,     // AVX2 + AVX-VNNI vpdpbusd on ymm
  kAvx512,      // AVX-512 F/BW/VL, 16 lanes
  kAvx512Vnni,  // AVX-512 + VNNI vpdpbusd on zmm
  kAvx512Bf16,  // AVX-512 + BF16 vdpbf16ps
};

const char* SimdPathName(SimdPath path);
// Every path, portable first.
std::vector<SimdPath> AllSimdPaths();
// The name of the first feature `path` needs that `f` lacks ("avx512_vnni"), or nullptr
// when `f` can run it.
const char* MissingFeature(SimdPath path, const CpuFeatures& f);

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_CPU_ISA_H_
