#include "services/worker/model/gguf_split.h"

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "services/worker/model/mapped_file.h"

namespace folio::worker {
namespace {

#define FOLIO_SPLIT_CONCAT_INNER(a, b) a##b
#define FOLIO_SPLIT_CONCAT(a, b) FOLIO_SPLIT_CONCAT_INNER(a, b)
#define FOLIO_SPLIT_ASSIGN_IMPL(var, tmp, expr) \
  auto tmp = (expr);                            \
  if (!tmp.ok()) return tmp.status();           \
  var = *std::move(tmp)
#define ASSIGN_OR_RETURN(var, expr) \
  FOLIO_SPLIT_ASSIGN_IMPL(var, FOLIO_SPLIT_CONCAT(status_or_, __LINE__), expr)
#define RETURN_IF_ERROR(expr) \
  do {                        \
    absl::Status s_ = (expr); \
    if (!s_.ok()) return s_;  \
  } while (0)

// The integer at `key`, or `fallback` when absent; InvalidArgument naming file and key
// when ill-typed.
absl::StatusOr<int64_t> SplitKey(const GgufFile& f, absl::string_view key, int64_t fallback) {
  const GgufValue* v = f.FindValue(key);
  if (v == nullptr) return fallback;
  absl::StatusOr<int64_t> n = v->AsInt64();
  if (!n.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.name(), ": key '", key, "': ", n.status().message()));
  }
  return *n;
}

absl::Status Disagrees(const GgufFile& f, absl::string_view key, int64_t found,
                       absl::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat(f.name(), ": key '", key, "' is ", found,
                                                 " but ", expected));
}

}  // namespace

std::string GgufSplitPath(absl::string_view prefix, int no, int count) {
  return absl::StrFormat("%s-%05d-of-%05d.gguf", prefix, no + 1, count);
}

absl::Status LoadGgufShards(const std::string& path, GgufFile* first, MappedModelWeights* weights) {
  ASSIGN_OR_RETURN(const int64_t count, SplitKey(*first, kGgufSplitCountKey, 1));
  if (count == 1) return absl::OkStatus();
  if (count < 1 || count > 99999) {
    return Disagrees(*first, kGgufSplitCountKey, count, "a split count is 1..99999");
  }
  if (first->FindValue(kGgufSplitNoKey) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": key '", kGgufSplitNoKey,
                                                   "' is missing (split.count is ", count, ")"));
  }
  ASSIGN_OR_RETURN(const int64_t no, SplitKey(*first, kGgufSplitNoKey, 0));
  if (no != 0) {
    return Disagrees(*first, kGgufSplitNoKey, no,
                     absl::StrCat("a split model is loaded from its first shard, ",
                                  GgufSplitPath("<prefix>", 0, static_cast<int>(count))));
  }
  const std::string suffix = GgufSplitPath("", 0, static_cast<int>(count));
  if (path.size() <= suffix.size() || !absl::EndsWith(path, suffix)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": key 'split.count' is ", count, " but the file is not named <prefix>", suffix,
        ", so its other shards cannot be found"));
  }
  const std::string prefix = path.substr(0, path.size() - suffix.size());
  ASSIGN_OR_RETURN(const int64_t total, SplitKey(*first, kGgufSplitTensorsCountKey, -1));
  LOG(INFO) << path << ": shard 1 of " << count << ", " << first->tensors().size()
            << " tensors, " << (weights->file().size() >> 20) << " MiB mapped";
  for (int i = 1; i < count; ++i) {
    const std::string shard_path = GgufSplitPath(prefix, i, static_cast<int>(count));
    absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(shard_path);
    if (absl::IsNotFound(file.status())) {
      return absl::NotFoundError(absl::StrCat("shard ", i + 1, " of ", count, " is missing: ",
                                              shard_path, " (", path, " has split.count ", count,
                                              ")"));
    }
    if (!file.ok()) return file.status();
    const absl::Span<const uint8_t> bytes = (*file)->bytes();
    weights->AddFile(*std::move(file));  // the tensors appended below point into it
    ASSIGN_OR_RETURN(GgufFile shard, GgufFile::Parse(bytes, shard_path));
    ASSIGN_OR_RETURN(const int64_t shard_count, SplitKey(shard, kGgufSplitCountKey, -1));
    if (shard_count != count) {
      if (shard_count == -1) {
        return absl::InvalidArgumentError(
            absl::StrCat(shard_path, ": key '", kGgufSplitCountKey, "' is missing"));
      }
      return Disagrees(shard, kGgufSplitCountKey, shard_count,
                       absl::StrCat(path, " has ", count));
    }
    ASSIGN_OR_RETURN(const int64_t shard_no, SplitKey(shard, kGgufSplitNoKey, -1));
    if (shard_no != i) {
      if (shard_no == -1) {
        return absl::InvalidArgumentError(
            absl::StrCat(shard_path, ": key '", kGgufSplitNoKey, "' is missing"));
      }
      return Disagrees(shard, kGgufSplitNoKey, shard_no,
                       absl::StrCat("the file is named as shard ", i + 1, " (split.no ", i, ")"));
    }
    ASSIGN_OR_RETURN(const int64_t shard_total, SplitKey(shard, kGgufSplitTensorsCountKey, total));
    if (shard_total != total) {
      return Disagrees(shard, kGgufSplitTensorsCountKey, shard_total,
                       absl::StrCat(path, " has ", total));
    }
    RETURN_IF_ERROR(first->AddShardTensors(shard));
    LOG(INFO) << shard_path << ": shard " << i + 1 << " of " << count << ", "
              << shard.tensors().size() << " tensors, " << (bytes.size() >> 20)
              << " MiB mapped";
  }
  if (total >= 0 && static_cast<size_t>(total) != first->tensors().size()) {
    return Disagrees(*first, kGgufSplitTensorsCountKey, total,
                     absl::StrCat("its ", count, " shards hold ", first->tensors().size(),
                                  " tensors"));
  }
  return absl::OkStatus();
}

}  // namespace folio::worker
