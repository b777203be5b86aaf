// Folio's CPU forward pass judged by llama.cpp (folio_llama_ref): random-weight models of
// each architecture (Llama 3 with rope_freqs and tied embeddings, Qwen2 with biases,
// Qwen3 with Q/K norms and key_length != dim / heads, Mistral-shaped GQA, the
// mixtures of experts Qwen3-MoE and Mixtral-style llama, Gemma 2 and 3 with sliding
// windows shorter than the prompt, Phi-3 with fused projections and Phi-3.5's LongRoPE),
// written in
// F16 by folio-make-model and quantized to Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K_M, Q5_K_M
// and Q6_K by llama.cpp's own quantizer, so the quantized bytes are llama.cpp's.
//
// Logits: for a fixed 64-token prompt, Folio's logits at every position are within
// kTolerance(type) * max|logit| of llama.cpp's. Greedy: llama.cpp's 32-token greedy
// continuation is fed to Folio token by token; Folio's argmax must equal llama.cpp's
// token wherever llama.cpp's top-2 margin exceeds that tolerance, and at least 24 of the
// 32 positions must be such (else the model is too flat to test anything).
//
// Tolerances. Folio dequantizes weights exactly (bit-exact with gguf-py) and multiplies
// in f32; llama.cpp's CPU path rounds the activations before each product: to f16 for
// f16 weights (2^-11 relative per element) and to 8-bit blocks for quantized ones, q8_0
// (one scale per 32 values) for q8_0 and q4_0 weights, q8_K (one per 256) for the
// K-quants, so the gap grows with the activation block, not with the weight's bits
// (q6_K is as far off as q4_K). Measured worst gap / max|logit| over these models
// (FOLIO_LOGITS_TOL=1 prints them): f16 3.7e-4, q8_0 7.8e-3, q4_0 1.1e-2, K-quants
// 1.2e-2; the limits are about 1.5x that (f16: the 1e-3). To show the gap is llama.cpp's rounding and not Folio's arithmetic, a
// second test runs llama.cpp on an f32 copy of the same dequantized weights (f32
// products, no activation rounding): there the two agree within 2e-3 of max|logit|
// (typically 1e-4; both round K/V to f16 in their caches).
//
// Q8_0 is the exception since issue 20: Folio's q8_0 kernel quantizes activations to
// q8_0 blocks exactly as llama.cpp does (kernels/typed_dot.h) and takes integer block
// dot products, so against llama.cpp on the Q8_0 file the gap fell (worst 4.5e-3, was
// 7.8e-3; limit 7e-3), and against llama.cpp's f32 products it is now the activation
// rounding (worst 7.7e-3, limit Q8_0's earlier 1.2e-2).
//
// Issue 21 did the same for q4_0..q5_1 (q8_0 activation blocks) and q4_K, q5_K, q6_K
// (q8_K super-blocks, as ggml's quantize_row_q8_K), read in place by integer kernels.
// Against llama.cpp on its own files the worst gaps fell: Q4_0 9.6e-3 (mistral; the
// other architectures 2.2e-3..3.5e-3; was 1.1e-2, limit kept 1.5e-2), K-quants 7.4e-3
// (mistral Q6_K; others 1.2e-3..3.9e-3; was 1.2e-2, limit 2e-2 -> 1.2e-2). Against the
// f32 copy they are now the activation rounding: worst 1.08e-2 (mistral), 2.4e-3..3.9e-3
// elsewhere (limit 1.6e-2).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <unistd.h>
#include <string>
#include <vector>

#include <glog/logging.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/test_models.h"
#include "services/worker/kernels/onednn_gemm.h"
#include "services/worker/model/dequant.h"
#include "services/worker/model/gguf.h"
#include "services/worker/model/gguf_writer.h"
#include "services/worker/model/load_model.h"
#include "services/worker/model/mapped_file.h"
#include "services/worker/model/random_model.h"
#include "tests/reference/llama_ref.h"

namespace folio::worker {
namespace {

namespace ref = folio::reference;

constexpr int kPrompt = 64;
constexpr int kGreedy = 32;

struct Arch {
  const char* name;
  RandomModelOptions options;
};

RandomModelOptions Base() {
  RandomModelOptions o;
  o.dim = 256;
  o.hidden_dim = 512;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.vocab_size = 1024;
  o.context_length = 256;
  // Larger matrices amplify the activations, and with them llama.cpp's rounding of
  // them; larger embeddings spread the logits. These keep 24+ of 32 greedy positions
  // decisive at the tolerances below.
  o.weight_std = 0.02f;
  o.embedding_std = 0.2f;
  o.seed = 17;
  return o;
}

std::vector<Arch> Archs() {
  std::vector<Arch> out;
  RandomModelOptions llama3 = Base();
  llama3.rope_theta = 500000.0f;
  llama3.rope_freqs = true;
  llama3.tied_embeddings = true;
  out.push_back({"llama3", llama3});
  RandomModelOptions qwen2 = Base();
  qwen2.architecture = "qwen2";
  qwen2.rope_theta = 1000000.0f;
  qwen2.rms_norm_eps = 1e-6f;
  qwen2.tied_embeddings = true;  // as Qwen2.5 0.5B and 1.5B
  out.push_back({"qwen2", qwen2});
  RandomModelOptions qwen3 = Base();
  qwen3.architecture = "qwen3";
  qwen3.head_dim = 128;  // key_length 128 over dim 256 / 4 heads
  qwen3.rope_theta = 1000000.0f;
  qwen3.tied_embeddings = true;
  out.push_back({"qwen3", qwen3});
  RandomModelOptions mistral = Base();
  mistral.num_heads = 8;
  mistral.num_kv_heads = 2;  // GQA 4:1, head_dim 32
  mistral.rope_theta = 1000000.0f;
  out.push_back({"mistral", mistral});
  // Mixtures of experts: Qwen3-MoE's shape (Q/K norms, experts narrower than dim, 8 of
  // them, top-2) and Mixtral's (llama with experts as wide as feed_forward_length).
  RandomModelOptions qwen3moe = Base();
  qwen3moe.architecture = "qwen3moe";
  qwen3moe.head_dim = 128;
  qwen3moe.rope_theta = 1000000.0f;
  qwen3moe.num_experts = 8;
  qwen3moe.num_experts_used = 2;
  qwen3moe.expert_hidden_dim = 256;
  qwen3moe.embedding_std = 0.4f;  // logits spread enough for 24+ decisive positions
  out.push_back({"qwen3moe", qwen3moe});
  RandomModelOptions mixtral = Base();
  mixtral.num_heads = 8;
  mixtral.num_kv_heads = 2;
  mixtral.rope_theta = 1000000.0f;
  mixtral.num_experts = 4;
  mixtral.num_experts_used = 2;
  mixtral.embedding_std = 0.4f;
  out.push_back({"mixtral", mixtral});
  // Gemma 2: a window of 8 over the 64-token prompt on the even layers, llama.cpp's
  // default softcaps (50 on scores, 30 on logits: the keys absent), tied embeddings.
  RandomModelOptions gemma2 = Base();
  gemma2.architecture = "gemma2";
  gemma2.sliding_window = 8;
  gemma2.tied_embeddings = true;
  out.push_back({"gemma2", gemma2});
  // Gemma 3: Q/K norms, 6 layers (5 local with window 8 and RoPE base 10000, the sixth
  // global with base 1e6 and linear scaling 8), key_length 128 over dim 256.
  RandomModelOptions gemma3 = Base();
  gemma3.architecture = "gemma3";
  gemma3.num_layers = 6;
  gemma3.head_dim = 128;
  gemma3.sliding_window = 8;
  gemma3.rope_theta = 1000000.0f;
  gemma3.rope_theta_local = 10000.0f;
  gemma3.rope_scaling_factor = 8.0f;
  gemma3.tied_embeddings = true;
  out.push_back({"gemma3", gemma3});
  // Phi-3 (fused attn_qkv and ffn_up) and Phi-3.5-style LongRoPE: original context 128
  // under a 512-token model, so both engines take the long factors (llama.cpp's context
  // of 256 is above 128 too), and attn_factor scales every score.
  RandomModelOptions phi3 = Base();
  phi3.architecture = "phi3";
  // (Not named "phi3": llama.cpp then expects Phi-3's own special tokens in the vocabulary.)
  out.push_back({"phimini", phi3});
  RandomModelOptions phi35 = Base();
  phi35.architecture = "phi3";
  phi35.context_length = 512;
  phi35.longrope_original_context = 128;
  phi35.embedding_std = 0.5f;  // logits spread enough for 24+ decisive positions
  out.push_back({"phimini_longrope", phi35});
  return out;
}

// Relative to the largest |logit| of the position; see the header comment.
// The 6-layer gemma3 model, three times as deep as the others, takes 1.25x the quantized
// limits (worst: Q8_0 8.0e-3, Q4_K_M 1.0e-2; F16 2.7e-4, and 1.7e-4 against llama.cpp's
// f32 products), the activation rounding compounding over its layers. The mixtures of
// experts stay within the dense limits (worst: qwen3moe Q4_0 9.5e-3, Q6_K 8.9e-3, Q8_0
// 4.1e-3; F16 3.3e-4), their logits spread by a larger embedding_std: at 0.2 a token's
// routing on the activation rounding put qwen3moe Q6_K at 1.29e-2.
float Tolerance(const std::string& type, bool amplified = false) {
  if (const char* t = std::getenv("FOLIO_LOGITS_TOL"); t != nullptr) return std::atof(t);
  if (type == "F16") return 1e-3f;
  const float f = amplified ? 1.25f : 1.0f;
  if (type == "Q8_0") return 7e-3f * f;
  if (type == "Q4_0" || type == "Q4_1" || type == "Q5_0" || type == "Q5_1") return 1.5e-2f * f;
  return 1.2e-2f * f;  // K-quants: q8_K activations
}

// The test models are shared by the test cases (each its own process under ctest): kept
// in the build tree, bump kModelsVersion when the generator changes, written under a
// temporary name and renamed so concurrent cases never read half a file.
constexpr char kModelsVersion[] = "v5";

std::string ModelPath(const Arch& a, const std::string& type) {
  const char* build = std::getenv("FOLIO_BUILD_DIR");
  const std::string dir = (build != nullptr ? std::string(build) + "/test-tmp" : ::testing::TempDir()) +
                          "/llama_logits_test";
  std::filesystem::create_directories(dir);
  return absl::StrCat(dir, "/", a.name, "-", kModelsVersion, "-", type, ".gguf");
}

// Runs write(tmp) and renames tmp to `path`, unless `path` exists.
absl::Status Publish(const std::string& path,
                     const std::function<absl::Status(const std::string&)>& write) {
  if (std::filesystem::exists(path)) return absl::OkStatus();
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  if (absl::Status s = write(tmp); !s.ok()) return s;
  std::filesystem::rename(tmp, path);
  return absl::OkStatus();
}

// The F16 model, then llama.cpp's quantization of it.
absl::StatusOr<std::string> MakeModel(const Arch& a, const std::string& type) {
  const std::string f16 = ModelPath(a, "F16");
  absl::Status s = Publish(f16, [&](const std::string& tmp) {
    RandomModelOptions o = a.options;
    o.dtype = DType::kF16;
    o.name = a.name;
    return WriteRandomModel(o, tmp);
  });
  if (!s.ok()) return s;
  if (type == "F16") return f16;
  const std::string out = ModelPath(a, type);
  s = Publish(out, [&](const std::string& tmp) { return ref::Quantize(f16, tmp, type, 2); });
  if (!s.ok()) return s;
  return out;
}

// An f32 copy of the GGUF at `path`: the same metadata, every tensor dequantized
// (Folio's dequantizers, bit-exact with gguf-py's).
absl::StatusOr<std::string> DequantizedCopy(const std::string& path) {
  const std::string out = path + ".f32.gguf";
  if (std::filesystem::exists(out)) return out;
  const std::string tmp = absl::StrCat(out, ".tmp.", ::getpid());
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<GgufFile> g = GgufFile::Parse((*file)->bytes(), path);
  if (!g.ok()) return g.status();
  GgufWriter w;
  for (const auto& [key, v] : g->metadata()) {
    if (key == "general.file_type") {
      w.AddUint32(key, 0);
      continue;
    }
    switch (v.type()) {
      case GgufType::kUint32: w.AddUint32(key, static_cast<uint32_t>(*v.AsInt64())); break;
      case GgufType::kInt32: w.AddInt32(key, static_cast<int32_t>(*v.AsInt64())); break;
      case GgufType::kUint64: w.AddUint64(key, static_cast<uint64_t>(*v.AsInt64())); break;
      case GgufType::kFloat32: w.AddFloat32(key, static_cast<float>(*v.AsDouble())); break;
      case GgufType::kBool: w.AddBool(key, *v.AsBool()); break;
      case GgufType::kString: w.AddString(key, *v.AsString()); break;
      case GgufType::kArray: {
        if (v.array_type() == GgufType::kString) {
          std::vector<std::string> a;
          for (uint64_t i = 0; i < v.array_size(); ++i) a.emplace_back(*v.ArrayString(i));
          w.AddStringArray(key, a);
        } else if (v.array_type() == GgufType::kFloat32) {
          std::vector<float> a;
          for (uint64_t i = 0; i < v.array_size(); ++i) a.push_back(*v.ArrayDouble(i));
          w.AddFloat32Array(key, a);
        } else if (v.array_type() == GgufType::kInt32) {
          std::vector<int32_t> a;
          for (uint64_t i = 0; i < v.array_size(); ++i) a.push_back(*v.ArrayInt64(i));
          w.AddInt32Array(key, a);
        } else {
          return absl::UnimplementedError(absl::StrCat("array key ", key));
        }
        break;
      }
      default:
        return absl::UnimplementedError(absl::StrCat("key ", key, " of type ",
                                                     GgufTypeName(v.type())));
    }
  }
  for (const GgufTensorInfo& t : g->tensors()) {
    const std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
    const TensorView view{GgmlTypeToDType(t.type), t.data, shape};
    w.AddTensorF32(t.name, DType::kF32, shape, ToF32(view));
  }
  if (absl::Status s = w.WriteFile(tmp); !s.ok()) return s;
  std::filesystem::rename(tmp, out);
  return out;
}

std::vector<int32_t> Prompt(int32_t vocab) {
  std::vector<int32_t> p = {1};
  for (int i = 1; i < kPrompt; ++i) p.push_back(3 + (i * 7919 + 13) % (vocab - 3));
  return p;
}

// A case's model (written, and quantized by llama.cpp) loaded by Folio and by llama.cpp,
// and llama.cpp's logits at every position of the prompt.
struct Loaded {
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<ref::LlamaModel> llama;
  std::vector<int32_t> prompt;
  std::vector<std::vector<float>> want;
};

absl::StatusOr<Loaded> LoadBoth(const Arch& arch, const std::string& type) {
  absl::StatusOr<std::string> path = MakeModel(arch, type);
  if (!path.ok()) return path.status();
  Loaded m;
  m.weights = testing::LoadOrDie(*path);
  absl::StatusOr<std::unique_ptr<ref::LlamaModel>> llama =
      ref::LlamaModel::Load(*path, ref::LlamaModelOptions{.n_ctx = 256});
  if (!llama.ok()) return llama.status();
  m.llama = *std::move(llama);
  m.prompt = Prompt(arch.options.vocab_size);
  absl::StatusOr<std::vector<std::vector<float>>> want = m.llama->Logits(m.prompt);
  if (!want.ok()) return want.status();
  m.want = *std::move(want);
  return m;
}

using testing::FolioRun;
using testing::MaxAbs;
using testing::RunFolio;
using testing::Top2Margin;

using Param = std::tuple<int, const char*>;

class LlamaLogitsTest : public ::testing::TestWithParam<Param> {};

TEST_P(LlamaLogitsTest, LogitsAndGreedyAgreeWithLlamaCpp) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const Arch arch = Archs()[std::get<0>(GetParam())];
  const std::string type = std::get<1>(GetParam());
  absl::StatusOr<Loaded> m = LoadBoth(arch, type);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::unique_ptr<ModelWeights>& weights = m->weights;
  ref::LlamaModel& llama = *m->llama;
  const float tol = Tolerance(type, arch.options.num_layers > 2);

  // Logits over the prompt.
  const std::vector<int32_t>& prompt = m->prompt;
  const std::vector<std::vector<float>>& want = m->want;
  const FolioRun got = RunFolio(*weights, prompt);
  float worst = 0;
  for (int i = 0; i < kPrompt; ++i) {
    const std::vector<float>& w = want[i];
    const std::vector<float>& g = got.logits[i];
    ASSERT_EQ(g.size(), w.size());
    const float scale = MaxAbs(w);
    float diff = 0;
    for (size_t v = 0; v < w.size(); ++v) diff = std::max(diff, std::abs(g[v] - w[v]));
    worst = std::max(worst, diff / scale);
    EXPECT_LE(diff, tol * scale) << arch.name << " " << type << " position " << i
                                 << ": max |logit diff| " << diff << ", max |logit| " << scale;
  }

  // Greedy: llama.cpp's continuation, teacher-forced through Folio.
  absl::StatusOr<std::vector<int32_t>> cont = llama.Greedy(prompt, kGreedy);
  ASSERT_TRUE(cont.ok()) << cont.status();
  ASSERT_EQ(cont->size(), static_cast<size_t>(kGreedy));
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), cont->begin(), cont->end());
  absl::StatusOr<std::vector<std::vector<float>>> all_want = llama.Logits(all);
  ASSERT_TRUE(all_want.ok()) << all_want.status();
  const FolioRun all_got = RunFolio(*weights, all);
  int decisive = 0, agree = 0;
  for (int i = 0; i < kGreedy; ++i) {
    const int pos = kPrompt - 1 + i;  // the position whose logits pick (*cont)[i]
    const std::vector<float>& w = (*all_want)[pos];
    const float margin = Top2Margin(w);
    if (margin <= tol * MaxAbs(w)) continue;
    ++decisive;
    agree += all_got.argmax[pos] == (*cont)[i];
    EXPECT_EQ(all_got.argmax[pos], (*cont)[i])
        << arch.name << " " << type << " greedy token " << i << " (margin " << margin << ")";
  }
  EXPECT_GE(decisive, 24) << "the model is too flat: only " << decisive << " of " << kGreedy
                          << " greedy positions have a top-2 margin above the tolerance";
  LOG(INFO) << arch.name << " " << type << ": worst |logit diff| / max|logit| = " << worst
            << " (tolerance " << tol << "), greedy " << agree << "/" << decisive
            << " decisive positions agree";
}

TEST_P(LlamaLogitsTest, LogitsMatchLlamaCppOnTheDequantizedWeightsInF32) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const Arch arch = Archs()[std::get<0>(GetParam())];
  const std::string type = std::get<1>(GetParam());
  absl::StatusOr<std::string> path = MakeModel(arch, type);
  ASSERT_TRUE(path.ok()) << path.status();
  absl::StatusOr<std::string> f32 = DequantizedCopy(*path);
  ASSERT_TRUE(f32.ok()) << f32.status();
  absl::StatusOr<std::unique_ptr<ref::LlamaModel>> llama =
      ref::LlamaModel::Load(*f32, ref::LlamaModelOptions{.n_ctx = 256});
  ASSERT_TRUE(llama.ok()) << llama.status();
  const std::vector<int32_t> prompt = Prompt(arch.options.vocab_size);
  absl::StatusOr<std::vector<std::vector<float>>> want = (*llama)->Logits(prompt);
  ASSERT_TRUE(want.ok()) << want.status();
  // Folio reads the quantized file itself, as stored.
  const FolioRun got = RunFolio(*testing::LoadOrDie(*path), prompt);
  float worst = 0;
  for (int i = 0; i < kPrompt; ++i) {
    const float scale = MaxAbs((*want)[i]);
    float diff = 0;
    for (size_t v = 0; v < (*want)[i].size(); ++v) {
      diff = std::max(diff, std::abs(got.logits[i][v] - (*want)[i][v]));
    }
    worst = std::max(worst, diff / scale);
    // Summation order and the f16 KV caches' roundings (both keep K/V in f16): measured
    // worst 7.7e-4 of max|logit| (llama3 q6_K, before issue 21), typically 1e-4. The
    // quantized types: Folio rounds the activations to q8_0 / q8_K blocks, llama.cpp's
    // f32 copy does not (header comment).
    const float tol = type == "Q8_0" ? 1.2e-2f : type == "F16" ? 2e-3f : 1.6e-2f;
    EXPECT_LE(diff, tol * scale) << arch.name << " " << type << " position " << i;
  }
  LOG(INFO) << arch.name << " " << type << " vs llama.cpp on its f32 dequantization: worst "
            << worst;
}

// Issue 21's batched quantized matmuls through oneDNN (CpuModelRunnerOptions::
// dequant_min_rows): the prompt's prefixes of 8, 16, .., 64 tokens as 8 sequences of one
// step (288 rows), every quantized projection dequantized to bf16 a chunk at a time and
// multiplied by oneDNN's bf16 matmul (bf16 activations too), each sequence's last logits
// against llama.cpp's at that position within Tolerance(type) (llama.cpp rounds the
// activations to 8-bit blocks; this path rounds both sides to bf16), argmax where
// decisive. Tolerance(type) is for Folio's integer kernels, whose activation blocks are
// llama.cpp's own; here the gap is two different activation roundings (bf16 against
// llama.cpp's 8-bit blocks), as in the f32-copy test above, so this path takes that
// test's limit, 1.6e-2, for every type. Measured worst / max|logit| (2026-12-02, Zen 5,
// brg:avx512_core_bf16): llama3, qwen2, qwen3 1.6e-3..2.7e-3 for every type; mistral
// (head_dim 32) Q8_0 8.8e-3, Q4_0..Q5_1 9.4e-3..1.15e-2, K-quants 1.03e-2..1.15e-2.
TEST_P(LlamaLogitsTest, BatchedPrefillThroughOneDnnAgreesWithLlamaCpp) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  if (!kernels::OnednnAvailable()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
  if (auto e = kernels::OnednnGemm::Create(2); !e.ok()) GTEST_SKIP() << e.status().message();
  const Arch arch = Archs()[std::get<0>(GetParam())];
  const std::string type = std::get<1>(GetParam());
  if (type == "F16") GTEST_SKIP() << "F16 projections are read as f16, not dequantized";
  absl::StatusOr<Loaded> m = LoadBoth(arch, type);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<int32_t>& prompt = m->prompt;
  CpuModelRunnerOptions o;
  o.kv_cache_bytes = 16 << 20;
  o.num_threads = 2;
  o.dequant_min_rows = 8;  // the LM head's 8 rows too
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> runner = CpuModelRunner::Create(*m->weights, o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  ASSERT_NE((*runner)->onednn(), nullptr);
  std::vector<std::vector<int32_t>> prefixes;
  for (int n = 8; n <= kPrompt; n += 8) prefixes.emplace_back(prompt.begin(), prompt.begin() + n);
  const std::vector<std::vector<float>> got = testing::PrefillLastLogits(**runner, prefixes);
  EXPECT_GT((*runner)->onednn()->cached_primitives(), 0) << "oneDNN never ran";
  const float tol = std::getenv("FOLIO_LOGITS_TOL") == nullptr ? 1.6e-2f : Tolerance(type);
  float worst = 0;
  int decisive = 0;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    const int n = static_cast<int>(prefixes[i].size());
    const std::vector<float>& w = m->want[n - 1];
    const float scale = MaxAbs(w);
    float diff = 0;
    for (size_t v = 0; v < w.size(); ++v) diff = std::max(diff, std::abs(got[i][v] - w[v]));
    worst = std::max(worst, diff / scale);
    EXPECT_LE(diff, tol * scale) << arch.name << " " << type << ": " << n << " tokens";
    if (Top2Margin(w) > tol * scale) {
      ++decisive;
      EXPECT_EQ(std::max_element(got[i].begin(), got[i].end()) - got[i].begin(),
                std::max_element(w.begin(), w.end()) - w.begin())
          << arch.name << " " << type << ": " << n << " tokens, argmax";
    }
  }
  EXPECT_GE(decisive, 4) << "too flat to judge the argmax";
  LOG(INFO) << arch.name << " " << type << " batched prefill on oneDNN (bf16): worst "
            << worst << " of max|logit| (tolerance " << tol << "), " << decisive << " decisive";
  if (std::getenv("FOLIO_LOGITS_TOL") != nullptr) {
    std::printf("%s %s onednn prefill: worst %.3g\n", arch.name, type.c_str(), worst);
  }
}

// The 8-bit KV cache against llama.cpp's (`-ctk q8_0 -ctv q8_0`, flash attention) on the
// F16 files, decode one token at a time: both quantize K and V to 8 bits, Folio with one
// f32 scale per row of head_dim values (kernels/kv_q8.h), llama.cpp with one f16 scale
// per 32 values, so the roundings differ and neither matches the other bit for bit; the
// gap is two independent 8-bit KV roundings on top of the F16 gap (3.7e-4). Measured
// worst / max|logit| (FOLIO_LOGITS_TOL=1 prints them): Folio q8_0 vs llama.cpp q8_0
// 1.1e-3..1.8e-3 over the four archs, llama.cpp q8_0 vs its own f16 cache 0.7e-3..3.2e-3
// (mistral, head_dim 32), Folio q8_0 vs its f16 cache 0.8e-3..3.1e-3. The limit 3e-3 is
// ~1.6x the worst measured gap, below either cache's own q8_0-vs-f16 effect on mistral.
// Greedy tokens must agree wherever llama.cpp's top-2 margin exceeds the limit.
// The four dense Llama-family models only: the two caches quantize differently (Folio
// one scale per row, llama.cpp one per 32 values), and the mixtures of experts route on
// those differences (qwen3moe: 7e-3 at position 0, where attention returns V itself).
TEST(LlamaKvQ8Test, LogitsAgreeWithLlamaCppQ8_0Cache) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const std::vector<Arch> archs = Archs();
  for (const Arch& arch : absl::MakeConstSpan(archs).first(4)) {
    SCOPED_TRACE(arch.name);
    absl::StatusOr<std::string> path = MakeModel(arch, "F16");
    ASSERT_TRUE(path.ok()) << path.status();
    std::unique_ptr<ModelWeights> weights = testing::LoadOrDie(*path);
    absl::StatusOr<std::unique_ptr<ref::LlamaModel>> llama =
        ref::LlamaModel::Load(*path, ref::LlamaModelOptions{.n_ctx = 256, .q8_0_kv = true});
    ASSERT_TRUE(llama.ok()) << llama.status();
    absl::StatusOr<std::unique_ptr<ref::LlamaModel>> llama_f16 =
        ref::LlamaModel::Load(*path, ref::LlamaModelOptions{.n_ctx = 256});
    ASSERT_TRUE(llama_f16.ok()) << llama_f16.status();
    const std::vector<int32_t> prompt = Prompt(arch.options.vocab_size);
    absl::StatusOr<std::vector<std::vector<float>>> want = (*llama)->Logits(prompt);
    ASSERT_TRUE(want.ok()) << want.status();
    absl::StatusOr<std::vector<std::vector<float>>> want_f16 = (*llama_f16)->Logits(prompt);
    ASSERT_TRUE(want_f16.ok()) << want_f16.status();
    const FolioRun got = RunFolio(*weights, prompt, kernels::KvDType::kQ8);
    const FolioRun got_f16 = RunFolio(*weights, prompt, kernels::KvDType::kF16);
    constexpr float kTol = 3e-3f;
    float worst = 0, llama_own = 0, folio_own = 0;
    int decisive = 0;
    for (int i = 0; i < kPrompt; ++i) {
      const std::vector<float>& w = (*want)[i];
      const float scale = MaxAbs(w);
      float diff = 0, own = 0, fown = 0;
      for (size_t v = 0; v < w.size(); ++v) {
        diff = std::max(diff, std::abs(got.logits[i][v] - w[v]));
        own = std::max(own, std::abs((*want_f16)[i][v] - w[v]));
        fown = std::max(fown, std::abs(got_f16.logits[i][v] - got.logits[i][v]));
      }
      worst = std::max(worst, diff / scale);
      llama_own = std::max(llama_own, own / scale);
      folio_own = std::max(folio_own, fown / scale);
      EXPECT_LE(diff, kTol * scale) << "position " << i;
      if (i + 1 < kPrompt && Top2Margin(w) > kTol * scale) {
        ++decisive;
        EXPECT_EQ(got.argmax[i], std::max_element(w.begin(), w.end()) - w.begin())
            << "position " << i;
      }
    }
    EXPECT_GT(folio_own, 0.0f) << "the q8_0 cache should change Folio's logits a little";
    EXPECT_GE(decisive, kPrompt / 2);
    LOG(INFO) << arch.name << ": Folio q8_0 KV vs llama.cpp q8_0 KV worst " << worst
              << " of max|logit|; llama.cpp q8_0 vs its f16 KV " << llama_own
              << "; Folio q8_0 vs its f16 KV " << folio_own;
    if (std::getenv("FOLIO_LOGITS_TOL") != nullptr) {
      std::printf("%s kv q8_0: folio-vs-llama %.3g, llama q8-vs-f16 %.3g, folio q8-vs-f16 %.3g\n",
                  arch.name, worst, llama_own, folio_own);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    ArchsAndTypes, LlamaLogitsTest,
    ::testing::Combine(::testing::Values(0, 1, 2, 3),
                       ::testing::Values("F16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                         "Q4_K_M", "Q5_K_M", "Q6_K")),
    [](const ::testing::TestParamInfo<Param>& info) {
      return absl::StrCat(Archs()[std::get<0>(info.param)].name, "_", std::get<1>(info.param));
    });

// Gemma 2 and 3 (sliding windows, softcaps, post-norms, GeGLU), Phi-3 and Phi-3.5.
INSTANTIATE_TEST_SUITE_P(
    GemmaPhiAndTypes, LlamaLogitsTest,
    ::testing::Combine(::testing::Values(6, 7, 8, 9),
                       ::testing::Values("F16", "Q8_0", "Q4_0", "Q4_K_M", "Q6_K")),
    [](const ::testing::TestParamInfo<Param>& info) {
      return absl::StrCat(Archs()[std::get<0>(info.param)].name, "_", std::get<1>(info.param));
    });

// The mixtures of experts, in the types CPU users download them in (Q4_K_M keeps some
// expert tensors in Q6_K and others in Q4_K).
INSTANTIATE_TEST_SUITE_P(
    ExpertsAndTypes, LlamaLogitsTest,
    ::testing::Combine(::testing::Values(4, 5),
                       ::testing::Values("F16", "Q8_0", "Q4_0", "Q4_K_M", "Q6_K")),
    [](const ::testing::TestParamInfo<Param>& info) {
      return absl::StrCat(Archs()[std::get<0>(info.param)].name, "_", std::get<1>(info.param));
    });

}  // namespace
}  // namespace folio::worker
