// libFuzzer target: the safetensors header parser on arbitrary bytes must return a
// Status, never crash, read out of bounds or allocate without bound; every tensor it
// accepts must lie inside the input (its first and last bytes are read, and F16/BF16/F32
// values converted). Built only with -DFOLIO_FUZZ=ON (clang); see tools/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "services/worker/model/dequant.h"
#include "services/worker/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An 8-aligned copy, as a memory mapping would be.
  std::vector<uint64_t> aligned(size / 8 + 1);
  if (size > 0) std::memcpy(aligned.data(), data, size);
  const auto* bytes = reinterpret_cast<const uint8_t*>(aligned.data());
  absl::StatusOr<folio::worker::SafetensorsFile> f =
      folio::worker::SafetensorsFile::Parse({bytes, size}, "fuzz.safetensors");
  if (!f.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& [name, t] : f->tensors()) {
    if (t.data < bytes || t.data + t.size_bytes > bytes + size) std::abort();
    if (t.size_bytes == 0) continue;
    sink = sink + t.data[0] + t.data[t.size_bytes - 1];
    folio::worker::TensorView v{t.dtype, t.data, {static_cast<int64_t>(
                                                     t.size_bytes / (t.dtype == folio::worker::DType::kF32 ? 4 : 2))}};
    if (v.shape[0] <= 4096) (void)folio::worker::ToF32(v);
  }
  return 0;
}
