// MappedModelWeights: ModelWeights whose tensor views point into a MappedFile that the
// object owns, so the views stay valid exactly as long as the weights do. Internal to
// the model loaders; callers see only ModelWeights. Immutable after loading; safe to
// read from many threads.
#ifndef FOLIO_SERVICES_WORKER_MODEL_MAPPED_WEIGHTS_H_
#define FOLIO_SERVICES_WORKER_MODEL_MAPPED_WEIGHTS_H_

#include <memory>
#include <utility>

#include "services/worker/model/dequant.h"
#include "services/worker/model/mapped_file.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

class MappedModelWeights : public ModelWeights {
 public:
  explicit MappedModelWeights(std::unique_ptr<MappedFile> file) : file_(std::move(file)) {}

  const MappedFile& file() const { return *file_; }

  int64_t file_bytes() const override { return static_cast<int64_t>(file_->size()); }

  void ReleasePages(const TensorView& t) const override {
    if (t.data == nullptr) return;
    file_->ReleasePages(t.data, static_cast<size_t>(DTypeBytes(t.dtype, t.num_elements())));
  }

 private:
  std::unique_ptr<MappedFile> file_;  // never null
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_MAPPED_WEIGHTS_H_
