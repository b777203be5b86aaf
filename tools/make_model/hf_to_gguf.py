# Writes the GGUF twin of a Hugging Face checkpoint folder with gguf-py's GGUFWriter, the
# way llama.cpp's convert_hf_to_gguf.py would (its torch/transformers dependencies are not
# installable here), so that llama.cpp can judge Folio's reading of the folder:
#   - safetensors read with the standard library + numpy (header JSON, raw bytes);
#   - Q/K rows of LlamaForCausalLM/MistralForCausalLM permuted exactly as the converter's
#     LlamaModel.permute documents it (conversion/llama.py): reshape(n_head, 2, rows //
#     n_head // 2, cols).swapaxes(1, 2), with n_head = num_key_value_heads for K; Qwen2/3
#     are written unpermuted, as their converters write them;
#   - 2-D tensors kept in the folder's dtype (BF16 as raw bits, F16), 1-D tensors in F32,
#     as the converter's --outtype bf16/f16 does;
#   - Llama 3.1 rope_scaling as the converter's rope_freqs tensor (its formula, in float32);
#   - the tokenizer as a gpt2 vocabulary: tokenizer.json's pieces by id ([PAD<i>] up to
#     vocab_size, UNUSED), added tokens CONTROL (special) or USER_DEFINED, its merges,
#     pre-tokenizer llama-bpe;
#   - or, for a SentencePiece-style tokenizer.json (byte_fallback, "▁" for spaces: Llama 2,
#     Mistral), a llama vocabulary as the converter writes one from tokenizer.model: pieces,
#     <0xXX> BYTE, unk UNKNOWN, added tokens CONTROL, add_space_prefix from the Prepend
#     normalizer (or a Metaspace pre-tokenizer whose prepend_scheme is not "never": GGUF
#     cannot say "first"; see below), and scores. tokenizer.model is not in the folder, so the scores are
#     recovered from the merges: transformers' converter listed them by the score of the
#     piece they form, so minus the rank of a piece's first merge orders the pieces as
#     their scores did (single characters 0; longer pieces no merge forms UNUSED). This
#     is the rule Folio's reader uses too: llama.cpp here checks the tokenizer engine,
#     not that rule (hf_tokenizer_reference_test checks it against tokenizers).
# folio-make-model --format=hf writes the folder; this writes its matching GGUF (used by
# services/worker/engine/hf_pair_reference_test.cc).
# Usage: PYTHONPATH=build/reference/llama.cpp/gguf-py /usr/bin/python3 \
#            tools/make_model/hf_to_gguf.py FOLDER OUT.gguf      (needs numpy)
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType, LlamaFileType, TokenType

folder, out = Path(sys.argv[1]), sys.argv[2]
cfg = json.loads((folder / "config.json").read_text())
hf_class = cfg["architectures"][0]
arch = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama",
        "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
        "Qwen3MoeForCausalLM": "qwen3moe", "MixtralForCausalLM": "llama",
        "Phi3ForCausalLM": "phi3", "Gemma2ForCausalLM": "gemma2",
        "Gemma3ForCausalLM": "gemma3"}[hf_class]
gemma = arch in ("gemma2", "gemma3")


def read_safetensors(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}[info["dtype"]]
        tensors[name] = (info["dtype"], np.frombuffer(raw[base + begin:base + end], dtype=dtype)
                         .reshape(info["shape"]).copy())
    return tensors


tensors = {}
index = folder / "model.safetensors.index.json"
if (folder / "model.safetensors").exists():
    tensors.update(read_safetensors(folder / "model.safetensors"))
else:
    for shard in sorted(set(json.loads(index.read_text())["weight_map"].values())):
        tensors.update(read_safetensors(folder / shard))


def to_f32(dtype, a):
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def permute(w, n_head, n_head_kv):  # convert_hf_to_gguf's LlamaModel.permute, in numpy
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


n_head = cfg["num_attention_heads"]
n_kv = cfg.get("num_key_value_heads", n_head)
head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
torch_dtype = cfg.get("torch_dtype", "bfloat16")

w = GGUFWriter(out, arch)
w.add_name("hf-pair")
w.add_context_length(cfg["max_position_embeddings"])
w.add_embedding_length(cfg["hidden_size"])
w.add_block_count(cfg["num_hidden_layers"])
w.add_feed_forward_length(cfg["intermediate_size"])
w.add_rope_dimension_count(head_dim)
w.add_head_count(n_head)
w.add_head_count_kv(n_kv)
if cfg.get("head_dim"):
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
# rope_scaling, or transformers >= 4.56's rope_parameters (which may hold rope_theta).
scaling = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
rope_theta = scaling.get("rope_theta", cfg.get("rope_theta", 10000.0))
w.add_rope_freq_base(rope_theta)
w.add_vocab_size(cfg["vocab_size"])
w.add_file_type(LlamaFileType.MOSTLY_BF16 if torch_dtype == "bfloat16" else LlamaFileType.MOSTLY_F16)
rope_type = scaling.get("rope_type", scaling.get("type", "default"))
if rope_type == "linear":
    from gguf import RopeScalingType
    w.add_rope_scaling_type(RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(scaling["factor"])
elif rope_type == "llama3":  # the converter's generate_extra_tensors, in float32
    base = rope_theta
    freqs = 1.0 / (np.float32(base) ** (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)))
    factor = scaling.get("factor", 8.0)
    low = scaling.get("low_freq_factor", 1.0)
    high = scaling.get("high_freq_factor", 4.0)
    old = scaling.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old / low, old / high
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    tensors["__rope_freqs"] = ("F32", np.array(factors, dtype=np.float32))

# Tokenizer.
tok = json.loads((folder / "tokenizer.json").read_text())
vocab_size = cfg["vocab_size"]
pieces = {i: p for p, i in tok["model"]["vocab"].items()}
types = {}
for a in tok.get("added_tokens", []):
    pieces[a["id"]] = a["content"]
    types[a["id"]] = TokenType.CONTROL if a["special"] else TokenType.USER_DEFINED
tokens, toktypes = [], []
for i in range(vocab_size):
    if i in pieces:
        tokens.append(pieces[i])
        toktypes.append(types.get(i, TokenType.NORMAL))
    else:
        tokens.append(f"[PAD{i}]")
        toktypes.append(TokenType.UNUSED)
merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
pre = tok.get("pre_tokenizer")
metaspace = isinstance(pre, dict) and pre.get("type") == "Metaspace"
spm = metaspace or "\u2581" in json.dumps(tok.get("normalizer"), ensure_ascii=False)
if spm:
    vocab = tok["model"]["vocab"]
    first_rank = {}
    for rank, m in enumerate(merges):
        left, right = m.split(" ", 1)
        first_rank.setdefault(vocab[left + right], rank)
    scores = []
    for i, piece in enumerate(tokens):
        if toktypes[i] != TokenType.NORMAL:
            scores.append(0.0)
            continue
        if tok["model"].get("byte_fallback") and len(piece) == 6 and piece.startswith("<0x"):
            toktypes[i] = TokenType.BYTE
        elif i not in first_rank and len(piece) > 1:
            toktypes[i] = TokenType.UNUSED
        scores.append(-float(first_rank.get(i, 0)))
    unk = tok["model"].get("unk_token")
    if unk is not None:
        toktypes[vocab[unk]] = TokenType.UNKNOWN
        w.add_unk_token_id(vocab[unk])
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(toktypes)
    if metaspace:
        # GGUF has one flag, llama.cpp's rule: a space before the text and after every
        # special token. Metaspace's "first" (only at the start, only where no space
        # leads) and "always" (where no space leads) have no GGUF spelling; llama.cpp's
        # converter writes add_space_prefix true for them too (LlamaHfVocab leaves it at
        # its default), so the GGUF tokenizes as llama.cpp does, not as the folder.
        scheme = pre.get("prepend_scheme", "always")
        if pre.get("add_prefix_space") is False:
            scheme = "never"
        w.add_add_space_prefix(scheme != "never")
    else:
        w.add_add_space_prefix('"Prepend"' in json.dumps(tok.get("normalizer")))
else:
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types(toktypes)
    w.add_token_merges(merges)
tc = json.loads((folder / "tokenizer_config.json").read_text())
ids = {p: i for i, p in pieces.items()}
if tc.get("bos_token"):
    w.add_bos_token_id(ids[tc["bos_token"]])
if tc.get("eos_token"):
    w.add_eos_token_id(ids[tc["eos_token"]])
# Mixtures of experts, as the converter's Qwen3MoeModel / MixtralModel write them: the
# expert counts (and Qwen3-MoE's expert width), each layer's experts stacked into 3-D
# ffn_{gate,up,down}_exps [experts, rows, cols], the router as ffn_gate_inp.
experts = cfg.get("num_experts") or cfg.get("num_local_experts")
if experts:
    w.add_expert_count(experts)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    if hf_class == "Qwen3MoeForCausalLM":
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        # llama.cpp renormalises whatever a file says; a norm_topk_prob false folder has
        # no faithful twin here, so refuse it rather than write one that differs.
        if not cfg.get("norm_topk_prob", False):
            sys.exit("hf_to_gguf.py: norm_topk_prob false has no llama.cpp twin")
    parts = ({"w1": "ffn_gate_exps", "w3": "ffn_up_exps", "w2": "ffn_down_exps"}
             if hf_class == "MixtralForCausalLM" else
             {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"})
    moe = "block_sparse_moe" if hf_class == "MixtralForCausalLM" else "mlp"
    for layer in range(cfg["num_hidden_layers"]):
        for hf_part, gguf_part in parts.items():
            names_e = [f"model.layers.{layer}.{moe}.experts.{e}.{hf_part}.weight"
                       for e in range(experts)]
            dtype = tensors[names_e[0]][0]
            stacked = np.stack([tensors.pop(n)[1] for n in names_e])
            tensors[f"__exps.{layer}.{gguf_part}"] = (dtype, stacked)
        gate = tensors.pop(f"model.layers.{layer}.{moe}.gate.weight")
        tensors[f"__exps.{layer}.ffn_gate_inp"] = ("F32", to_f32(*gate))
if rope_type in ("longrope", "su"):  # the converter's Phi3MiniModel, as conversion/phi.py
    orig = scaling.get("original_max_position_embeddings", cfg.get("original_max_position_embeddings"))
    w.add_rope_scaling_orig_ctx_len(orig)
    s = cfg["max_position_embeddings"] / orig
    w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(s) / math.log(orig)) if s > 1.0 else 1.0)
    tensors["__rope_long"] = ("F32", np.array(scaling["long_factor"], dtype=np.float32))
    tensors["__rope_short"] = ("F32", np.array(scaling["short_factor"], dtype=np.float32))
if gemma:  # the converter's Gemma2Model / Gemma3Model (conversion/gemma.py)
    w.add_sliding_window(cfg["sliding_window"])
    if arch == "gemma2":  # the converter's defaults when absent or null
        w.add_attn_logit_softcapping(cfg.get("attn_logit_softcapping") or 50.0)
        w.add_final_logit_softcapping(cfg.get("final_logit_softcapping") or 30.0)
    else:
        w.add_rope_freq_base_swa(cfg.get("rope_local_base_freq", 10000.0))
        if cfg.get("sliding_window_pattern", 6) != 6:  # llama.cpp's default is 6
            w.add_uint32("gemma3.attention.sliding_window_pattern", cfg["sliding_window_pattern"])
        if cfg.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
if "add_bos_token" in tc:
    w.add_add_bos_token(bool(tc["add_bos_token"]))

names = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "__rope_freqs": "rope_freqs.weight",
    "__rope_long": "rope_factors_long.weight",
    "__rope_short": "rope_factors_short.weight",
}
layer_names = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight",
}
# Gemma's norms: post_attention_layernorm is the attention's post-norm there, and every
# norm weight is stored as 1 + w (the converter adds 1).
gemma_names = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}
for name, (dtype, data) in list(tensors.items()):
    if gemma and name.endswith("norm.weight"):
        tensors[name] = ("F32", to_f32(dtype, data) + np.float32(1))
for name, (dtype, data) in tensors.items():
    if name == "lm_head.weight" and cfg.get("tie_word_embeddings"):
        continue
    if name.startswith("__exps."):
        _, layer, part = name.split(".")
        gguf_name = f"blk.{layer}.{part}.weight"
    elif name.startswith("model.layers."):
        _, _, layer, rest = name.split(".", 3)
        gguf_name = f"blk.{layer}.{(gemma_names if gemma else {}).get(rest) or layer_names[rest]}"
    else:
        gguf_name = names[name]
    if arch == "llama" and name.endswith(("q_proj.weight", "q_proj.bias")):
        data = permute(data, n_head, n_head)
    if arch == "llama" and name.endswith(("k_proj.weight", "k_proj.bias")):
        data = permute(data, n_head, n_kv)
    if data.ndim <= 1 or gguf_name.endswith("ffn_gate_inp.weight"):  # kept in F32
        w.add_tensor(gguf_name, to_f32(dtype, data))
    elif dtype == "BF16":
        w.add_tensor(gguf_name, data, raw_dtype=GGMLQuantizationType.BF16)
    else:
        w.add_tensor(gguf_name, data)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
