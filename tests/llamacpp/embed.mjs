// Embeddings with llama.cpp through node-llama-cpp, for cross-checking cinfer's /v1/embeddings.
//   node tests/llamacpp/embed.mjs MODEL.gguf IDS_JSON [--threads T]
// IDS_JSON: a JSON list of token-id lists or strings (tokenized by llama.cpp).  Prints one JSON list of vectors (llama.cpp's pooled embedding per
// the file's pooling_type, or the last token's when it has none; not normalized) on stdout.  node-llama-cpp
// puts BOS in front of an input that does not start with it (and EOS after it where the vocabulary asks).
// Env NLC_DIR: where node-llama-cpp was installed (npm --prefix); default build/npm.
import path from "node:path";
import { openLlama } from "./nlc.mjs";

const args = process.argv.slice(2);
let threads = 1;
const pos = [];
for (let i = 0; i < args.length; i++) {
    if (args[i] === "--threads") threads = Number(args[++i]);
    else pos.push(args[i]);
}
if (pos.length !== 2 || !Number.isInteger(threads) || threads <= 0) {
    console.error("usage: embed.mjs MODEL.gguf IDS_JSON [--threads T]");
    process.exit(2);
}
const inputs = JSON.parse(pos[1]);
const llama = await openLlama();
const model = await llama.loadModel({ modelPath: path.resolve(pos[0]), gpuLayers: 0 });
const longest = Math.max(...inputs.map((x) => (typeof x === "string" ? model.tokenize(x).length + 2 : x.length)));
const ctx = await model.createEmbeddingContext({ contextSize: Math.max(64, longest + 8), threads });
const out = [];
for (const ids of inputs) out.push(Array.from((await ctx.getEmbeddingFor(ids)).vector));
console.log(JSON.stringify(out));
await ctx.dispose();
await model.dispose();
await llama.dispose();
