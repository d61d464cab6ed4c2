// `cinfer serve` through the official Anthropic SDK for Node (the pinned npm package @anthropic-ai/sdk; this
// version sends the key as Authorization: Bearer, test_anthropic.py covers x-api-key): messages.create (the
// message object, stop reasons max_tokens and stop_sequence), messages.stream (the SDK parses the event
// stream; its text events joined and its final message equal the non-streamed answer at temperature 0),
// messages.countTokens (equal to the answer's usage.input_tokens), a tool_use -> tool_result round trip
// through a real template, extended thinking (thinking blocks with signatures, thinking_delta and signature_delta
// events, budget_tokens enforced, earlier turns' thinking passed back to the template), and the SDK's error
// classes for the server's Anthropic-shaped errors.  Prints
// PASS/FAIL lines.
//   node tests/server/anthropic_sdk.mjs SDK_DIR BASE_URL API_KEY MODEL_NAME [NPM_DIR TEMPLATE]
// NPM_DIR (scripts/llamacpp-setup.sh's, for @huggingface/jinja) and TEMPLATE (the server's
// --chat-template-file): the real-template round trip runs only with both.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, baseURL, apiKey, model, npmDir, templatePath] = process.argv.slice(2);
const sdk = await import(pathToFileURL(path.join(sdkDir, "node_modules/@anthropic-ai/sdk/index.mjs")).href);
const Anthropic = sdk.default;

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

async function expectError(name, fn, cls, status, type) {
  try {
    await fn();
    check(name, false, "no error");
  } catch (e) {
    const body = e && e.error;
    check(name, e instanceof cls && e.status === status && body && body.type === "error" && body.error &&
      body.error.type === type, `${e && e.constructor && e.constructor.name} status ${e && e.status}: ` +
      `${JSON.stringify(body)} ${e && e.message}`);
  }
}

const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const conversation = {
  model,
  system: "You tell stories.",
  messages: [{ role: "user", content: "Once upon a time" }],
};
let created = null;

await step("sdk_create", async () => {
  const m = await client.messages.create({ ...conversation, max_tokens: 24, temperature: 0 });
  created = m;
  check("sdk_create", m.type === "message" && m.role === "assistant" && m.model === model &&
    m.id.startsWith("msg_") && m.content.length === 1 && m.content[0].type === "text" &&
    typeof m.content[0].text === "string" && m.content[0].text.length > 0, JSON.stringify(m));
  check("sdk_create_max_tokens", m.stop_reason === "max_tokens" && m.stop_sequence === null &&
    m.usage.output_tokens === 24 && m.usage.input_tokens > 0, JSON.stringify(m));
});

await step("sdk_stream", async () => {
  let text = "";
  const types = [];
  const stream = client.messages.stream({ ...conversation, max_tokens: 24, temperature: 0 });
  stream.on("text", (t) => { text += t; });
  stream.on("streamEvent", (ev) => { types.push(ev.type); });
  const final = await stream.finalMessage();
  const want = created ? created.content[0].text : null;
  check("sdk_stream_text", text === want, `${JSON.stringify(text)} vs ${JSON.stringify(want)}`);
  check("sdk_stream_final_message", final.id.startsWith("msg_") && final.content.length === 1 &&
    final.content[0].type === "text" && final.content[0].text === want && final.stop_reason === "max_tokens" &&
    final.usage.output_tokens === 24 && created && final.usage.input_tokens === created.usage.input_tokens,
    JSON.stringify(final));
  check("sdk_stream_events", types[0] === "message_start" && types[1] === "content_block_start" &&
    types.at(-1) === "message_stop" && types.at(-2) === "message_delta" && types.at(-3) === "content_block_stop",
    types.join(","));
});

await step("sdk_stop_sequence", async () => {
  const full = created.content[0].text;
  const words = full.split(/[^A-Za-z]+/).filter((w) => w.length >= 3);
  const seq = words[1];
  const cut = full.indexOf(seq);
  const m = await client.messages.create({ ...conversation, max_tokens: 24, temperature: 0, stop_sequences: [seq] });
  check("sdk_stop_sequence", m.stop_reason === "stop_sequence" && m.stop_sequence === seq &&
    m.content[0].text === full.slice(0, cut), `${seq} in ${JSON.stringify(full)}: ${JSON.stringify(m)}`);
  const stream = client.messages.stream({ ...conversation, max_tokens: 24, temperature: 0, stop_sequences: [seq] });
  const final = await stream.finalMessage();
  check("sdk_stream_stop_sequence", final.stop_reason === "stop_sequence" && final.stop_sequence === seq &&
    final.content[0].text === full.slice(0, cut), JSON.stringify(final));
});

await step("sdk_count_tokens", async () => {
  const c = await client.messages.countTokens(conversation);
  check("sdk_count_tokens", created && c.input_tokens === created.usage.input_tokens,
    `${JSON.stringify(c)} vs ${created && created.usage.input_tokens}`);
});

// With a real template (Qwen3's, from llama.cpp) and @huggingface/jinja: the prompt of the round trip is the
// template rendered with the conversation in OpenAI's shape, written here by hand from the Messages API's
// documented mapping (tool_use -> an assistant tool call whose arguments are the input object, as
// transformers documents tool calls for chat templates;
// tool_result -> a "tool" message); it holds the tool result, and the server's prompt has exactly its tokens
// (count_tokens) and, at temperature 0, the same continuation as /v1/completions of it.
await step("sdk_real_template_round_trip", async () => {
  if (!npmDir || !templatePath) return;
  const fs = await import("node:fs");
  const { Template } = await import(pathToFileURL(path.join(npmDir, "node_modules/@huggingface/jinja/dist/index.js")).href);
  const schema = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };
  const tools = [{ name: "get_weather", description: "Weather of a city", input_schema: schema }];
  const messages = [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: [{ type: "text", text: "Let me check." },
      { type: "tool_use", id: "toolu_01", name: "get_weather", input: { city: "Paris" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_01", content: [{ type: "text", text: "21 C and sunny" }] }] },
  ];
  const openaiShape = {
    messages: [
      { role: "system", content: "You tell stories." },
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "Let me check.", tool_calls: [{ id: "toolu_01", type: "function",
        function: { name: "get_weather", arguments: { city: "Paris" } } }] },
      { role: "tool", tool_call_id: "toolu_01", content: "21 C and sunny" },
    ],
    tools: [{ type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: schema } }],
    add_generation_prompt: true,
  };
  const prompt = new Template(fs.readFileSync(templatePath, "utf8")).render(openaiShape);
  check("sdk_real_template_has_tool_result", prompt.includes("<tool_response>\n21 C and sunny\n</tool_response>") &&
    prompt.includes('{"name": "get_weather", "arguments": {"city": "Paris"}}'), JSON.stringify(prompt));
  const post = async (p, body) => (await fetch(baseURL + p, { method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", Authorization: "Bearer " + apiKey } })).json();
  const ref = await post("/tokenize", { prompt });
  const c = await client.messages.countTokens({ model, system: "You tell stories.", tools, messages });
  check("sdk_real_template_count_tokens", c.input_tokens === ref.count, `${JSON.stringify(c)} vs ${ref.count}`);
  const m = await client.messages.create({ model, system: "You tell stories.", max_tokens: 8, temperature: 0, tools,
    tool_choice: { type: "auto" }, messages });
  const comp = await post("/v1/completions", { prompt, max_tokens: 8, temperature: 0 });
  check("sdk_real_template_generation", m.usage.input_tokens === ref.count &&
    m.content[0].text === comp.choices[0].text, `${JSON.stringify(m)} vs ${JSON.stringify(comp)}`);
});

await step("sdk_tool_round_trip", async () => {
  if (!templatePath) return; // the built-in templates have no tool role
  const tools = [{ name: "get_weather", description: "Weather of a city",
    input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
  const messages = [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_01", name: "get_weather", input: { city: "Paris" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_01", content: "21 C and sunny" }] },
  ];
  const m = await client.messages.create({ model, max_tokens: 4, temperature: 0, tools, tool_choice: { type: "auto" },
    messages });
  const c = await client.messages.countTokens({ model, tools, messages });
  check("sdk_tool_round_trip", m.type === "message" && m.usage.input_tokens === c.input_tokens, JSON.stringify([m, c]));
});

// Extended thinking through a real thinking template (Qwen3's): thinking {type: "enabled", budget_tokens} is
// the template's enable_thinking true, and the model's <think> block comes back as a thinking block before the
// text (Anthropic's shape: {type: "thinking", thinking, signature}), streamed as thinking_delta events that the
// SDK accumulates into the same message; {type: "disabled"} is enable_thinking false.  The prompts' token
// counts equal those of @huggingface/jinja's renders of the template with enable_thinking true and false (Qwen3
// writes an empty <think></think> into the prompt when it is false).  A grammar (llama.cpp's field, passed
// through the SDK as an extra body field) makes the random model write a <think> block.
await step("sdk_thinking", async () => {
  if (!npmDir || !templatePath) return;
  const fs = await import("node:fs");
  const { Template } = await import(pathToFileURL(path.join(npmDir, "node_modules/@huggingface/jinja/dist/index.js")).href);
  const raw = "<think>\nThe user greets me.\n</think>\n\nHello there!";
  const messages = [{ role: "user", content: "Hi" }];
  const body = { model, max_tokens: 2048, temperature: 0, thinking: { type: "enabled", budget_tokens: 1024 }, messages,
    grammar: "root ::= " + JSON.stringify(raw) };
  const want = [{ type: "thinking", thinking: "The user greets me.", signature: "" }, { type: "text", text: "Hello there!" }];
  const m = await client.messages.create(body);
  // The signature is opaque (Anthropic's are too): a non-empty string, the same for the same thinking text.
  const sig = m.content[0] && m.content[0].signature;
  want[0].signature = sig;
  check("sdk_thinking_blocks", JSON.stringify(m.content) === JSON.stringify(want) && m.stop_reason === "end_turn" &&
    typeof sig === "string" && sig.length >= 16, JSON.stringify(m));
  let thinking = "", text = "";
  const types = [];
  const stream = client.messages.stream(body);
  stream.on("thinking", (d) => { thinking += d; });
  stream.on("text", (d) => { text += d; });
  stream.on("streamEvent", (ev) => {
    if (ev.type === "content_block_start") types.push(ev.content_block.type);
    if (ev.type === "content_block_delta") types.push(ev.delta.type);
    if (ev.type === "content_block_stop") types.push(`stop${ev.index}`);
  });
  const final = await stream.finalMessage();
  // Anthropic's order: the thinking deltas, then one signature_delta, then the thinking block's stop.
  const sigAt = types.indexOf("signature_delta");
  check("sdk_thinking_stream", JSON.stringify(final.content) === JSON.stringify(want) &&
    thinking === want[0].thinking && text === want[1].text && types[0] === "thinking" &&
    types[1] === "thinking_delta" && sigAt > 1 && types[sigAt + 1] === "stop0" &&
    types.lastIndexOf("signature_delta") === sigAt && types.slice(1, sigAt).every((t) => t === "thinking_delta") &&
    types.includes("text") && types.at(-2) === "text_delta",
    `${JSON.stringify(final.content)} ${JSON.stringify(thinking)} ${JSON.stringify(text)} ${types.join(",")}`);
  const plain = await client.messages.create({ ...body, thinking: undefined });
  check("sdk_thinking_absent_is_text", plain.content.length === 1 && plain.content[0].type === "text" &&
    plain.content[0].text === raw, JSON.stringify(plain));
  const tmpl = new Template(fs.readFileSync(templatePath, "utf8"));
  const post = async (p, b) => (await fetch(baseURL + p, { method: "POST", body: JSON.stringify(b),
    headers: { "Content-Type": "application/json", Authorization: "Bearer " + apiKey } })).json();
  for (const on of [true, false]) {
    const prompt = tmpl.render({ messages, add_generation_prompt: true, enable_thinking: on });
    const ref = await post("/tokenize", { prompt });
    const c = await client.messages.countTokens({ model, messages,
      thinking: on ? { type: "enabled", budget_tokens: 1024 } : { type: "disabled" } });
    check(`sdk_thinking_${on ? "enabled" : "disabled"}_prompt`, c.input_tokens === ref.count,
      `${JSON.stringify(c)} vs ${ref.count} tokens of ${JSON.stringify(prompt)}`);
  }
});
// budget_tokens is enforced: a grammar (llama.cpp's field) makes the model open a <think> block that nothing
// in it can close except the grammar's own "\n</think>" path, and allows no end of generation before
// "Done."; without the budget (the same grammar on /v1/chat/completions) the thinking runs to max_tokens.  With
// budget_tokens B the server forces the end of the block after B thinking tokens: stop_reason end_turn, the
// blocks [thinking, text "Done."], and output_tokens = (the tokens spelling "<think>\n", at most 8) + B + (the
// forced "\n</think>\n\n" and "Done.", at most 16).  Streamed the same.
await step("sdk_thinking_budget", async () => {
  if (!npmDir || !templatePath) return;
  const grammar = 'root ::= "<think>\\n" [^<]* "\\n</think>\\n\\nDone."';
  const messages = [{ role: "user", content: "Hi" }];
  for (const budget of [1024, 1100]) {
    const body = { model, max_tokens: 1400, temperature: 0, thinking: { type: "enabled", budget_tokens: budget },
      messages, grammar };
    const m = await client.messages.create(body);
    const out = m.usage.output_tokens;
    check(`sdk_thinking_budget_${budget}`, m.stop_reason === "end_turn" && m.content.length === 2 &&
      m.content[0].type === "thinking" && m.content[0].thinking.length > 0 && m.content[1].type === "text" &&
      m.content[1].text === "Done." && out > budget && out <= budget + 24,
      `${out} tokens, ${m.stop_reason}, ${JSON.stringify(m.content.map((b) => b.type))}`);
    const final = await client.messages.stream(body).finalMessage();
    check(`sdk_thinking_budget_${budget}_stream`, JSON.stringify(final.content) === JSON.stringify(m.content) &&
      final.usage.output_tokens === out, `${JSON.stringify(final.usage)} vs ${out}`);
  }
  const r = await fetch(baseURL + "/v1/chat/completions", { method: "POST", body: JSON.stringify({ model,
    max_tokens: 1400, temperature: 0, messages, grammar }), headers: { "Content-Type": "application/json",
    Authorization: "Bearer " + apiKey } });
  const c = await r.json();
  check("sdk_thinking_budget_control", c.choices[0].finish_reason === "length" && c.usage.completion_tokens === 1400,
    JSON.stringify(c.usage));
});

// An earlier turn's thinking block goes back to the template as the assistant message's reasoning_content
// (Qwen3's template shows it for the turns after the last user query: a tool round trip), so the prompt's
// token count equals that of @huggingface/jinja's render with reasoning_content (and differs from the render
// without it).  The block's signature is required (a 400 without it, as Anthropic's API); redacted_thinking
// blocks are accepted and add nothing to the prompt.
await step("sdk_thinking_history", async () => {
  if (!npmDir || !templatePath) return;
  const fs = await import("node:fs");
  const { Template } = await import(pathToFileURL(path.join(npmDir, "node_modules/@huggingface/jinja/dist/index.js")).href);
  const tmpl = new Template(fs.readFileSync(templatePath, "utf8"));
  const tools = [{ name: "get_weather", description: "Weather of a city",
    input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
  const thought = "Paris weather needs the tool.";
  const first = await client.messages.create({ model, max_tokens: 2048, temperature: 0, tools,
    thinking: { type: "enabled", budget_tokens: 1024 }, messages: [{ role: "user", content: "Weather in Paris?" }],
    grammar: "root ::= " + JSON.stringify(`<think>\n${thought}\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>`) });
  check("sdk_thinking_history_first", first.stop_reason === "tool_use" && first.content.length === 2 &&
    first.content[0].type === "thinking" && first.content[0].thinking === thought &&
    first.content[1].type === "tool_use", JSON.stringify(first.content));
  const messages = [{ role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: first.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: first.content[1].id, content: "21 C" }] }];
  const post = async (p, b) => (await fetch(baseURL + p, { method: "POST", body: JSON.stringify(b),
    headers: { "Content-Type": "application/json", Authorization: "Bearer " + apiKey } })).json();
  const openai = (reasoning) => [{ role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: "", ...(reasoning ? { reasoning_content: thought } : {}),
      tool_calls: [{ id: first.content[1].id, type: "function",
        function: { name: "get_weather", arguments: { city: "Paris" } } }] },
    { role: "tool", tool_call_id: first.content[1].id, content: "21 C" }];
  const fnTools = tools.map((t) => ({ type: "function", function: { name: t.name, description: t.description,
    parameters: t.input_schema } }));
  const ref = async (reasoning) => (await post("/tokenize", { prompt: tmpl.render({ messages: openai(reasoning),
    tools: fnTools, add_generation_prompt: true, enable_thinking: true }) })).count;
  const [withIt, without] = [await ref(true), await ref(false)];
  const c = await client.messages.countTokens({ model, tools, messages,
    thinking: { type: "enabled", budget_tokens: 1024 } });
  check("sdk_thinking_history_prompt", c.input_tokens === withIt && withIt > without,
    `${c.input_tokens} vs ${withIt} (with reasoning_content) / ${without} (without)`);
  const redacted = messages.map((m, i) => i !== 1 ? m : { role: "assistant", content: [
    { type: "redacted_thinking", data: "opaque" }, first.content[1]] });
  const cr = await client.messages.countTokens({ model, tools, messages: redacted,
    thinking: { type: "enabled", budget_tokens: 1024 } });
  check("sdk_thinking_history_redacted", cr.input_tokens === without, `${cr.input_tokens} vs ${without}`);
  const unsigned = messages.map((m, i) => i !== 1 ? m : { role: "assistant", content: [
    { type: "thinking", thinking: thought }, first.content[1]] });
  await expectError("sdk_thinking_history_unsigned", () => client.messages.countTokens({ model, tools,
    messages: unsigned }), sdk.BadRequestError, 400, "invalid_request_error");
});

await expectError("sdk_error_thinking_forced_tool", () => client.messages.create({ ...conversation, max_tokens: 2048,
  tools: [{ name: "f", input_schema: { type: "object" } }], tool_choice: { type: "any" },
  thinking: { type: "enabled", budget_tokens: 1024 } }), sdk.BadRequestError, 400, "invalid_request_error");
await expectError("sdk_error_thinking_budget", () => client.messages.create({ ...conversation, max_tokens: 2048,
  thinking: { type: "enabled", budget_tokens: 100 } }), sdk.BadRequestError, 400, "invalid_request_error");
await expectError("sdk_error_thinking_over_max_tokens", () => client.messages.create({ ...conversation,
  max_tokens: 1024, thinking: { type: "enabled", budget_tokens: 1024 } }), sdk.BadRequestError, 400,
  "invalid_request_error");
await expectError("sdk_error_thinking_type", () => client.messages.create({ ...conversation, max_tokens: 16,
  thinking: { type: "sometimes" } }), sdk.BadRequestError, 400, "invalid_request_error");

await expectError("sdk_error_bad_request", () => client.messages.create({ model, max_tokens: 4, messages: [
  { role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] }] }),
  sdk.BadRequestError, 400, "invalid_request_error");
await expectError("sdk_error_not_found", () => client.messages.create({ ...conversation, model: "claude-x",
  max_tokens: 4 }), sdk.NotFoundError, 404, "not_found_error");
await expectError("sdk_error_authentication", () => new Anthropic({ baseURL, apiKey: "wrong", maxRetries: 0 })
  .messages.create({ ...conversation, max_tokens: 4 }), sdk.AuthenticationError, 401, "authentication_error");
await expectError("sdk_error_count_tokens", () => client.messages.countTokens({ model, messages: [] }),
  sdk.BadRequestError, 400, "invalid_request_error");

process.exit(failed ? 1 : 0);
