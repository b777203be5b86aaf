// Encodes texts with Hugging Face's JavaScript tokenizers (@huggingface/tokenizers), the
// reference for Folio's tokenizer.json reader (services/worker/model/hf_tokenizer_reference_test.cc).
//
//   node hf_tokenize.mjs TOKENIZER_JSON TOKENIZER_CONFIG_JSON TEXTS_JSON
//
// TEXTS_JSON holds a JSON list of strings. Prints {"with": [[ids]...], "without": [[ids]...],
// "decoded": [text...]}: each text encoded with and without add_special_tokens, and the
// "with" ids decoded again with skip_special_tokens. Run from the reference folder
// (build/reference), whose node_modules holds the package.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const { Tokenizer } = await import(pathToFileURL(
    join(process.cwd(), "node_modules/@huggingface/tokenizers/dist/tokenizers.mjs")).href);

const [tokenizerPath, configPath, textsPath] = process.argv.slice(2);
const tokenizer = new Tokenizer(JSON.parse(readFileSync(tokenizerPath, "utf8")),
                                JSON.parse(readFileSync(configPath, "utf8")));
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
const out = { with: [], without: [], decoded: [] };
for (const text of texts) {
  const ids = tokenizer.encode(text, { add_special_tokens: true }).ids;
  out.with.push(ids);
  out.decoded.push(ids.length === 0 ? "" : tokenizer.decode(ids, {
    skip_special_tokens: true, clean_up_tokenization_spaces: false }));
  out.without.push(tokenizer.encode(text, { add_special_tokens: false }).ids);
}
process.stdout.write(JSON.stringify(out));
