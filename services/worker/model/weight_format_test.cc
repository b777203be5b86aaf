// Every WeightFormat's dequantizer against gguf-py's reference (gguf/quants.py from the
// llama.cpp sources of the reference bundle, run by python3 with numpy): random blocks of
// each type go through both, and the f32 results must agree bit for bit. Also checks the
// block geometry against gguf-py's GGML_QUANT_SIZES table.
#include "services/worker/model/weight_format.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "services/worker/model/dequant.h"
#include "services/worker/model/model_test_util.h"
#include "tests/reference/llama_ref.h"

namespace folio::worker {
namespace {

// gguf-py in the reference's llama.cpp sources.
std::string GgufPyDir() { return reference::LlamaCppSourceDir() + "/gguf-py"; }

// Debian's python3 (the one python3-numpy installs into), ahead of any other in PATH.
std::string Python3() {
  return std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

// Runs `script` with python3 and gguf-py importable; returns its stdout, or nullopt with
// `why` set when python3, numpy or gguf-py is missing.
std::optional<std::string> RunGgufPy(const std::string& script, std::string* why) {
  const std::string dir = GgufPyDir();
  if (!std::filesystem::exists(dir + "/gguf/quants.py")) {
    *why = absl::StrCat(dir, "/gguf/quants.py is missing: run ./folio reference (or set "
                        "FOLIO_REFERENCE_DIR)");
    return std::nullopt;
  }
  const std::string tmp = testing::MakeTempDir("weight_format_py");
  const std::string path = tmp + "/check.py";
  testing::WriteFileBytes(path, script.data(), script.size());
  const std::string cmd = absl::StrCat("PYTHONPATH='", dir, "' ", Python3(), " '", path, "' 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *why = "cannot run python3";
    return std::nullopt;
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0) {
    *why = absl::StrCat("python3 with gguf-py failed (is python3-numpy installed?): ", out);
    return std::nullopt;
  }
  return out;
}

// Random blocks of `f`: random bytes, with every f16 scale field set to a random finite
// value (a NaN or infinite scale would make both sides NaN and prove nothing).
std::vector<uint8_t> RandomBlocks(const WeightFormat& f, int64_t num_blocks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(static_cast<size_t>(num_blocks * f.block_bytes));
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-2.0f, 2.0f);
  auto set_f16 = [&](uint8_t* p) {
    const uint16_t h = F32ToF16(scale(rng) * (rng() % 4 == 0 ? 1e-3f : 1.0f));
    std::memcpy(p, &h, 2);
  };
  std::vector<int> f16_offsets;
  switch (f.dtype) {
    case DType::kF16:
      for (int64_t i = 0; i < num_blocks; ++i) {
        // Every finite f16, subnormals included; no inf or NaN.
        uint16_t h = static_cast<uint16_t>(rng());
        if ((h & 0x7c00u) == 0x7c00u) h &= 0x83ffu;
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      return out;
    case DType::kBF16:
      for (int64_t i = 0; i < num_blocks; ++i) {
        uint16_t h = static_cast<uint16_t>(rng());
        if ((h & 0x7f80u) == 0x7f80u) h &= 0x807fu;
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      return out;
    case DType::kQ4_0: case DType::kQ5_0: case DType::kQ8_0: f16_offsets = {0}; break;
    case DType::kQ4_1: case DType::kQ5_1: f16_offsets = {0, 2}; break;
    case DType::kQ2_K: f16_offsets = {80, 82}; break;
    case DType::kQ3_K: f16_offsets = {108}; break;
    case DType::kQ4_K: case DType::kQ5_K: f16_offsets = {0, 2}; break;
    case DType::kQ6_K: f16_offsets = {208}; break;
    case DType::kF32: break;
  }
  for (int64_t b = 0; b < num_blocks; ++b) {
    for (int off : f16_offsets) set_f16(out.data() + b * f.block_bytes + off);
  }
  return out;
}

TEST(WeightFormatTest, TableIsConsistent) {
  for (const WeightFormat* f : AllWeightFormats()) {
    EXPECT_EQ(&FormatOf(f->dtype), f) << f->name;
    EXPECT_EQ(FormatForGgmlType(f->ggml_type), f) << f->name;
    EXPECT_STREQ(DTypeName(f->dtype), f->name);
  }
  EXPECT_EQ(FormatForGgmlType(9), nullptr);  // q8_1: not read
  EXPECT_NE(SupportedGgmlTypes().find("q4_K (12)"), std::string::npos) << SupportedGgmlTypes();
}

TEST(WeightFormatTest, DequantizationMatchesGgufPyBitForBit) {
  const std::string dir = testing::MakeTempDir("weight_format_blocks");
  constexpr int64_t kBlocks = 96;
  std::string script =
      "import sys, numpy as np\n"
      "from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType\n"
      "from gguf import quants\n";
  std::vector<std::vector<float>> mine;
  std::vector<const WeightFormat*> formats;
  for (const WeightFormat* f : AllWeightFormats()) {
    if (f->dtype == DType::kF32) continue;  // a copy: nothing to compare
    // f16/bf16 "blocks" are single values: use more of them.
    const int64_t n = f->block_values == 1 ? 4096 : kBlocks;
    const std::vector<uint8_t> blocks = RandomBlocks(*f, n, 1000 + f->ggml_type);
    const std::string in = absl::StrCat(dir, "/", f->name, ".bin");
    testing::WriteFileBytes(in, blocks.data(), blocks.size());
    std::vector<float> out(static_cast<size_t>(n * f->block_values));
    f->dequantize(blocks.data(), n, out.data());
    mine.push_back(std::move(out));
    formats.push_back(f);
    absl::StrAppend(&script, "t = GGMLQuantizationType(", f->ggml_type, ")\n",
                    "assert GGML_QUANT_SIZES[t] == (", f->block_values, ", ", f->block_bytes,
                    "), (t, GGML_QUANT_SIZES[t])\n",
                    "raw = np.fromfile('", in, "', dtype=np.uint8)\n");
    absl::StrAppend(&script, "raw = raw.reshape(1, -1)\n");
    absl::StrAppend(&script, "quants.dequantize(raw, t).astype(np.float32).tofile('", in,
                    ".f32')\n");
  }
  absl::StrAppend(&script, "print('ok')\n");
  std::string why;
  const std::optional<std::string> out = RunGgufPy(script, &why);
  if (!out) {
    if (reference::ReferenceRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  ASSERT_NE(out->find("ok"), std::string::npos) << *out;
  for (size_t i = 0; i < formats.size(); ++i) {
    const WeightFormat& f = *formats[i];
    const std::vector<uint8_t> ref_bytes =
        testing::ReadFileBytes(absl::StrCat(dir, "/", f.name, ".bin.f32"));
    ASSERT_EQ(ref_bytes.size(), mine[i].size() * sizeof(float)) << f.name;
    int64_t mismatches = 0;
    for (size_t v = 0; v < mine[i].size(); ++v) {
      uint32_t a, b;
      std::memcpy(&a, &mine[i][v], 4);
      std::memcpy(&b, ref_bytes.data() + 4 * v, 4);
      if (a != b && mismatches++ < 5) {
        float rf;
        std::memcpy(&rf, &b, 4);
        ADD_FAILURE() << f.name << " value " << v << " (block " << v / f.block_values
                      << "): Folio " << mine[i][v] << ", gguf-py " << rf;
      }
    }
    EXPECT_EQ(mismatches, 0) << f.name;
  }
}

TEST(WeightFormatTest, RowToF32ReadsBlockRows) {
  // Two rows of two q4_K blocks: row 1 is blocks 2 and 3.
  const WeightFormat& f = kQ4_KFormat;
  const std::vector<uint8_t> blocks = RandomBlocks(f, 4, 7);
  std::vector<float> all(4 * 256), row(512);
  f.dequantize(blocks.data(), 4, all.data());
  const TensorView t{DType::kQ4_K, blocks.data(), {2, 512}};
  RowToF32(t, 1, row.data());
  EXPECT_EQ(0, std::memcmp(row.data(), all.data() + 512, 512 * sizeof(float)));
  EXPECT_EQ(DTypeBytes(DType::kQ4_K, 512), 288);
  EXPECT_EQ(ToF32(t), all);
}

}  // namespace
}  // namespace folio::worker
