// Runs the official openai client against a Folio frontend's HTTP API and compares each
// completion with the text the gRPC API gave for the same request.
//
//   node check.mjs CASES.json
//
// CASES.json: {"baseURL", "apiKey", "model", "cases": [{"name", "kind", "prompt" |
// "messages", "max_tokens", "extra", "expected"}]}, kind one of completion,
// completion_stream, chat_stream, chat, or completion_error (a call the server must refuse
// with 400; "expected" is then the error's param). With "tools": chat_tools (not
// streamed), chat_tools_stream (the client's own stream helper joins the tool_calls
// deltas: beta.chat.completions.stream + finalChatCompletion) and chat_tools_round_trip
// (the call sent back with its result as the next request); their text is
// JSON {content, finish_reason, calls: [{name, arguments}]} of the (last) reply. With
// "response_format" (OpenAI's {type: "json_schema", json_schema: {name, schema, strict}}):
// chat_json_schema (create), chat_json_schema_parse (the client's beta.chat.completions.parse,
// which parses the content itself) and chat_json_schema_stream (beta.chat.completions.stream
// + finalChatCompletion, which joins the streamed deltas); their text is the reply's content,
// which must end with "stop", parse as JSON and (parse) equal the client's own `parsed`.
// "extra" holds more request fields
// (presence_penalty, logit_bias, seed, ...) passed as the client passes them. Prints one
// line per case; exits 1 when any text differs or a call fails.
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const client = new OpenAI({ baseURL: spec.baseURL, apiKey: spec.apiKey, maxRetries: 0 });

async function run(c) {
  const common = { model: spec.model, max_tokens: c.max_tokens, temperature: 0, ...(c.extra ?? {}) };
  if (c.kind === "completion") {
    const r = await client.completions.create({ ...common, prompt: c.prompt });
    if (r.object !== "text_completion") throw new Error(`object is ${r.object}`);
    if (r.usage.completion_tokens <= 0) throw new Error("no completion tokens in usage");
    return r.choices[0].text;
  }
  if (c.kind === "completion_stream") {
    const stream = await client.completions.create({
      ...common, prompt: c.prompt, stream: true, stream_options: { include_usage: true } });
    let text = "";
    let usage = null;
    let finish = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices) {
        text += choice.text;
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }
    if (!usage || usage.completion_tokens <= 0) throw new Error("no usage chunk");
    if (!finish) throw new Error("no finish_reason");
    return text;
  }
  if (c.kind === "chat_stream") {
    const stream = await client.chat.completions.create({
      ...common, messages: c.messages, stream: true });
    let text = "";
    let role = null;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        if (choice.delta.role) role = choice.delta.role;
        if (choice.delta.content) text += choice.delta.content;
      }
    }
    if (role !== "assistant") throw new Error(`role is ${role}`);
    return text;
  }
  if (c.kind === "chat") {
    const r = await client.chat.completions.create({ ...common, messages: c.messages });
    if (r.object !== "chat.completion") throw new Error(`object is ${r.object}`);
    return r.choices[0].message.content;
  }
  if (c.kind.startsWith("chat_tools")) {
    const summary = (r) => {
      const m = r.choices[0].message;
      for (const call of m.tool_calls ?? []) {
        if (call.type !== "function" || !call.id) throw new Error(`bad call ${JSON.stringify(call)}`);
        JSON.parse(call.function.arguments);  // must be JSON
      }
      return JSON.stringify({
        content: m.content ?? null, finish_reason: r.choices[0].finish_reason,
        calls: (m.tool_calls ?? []).map((t) => ({ name: t.function.name, arguments: t.function.arguments })),
      });
    };
    const req = { ...common, messages: c.messages, tools: c.tools };
    if (c.kind === "chat_tools") return summary(await client.chat.completions.create(req));
    if (c.kind === "chat_tools_stream") {
      const stream = client.beta.chat.completions.stream(req);
      return summary(await stream.finalChatCompletion());
    }
    if (c.kind === "chat_tools_round_trip") {
      const first = await client.chat.completions.create(req);
      const m = first.choices[0].message;
      if (!m.tool_calls?.length) throw new Error("no tool call to answer");
      const messages = [...c.messages, m,
        ...m.tool_calls.map((t) => ({ role: "tool", tool_call_id: t.id, content: c.tool_result }))];
      return summary(await client.chat.completions.create({ ...req, messages }));
    }
  }
  if (c.kind.startsWith("chat_json_schema")) {
    const req = { ...common, messages: c.messages, response_format: c.response_format };
    const checked = (r) => {
      const m = r.choices[0].message;
      if (r.choices[0].finish_reason !== "stop") {
        throw new Error(`finish_reason is ${r.choices[0].finish_reason}`);
      }
      const value = JSON.parse(m.content);  // must be JSON
      // The client's parse helper parses a plain JSON schema's content itself (its stream
      // helper only parses the zod-made formats, so `parsed` stays null there).
      if (c.kind === "chat_json_schema_parse" &&
          JSON.stringify(m.parsed) !== JSON.stringify(value)) {
        throw new Error(`the client parsed ${JSON.stringify(m.parsed)}`);
      }
      return m.content;
    };
    if (c.kind === "chat_json_schema") return checked(await client.chat.completions.create(req));
    if (c.kind === "chat_json_schema_parse") {
      return checked(await client.beta.chat.completions.parse(req));
    }
    if (c.kind === "chat_json_schema_stream") {
      const stream = client.beta.chat.completions.stream(req);
      return checked(await stream.finalChatCompletion());
    }
  }
  if (c.kind === "completion_error") {
    try {
      await client.completions.create({ ...common, prompt: c.prompt });
    } catch (e) {
      if (!(e instanceof OpenAI.BadRequestError)) throw e;
      return e.param;
    }
    throw new Error("the server accepted it");
  }
  throw new Error(`unknown kind ${c.kind}`);
}

let failed = 0;
for (const c of spec.cases) {
  try {
    const text = await run(c);
    const ok = text === c.expected;
    if (!ok) failed++;
    console.log(`${ok ? "OK  " : "DIFF"} ${c.name}: ${JSON.stringify(text)}` +
                (ok ? "" : ` (gRPC: ${JSON.stringify(c.expected)})`));
  } catch (e) {
    failed++;
    console.log(`FAIL ${c.name}: ${e}`);
  }
}
process.exit(failed === 0 ? 0 : 1);
