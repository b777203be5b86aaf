// MappedModelWeights: ModelWeights whose tensor views point into MappedFiles that the
// object owns (one, or one per shard of a split GGUF), so the views stay valid exactly
// as long as the weights do. Internal to
// the model loaders; callers see only ModelWeights. Immutable after loading; safe to
// read from many threads.
#ifndef FOLIO_SERVICES_WORKER_MODEL_MAPPED_WEIGHTS_H_
#define FOLIO_SERVICES_WORKER_MODEL_MAPPED_WEIGHTS_H_

#include <memory>
#include <utility>
#include <vector>

#include "services/worker/model/dequant.h"
#include "services/worker/model/mapped_file.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

class MappedModelWeights : public ModelWeights {
 public:
  explicit MappedModelWeights(std::unique_ptr<MappedFile> file) { AddFile(std::move(file)); }

  // Takes another mapping (a further shard) whose memory views may point into.
  void AddFile(std::unique_ptr<MappedFile> file) { files_.push_back(std::move(file)); }

  const MappedFile& file() const { return *files_.front(); }

  int64_t file_bytes() const override {
    int64_t n = 0;
    for (const auto& f : files_) n += static_cast<int64_t>(f->size());
    return n;
  }

  using ModelWeights::ReleasePages;
  void ReleasePages(absl::Span<const TensorView> tensors) const override {
    std::vector<MappedFile::Range> ranges;
    ranges.reserve(tensors.size());
    for (const TensorView& t : tensors) {
      if (t.data == nullptr) continue;
      ranges.push_back({t.data, static_cast<size_t>(DTypeBytes(t.dtype, t.num_elements()))});
    }
    // A view lies in exactly one mapping; the others ignore ranges outside them.
    for (const auto& f : files_) f->ReleasePages(ranges);
  }

 private:
  std::vector<std::unique_ptr<MappedFile>> files_;  // at least one, none null
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_MAPPED_WEIGHTS_H_
