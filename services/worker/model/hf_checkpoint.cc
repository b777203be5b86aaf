#include "services/worker/model/hf_checkpoint.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace folio::worker {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

absl::StatusOr<std::string> ReadTextFile(const std::string& path, int64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!Exists(path)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot be read"));
  }
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) return absl::InternalError(absl::StrCat(path, ": cannot tell its size"));
  if (size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " bytes, more than the ", max_bytes, " allowed"));
  }
  in.seekg(0);
  std::string out(static_cast<size_t>(size), '\0');
  if (!in.read(out.data(), size)) {
    return absl::DataLossError(absl::StrCat(path, ": short read"));
  }
  return out;
}

absl::StatusOr<HfWeightFiles> HfWeightFiles::Open(const std::string& dir) {
  HfWeightFiles w;
  auto add = [&](const std::string& path) -> absl::StatusOr<SafetensorsFile*> {
    absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
    if (!file.ok()) return file.status();
    absl::StatusOr<SafetensorsFile> parsed = SafetensorsFile::Parse((*file)->bytes(), path);
    if (!parsed.ok()) return parsed.status();
    w.files_.push_back(*std::move(file));
    w.paths_.push_back(path);
    w.parsed_.push_back(std::make_unique<SafetensorsFile>(*std::move(parsed)));
    return w.parsed_.back().get();
  };
  const std::string single = absl::StrCat(dir, "/", kHfSingleWeightsFile);
  const std::string index_path = absl::StrCat(dir, "/", kHfWeightsIndexFile);
  if (Exists(single)) {
    absl::StatusOr<SafetensorsFile*> f = add(single);
    if (!f.ok()) return f.status();
    for (const auto& [name, t] : (*f)->tensors()) w.tensors_[name] = {&t, &(*f)->name()};
    return w;
  }
  if (!Exists(index_path)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no ", kHfSingleWeightsFile, " and no ",
                                            kHfWeightsIndexFile,
                                            " (not a Hugging Face safetensors checkpoint)"));
  }
  absl::StatusOr<std::string> text = ReadTextFile(index_path, int64_t{64} << 20);
  if (!text.ok()) return text.status();
  const nlohmann::json index = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": not a JSON object"));
  }
  const auto map_it = index.find("weight_map");
  if (map_it == index.end() || !map_it->is_object() || map_it->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": key 'weight_map' is missing or not a non-empty object"));
  }
  // shard file name -> tensors the index assigns to it, in first-mention order.
  std::vector<std::string> shard_order;
  std::map<std::string, std::vector<std::string>> assigned;
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": key 'weight_map.", tensor,
                                                     "' is not a file name"));
    }
    const std::string s = shard.get<std::string>();
    if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..") {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": key 'weight_map.", tensor,
                                                     "' names '", s,
                                                     "', not a file name in the folder"));
    }
    auto [it, inserted] = assigned.try_emplace(s);
    if (inserted) shard_order.push_back(s);
    it->second.push_back(tensor);
  }
  for (const std::string& shard : shard_order) {
    const std::string path = absl::StrCat(dir, "/", shard);
    if (!Exists(path)) {
      return absl::NotFoundError(absl::StrCat(path, ": shard missing (", kHfWeightsIndexFile,
                                              " lists it for tensor '", assigned[shard].front(),
                                              "' and ", assigned[shard].size() - 1, " more)"));
    }
    absl::StatusOr<SafetensorsFile*> f = add(path);
    if (!f.ok()) return f.status();
    for (const std::string& tensor : assigned[shard]) {
      const SafetensorsTensor* t = (*f)->Find(tensor);
      if (t == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", tensor,
                                                       "' is missing (", kHfWeightsIndexFile,
                                                       " assigns it to this shard)"));
      }
      w.tensors_[tensor] = {t, &(*f)->name()};
    }
    for (const auto& [name, t] : (*f)->tensors()) {
      const auto it = w.tensors_.find(name);
      if (it == w.tensors_.end() || it->second.tensor != &t) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name,
                                                       "' is not assigned to this shard by ",
                                                       kHfWeightsIndexFile));
      }
    }
    LOG(INFO) << path << ": shard " << w.paths_.size() << " of " << shard_order.size() << ", "
              << (*f)->tensors().size() << " tensors";
  }
  return w;
}

const HfWeightFiles::Tensor* HfWeightFiles::Find(absl::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}


}  // namespace folio::worker
