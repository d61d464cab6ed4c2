// Greedy (argmax) decoding with llama.cpp through node-llama-cpp, for cross-checking cinfer.
//   node tests/llamacpp/greedy.mjs MODEL.gguf [-n N] [--prompt-ids 1,2,3 | --prompt-text TEXT] [--threads T]
//                                   [--margins]
// Prints the N generated token ids space-separated on one line of stdout.  The prompt defaults to the model's
// BOS token alone; --prompt-text is tokenized by llama.cpp and put after BOS (its ids go to stderr).
// --margins also prints, per step on stderr, the top two tokens and probabilities (a near tie explains a
// disagreement).  Env NLC_DIR: where node-llama-cpp was installed (npm --prefix); default build/npm.
import { greedy, openLlama, parseIds } from "./nlc.mjs";

function usage(msg) {
    console.error(`greedy.mjs: ${msg}
usage: greedy.mjs MODEL.gguf [-n N] [--prompt-ids 1,2,3 | --prompt-text TEXT] [--threads T] [--margins]`);
    process.exit(2);
}

const args = process.argv.slice(2);
let modelPath = null, n = 32, promptIds = null, promptText = null, threads = 1, margins = false;
try {
    for (let i = 0; i < args.length; i++) {
        const a = args[i];
        if (a === "-n") n = Number(args[++i]);
        else if (a === "--prompt-ids") promptIds = parseIds(args[++i] ?? "");
        else if (a === "--prompt-text") promptText = args[++i];
        else if (a === "--threads") threads = Number(args[++i]);
        else if (a === "--margins") margins = true;
        else if (a.startsWith("-")) usage(`unknown option ${a}`);
        else if (modelPath === null) modelPath = a;
        else usage("more than one model given");
    }
} catch (e) {
    usage(e.message);
}
if (modelPath === null) usage("no model given");
if (!Number.isInteger(n) || n <= 0) usage("bad -n");
if (!Number.isInteger(threads) || threads <= 0) usage("bad --threads");
if (promptIds !== null && promptText !== null) usage("give --prompt-ids or --prompt-text, not both");
if (promptText === "") usage("empty --prompt-text");

const llama = await openLlama();
const r = await greedy(llama, modelPath, { n, promptIds, promptText, threads });
if (promptText !== null) console.error(`prompt ids: ${r.prompt.join(" ")}`);
if (margins)
    r.margins.forEach((m, i) => console.error(`step ${i}: token ${m.token} p=${m.p} second ${m.second} p=${m.p2}`));
console.log(r.ids.join(" "));
await llama.dispose();
