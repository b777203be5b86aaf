// The AVX-512 kernels of the 4/5/6-bit ggml block types (typed_dot.h; the portable
// kernels in typed_quant_portable.cc are their reference): 64 weights per zmm. Weights
// are unpacked in registers to bytes; the 32-value types take two blocks per zmm
// (vpdpbusd with VNNI, vpmaddubsw + vpmaddwd without), the K-quants multiply by
// vpmaddubsw and apply the group scales by vpdpwssd (VNNI) or vpmaddwd (F/BW only), so
// every super-block's integer sum is exact before the f32 scaling. Register tiles (W
// weight rows x 5..8 token rows) share each unpacked block across token rows and each
// activation load across weight rows; dot[] is the same body at W = 1. Two paths from one
// body: kAvx512 (F/BW/VL) and kAvx512Vnni, typed_quant_avx512.inc compiled twice under
// #pragma GCC target (so the F/BW copy holds no VNNI instruction); the library itself
// stays baseline x86-64. Stateless; thread-safe.
#include "glog/logging.h"
#include "services/worker/kernels/cpu_target.h"
#include "services/worker/kernels/typed_dot.h"

#if defined(__x86_64__)
#include <utility>

namespace folio::worker::kernels::typed {
// Weight rows per register tile (typed_dot.h's tile_w): 2 for the K-quants (their
// unpacked super-block is 8 zmm a row), 4 for the 32-value types. Chosen by one layer of
// the 1.1B shape at 8 and 32 token rows, one thread, thread CPU time (W = 1 / 2 / 4).
constexpr int kTileWK = 2, kTileWL = 4;
namespace avx512_bw {
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
constexpr bool kUseVnni = false;
#include "services/worker/kernels/typed_quant_avx512.inc"
#pragma GCC pop_options
}  // namespace avx512_bw

namespace avx512_vnni {
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
constexpr bool kUseVnni = true;
#include "services/worker/kernels/typed_quant_avx512.inc"
#pragma GCC pop_options
}  // namespace avx512_vnni

DotKernel Avx512QuantKernel(StoredKind kind, SimdPath path) {
  if (path == SimdPath::kAvx512) return avx512_bw::MakeFor<false>(kind);
  if (path == SimdPath::kAvx512Vnni) return avx512_vnni::MakeFor<true>(kind);
  return DotKernel{};
}

}  // namespace folio::worker::kernels::typed

#else  // not x86-64: no vector kernels

namespace folio::worker::kernels::typed {
DotKernel Avx512QuantKernel(StoredKind, SimdPath) { return DotKernel{}; }
}  // namespace folio::worker::kernels::typed

#endif
