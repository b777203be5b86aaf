// LoadModel: the single entry point the worker uses to load a model file.
//
// A folder with a config.json is a Hugging Face checkpoint (hf_model.h: safetensors
// weights, tokenizer.json). Otherwise dispatches on the file's first bytes: "GGUF" -> GGUF v2/v3 (llama, qwen2, qwen3,
// gguf_model.h); anything else -> llama2.c legacy v0 checkpoint (llama2c_loader.h),
// whose tokenizer is tok<vocab>.bin or tokenizer.bin in the same folder. The returned
// weights own the memory mapping that backs every TensorView. Safe to call from any
// thread; the result is immutable and safe to share between threads.
#ifndef FOLIO_SERVICES_WORKER_MODEL_LOAD_MODEL_H_
#define FOLIO_SERVICES_WORKER_MODEL_LOAD_MODEL_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

// Loads the model at `path`. NotFound/PermissionDenied if it cannot be opened;
// InvalidArgument or DataLoss (naming the file and the problem) if it is malformed;
// Unimplemented for a recognised but unsupported variant (another architecture, a
// non-Llama tokenizer, a ggml type without a WeightFormat, llama2.c v1+).
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModel(const std::string& path);

// What a file is when its first bytes (`head`, up to 16) show a kind the loader does not
// take (a zip or pickle PyTorch checkpoint, a pre-GGUF llama.cpp file, a lone safetensors
// file, a text file), with what to do about it; nullopt otherwise. LoadModel's
// Unimplemented message for such a file.
std::optional<std::string> UnsupportedModelKind(std::string_view head);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_LOAD_MODEL_H_
