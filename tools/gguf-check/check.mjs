// Reads a GGUF written by folio-make-model with @huggingface/gguf (an independent
// parser) and checks metadata, tensor names, shapes, dtypes and data layout against
// what the model was asked to be.
//
//   node check.mjs FILE '{"dim":64,"hidden":96,"layers":2,"heads":4,"kv_heads":2,
//                        "vocab":300,"context":128,"dtype":"q8_0","tied":false,
//                        "rope_theta":10000,"rms_eps":1e-5}'
// Exits 0 when everything matches, 1 with one line per mismatch otherwise.
import { statSync } from "node:fs";
import { gguf } from "@huggingface/gguf";

const [file, specJson] = process.argv.slice(2);
if (!file || !specJson) {
  console.error("usage: node check.mjs FILE SPEC_JSON");
  process.exit(2);
}
const spec = JSON.parse(specJson);
const GGML = { f32: 0, f16: 1, q8_0: 8, bf16: 30 };
const errors = [];
const expect = (what, got, want) => {
  const g = typeof got === "bigint" ? Number(got) : got;
  if (g !== want) errors.push(`${what}: got ${JSON.stringify(g)}, want ${JSON.stringify(want)}`);
};
const expectNear = (what, got, want) => {
  if (!(Math.abs(Number(got) - want) <= Math.abs(want) * 1e-6)) {
    errors.push(`${what}: got ${got}, want ${want}`);
  }
};

const { metadata: md, tensorInfos, tensorDataOffset } = await gguf(file, { allowLocalFile: true });

expect("version", md.version, 3);
expect("general.architecture", md["general.architecture"], "llama");
expect("llama.embedding_length", md["llama.embedding_length"], spec.dim);
expect("llama.feed_forward_length", md["llama.feed_forward_length"], spec.hidden);
expect("llama.block_count", md["llama.block_count"], spec.layers);
expect("llama.attention.head_count", md["llama.attention.head_count"], spec.heads);
expect("llama.attention.head_count_kv", md["llama.attention.head_count_kv"], spec.kv_heads);
expect("llama.context_length", md["llama.context_length"], spec.context);
expect("llama.rope.dimension_count", md["llama.rope.dimension_count"], spec.dim / spec.heads);
expectNear("llama.rope.freq_base", md["llama.rope.freq_base"], spec.rope_theta);
expectNear("llama.attention.layer_norm_rms_epsilon",
           md["llama.attention.layer_norm_rms_epsilon"], spec.rms_eps);
expect("tokenizer.ggml.model", md["tokenizer.ggml.model"], "llama");
const tokens = md["tokenizer.ggml.tokens"] ?? [];
expect("token count", tokens.length, spec.vocab);
expect("token 0", tokens[0], "<unk>");
expect("token 1", tokens[1], "<s>");
expect("token 2", tokens[2], "</s>");
expect("token 3", tokens[3], "<0x00>");
expect("token 258", tokens[258], "<0xFF>");
expect("distinct tokens", new Set(tokens).size, spec.vocab);
expect("scores count", (md["tokenizer.ggml.scores"] ?? []).length, spec.vocab);
const types = md["tokenizer.ggml.token_type"] ?? [];
expect("token_type count", types.length, spec.vocab);
expect("token_type[0]", types[0], 2);
expect("token_type[1]", types[1], 3);
expect("token_type[100]", types[100], 6);
expect("bos id", md["tokenizer.ggml.bos_token_id"], 1);
expect("eos id", md["tokenizer.ggml.eos_token_id"], 2);
expect("add_bos", md["tokenizer.ggml.add_bos_token"], true);

// Expected tensors: shapes in GGUF order (innermost first).
const hd = spec.dim / spec.heads;
const want = new Map();
const mat = (name, rows, cols) => want.set(name, { shape: [cols, rows], type: GGML[spec.dtype] });
const vec = (name, n) => want.set(name, { shape: [n], type: GGML.f32 });
mat("token_embd.weight", spec.vocab, spec.dim);
vec("output_norm.weight", spec.dim);
if (!spec.tied) mat("output.weight", spec.vocab, spec.dim);
for (let l = 0; l < spec.layers; ++l) {
  const p = `blk.${l}.`;
  vec(p + "attn_norm.weight", spec.dim);
  vec(p + "ffn_norm.weight", spec.dim);
  mat(p + "attn_q.weight", spec.heads * hd, spec.dim);
  mat(p + "attn_k.weight", spec.kv_heads * hd, spec.dim);
  mat(p + "attn_v.weight", spec.kv_heads * hd, spec.dim);
  mat(p + "attn_output.weight", spec.dim, spec.heads * hd);
  mat(p + "ffn_gate.weight", spec.hidden, spec.dim);
  mat(p + "ffn_down.weight", spec.dim, spec.hidden);
  mat(p + "ffn_up.weight", spec.hidden, spec.dim);
}
expect("tensor_count", md.tensor_count, want.size);
expect("tensorInfos.length", tensorInfos.length, want.size);

const bytesPer = (type, n) =>
  type === GGML.f32 ? 4 * n : type === GGML.q8_0 ? (n / 32) * 34 : 2 * n;
const fileSize = statSync(file).size;
const alignment = Number(md["general.alignment"] ?? 32);
for (const t of tensorInfos) {
  const w = want.get(t.name);
  if (!w) {
    errors.push(`unexpected tensor ${t.name}`);
    continue;
  }
  want.delete(t.name);
  expect(`${t.name} shape`, JSON.stringify(t.shape.map(Number)), JSON.stringify(w.shape));
  expect(`${t.name} dtype`, t.dtype, w.type);
  const offset = Number(t.offset);
  if (offset % alignment !== 0) errors.push(`${t.name}: offset ${offset} not aligned`);
  if (tensorDataOffset !== undefined) {
    const end = Number(tensorDataOffset) + offset + bytesPer(w.type, w.shape.reduce((a, b) => a * b));
    if (end > fileSize) errors.push(`${t.name}: data ends at ${end} past file size ${fileSize}`);
  }
}
for (const name of want.keys()) errors.push(`missing tensor ${name}`);
if (tensorDataOffset !== undefined && Number(tensorDataOffset) % alignment !== 0) {
  errors.push(`tensorDataOffset ${tensorDataOffset} not aligned to ${alignment}`);
}

if (errors.length > 0) {
  for (const e of errors) console.error(`${file}: ${e}`);
  process.exit(1);
}
console.log(`${file}: OK (${tensorInfos.length} tensors, ${tokens.length} tokens, ${spec.dtype})`);
