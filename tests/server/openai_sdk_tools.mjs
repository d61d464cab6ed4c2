// Tool calling and reasoning through the official OpenAI SDK for Node (the pinned npm package `openai`),
// against `cinfer serve` with a Hermes/Qwen-style chat template.  A random-weight model writes no call by
// itself, so the request's `grammar` (llama.cpp's GBNF field, passed through the SDK as an extra body field)
// forces the raw text a Qwen3 model writes: a <think> block, then <tool_call>{...}</tool_call>.  Checked with the
// SDK's own types and accumulation: message.tool_calls and reasoning_content, finish_reason "tool_calls", the
// streaming helper's finalChatCompletion() (the SDK assembling the tool_call deltas) equal to the
// non-streamed message, a tool_calls -> tool message -> answer round trip, and the SDK's BadRequestError with
// the parameter named for bad tools, tool_choice, content parts and tool messages.  Prints PASS/FAIL lines.
//   node tests/server/openai_sdk_tools.mjs SDK_DIR BASE_URL API_KEY MODEL_NAME
import path from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, baseURL, apiKey, model] = process.argv.slice(2);
const { default: OpenAI } = await import(pathToFileURL(path.join(sdkDir, "node_modules/openai/index.mjs")).href);

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

const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey, maxRetries: 0, timeout: 60000 });
const tools = [{
  type: "function",
  function: { name: "get_weather", description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
}];
const gbnf = (s) => "root ::= " + JSON.stringify(s); // a JSON string literal is a GBNF literal here
const RAW = '<think>\nThe user asks for the weather.\n</think>\n\n<tool_call>\n' +
  '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const user = { role: "user", content: "What is the weather in Paris?" };
const body = { model, messages: [user], tools, max_tokens: 400, seed: 1, grammar: gbnf(RAW) };

let first = null;
await step("sdk_tool_call", async () => {
  const r = await client.chat.completions.create(body);
  const c = r.choices[0], m = c.message;
  first = m;
  const tc = (m.tool_calls || [])[0];
  check("sdk_tool_call", m.tool_calls && m.tool_calls.length === 1 && tc.type === "function" &&
    /^call_[A-Za-z0-9]{24}$/.test(tc.id) && tc.function.name === "get_weather" &&
    JSON.stringify(JSON.parse(tc.function.arguments)) === '{"city":"Paris"}', JSON.stringify(m));
  check("sdk_tool_call_content_null", m.content === null, JSON.stringify(m.content));
  check("sdk_tool_call_reasoning", m.reasoning_content === "The user asks for the weather.", JSON.stringify(m));
  check("sdk_tool_call_finish", c.finish_reason === "tool_calls", c.finish_reason);
});

await step("sdk_tool_call_stream", async () => {
  const stream = client.chat.completions.stream({ ...body, stream: true });
  let reasoning = "";
  for await (const chunk of stream) {
    const d = chunk.choices[0] && chunk.choices[0].delta;
    if (d && d.reasoning_content) reasoning += d.reasoning_content;
  }
  const f = await stream.finalChatCompletion();
  const m = f.choices[0].message;
  const a = (m.tool_calls || []).map((t) => [t.type, t.function.name, t.function.arguments]);
  const b = (first && first.tool_calls || []).map((t) => [t.type, t.function.name, t.function.arguments]);
  check("sdk_tool_call_stream_equals", JSON.stringify(a) === JSON.stringify(b) && a.length === 1 &&
    !m.content && reasoning === first.reasoning_content && f.choices[0].finish_reason === "tool_calls",
    `${JSON.stringify(m)} ${reasoning} vs ${JSON.stringify(first)}`);
});

await step("sdk_tool_round_trip", async () => {
  const call = first.tool_calls[0];
  const answer = "It is sunny in Paris.";
  const r = await client.chat.completions.create({
    model, tools, max_tokens: 100, grammar: gbnf(answer),
    messages: [user, { role: "assistant", content: null, tool_calls: first.tool_calls },
      { role: "tool", tool_call_id: call.id, content: "sunny, 21C" }],
  });
  const m = r.choices[0].message;
  check("sdk_tool_round_trip", m.content === answer && !m.tool_calls && r.choices[0].finish_reason === "stop",
    JSON.stringify(r.choices[0]));
});

async function bad(name, req, param) {
  try {
    await client.chat.completions.create({ model, max_tokens: 4, ...req });
    check(name, false, "no error");
  } catch (e) {
    check(name, e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === param,
      `${e && e.constructor && e.constructor.name} ${e && e.status} param ${e && e.param}: ${e && e.message}`);
  }
}
await bad("sdk_bad_tool_choice", { messages: [user], tools,
  tool_choice: { type: "function", function: { name: "get_time" } } }, "tool_choice");
await bad("sdk_bad_tool_no_name", { messages: [user], tools: [{ type: "function", function: { parameters: {} } }] },
  "tools[0].function.name");
await bad("sdk_bad_image_part", { messages: [{ role: "user", content: [{ type: "text", text: "see" },
  { type: "image_url", image_url: { url: "https://example.com/a.png" } }] }] }, "messages[0].content");
await bad("sdk_bad_tool_message", { messages: [user, { role: "tool", tool_call_id: "call_none", content: "x" }] },
  "messages[1].tool_call_id");

process.exit(failed ? 1 : 0);
