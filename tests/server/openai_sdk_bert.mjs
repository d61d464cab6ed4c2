// A BERT embedding model (`cinfer synth --preset tiny-bert`) through the official OpenAI SDK for Node:
// embeddings.create (strings, float and base64) works; completions.create is a BadRequestError (400) saying
// the model is an embedding model.  Prints PASS/FAIL lines.
//   node tests/server/openai_sdk_bert.mjs SDK_DIR BASE_URL
import path from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, baseURL] = process.argv.slice(2);
const { default: OpenAI } = await import(pathToFileURL(path.join(sdkDir, "node_modules/openai/index.mjs")).href);
const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "unused", maxRetries: 0 });

let failed = 0;
function check(name, ok, why = "") {
  if (ok) console.log(`PASS ${name}`);
  else {
    failed++;
    console.log(`FAIL ${name}: ${why}`);
  }
}

try {
  const model = (await client.models.list()).data[0].id;
  const r = await client.embeddings.create({ model, input: ["Hello, World!", "unbelievable café"] });
  const f = await client.embeddings.create({ model, input: ["Hello, World!"], encoding_format: "float" });
  const v = r.data[0].embedding, w = f.data[0].embedding;
  const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  check("sdk_bert_embeddings", r.data.length === 2 && v.length === 128 && Math.abs(norm - 1) < 1e-5 &&
    r.usage.prompt_tokens > 4, `${r.data.length} vectors of ${v.length}, norm ${norm}`);
  check("sdk_bert_base64_equals_float", v.every((x, i) => Math.abs(x - w[i]) < 1e-6), "vectors differ");
  try {
    await client.completions.create({ model, prompt: "hello", max_tokens: 4 });
    check("sdk_bert_completions_refused", false, "no error");
  } catch (e) {
    check("sdk_bert_completions_refused", e instanceof OpenAI.BadRequestError && e.status === 400 &&
      /embedding model/.test(e.message), `${e && e.constructor && e.constructor.name}: ${e && e.message}`);
  }
} catch (e) {
  check("sdk_bert", false, `threw ${e && e.constructor && e.constructor.name}: ${e && e.message}`);
}
process.exit(failed ? 1 : 0);
