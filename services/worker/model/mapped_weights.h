// MappedModelWeights: ModelWeights whose tensor views point into a MappedFile that the
// object owns, so the views stay valid exactly as long as the weights do. Internal to
// the model loaders; callers see only ModelWeights. Immutable after loading; safe to
// read from many threads.
#ifndef FOLIO_SERVICES_WORKER_MODEL_MAPPED_WEIGHTS_H_
#define FOLIO_SERVICES_WORKER_MODEL_MAPPED_WEIGHTS_H_

#include <memory>
#include <utility>

#include "services/worker/model/mapped_file.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

class MappedModelWeights : public ModelWeights {
 public:
  explicit MappedModelWeights(std::unique_ptr<MappedFile> file) : file_(std::move(file)) {}

  const MappedFile& file() const { return *file_; }

 private:
  std::unique_ptr<MappedFile> file_;  // never null
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_MAPPED_WEIGHTS_H_
