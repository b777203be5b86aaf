// Encodes texts with Hugging Face's JavaScript tokenizers (@huggingface/tokenizers), the
// reference for Folio's tokenizer.json reader (services/worker/model/hf_tokenizer_reference_test.cc).
//
//   node hf_tokenize.mjs TOKENIZER_JSON TOKENIZER_CONFIG_JSON TEXTS_JSON [rust]
//
// With "rust": Hugging Face's Rust tokenizers instead (0.21.4 through its Node binding,
// @inference-net/tokenizers), for what the JavaScript port leaves out (it ignores Metaspace's
// split). The Rust library reads no tokenizer_config.json: BOS comes from the post-processor.
//
// TEXTS_JSON holds a JSON list of strings. Prints {"with": [[ids]...], "without": [[ids]...],
// "decoded": [text...]}: each text encoded with and without add_special_tokens, and the
// "with" ids decoded again with skip_special_tokens. Run from the reference folder
// (build/reference), whose node_modules holds the package.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [tokenizerPath, configPath, textsPath, engine] = process.argv.slice(2);
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
const out = { with: [], without: [], decoded: [] };
if (engine === "rust") {
  const { createRequire } = await import("node:module");
  const require = createRequire(join(process.cwd(), "package.json"));
  const { Tokenizer } = require("@inference-net/tokenizers");
  const tokenizer = Tokenizer.fromString(readFileSync(tokenizerPath, "utf8"));
  for (const text of texts) {
    const ids = (await tokenizer.encode(text, null, { addSpecialTokens: true })).getIds();
    out.with.push(ids);
    out.decoded.push(ids.length === 0 ? "" : await tokenizer.decode(ids, true));
    out.without.push((await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds());
  }
  process.stdout.write(JSON.stringify(out));
  process.exit(0);
}
const { Tokenizer } = await import(pathToFileURL(
    join(process.cwd(), "node_modules/@huggingface/tokenizers/dist/tokenizers.mjs")).href);
const tokenizer = new Tokenizer(JSON.parse(readFileSync(tokenizerPath, "utf8")),
                                JSON.parse(readFileSync(configPath, "utf8")));
for (const text of texts) {
  const ids = tokenizer.encode(text, { add_special_tokens: true }).ids;
  out.with.push(ids);
  out.decoded.push(ids.length === 0 ? "" : tokenizer.decode(ids, {
    skip_special_tokens: true, clean_up_tokenization_spaces: false }));
  out.without.push(tokenizer.encode(text, { add_special_tokens: false }).ids);
}
process.stdout.write(JSON.stringify(out));
