// The weight files of a Hugging Face checkpoint folder: `model.safetensors`, or the shards
// that `model.safetensors.index.json` lists in its weight_map (the single file wins when
// both are there, as transformers decides). Every file is memory-mapped and parsed
// (safetensors.h checks each header against its file); tensors are then looked up by
// name across the shards.
//
// With an index: each shard name must be a plain file name in the folder; a shard the
// index names that is absent is NotFound naming the shard and the index; every tensor
// the index assigns to a shard must be in that shard, and every tensor of a shard must
// be assigned to it (so no tensor is found in two files). Errors name the file and the
// tensor.
//
// Owns the mappings until Release() hands them to the model weights. Immutable after
// Open() but for Release(); thread-compatible.
#ifndef FOLIO_SERVICES_WORKER_MODEL_HF_CHECKPOINT_H_
#define FOLIO_SERVICES_WORKER_MODEL_HF_CHECKPOINT_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/worker/model/mapped_file.h"
#include "services/worker/model/safetensors.h"

namespace folio::worker {

inline constexpr char kHfSingleWeightsFile[] = "model.safetensors";
inline constexpr char kHfWeightsIndexFile[] = "model.safetensors.index.json";

class HfWeightFiles {
 public:
  struct Tensor {
    const SafetensorsTensor* tensor;  // points into a parsed file below
    const std::string* file;          // the file's path
  };

  // Maps and parses the weight files of the checkpoint folder `dir`. NotFound when the
  // folder has neither file (or a listed shard is missing); the parse errors of
  // SafetensorsFile::Parse; InvalidArgument for a malformed index (naming its key) or a
  // disagreement between the index and a shard.
  static absl::StatusOr<HfWeightFiles> Open(const std::string& dir);

  // The tensor `name`, or nullptr.
  const Tensor* Find(absl::string_view name) const;
  const std::map<std::string, Tensor, std::less<>>& tensors() const { return tensors_; }
  // The paths of the files, in load order.
  const std::vector<std::string>& paths() const { return paths_; }

  // Hands over the mappings (which the tensors point into); lookups stay valid only as
  // long as the new owner keeps them.
  std::vector<std::unique_ptr<MappedFile>> Release() { return std::move(files_); }

 private:
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<std::string> paths_;
  // unique_ptr so that Tensor pointers survive moves of this object.
  std::vector<std::unique_ptr<SafetensorsFile>> parsed_;
  std::map<std::string, Tensor, std::less<>> tensors_;
};

// Reads a small text file (config.json, tokenizer.json, ...) whole. NotFound naming it
// when absent; InvalidArgument when it exceeds `max_bytes`.
absl::StatusOr<std::string> ReadTextFile(const std::string& path, int64_t max_bytes);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_HF_CHECKPOINT_H_
