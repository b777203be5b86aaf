// GGUF (v2/v3) container parser: header, metadata key/values, tensor infos and the
// location of each tensor's data.
//
// Parsing works on a byte span (the fuzzer calls it without a file). The parsed
// GgufFile does NOT copy strings, arrays or tensor data: every string_view and data
// pointer points into the span given to Parse(), which must outlive the GgufFile.
// Every read is bounds-checked; a malformed or truncated input gives InvalidArgument
// (bad structure) or DataLoss (truncated), with the name given to Parse() and what is
// wrong. Element counts are checked against the bytes that remain before anything is
// allocated. Immutable after Parse(); safe to read from many threads.
//
// Format (little-endian): "GGUF" u32 version, u64 tensor_count, u64 kv_count,
// kv_count x {string key, u32 type, value}, tensor_count x {string name, u32 n_dims,
// u64 ne[n_dims] (innermost first), u32 ggml_type, u64 offset}, padding to the
// alignment (general.alignment, default 32), then the tensor data; each offset is
// relative to that data start. A string is u64 length + bytes.
#ifndef FOLIO_SERVICES_WORKER_MODEL_GGUF_H_
#define FOLIO_SERVICES_WORKER_MODEL_GGUF_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/numeric/int128.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32
inline constexpr uint64_t kGgufDefaultAlignment = 32;

// Metadata value types, numbered as in the GGUF spec.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* GgufTypeName(GgufType type);

// A ggml tensor type number. The parser accepts those with a WeightFormat
// (weight_format.h) and rejects others as Unimplemented, naming the supported list.
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30,
};

DType GgmlTypeToDType(GgmlType type);
GgmlType DTypeToGgmlType(DType dtype);

// One metadata value. Scalars are held decoded; arrays (of scalars or strings, not of
// arrays) refer to the raw bytes in the parsed span and are decoded on access.
class GgufValue {
 public:
  GgufType type() const { return type_; }

  // Typed accessors. The *Integer/*Number forms accept any integer (resp. integer or
  // float) type and fail with InvalidArgument on a type or range mismatch; the caller
  // adds context (the key) to the message.
  absl::StatusOr<int64_t> AsInt64() const;
  absl::StatusOr<double> AsDouble() const;
  absl::StatusOr<bool> AsBool() const;
  absl::StatusOr<absl::string_view> AsString() const;

  // Arrays. array_size() is 0 for a non-array. Element accessors CHECK the index and
  // fail like the scalar accessors on a type mismatch.
  bool is_array() const { return type_ == GgufType::kArray; }
  GgufType array_type() const { return array_type_; }
  uint64_t array_size() const { return array_size_; }
  absl::StatusOr<int64_t> ArrayInt64(uint64_t i) const;
  absl::StatusOr<double> ArrayDouble(uint64_t i) const;
  absl::StatusOr<bool> ArrayBool(uint64_t i) const;  // an array of bools only
  absl::StatusOr<absl::string_view> ArrayString(uint64_t i) const;

  // A short human-readable rendering (arrays show their type and size).
  std::string DebugString() const;

 private:
  friend class GgufParser;

  GgufType type_ = GgufType::kUint8;
  uint64_t u64_ = 0;  // unsigned integers and bool
  int64_t i64_ = 0;   // signed integers
  double f64_ = 0;    // float32 and float64
  absl::string_view str_;
  GgufType array_type_ = GgufType::kUint8;
  uint64_t array_size_ = 0;
  const uint8_t* array_data_ = nullptr;       // numeric arrays: packed elements
  std::vector<absl::string_view> array_strs_;  // string arrays
};

struct GgufTensorInfo {
  absl::string_view name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;     // innermost first, as stored; ne[0] is the row length
  uint64_t offset = 0;         // relative to GgufFile::data_offset()
  uint64_t size_bytes = 0;
  const uint8_t* data = nullptr;  // into the parsed span

  int64_t num_elements() const;
};

class GgufFile {
 public:
  // Parses `bytes`; `name` (usually the path) prefixes every error message.
  static absl::StatusOr<GgufFile> Parse(absl::Span<const uint8_t> bytes, absl::string_view name);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute, aligned
  const std::string& name() const { return name_; }

  // In file order.
  const std::vector<std::pair<absl::string_view, GgufValue>>& metadata() const { return kvs_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  // nullptr when absent.
  const GgufValue* FindValue(absl::string_view key) const;
  const GgufTensorInfo* FindTensor(absl::string_view name) const;

  // Appends the tensors of `shard` (a further file of a split model) to this file's
  // list, so FindTensor() and tensors() see every shard; their names and data point
  // into the span `shard` was parsed from, which must outlive this file. The
  // shard's metadata is not merged (the first file's describes the model).
  // InvalidArgument, naming both files, if a tensor name is already present.
  absl::Status AddShardTensors(const GgufFile& shard);

 private:
  friend class GgufParser;

  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<absl::string_view, GgufValue>> kvs_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<absl::string_view, size_t> kv_index_;
  absl::flat_hash_map<absl::string_view, size_t> tensor_index_;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_GGUF_H_
