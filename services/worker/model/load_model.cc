#include "services/worker/model/load_model.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "services/worker/model/gguf.h"
#include "services/worker/model/gguf_model.h"
#include "services/worker/model/hf_model.h"
#include "services/worker/model/llama2c_loader.h"

namespace folio::worker {
namespace {

// llama2.c export.py "v1"/"v2" files start with this u32 ("ak42" read big-endian).
constexpr uint32_t kLlama2cVersionedMagic = 0x616b3432;

}  // namespace

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModel(const std::string& path) {
  if (IsHfCheckpointDir(path)) return LoadHfModel(path);
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
    return absl::NotFoundError(absl::StrCat(
        path, ": a folder without config.json (a Hugging Face checkpoint folder needs "
              "config.json, model.safetensors or its index, and tokenizer.json)"));
  }
  std::ifstream in(path, std::ios::binary);
  uint32_t magic = 0;
  // A file too short for a magic falls through to the llama2.c loader, which reports
  // the size problem (or the open error) itself.
  if (in.read(reinterpret_cast<char*>(&magic), sizeof(magic))) {
    if (magic == kGgufMagic) return LoadGgufModel(path);
    if (magic == kLlama2cVersionedMagic) {
      return absl::UnimplementedError(absl::StrCat(
          path, ": llama2.c versioned checkpoint (magic \"ak42\"); only the legacy v0 "
                "format is supported (export with --version 0)"));
    }
  }
  return LoadLlama2cModel(path);
}

}  // namespace folio::worker
