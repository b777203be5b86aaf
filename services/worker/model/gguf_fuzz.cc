// libFuzzer target: GGUF parsing and weight building (llama, qwen2, qwen3) on arbitrary
// bytes must return a Status, never crash, read out of bounds or allocate without
// bound; every tensor's first and last block go through its type's dequantizer (all the
// block types). Built only with -DFOLIO_FUZZ=ON (clang); see tools/run_fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "services/worker/model/dequant.h"
#include "services/worker/model/gguf.h"
#include "services/worker/model/gguf_model.h"
#include "services/worker/model/weight_format.h"

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
  std::vector<float> block(256);
  for (const folio::worker::GgufTensorInfo& t : f->tensors()) {
    if (t.size_bytes > 0) sink = sink + t.data[0] + t.data[t.size_bytes - 1];
    const folio::worker::WeightFormat* format =
        folio::worker::FormatForGgmlType(static_cast<uint32_t>(t.type));
    if (format != nullptr && t.size_bytes >= static_cast<uint64_t>(format->block_bytes)) {
      format->dequantize(t.data, 1, block.data());
      format->dequantize(t.data + t.size_bytes - format->block_bytes, 1, block.data());
    }
  }
  folio::worker::ModelWeights w;
  if (folio::worker::BuildLlamaWeights(*f, &w).ok()) {
    (void)folio::worker::ToF32(w.final_norm);
    if (w.lm_head.rows() > 0) {
      std::vector<float> row(static_cast<size_t>(w.lm_head.cols()));
      folio::worker::RowToF32(w.lm_head, w.lm_head.rows() - 1, row.data());
    }
    if (w.rope_freqs.data != nullptr) (void)folio::worker::ToF32(w.rope_freqs);
    const folio::worker::LayerWeights& l = w.layers.back();
    for (const folio::worker::TensorView* v : {&l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm}) {
      if (v->data != nullptr) (void)folio::worker::ToF32(*v);
    }
    // The dense MLP's down projection, or the last expert's (the end of the 3-D tensor).
    const folio::worker::TensorView& down = l.experts.empty() ? l.w_down : l.experts.back().w_down;
    std::vector<float> row(static_cast<size_t>(down.cols()));
    folio::worker::RowToF32(down, down.rows() - 1, row.data());
    if (!l.experts.empty()) (void)folio::worker::ToF32(l.router);
  }
  return 0;
}
