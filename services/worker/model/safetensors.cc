#include "services/worker/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace folio::worker {
namespace {

using nlohmann::json;

struct StDType {
  const char* name;
  DType dtype;
  int bytes;
};
constexpr StDType kReadable[] = {
    {"F32", DType::kF32, 4}, {"F16", DType::kF16, 2}, {"BF16", DType::kBF16, 2}};
// The other dtypes of the safetensors format, refused by name.
constexpr const char* kUnreadable[] = {"F64", "I64", "U64", "I32", "U32", "I16", "U16", "I8",
                                       "U8", "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4",
                                       "F6_E2M3", "F6_E3M2", "C64"};

const StDType* FindReadable(absl::string_view s) {
  for (const StDType& d : kReadable) {
    if (s == d.name) return &d;
  }
  return nullptr;
}

int ElementBytes(DType dtype) {
  for (const StDType& d : kReadable) {
    if (d.dtype == dtype) return d.bytes;
  }
  return 0;
}

// A JSON value as a non-negative integer that fits `limit`, else nullopt-like false.
bool AsUnsigned(const json& v, uint64_t limit, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    const int64_t n = v.get<int64_t>();
    if (n < 0) return false;
    *out = static_cast<uint64_t>(n);
  } else {
    return false;
  }
  return *out <= limit;
}

std::string Brief(const json& v) {
  std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

}  // namespace

const char* SafetensorsDTypeName(DType dtype) {
  for (const StDType& d : kReadable) {
    if (d.dtype == dtype) return d.name;
  }
  return nullptr;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(absl::Span<const uint8_t> bytes,
                                                       absl::string_view name) {
  SafetensorsFile f;
  f.name_ = std::string(name);
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
  };
  auto tensor_error = [&](absl::string_view tensor, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": tensor '", tensor, "': ", what));
  };
  if (bytes.size() < 8) {
    return absl::DataLossError(absl::StrCat(name, ": ", bytes.size(),
                                            " bytes, too short for a safetensors header"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | bytes[i];
  if (header_len > kSafetensorsMaxHeaderBytes) {
    return error(absl::StrCat("header length ", header_len, " exceeds the limit of ",
                              kSafetensorsMaxHeaderBytes, " bytes (not a safetensors file?)"));
  }
  if (header_len > bytes.size() - 8) {
    return absl::DataLossError(absl::StrCat(name, ": header length ", header_len,
                                            " runs past the end of the ", bytes.size(),
                                            "-byte file"));
  }
  const char* header = reinterpret_cast<const char*>(bytes.data() + 8);
  json root = json::parse(header, header + header_len, /*cb=*/nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded()) return error("the header is not valid JSON");
  if (!root.is_object()) return error(absl::StrCat("the header is ", Brief(root), ", expected a JSON object"));

  const uint8_t* data = bytes.data() + 8 + header_len;
  const uint64_t data_size = bytes.size() - 8 - header_len;
  struct Extent {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Extent> extents;
  for (const auto& [key, entry] : root.items()) {
    if (key == "__metadata__") {
      if (!entry.is_object()) return error("'__metadata__' is not an object");
      for (const auto& [mk, mv] : entry.items()) {
        if (!mv.is_string()) {
          return error(absl::StrCat("'__metadata__' key '", mk, "' is ", Brief(mv),
                                    ", expected a string"));
        }
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) return tensor_error(key, absl::StrCat(Brief(entry), " is not an object"));
    for (const auto& [field, unused] : entry.items()) {
      (void)unused;
      if (field != "dtype" && field != "shape" && field != "data_offsets") {
        return tensor_error(key, absl::StrCat("unknown field '", field, "'"));
      }
    }
    const auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end() || !dtype_it->is_string()) {
      return tensor_error(key, "'dtype' is missing or not a string");
    }
    const std::string dtype_name = dtype_it->get<std::string>();
    const StDType* dtype = FindReadable(dtype_name);
    if (dtype == nullptr) {
      const bool known = std::find_if(std::begin(kUnreadable), std::end(kUnreadable),
                                      [&](const char* s) { return dtype_name == s; }) !=
                         std::end(kUnreadable);
      return absl::UnimplementedError(absl::StrCat(
          name, ": tensor '", key, "': dtype '", dtype_name, "' ",
          known ? "is not supported" : "is not a safetensors dtype",
          " (Folio reads F32, F16, BF16)"));
    }
    const auto shape_it = entry.find("shape");
    if (shape_it == entry.end() || !shape_it->is_array()) {
      return tensor_error(key, "'shape' is missing or not an array");
    }
    if (shape_it->size() > 8) {
      return tensor_error(key, absl::StrCat("'shape' has ", shape_it->size(),
                                            " dimensions (at most 8)"));
    }
    SafetensorsTensor t;
    t.dtype = dtype->dtype;
    absl::uint128 elements = 1;
    for (const json& d : *shape_it) {
      uint64_t n = 0;
      if (!AsUnsigned(d, std::numeric_limits<int64_t>::max(), &n)) {
        return tensor_error(key, absl::StrCat("'shape' entry ", Brief(d),
                                              " is not a non-negative integer"));
      }
      t.shape.push_back(static_cast<int64_t>(n));
      elements *= n;
      if (elements > data_size) elements = absl::uint128(data_size) + 1;  // caps, stays > size
    }
    const auto off_it = entry.find("data_offsets");
    if (off_it == entry.end() || !off_it->is_array() || off_it->size() != 2) {
      return tensor_error(key, "'data_offsets' is missing or not [begin, end]");
    }
    uint64_t begin = 0, end = 0;
    if (!AsUnsigned((*off_it)[0], std::numeric_limits<uint64_t>::max(), &begin) ||
        !AsUnsigned((*off_it)[1], std::numeric_limits<uint64_t>::max(), &end)) {
      return tensor_error(key, absl::StrCat("'data_offsets' ", Brief(*off_it),
                                            " are not non-negative integers"));
    }
    if (begin > end) {
      return tensor_error(key, absl::StrCat("'data_offsets' [", begin, ", ", end,
                                            "] end before they begin"));
    }
    if (end > data_size) {
      return tensor_error(key, absl::StrCat("'data_offsets' [", begin, ", ", end,
                                            "] run past the data block's ", data_size,
                                            " bytes (the file is ", bytes.size(), " bytes)"));
    }
    const absl::uint128 want = elements * dtype->bytes;
    if (want != end - begin) {
      return tensor_error(key, absl::StrCat("shape [", absl::StrJoin(t.shape, ", "), "] of ",
                                            dtype->name, " needs ",
                                            elements > data_size ? std::string("more")
                                                                 : absl::StrCat(static_cast<uint64_t>(want)),
                                            " bytes but 'data_offsets' [", begin, ", ", end,
                                            "] hold ", end - begin));
    }
    t.data = data + begin;
    t.size_bytes = end - begin;
    if (t.size_bytes > 0 && reinterpret_cast<uintptr_t>(t.data) % dtype->bytes != 0) {
      return tensor_error(key, absl::StrCat("data at file offset ", 8 + header_len + begin,
                                            " is not aligned to its ", dtype->bytes,
                                            "-byte elements"));
    }
    auto [it, inserted] = f.tensors_.emplace(key, std::move(t));
    if (!inserted) return tensor_error(key, "listed twice");
    extents.push_back({begin, end, &it->first});
  }
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < extents.size(); ++i) {
    if (extents[i].begin < extents[i - 1].end) {
      return tensor_error(*extents[i].name,
                          absl::StrCat("'data_offsets' [", extents[i].begin, ", ", extents[i].end,
                                       "] overlap tensor '", *extents[i - 1].name, "' [",
                                       extents[i - 1].begin, ", ", extents[i - 1].end, "]"));
    }
  }
  return f;
}

const SafetensorsTensor* SafetensorsFile::Find(absl::string_view tensor_name) const {
  const auto it = tensors_.find(tensor_name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::string> WriteSafetensors(const std::vector<SafetensorsEntry>& entries,
                                             const std::map<std::string, std::string>& metadata) {
  // nlohmann's ordered_json keeps insertion order, as the entries were given.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    const char* dtype = SafetensorsDTypeName(e.dtype);
    if (dtype == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "': ",
                                                     DTypeName(e.dtype),
                                                     " cannot be stored in safetensors"));
    }
    int64_t elements = 1;
    for (int64_t d : e.shape) elements *= d;
    if (static_cast<uint64_t>(elements) * ElementBytes(e.dtype) != e.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "': ", e.data.size(),
                                                     " bytes for shape [",
                                                     absl::StrJoin(e.shape, ", "), "]"));
    }
    header[e.name] = {{"dtype", dtype},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + e.data.size()}}};
    offset += e.data.size();
  }
  std::string json_text = header.dump();
  while ((8 + json_text.size()) % 8 != 0) json_text.push_back(' ');
  std::string out;
  out.reserve(8 + json_text.size() + offset);
  const uint64_t n = json_text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(n >> (8 * i) & 0xff));
  out += json_text;
  for (const SafetensorsEntry& e : entries) {
    out.append(reinterpret_cast<const char*>(e.data.data()), e.data.size());
  }
  return out;
}

}  // namespace folio::worker
