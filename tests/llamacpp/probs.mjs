// Next-token probabilities from llama.cpp (through node-llama-cpp) at every position of a token sequence
// (teacher forcing), for checking the numpy reference and cinfer against llama.cpp without depending on greedy
// near-ties.
//   node tests/llamacpp/probs.mjs MODEL.gguf --ids 1,2,3 [--threads T]
// Prints JSON {"probs": [[p_0, ..., p_{V-1}] for each position]}: probs[i] is llama.cpp's softmax of the logits
// after tokens 0..i.  Env NLC_DIR: where node-llama-cpp was installed (npm --prefix); default build/npm.
import { openLlama, parseIds, probs } from "./nlc.mjs";

function usage(msg) {
    console.error(`probs.mjs: ${msg}\nusage: probs.mjs MODEL.gguf --ids 1,2,3 [--threads T]`);
    process.exit(2);
}

const args = process.argv.slice(2);
let modelPath = null, ids = null, threads = 1;
try {
    for (let i = 0; i < args.length; i++) {
        const a = args[i];
        if (a === "--ids") ids = parseIds(args[++i] ?? "");
        else if (a === "--threads") threads = Number(args[++i]);
        else if (a.startsWith("-")) usage(`unknown option ${a}`);
        else if (modelPath === null) modelPath = a;
        else usage("more than one model given");
    }
} catch (e) {
    usage(e.message);
}
if (modelPath === null || ids === null) usage("need a model and --ids");

const llama = await openLlama();
process.stdout.write(JSON.stringify({ probs: await probs(llama, modelPath, ids, { threads }) }) + "\n");
await llama.dispose();
