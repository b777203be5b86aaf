// Split GGUF models: llama.cpp's convention of one model in N files named
// <prefix>-00001-of-0000N.gguf .. <prefix>-0000N-of-0000N.gguf, each carrying the keys
// split.no (0-based shard index), split.count (N) and split.tensors.count (the model's
// tensor total). The first shard holds the model's metadata and some tensors; the
// others hold further tensors. Loading the first shard loads all of them: each is
// memory-mapped and parsed, its split keys checked, and its tensors appended to the
// first file's list so tensors are looked up across shards.
// Free functions; safe to call from any thread.
#ifndef FOLIO_SERVICES_WORKER_MODEL_GGUF_SPLIT_H_
#define FOLIO_SERVICES_WORKER_MODEL_GGUF_SPLIT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "services/worker/model/gguf.h"
#include "services/worker/model/mapped_weights.h"

namespace folio::worker {

inline constexpr char kGgufSplitNoKey[] = "split.no";
inline constexpr char kGgufSplitCountKey[] = "split.count";
inline constexpr char kGgufSplitTensorsCountKey[] = "split.tensors.count";

// "<prefix>-%05d-of-%05d.gguf" for the 0-based shard `no` of `count`.
std::string GgufSplitPath(absl::string_view prefix, int no, int count);

// If `first` (parsed from `path`, which `weights` maps) has split.count > 1: checks
// that it is shard 0 and that `path` is named as shard 1 of split.count, then maps and
// parses every other shard, hands its mapping to `weights` and its tensors to `first`,
// logging each shard. A file without split.count (or with 1) is left as it is.
// Errors: NotFound naming the missing shard's file; InvalidArgument naming the file
// and key for a split key that is missing, ill-typed or disagrees (split.no out of
// order, another split.count, a split.tensors.count the shards do not add up to), a
// first file not named like a shard, or a tensor found in two shards; the shard's own
// parse errors as GgufFile::Parse gives them.
absl::Status LoadGgufShards(const std::string& path, GgufFile* first, MappedModelWeights* weights);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_GGUF_SPLIT_H_
