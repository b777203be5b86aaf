#include "services/worker/model/gguf.h"

#include <cstring>
#include <limits>

#include <glog/logging.h>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/worker/model/dequant.h"
#include "services/worker/model/weight_format.h"

namespace folio::worker {
namespace {

constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Size in bytes of one element of a scalar metadata type; 0 for string/array/unknown.
size_t ScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

bool IsKnownType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }


// uint128 values in messages (absl::StrCat has no overload for them here).
std::string U128(absl::uint128 v) {
  if (absl::Uint128High64(v) != 0) return "more than 2^64";
  return absl::StrCat(absl::Uint128Low64(v));
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Decodes one scalar element at `p` (ScalarSize(t) readable bytes) into the value's
// integer/float fields.
struct Scalar {
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
};

Scalar DecodeScalar(GgufType t, const uint8_t* p) {
  Scalar s;
  switch (t) {
    case GgufType::kUint8: s.u = Load<uint8_t>(p); break;
    case GgufType::kInt8: s.i = Load<int8_t>(p); break;
    case GgufType::kUint16: s.u = Load<uint16_t>(p); break;
    case GgufType::kInt16: s.i = Load<int16_t>(p); break;
    case GgufType::kUint32: s.u = Load<uint32_t>(p); break;
    case GgufType::kInt32: s.i = Load<int32_t>(p); break;
    case GgufType::kFloat32: s.f = Load<float>(p); break;
    case GgufType::kBool: s.u = Load<uint8_t>(p); break;
    case GgufType::kUint64: s.u = Load<uint64_t>(p); break;
    case GgufType::kInt64: s.i = Load<int64_t>(p); break;
    case GgufType::kFloat64: s.f = Load<double>(p); break;
    case GgufType::kString:
    case GgufType::kArray: break;
  }
  return s;
}

bool IsUnsigned(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kUint16 || t == GgufType::kUint32 ||
         t == GgufType::kUint64;
}
bool IsSigned(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 ||
         t == GgufType::kInt64;
}
bool IsFloat(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

absl::StatusOr<int64_t> ScalarToInt64(GgufType t, const Scalar& s) {
  if (IsSigned(t)) return s.i;
  if (IsUnsigned(t)) {
    if (s.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat("value ", s.u, " is out of int64 range"));
    }
    return static_cast<int64_t>(s.u);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("expected an integer, found ", GgufTypeName(t)));
}

absl::StatusOr<double> ScalarToDouble(GgufType t, const Scalar& s) {
  if (IsFloat(t)) return s.f;
  if (IsSigned(t)) return static_cast<double>(s.i);
  if (IsUnsigned(t)) return static_cast<double>(s.u);
  return absl::InvalidArgumentError(absl::StrCat("expected a number, found ", GgufTypeName(t)));
}

}  // namespace

const char* GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

DType GgmlTypeToDType(GgmlType type) {
  const WeightFormat* f = FormatForGgmlType(static_cast<uint32_t>(type));
  CHECK(f != nullptr) << "bad ggml type " << static_cast<uint32_t>(type);
  return f->dtype;
}

GgmlType DTypeToGgmlType(DType dtype) { return static_cast<GgmlType>(FormatOf(dtype).ggml_type); }

// ---- GgufValue ----

absl::StatusOr<int64_t> GgufValue::AsInt64() const {
  return ScalarToInt64(type_, Scalar{u64_, i64_, f64_});
}

absl::StatusOr<double> GgufValue::AsDouble() const {
  return ScalarToDouble(type_, Scalar{u64_, i64_, f64_});
}

absl::StatusOr<bool> GgufValue::AsBool() const {
  if (type_ != GgufType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat("expected bool, found ", GgufTypeName(type_)));
  }
  return u64_ != 0;
}

absl::StatusOr<absl::string_view> GgufValue::AsString() const {
  if (type_ != GgufType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected string, found ", GgufTypeName(type_)));
  }
  return str_;
}

absl::StatusOr<int64_t> GgufValue::ArrayInt64(uint64_t i) const {
  CHECK_LT(i, array_size_);
  if (ScalarSize(array_type_) == 0) return ScalarToInt64(array_type_, Scalar{});
  return ScalarToInt64(array_type_,
                       DecodeScalar(array_type_, array_data_ + i * ScalarSize(array_type_)));
}

absl::StatusOr<bool> GgufValue::ArrayBool(uint64_t i) const {
  CHECK_LT(i, array_size_);
  if (array_type_ != GgufType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected bool, found ", GgufTypeName(array_type_)));
  }
  return DecodeScalar(array_type_, array_data_ + i * ScalarSize(array_type_)).u != 0;
}

absl::StatusOr<double> GgufValue::ArrayDouble(uint64_t i) const {
  CHECK_LT(i, array_size_);
  if (ScalarSize(array_type_) == 0) return ScalarToDouble(array_type_, Scalar{});
  return ScalarToDouble(array_type_,
                        DecodeScalar(array_type_, array_data_ + i * ScalarSize(array_type_)));
}

absl::StatusOr<absl::string_view> GgufValue::ArrayString(uint64_t i) const {
  CHECK_LT(i, array_size_);
  if (array_type_ != GgufType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an array of string, found array of ", GgufTypeName(array_type_)));
  }
  return array_strs_[i];
}

std::string GgufValue::DebugString() const {
  switch (type_) {
    case GgufType::kString: {
      const absl::string_view head = str_.substr(0, 64);
      return absl::StrCat("\"", absl::CEscape(head), str_.size() > 64 ? "...\"" : "\"");
    }
    case GgufType::kArray:
      return absl::StrCat("[", array_size_, " x ", GgufTypeName(array_type_), "]");
    case GgufType::kBool:
      return u64_ ? "true" : "false";
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      return absl::StrFormat("%g", f64_);
    default:
      return IsSigned(type_) ? absl::StrCat(i64_) : absl::StrCat(u64_);
  }
}

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

// ---- Parsing ----

// A bounds-checked cursor over the input. Each Read* fails with DataLoss naming what
// was being read and where, rather than reading past the end.
class GgufParser {
 public:
  GgufParser(absl::Span<const uint8_t> bytes, absl::string_view name)
      : bytes_(bytes), name_(name) {}

  absl::StatusOr<GgufFile> Parse();

 private:
  size_t remaining() const { return bytes_.size() - pos_; }

  absl::Status Truncated(absl::string_view what, uint64_t need) const {
    return absl::DataLossError(absl::StrCat(name_, ": truncated: ", what, " needs ", need,
                                            " bytes at offset ", pos_, ", file size is ",
                                            bytes_.size()));
  }
  absl::Status Invalid(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": ", what));
  }

  template <typename T>
  absl::Status Read(absl::string_view what, T* out) {
    if (remaining() < sizeof(T)) return Truncated(what, sizeof(T));
    *out = Load<T>(bytes_.data() + pos_);
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status ReadString(absl::string_view what, absl::string_view* out) {
    uint64_t len = 0;
    if (absl::Status s = Read(what, &len); !s.ok()) return s;
    if (len > remaining()) return Truncated(what, len);
    *out = absl::string_view(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return absl::OkStatus();
  }

  absl::Status ReadValue(absl::string_view key, GgufType type, GgufValue* v);
  absl::Status ReadTensorInfo(GgufTensorInfo* t);

  const absl::Span<const uint8_t> bytes_;
  const absl::string_view name_;
  size_t pos_ = 0;
};

absl::Status GgufParser::ReadValue(absl::string_view key, GgufType type, GgufValue* v) {
  const std::string what = absl::StrCat("value of '", key, "'");
  v->type_ = type;
  if (type == GgufType::kString) return ReadString(what, &v->str_);
  if (type != GgufType::kArray) {
    const size_t n = ScalarSize(type);
    if (remaining() < n) return Truncated(what, n);
    const Scalar s = DecodeScalar(type, bytes_.data() + pos_);
    pos_ += n;
    v->u64_ = s.u;
    v->i64_ = s.i;
    v->f64_ = s.f;
    if (type == GgufType::kBool && s.u > 1) {
      return Invalid(absl::StrCat("key '", key, "': bool value ", s.u, " is not 0 or 1"));
    }
    return absl::OkStatus();
  }
  uint32_t elem_type = 0;
  uint64_t count = 0;
  if (absl::Status s = Read(what, &elem_type); !s.ok()) return s;
  if (absl::Status s = Read(what, &count); !s.ok()) return s;
  if (!IsKnownType(elem_type)) {
    return Invalid(absl::StrCat("key '", key, "': unknown array element type ", elem_type));
  }
  v->array_type_ = static_cast<GgufType>(elem_type);
  if (v->array_type_ == GgufType::kArray) {
    return Invalid(absl::StrCat("key '", key, "': nested arrays are not supported"));
  }
  // Cap the count by what the remaining bytes could hold before allocating anything.
  const size_t min_elem = v->array_type_ == GgufType::kString ? 8 : ScalarSize(v->array_type_);
  if (count > remaining() / min_elem) {
    return absl::DataLossError(absl::StrCat(
        name_, ": key '", key, "': array of ", count, " ", GgufTypeName(v->array_type_),
        " needs at least ", U128(absl::uint128(count) * min_elem), " bytes at offset ", pos_,
        ", only ", remaining(), " remain"));
  }
  v->array_size_ = count;
  if (v->array_type_ == GgufType::kString) {
    v->array_strs_.resize(count);
    for (uint64_t i = 0; i < count; ++i) {
      if (absl::Status s = ReadString(what, &v->array_strs_[i]); !s.ok()) {
        return absl::DataLossError(absl::StrCat(s.message(), " (element ", i, ")"));
      }
    }
  } else {
    v->array_data_ = bytes_.data() + pos_;
    pos_ += count * min_elem;
    if (v->array_type_ == GgufType::kBool) {
      for (uint64_t i = 0; i < count; ++i) {
        if (v->array_data_[i] > 1) {
          return Invalid(absl::StrCat("key '", key, "': bool element ", i, " is not 0 or 1"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ReadTensorInfo(GgufTensorInfo* t) {
  if (absl::Status s = ReadString("tensor name", &t->name); !s.ok()) return s;
  const std::string what = absl::StrCat("tensor '", absl::CEscape(t->name), "'");
  uint32_t n_dims = 0;
  if (absl::Status s = Read(what, &n_dims); !s.ok()) return s;
  if (n_dims == 0 || n_dims > kMaxDims) {
    return Invalid(absl::StrCat(what, " has ", n_dims, " dimensions (1..", kMaxDims,
                                " supported)"));
  }
  t->ne.resize(n_dims);
  absl::uint128 elems = 1;
  for (uint32_t i = 0; i < n_dims; ++i) {
    uint64_t d = 0;
    if (absl::Status s = Read(what, &d); !s.ok()) return s;
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid(absl::StrCat(what, " dimension ", i, " is ", d));
    }
    t->ne[i] = static_cast<int64_t>(d);
    elems *= d;
    // Cap against the input size: no tensor can have more elements than bytes.
    if (elems > bytes_.size() && elems != 0) {
      elems = absl::uint128(bytes_.size()) + 1;  // keep it bounded, reported below
    }
  }
  uint32_t type = 0;
  uint64_t offset = 0;
  if (absl::Status s = Read(what, &type); !s.ok()) return s;
  if (absl::Status s = Read(what, &offset); !s.ok()) return s;
  const WeightFormat* format = FormatForGgmlType(type);
  if (format == nullptr) {
    return absl::UnimplementedError(absl::StrCat(name_, ": ", what, " has ggml type ", type,
                                                 "; supported: ", SupportedGgmlTypes()));
  }
  t->type = static_cast<GgmlType>(type);
  if (elems > bytes_.size()) {
    return absl::DataLossError(absl::StrCat(name_, ": ", what, " has more elements than the ",
                                            bytes_.size(), "-byte file can hold"));
  }
  if (format->is_block_quantized() && (t->ne.empty() || t->ne[0] % format->block_values != 0)) {
    return Invalid(absl::StrCat(what, " is ", format->name, " but its row length ",
                                t->ne.empty() ? 0 : t->ne[0], " is not a multiple of ",
                                format->block_values, " (its block)"));
  }
  t->offset = offset;
  t->size_bytes = static_cast<uint64_t>(format->BytesFor(static_cast<int64_t>(elems)));
  return absl::OkStatus();
}

absl::StatusOr<GgufFile> GgufParser::Parse() {
  GgufFile f;
  f.name_ = std::string(name_);
  uint32_t magic = 0;
  if (absl::Status s = Read("magic", &magic); !s.ok()) return s;
  if (magic != kGgufMagic) {
    return Invalid(absl::StrFormat("not a GGUF file: magic is 0x%08x, expected 0x%08x (\"GGUF\")",
                                   magic, kGgufMagic));
  }
  if (absl::Status s = Read("version", &f.version_); !s.ok()) return s;
  if (f.version_ != 2 && f.version_ != 3) {
    return absl::UnimplementedError(
        absl::StrCat(name_, ": GGUF version ", f.version_, " is not supported (2 and 3 are)"));
  }
  uint64_t tensor_count = 0, kv_count = 0;
  if (absl::Status s = Read("tensor count", &tensor_count); !s.ok()) return s;
  if (absl::Status s = Read("metadata count", &kv_count); !s.ok()) return s;
  // Smallest encodings: a key/value is an 8-byte key length, a 4-byte type and a
  // 1-byte value; a tensor info is an 8-byte name length, u32 n_dims, one u64 dim,
  // u32 type and u64 offset.
  constexpr uint64_t kMinKvBytes = 8 + 4 + 1, kMinTensorBytes = 8 + 4 + 8 + 4 + 8;
  if (kv_count > remaining() / kMinKvBytes) {
    return absl::DataLossError(absl::StrCat(name_, ": metadata count ", kv_count,
                                            " cannot fit in the remaining ", remaining(),
                                            " bytes"));
  }
  f.kvs_.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    absl::string_view key;
    uint32_t type = 0;
    if (absl::Status s = ReadString(absl::StrCat("metadata key #", i), &key); !s.ok()) return s;
    if (absl::Status s = Read(absl::StrCat("type of '", key, "'"), &type); !s.ok()) return s;
    if (!IsKnownType(type)) {
      return Invalid(absl::StrCat("key '", absl::CEscape(key), "' has unknown type ", type));
    }
    GgufValue v;
    if (absl::Status s = ReadValue(key, static_cast<GgufType>(type), &v); !s.ok()) return s;
    if (!f.kv_index_.emplace(key, f.kvs_.size()).second) {
      return Invalid(absl::StrCat("duplicate metadata key '", absl::CEscape(key), "'"));
    }
    f.kvs_.emplace_back(key, std::move(v));
  }

  if (const GgufValue* a = f.FindValue("general.alignment")) {
    if (a->type() != GgufType::kUint32) {
      return Invalid(absl::StrCat("general.alignment has type ", GgufTypeName(a->type()),
                                  ", expected uint32"));
    }
    const uint64_t align = static_cast<uint64_t>(*a->AsInt64());
    if (align == 0 || (align & (align - 1)) != 0) {
      return Invalid(absl::StrCat("general.alignment ", align, " is not a power of two"));
    }
    f.alignment_ = align;
  }

  if (tensor_count > remaining() / kMinTensorBytes) {
    return absl::DataLossError(absl::StrCat(name_, ": tensor count ", tensor_count,
                                            " cannot fit in the remaining ", remaining(),
                                            " bytes"));
  }
  f.tensors_.resize(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo& t = f.tensors_[i];
    if (absl::Status s = ReadTensorInfo(&t); !s.ok()) return s;
    if (!f.tensor_index_.emplace(t.name, i).second) {
      return Invalid(absl::StrCat("duplicate tensor '", absl::CEscape(t.name), "'"));
    }
  }

  // The data section starts at the next multiple of the alignment (which may be
  // exactly the end of a file that has no tensors).
  const absl::uint128 data_start =
      (absl::uint128(pos_) + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  if (tensor_count > 0 && data_start > bytes_.size()) {
    return absl::DataLossError(absl::StrCat(name_, ": tensor data would start at byte ",
                                            U128(data_start), " past file size ", bytes_.size()));
  }
  f.data_offset_ = static_cast<uint64_t>(data_start);
  for (GgufTensorInfo& t : f.tensors_) {
    if (t.offset % f.alignment_ != 0) {
      return Invalid(absl::StrCat("tensor '", absl::CEscape(t.name), "' offset ", t.offset,
                                  " is not a multiple of the alignment ", f.alignment_));
    }
    const absl::uint128 end = data_start + t.offset + t.size_bytes;
    if (end > bytes_.size()) {
      return absl::DataLossError(absl::StrCat(name_, ": tensor '", absl::CEscape(t.name),
                                              "' data ends at byte ", U128(end), " past file size ",
                                              bytes_.size()));
    }
    t.data = bytes_.data() + f.data_offset_ + t.offset;
  }
  return f;
}

absl::StatusOr<GgufFile> GgufFile::Parse(absl::Span<const uint8_t> bytes, absl::string_view name) {
  return GgufParser(bytes, name).Parse();
}

const GgufValue* GgufFile::FindValue(absl::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].second;
}

absl::Status GgufFile::AddShardTensors(const GgufFile& shard) {
  for (const GgufTensorInfo& t : shard.tensors()) {
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat(shard.name(), ": tensor '", t.name,
                                                     "' is already in an earlier shard of ",
                                                     name_));
    }
    tensors_.push_back(t);
  }
  return absl::OkStatus();
}

const GgufTensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace folio::worker
