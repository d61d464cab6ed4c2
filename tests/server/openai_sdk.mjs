// `cinfer serve` through the official OpenAI SDK for Node (the pinned npm package `openai`): models,
// completions and chat, non-streaming and streaming (deltas collected), usage, logprobs, and the SDK's error
// classes for the server's error statuses.  Expected text: stories260K's greedy llama2.c output from
// shared/models/MANIFEST.md.  Prints PASS/FAIL lines.
//   node tests/server/openai_sdk.mjs SDK_DIR BASE_URL API_KEY MODEL_NAME
import path from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, baseURL, apiKey, model] = process.argv.slice(2);
const { default: OpenAI } = await import(pathToFileURL(path.join(sdkDir, "node_modules/openai/index.mjs")).href);

const GREEDY_TEXT =
  "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, " +
  "she saw a big, red ball. She wanted to play with it, but it was too high";

let failed = 0;
function check(name, ok, why = "") {
  if (ok) console.log(`PASS ${name}`);
  else {
    failed++;
    console.log(`FAIL ${name}: ${why}`);
  }
}

async function step(name, fn) {
  try {
    await fn();
  } catch (e) {
    check(name, false, `threw ${e && e.constructor && e.constructor.name}: ${e && e.message}`);
  }
}

async function expectError(name, fn, cls, status, extra = () => true) {
  try {
    await fn();
    check(name, false, "no error");
  } catch (e) {
    check(name, e instanceof cls && e.status === status && extra(e),
      `${e && e.constructor && e.constructor.name} status ${e && e.status}: ${e && e.message}`);
  }
}

const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey, maxRetries: 0, timeout: 60000 });

await step("sdk_models_list", async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  check("sdk_models_list", ids.length === 1 && ids[0] === model && page.data[0].owned_by === "cinfer", JSON.stringify(page.data));
});

await step("sdk_completion", async () => {
  const r = await client.completions.create({ model, prompt: [1], max_tokens: 60, temperature: 0 });
  const c = r.choices[0];
  check("sdk_completion_greedy", c.text === GREEDY_TEXT, JSON.stringify(c.text));
  check("sdk_completion_usage", r.usage.prompt_tokens === 1 && r.usage.completion_tokens === 60 &&
    r.usage.total_tokens === 61 && c.finish_reason === "length", JSON.stringify(r.usage));
});

await step("sdk_completion_stream", async () => {
  const stream = await client.completions.create({
    model, prompt: [1], max_tokens: 60, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = "", usage = null, finish = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      text += ch.text;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  check("sdk_completion_stream_text", text === GREEDY_TEXT && chunks > 10, JSON.stringify(text));
  check("sdk_completion_stream_usage", usage && usage.completion_tokens === 60 && finish === "length",
    JSON.stringify(usage));
});

const messages = [
  { role: "system", content: "You tell short stories." },
  { role: "user", content: "Once upon a time" },
];

await step("sdk_chat", async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
  const m = r.choices[0].message;
  check("sdk_chat_message", r.object === "chat.completion" && m.role === "assistant" &&
    typeof m.content === "string" && m.content.length > 0, JSON.stringify(r.choices[0]));
  check("sdk_chat_usage", r.usage.completion_tokens === 16 && r.usage.prompt_tokens > 5 &&
    r.usage.total_tokens === r.usage.prompt_tokens + 16, JSON.stringify(r.usage));

  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = "", role = null, usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      if (ch.delta.role) role = ch.delta.role;
      if (ch.delta.content) text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  check("sdk_chat_stream_equals_nonstream", text === m.content && role === "assistant" && finish === "length",
    `${JSON.stringify(text)} vs ${JSON.stringify(m.content)}`);
  check("sdk_chat_stream_usage", usage && usage.completion_tokens === 16 && usage.prompt_tokens === r.usage.prompt_tokens,
    JSON.stringify(usage));

  // The SDK's stream helper assembles the final message from the deltas itself.
  const runner = client.chat.completions.stream({ model, messages, max_tokens: 16, temperature: 0 });
  const final = await runner.finalChatCompletion();
  check("sdk_chat_stream_helper", final.choices[0].message.content === m.content,
    JSON.stringify(final.choices[0].message));
});

await step("sdk_chat_logprobs", async () => {
  const r = await client.chat.completions.create({
    model, messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const lp = r.choices[0].logprobs.content;
  check("sdk_chat_logprobs", lp.length === 4 && lp.every((e) => e.top_logprobs.length === 3 &&
    Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6 && e.logprob <= 0) &&
    lp.map((e) => e.token).join("") === r.choices[0].message.content, JSON.stringify(lp).slice(0, 300));
});

await step("sdk_stop", async () => {
  const r = await client.completions.create({ model, prompt: [1], max_tokens: 60, temperature: 0, stop: ["Lily"] });
  check("sdk_stop", r.choices[0].text === "Once upon a time, there was a little girl named " &&
    r.choices[0].finish_reason === "stop", JSON.stringify(r.choices[0]));
});

await step("sdk_embeddings", async () => {
  // The SDK asks for base64 by default and decodes it to floats; the same request as floats must agree.
  const r = await client.embeddings.create({ model, input: ["Once upon a time", "the end"] });
  const f = await client.embeddings.create({ model, input: ["Once upon a time", "the end"], encoding_format: "float" });
  const v = r.data[0].embedding, w = f.data[0].embedding;
  const norm = Math.sqrt(v.reduce((a, x) => a + x * x, 0));
  check("sdk_embeddings_shape", r.data.length === 2 && r.data[1].index === 1 && v.length > 0 && r.model === model &&
    r.usage.prompt_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens, JSON.stringify(r.usage));
  check("sdk_embeddings_unit_length", Math.abs(norm - 1) < 1e-5, String(norm));
  check("sdk_embeddings_base64_equals_float", v.length === w.length && v.every((x, i) => Math.abs(x - w[i]) < 1e-6),
    `${v.slice(0, 3)} vs ${w.slice(0, 3)}`);
  const d = await client.embeddings.create({ model, input: "the end", dimensions: 8 });
  check("sdk_embeddings_dimensions", d.data[0].embedding.length === 8, String(d.data[0].embedding.length));
});

await step("sdk_errors", async () => {
  const bad = new OpenAI({ baseURL: baseURL + "/v1", apiKey: apiKey + "x", maxRetries: 0 });
  await expectError("sdk_error_401", () => bad.models.list(), OpenAI.AuthenticationError, 401);
  await expectError("sdk_error_400_param", () => client.chat.completions.create({ model, messages, temperature: 9 }),
    OpenAI.BadRequestError, 400, (e) => e.param === "temperature");
  await expectError("sdk_error_404_model", () => client.chat.completions.create({ model: "gpt-4o", messages }),
    OpenAI.NotFoundError, 404, (e) => e.code === "model_not_found");
  await expectError("sdk_error_400_context",
    () => client.completions.create({ model, prompt: "Once upon a time", max_tokens: 2048 }),
    OpenAI.BadRequestError, 400, (e) => e.code === "context_length_exceeded");
});

await step("sdk_grammar", async () => {
  // llama.cpp's `grammar` field goes through the SDK as an extra body parameter.
  const r = await client.completions.create({ model, prompt: "Once", max_tokens: 20, temperature: 1, seed: 3,
    grammar: 'root ::= "<" [0-9]{2,3} ">"\n' });
  check("sdk_grammar", /^<[0-9]{2,3}>$/.test(r.choices[0].text) && r.choices[0].finish_reason === "stop",
    JSON.stringify(r.choices[0]));
  await expectError("sdk_grammar_400", () => client.completions.create({ model, prompt: "Once",
    grammar: "root ::= num\n" }), OpenAI.BadRequestError, 400,
  (e) => e.param === "grammar" && /undefined rule 'num'/.test(e.message));
});

console.log(`openai sdk tests: ${failed} failed`);
process.exit(failed ? 1 : 0);
