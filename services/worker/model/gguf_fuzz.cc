// libFuzzer target: GGUF parsing and Llama weight building on arbitrary bytes must
// return a Status, never crash, read out of bounds or allocate without bound. Built
// only with -DFOLIO_FUZZ=ON (clang); see tools/run_fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "services/worker/model/dequant.h"
#include "services/worker/model/gguf.h"
#include "services/worker/model/gguf_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using folio::worker::GgufFile;
  absl::StatusOr<GgufFile> f = GgufFile::Parse({data, size}, "fuzz.gguf");
  if (!f.ok()) return 0;
  // Touch everything the parser handed out, so bad pointers or sizes show up under ASan.
  for (const auto& [key, value] : f->metadata()) {
    (void)value.DebugString();
    for (uint64_t i = 0; i < value.array_size() && i < 64; ++i) {
      (void)value.ArrayInt64(i);
      (void)value.ArrayDouble(i);
      (void)value.ArrayString(i);
    }
  }
  volatile uint8_t sink = 0;
  for (const folio::worker::GgufTensorInfo& t : f->tensors()) {
    if (t.size_bytes > 0) sink = sink + t.data[0] + t.data[t.size_bytes - 1];
  }
  folio::worker::ModelWeights w;
  if (folio::worker::BuildLlamaWeights(*f, &w).ok()) {
    (void)folio::worker::ToF32(w.final_norm);
    if (w.lm_head.rows() > 0) {
      std::vector<float> row(static_cast<size_t>(w.lm_head.cols()));
      folio::worker::RowToF32(w.lm_head, w.lm_head.rows() - 1, row.data());
    }
  }
  return 0;
}
