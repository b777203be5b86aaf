// GgufWriter: assembles a GGUF v3 file in memory (metadata, tensor infos, aligned
// tensor data) and writes it out. Used by folio-make-model, the tests and the fuzz
// corpus generator; not meant for multi-gigabyte models (the whole file is buffered).
//
// Tensors are given in math order ({out, in} or {n}); the writer stores ne innermost
// first as GGUF requires. Keys and tensor names must be unique (CHECKed: a duplicate is
// a programming error). Thread-compatible.
#ifndef FOLIO_SERVICES_WORKER_MODEL_GGUF_WRITER_H_
#define FOLIO_SERVICES_WORKER_MODEL_GGUF_WRITER_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "services/worker/model/gguf.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

class GgufWriter {
 public:
  // `alignment` must be a power of two; a value other than 32 is recorded as
  // general.alignment.
  explicit GgufWriter(uint32_t alignment = kGgufDefaultAlignment);

  void AddUint16(absl::string_view key, uint16_t value);
  void AddUint32(absl::string_view key, uint32_t value);
  void AddInt32(absl::string_view key, int32_t value);
  void AddUint64(absl::string_view key, uint64_t value);
  void AddFloat32(absl::string_view key, float value);
  void AddFloat64(absl::string_view key, double value);
  void AddBool(absl::string_view key, bool value);
  void AddString(absl::string_view key, absl::string_view value);
  void AddStringArray(absl::string_view key, absl::Span<const std::string> values);
  void AddFloat32Array(absl::string_view key, absl::Span<const float> values);
  void AddInt32Array(absl::string_view key, absl::Span<const int32_t> values);
  // Copies a value read by the parser (any type, arrays element by element in their own
  // element type), e.g. a vocabulary's tokenizer.* keys from another GGUF file.
  // InvalidArgument naming the key for a value it cannot re-encode (an array of bools, a
  // uint64 past the int64 range); nothing is added then.
  absl::Status AddValue(absl::string_view key, const GgufValue& value);

  // Adds a tensor of `shape` (math order) whose data is `values` converted to `dtype`
  // (see AppendFromF32). values.size() must equal the product of `shape`.
  void AddTensorF32(absl::string_view name, DType dtype, const std::vector<int64_t>& shape,
                    absl::Span<const float> values);
  // Adds a tensor whose stored bytes are given as is; `data` must have the size the
  // dtype and shape imply.
  void AddTensorBytes(absl::string_view name, DType dtype, const std::vector<int64_t>& shape,
                      absl::Span<const uint8_t> data);

  // The complete file.
  std::string Serialize() const;

  // Serializes and writes to `path` (replacing it). Internal error naming the path if
  // the file cannot be written.
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset;  // relative to the data section, aligned
  };

  void BeginKv(absl::string_view key, GgufType type);
  // One scalar of `type`, taken from an integer or a number (by the type's kind).
  void PutScalar(std::string* out, GgufType type, int64_t i, double d) const;
  void PutString(std::string* out, absl::string_view s) const;
  template <typename T>
  void Put(std::string* out, T v) const {
    out->append(reinterpret_cast<const char*>(&v), sizeof(v));
  }

  const uint64_t alignment_;
  uint64_t kv_count_ = 0;
  std::string kvs_;  // encoded key/value pairs
  std::vector<Tensor> tensors_;
  std::string data_;  // tensor data section, each tensor padded to alignment_
  absl::flat_hash_set<std::string> keys_;
  absl::flat_hash_set<std::string> tensor_names_;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_GGUF_WRITER_H_
