#include "services/worker/model/load_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "services/worker/model/gguf.h"
#include "services/worker/model/gguf_model.h"
#include "services/worker/model/hf_model.h"
#include "services/worker/model/llama2c_loader.h"

namespace folio::worker {
namespace {

// llama2.c export.py "v1"/"v2" files start with this u32 ("ak42" read big-endian).
constexpr uint32_t kLlama2cVersionedMagic = 0x616b3432;

constexpr char kSupported[] =
    "supported: a GGUF file, a Hugging Face checkpoint folder (config.json, safetensors, "
    "tokenizer.json) or a llama2.c v0 checkpoint";

}  // namespace

std::optional<std::string> UnsupportedModelKind(std::string_view head) {
  auto starts = [&](std::string_view p) { return head.substr(0, p.size()) == p; };
  if (starts("PK\x03\x04")) {
    return "a zip archive (a PyTorch .bin/.pt checkpoint is one): convert it to GGUF or "
           "safetensors";
  }
  // A llama2.c header's first field is its dim, a small little-endian int32: its high
  // bytes are zero, so each check below needs bytes no such header has.
  if (head.size() >= 4 && head[0] == '\x80' && head[1] >= 2 && head[1] <= 5 && head[2] != 0) {
    return "a Python pickle (an old PyTorch checkpoint): convert it to GGUF or safetensors";
  }
  // llama.cpp's files before GGUF, their u32 magics as stored (little-endian).
  if (starts("lmgg") || starts("fmgg") || starts("tjgg")) {
    return "a llama.cpp file older than GGUF (ggml/ggmf/ggjt): convert it to GGUF with "
           "llama.cpp's convert tools";
  }
  // safetensors: a u64 header length, then the JSON header.
  // (A header length under 4 GiB has zero high bytes; a llama2.c hidden_dim there is > 0.)
  if (head.size() >= 9 && head[8] == '{' && head.substr(4, 4) == std::string_view("\0\0\0\0", 4)) {
    return "a safetensors file alone: pass the Hugging Face folder that holds it (with "
           "config.json and tokenizer.json)";
  }
  const bool printable_start =
      head.size() >= 4 && std::all_of(head.begin(), head.begin() + 4, [](char c) {
        return c == '\n' || c == '\t' || (c >= ' ' && c <= '~');
      });
  if (printable_start && (starts("{") || starts("<") || starts("#") || starts("---"))) {
    return "a text file (JSON, HTML or markdown), not model weights";
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModel(const std::string& path) {
  if (IsHfCheckpointDir(path)) return LoadHfModel(path);
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
    return absl::NotFoundError(absl::StrCat(
        path, ": a folder without config.json (a Hugging Face checkpoint folder needs "
              "config.json, model.safetensors or its index, and tokenizer.json)"));
  }
  std::ifstream in(path, std::ios::binary);
  char head[16] = {};
  in.read(head, sizeof(head));
  const std::string_view first(head, static_cast<size_t>(in.gcount()));
  // A file too short for a magic falls through to the llama2.c loader, which reports
  // the size problem (or the open error) itself.
  if (first.size() >= sizeof(uint32_t)) {
    uint32_t magic = 0;
    std::memcpy(&magic, first.data(), sizeof(magic));
    if (magic == kGgufMagic) return LoadGgufModel(path);
    if (magic == kLlama2cVersionedMagic) {
      return absl::UnimplementedError(absl::StrCat(
          path, ": llama2.c versioned checkpoint (magic \"ak42\"); only the legacy v0 "
                "format is supported (export with --version 0)"));
    }
  }
  if (std::optional<std::string> kind = UnsupportedModelKind(first)) {
    return absl::UnimplementedError(absl::StrCat(path, ": ", *kind, "; ", kSupported));
  }
  absl::StatusOr<std::unique_ptr<ModelWeights>> llama2c = LoadLlama2cModel(path);
  // Not a llama2.c header either: a file of no kind the loader knows.
  if (!llama2c.ok() && absl::StrContains(llama2c.status().message(), "not a llama2.c")) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a model file Folio knows (no GGUF magic, and ",
        absl::StripPrefix(llama2c.status().message(), absl::StrCat(path, ": ")), "); ",
        kSupported));
  }
  return llama2c;
}

}  // namespace folio::worker
