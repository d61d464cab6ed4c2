// Tool-call latency through the official OpenAI SDK for Node (bench/chat.py, part "tools"): N non-streamed
// chat requests with tool_choice "required" and N naming the second function, after one warm-up each, timed
// around client.chat.completions.create.  A call counts as parsed when the SDK's message has a tool call of an
// allowed function whose arguments parse as JSON and hold every required parameter with an allowed value.
//   node bench/chat_tools.mjs SDK_DIR BASE_URL SPEC.json      SPEC: {"tools", "messages", "n"}
// Prints a JSON array: [{"choice", "n", "ok", "median_ms", "min_ms", "completion_tokens"}, ...].
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, baseURL, specPath] = process.argv.slice(2);
const { default: OpenAI } = await import(pathToFileURL(path.join(sdkDir, "node_modules/openai/index.mjs")).href);
const spec = JSON.parse(fs.readFileSync(specPath, "utf8"));
const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "none", maxRetries: 0, timeout: 600000 });

function valid(call, allowed) {
  const tool = spec.tools.find((t) => t.function.name === call.function.name);
  if (!tool || !allowed.includes(call.function.name)) return false;
  let args;
  try {
    args = JSON.parse(call.function.arguments);
  } catch {
    return false;
  }
  const p = tool.function.parameters;
  return p.required.every((k) => k in args) &&
    Object.entries(args).every(([k, v]) => p.properties[k] && p.properties[k].enum.includes(v));
}

const model = (await client.models.list()).data[0].id; // the served name
const names = spec.tools.map((t) => t.function.name);
const cases = [
  ["required", "required", names],
  ["named", { type: "function", function: { name: names[1] } }, [names[1]]],
];
const rows = [];
for (const [label, choice, allowed] of cases) {
  const times = [];
  let ok = 0, tokens = 0;
  for (let i = 0; i <= spec.n; i++) {
    const t0 = performance.now();
    const r = await client.chat.completions.create({
      model, messages: spec.messages, tools: spec.tools, tool_choice: choice, temperature: 0,
      max_tokens: 192, seed: 1,
    });
    const ms = performance.now() - t0;
    if (i === 0) continue; // warm-up
    times.push(ms);
    const calls = r.choices[0].message.tool_calls || [];
    if (calls.length > 0 && calls.every((c) => valid(c, allowed))) ok++;
    tokens = r.usage ? r.usage.completion_tokens : tokens;
  }
  times.sort((a, b) => a - b);
  rows.push({ choice: label, n: times.length, ok, median_ms: times[Math.floor(times.length / 2)],
    min_ms: times[0], completion_tokens: tokens });
}
console.log(JSON.stringify(rows));
