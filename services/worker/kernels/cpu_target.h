// The target attributes of the kernels' SIMD functions, in one place: each function that
// uses a vector extension carries the attribute of exactly what it uses, and runs only
// after CpuFeatures (cpu_isa.h) said the CPU has it; the library itself stays baseline
// x86-64. Include it first in a kernel source, after that source's own header (it also
// silences GCC 12's warnings from inside its own AVX-512 headers, _mm512_undefined_* in
// the reductions and conversions, for the including file).
#ifndef FOLIO_SERVICES_WORKER_KERNELS_CPU_TARGET_H_
#define FOLIO_SERVICES_WORKER_KERNELS_CPU_TARGET_H_

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define FOLIO_T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define FOLIO_T_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define FOLIO_T_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define FOLIO_T_AVX512VNNI \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define FOLIO_T_AVX512BF16 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512bf16")))
// A helper of a SIMD function, inlined into it (and so compiled under its target).
#define FOLIO_INLINE inline __attribute__((always_inline))

#endif  // __x86_64__
#endif  // FOLIO_SERVICES_WORKER_KERNELS_CPU_TARGET_H_
