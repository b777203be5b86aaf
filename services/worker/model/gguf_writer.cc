#include "services/worker/model/gguf_writer.h"

#include <fstream>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "services/worker/model/dequant.h"

namespace folio::worker {
namespace {

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0)
      << "alignment " << alignment << " is not a power of two";
  if (alignment != kGgufDefaultAlignment) AddUint32("general.alignment", alignment);
}

void GgufWriter::PutString(std::string* out, absl::string_view s) const {
  Put<uint64_t>(out, s.size());
  out->append(s.data(), s.size());
}

void GgufWriter::BeginKv(absl::string_view key, GgufType type) {
  CHECK(keys_.emplace(key).second) << "duplicate GGUF key " << key;
  ++kv_count_;
  PutString(&kvs_, key);
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(type));
}

void GgufWriter::AddUint16(absl::string_view key, uint16_t value) {
  BeginKv(key, GgufType::kUint16);
  Put(&kvs_, value);
}

void GgufWriter::AddUint32(absl::string_view key, uint32_t value) {
  BeginKv(key, GgufType::kUint32);
  Put(&kvs_, value);
}

void GgufWriter::AddInt32(absl::string_view key, int32_t value) {
  BeginKv(key, GgufType::kInt32);
  Put(&kvs_, value);
}

void GgufWriter::AddUint64(absl::string_view key, uint64_t value) {
  BeginKv(key, GgufType::kUint64);
  Put(&kvs_, value);
}

void GgufWriter::AddFloat32(absl::string_view key, float value) {
  BeginKv(key, GgufType::kFloat32);
  Put(&kvs_, value);
}

void GgufWriter::AddFloat64(absl::string_view key, double value) {
  BeginKv(key, GgufType::kFloat64);
  Put(&kvs_, value);
}

void GgufWriter::AddBool(absl::string_view key, bool value) {
  BeginKv(key, GgufType::kBool);
  Put<uint8_t>(&kvs_, value ? 1 : 0);
}

void GgufWriter::AddString(absl::string_view key, absl::string_view value) {
  BeginKv(key, GgufType::kString);
  PutString(&kvs_, value);
}

void GgufWriter::AddStringArray(absl::string_view key, absl::Span<const std::string> values) {
  BeginKv(key, GgufType::kArray);
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(GgufType::kString));
  Put<uint64_t>(&kvs_, values.size());
  for (const std::string& v : values) PutString(&kvs_, v);
}

void GgufWriter::AddFloat32Array(absl::string_view key, absl::Span<const float> values) {
  BeginKv(key, GgufType::kArray);
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(GgufType::kFloat32));
  Put<uint64_t>(&kvs_, values.size());
  for (float v : values) Put(&kvs_, v);
}

void GgufWriter::AddInt32Array(absl::string_view key, absl::Span<const int32_t> values) {
  BeginKv(key, GgufType::kArray);
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(GgufType::kInt32));
  Put<uint64_t>(&kvs_, values.size());
  for (int32_t v : values) Put(&kvs_, v);
}

void GgufWriter::PutScalar(std::string* out, GgufType type, int64_t i, double d) const {
  switch (type) {
    case GgufType::kUint8: Put<uint8_t>(out, static_cast<uint8_t>(i)); return;
    case GgufType::kInt8: Put<int8_t>(out, static_cast<int8_t>(i)); return;
    case GgufType::kUint16: Put<uint16_t>(out, static_cast<uint16_t>(i)); return;
    case GgufType::kInt16: Put<int16_t>(out, static_cast<int16_t>(i)); return;
    case GgufType::kUint32: Put<uint32_t>(out, static_cast<uint32_t>(i)); return;
    case GgufType::kInt32: Put<int32_t>(out, static_cast<int32_t>(i)); return;
    case GgufType::kUint64: Put<uint64_t>(out, static_cast<uint64_t>(i)); return;
    case GgufType::kInt64: Put<int64_t>(out, i); return;
    case GgufType::kBool: Put<uint8_t>(out, i != 0 ? 1 : 0); return;
    case GgufType::kFloat32: Put<float>(out, static_cast<float>(d)); return;
    case GgufType::kFloat64: Put<double>(out, d); return;
    case GgufType::kString:
    case GgufType::kArray: break;
  }
  LOG(FATAL) << "not a scalar GGUF type: " << GgufTypeName(type);
}

absl::Status GgufWriter::AddValue(absl::string_view key, const GgufValue& value) {
  auto is_float = [](GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; };
  // One element of `type` from `get_int` / `get_double` into `out`.
  auto put = [&](std::string* out, GgufType type, const absl::StatusOr<int64_t>& i,
                 const absl::StatusOr<double>& d) -> absl::Status {
    if (is_float(type)) {
      if (!d.ok()) return d.status();
      PutScalar(out, type, 0, *d);
    } else {
      if (!i.ok()) return i.status();
      PutScalar(out, type, *i, 0);
    }
    return absl::OkStatus();
  };
  std::string encoded;
  absl::Status st;
  switch (value.type()) {
    case GgufType::kString:
      PutString(&encoded, value.AsString().value());
      break;
    case GgufType::kBool:
      Put<uint8_t>(&encoded, value.AsBool().value() ? 1 : 0);
      break;
    case GgufType::kArray: {
      const GgufType t = value.array_type();
      Put<uint32_t>(&encoded, static_cast<uint32_t>(t));
      Put<uint64_t>(&encoded, value.array_size());
      for (uint64_t i = 0; st.ok() && i < value.array_size(); ++i) {
        if (t == GgufType::kString) {
          PutString(&encoded, value.ArrayString(i).value());
        } else {
          st = put(&encoded, t, is_float(t) ? absl::StatusOr<int64_t>(0) : value.ArrayInt64(i),
                   is_float(t) ? value.ArrayDouble(i) : absl::StatusOr<double>(0.0));
        }
      }
      break;
    }
    default:
      st = put(&encoded, value.type(),
               is_float(value.type()) ? absl::StatusOr<int64_t>(0) : value.AsInt64(),
               is_float(value.type()) ? value.AsDouble() : absl::StatusOr<double>(0.0));
  }
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF key ", key, " cannot be copied: ", st.message()));
  }
  BeginKv(key, value.type());
  kvs_ += encoded;
  return absl::OkStatus();
}

void GgufWriter::AddTensorF32(absl::string_view name, DType dtype,
                              const std::vector<int64_t>& shape,
                              absl::Span<const float> values) {
  CHECK_EQ(static_cast<int64_t>(values.size()), Product(shape)) << name;
  std::vector<uint8_t> bytes;
  AppendFromF32(dtype, values.data(), static_cast<int64_t>(values.size()), &bytes);
  AddTensorBytes(name, dtype, shape, bytes);
}

void GgufWriter::AddTensorBytes(absl::string_view name, DType dtype,
                                const std::vector<int64_t>& shape,
                                absl::Span<const uint8_t> data) {
  CHECK(tensor_names_.emplace(name).second) << "duplicate GGUF tensor " << name;
  CHECK(!shape.empty() && shape.size() <= 4) << name;
  CHECK_EQ(static_cast<int64_t>(data.size()), DTypeBytes(dtype, Product(shape))) << name;
  tensors_.push_back(Tensor{std::string(name), dtype, shape, data_.size()});
  data_.append(reinterpret_cast<const char*>(data.data()), data.size());
  data_.resize((data_.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
}

std::string GgufWriter::Serialize() const {
  std::string out;
  Put<uint32_t>(&out, kGgufMagic);
  Put<uint32_t>(&out, 3);
  Put<uint64_t>(&out, tensors_.size());
  Put<uint64_t>(&out, kv_count_);
  out.append(kvs_);
  for (const Tensor& t : tensors_) {
    PutString(&out, t.name);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) {
      Put<uint64_t>(&out, static_cast<uint64_t>(*it));
    }
    Put<uint32_t>(&out, static_cast<uint32_t>(DTypeToGgmlType(t.dtype)));
    Put<uint64_t>(&out, t.offset);
  }
  if (!tensors_.empty()) {
    out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
    out.append(data_);
  }
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  const std::string bytes = Serialize();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return absl::InternalError(absl::StrCat(path, ": cannot open for writing"));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace folio::worker
