// Safetensors container parser (Hugging Face's weight file format).
//
// Format: u64 little-endian N, then N bytes of JSON: an object whose keys are tensor names
// mapping to {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]} (plus
// an optional "__metadata__" object of string values), then the data block; offsets are
// relative to the data block's start (8 + N). The header is parsed with nlohmann-json and
// every entry is checked against the file before any view is handed out: known keys only,
// a dtype Folio reads (F32, F16, BF16; the other safetensors dtypes are Unimplemented by
// name), non-negative dimensions whose product times the element size equals end - begin
// without overflow, end within the data block, no two tensors overlapping, and each
// tensor's data aligned to its element size (files written by the safetensors library
// always are: it pads the header to 8 bytes).
//
// Parsing works on a byte span (the fuzzer calls it without a file); nothing is copied:
// each tensor's data pointer points into the span, which must outlive the result. Errors
// are InvalidArgument (or DataLoss for a truncated file) and name the file and, where
// one is to blame, the tensor. Immutable after Parse(); safe to read from many threads.
#ifndef FOLIO_SERVICES_WORKER_MODEL_SAFETENSORS_H_
#define FOLIO_SERVICES_WORKER_MODEL_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

// Largest header Parse() accepts (the safetensors library's own limit is 100 MB).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100 << 20;

struct SafetensorsTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // as stored: row-major, outermost first
  const uint8_t* data = nullptr;
  uint64_t size_bytes = 0;
};

class SafetensorsFile {
 public:
  // Parses `bytes` (a whole .safetensors file); `name` prefixes every error.
  static absl::StatusOr<SafetensorsFile> Parse(absl::Span<const uint8_t> bytes,
                                               absl::string_view name);

  // The tensor called `tensor_name`, or nullptr.
  const SafetensorsTensor* Find(absl::string_view tensor_name) const;

  const std::map<std::string, SafetensorsTensor, std::less<>>& tensors() const {
    return tensors_;
  }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::map<std::string, SafetensorsTensor, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The safetensors dtype string for `dtype` ("F32", "F16", "BF16"); nullptr for the
// block types, which safetensors cannot hold.
const char* SafetensorsDTypeName(DType dtype);

// Serialises tensors into a safetensors file (for folio-make-model and tests): entries
// in the given order, each tensor's bytes as given (data must hold exactly
// product(shape) elements of dtype), the header padded with spaces to 8 bytes as the
// safetensors library pads it. InvalidArgument for a block dtype or a size mismatch.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  absl::Span<const uint8_t> data;
};
absl::StatusOr<std::string> WriteSafetensors(const std::vector<SafetensorsEntry>& entries,
                                             const std::map<std::string, std::string>& metadata);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_SAFETENSORS_H_
