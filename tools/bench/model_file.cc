#include "tools/bench/model_file.h"

#include <memory>

#include "services/worker/model/load_model.h"

namespace folio::bench {

absl::StatusOr<ModelFacts> ReadModelFile(const std::string& path) {
  absl::StatusOr<std::unique_ptr<worker::ModelWeights>> w = worker::LoadModel(path);
  if (!w.ok()) return w.status();
  const worker::ModelWeights& m = **w;
  const size_t slash = path.find_last_of('/');
  return ModelFacts{slash == std::string::npos ? path : path.substr(slash + 1),
                    m.config.vocab_size,
                    m.config.max_seq_len,
                    {m.vocab.unk_id, m.vocab.bos_id, m.vocab.eos_id}};
}

}  // namespace folio::bench
