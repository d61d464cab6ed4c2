// Shared helpers of the llama.cpp cross-check scripts: load node-llama-cpp's prebuilt llama.cpp and run
// argmax decoding / next-token probabilities on a GGUF.  Used by greedy.mjs, probs.mjs and batch.mjs.
// Every context uses an F32 KV cache and no flash attention, so llama.cpp attends in float32 as cinfer does
// (its defaults store K/V in F16).
import path from "node:path";
import fs from "node:fs";
import { pathToFileURL } from "node:url";

// NLC_DIR: the directory node-llama-cpp was installed into (npm --prefix); default build/npm.
export async function openLlama() {
    const nlcDir = path.resolve(process.env.NLC_DIR || "build/npm");
    const entry = path.join(nlcDir, "node_modules", "node-llama-cpp", "dist", "index.js");
    if (!fs.existsSync(entry)) throw new Error(`node-llama-cpp not found at ${entry} (run scripts/llamacpp-setup.sh)`);
    const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);
    // build: "never": use the prebuilt binary only, never download or compile llama.cpp.
    return getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
}

async function withContext(llama, modelPath, nTokens, threads, fn) {
    const model = await llama.loadModel({ modelPath: path.resolve(modelPath), gpuLayers: 0 });
    try {
        const context = await model.createContext({
            contextSize: Math.max(64, nTokens + 8),
            threads,
            sequences: 1,
            flashAttention: false,
            experimentalKvCacheKeyType: "F32",
            experimentalKvCacheValueType: "F32",
        });
        try {
            return await fn(model, context.getSequence());
        } finally {
            await context.dispose();
        }
    } finally {
        await model.dispose();
    }
}

const WANT = { generateNext: { probabilities: true } };

// The most probable token of one output (lower id on an exact tie, as an argmax keeping the first maximum does)
// and the runner-up: {token, p, second, p2}.
function top2(out, step) {
    if (!out || !out.next || !out.next.probabilities) throw new Error(`no probabilities at step ${step}`);
    let token = -1, p = -1, second = -1, p2 = -1;
    for (const [tok, q] of out.next.probabilities) {
        if (q > p || (q === p && tok < token)) {
            second = token;
            p2 = p;
            token = tok;
            p = q;
        } else if (q > p2 || (q === p2 && tok < second)) {
            second = tok;
            p2 = q;
        }
    }
    return { token, p, second, p2 };
}

// Argmax decoding of n tokens after the prompt (default: BOS alone; promptText is tokenized by llama.cpp and
// put after BOS).  Each step evaluates one token and takes the most probable next token from llama.cpp's full
// probability list: no sampler, no penalties.  Returns {prompt, ids, margins: [{token, p, second, p2}]}.
export async function greedy(llama, modelPath, { n = 32, promptIds = null, promptText = null, threads = 1 } = {}) {
    const m0 = await llama.loadModel({ modelPath: path.resolve(modelPath), gpuLayers: 0, vocabOnly: true });
    let prompt = promptIds ?? [m0.tokens.bos];
    if (promptText !== null) prompt = [m0.tokens.bos, ...m0.tokenize(promptText)];
    await m0.dispose();
    if (prompt.length === 0 || prompt.some((t) => !Number.isInteger(t) || t < 0))
        throw new Error("bad prompt (does the model have a BOS token?)");
    return withContext(llama, modelPath, prompt.length + n, threads, async (model, seq) => {
        const ids = [], margins = [];
        let res = await seq.controlledEvaluate(prompt.map((t, i) => (i === prompt.length - 1 ? [t, WANT] : t)));
        let best = top2(res[prompt.length - 1], 0);
        for (;;) {
            ids.push(best.token);
            margins.push(best);
            if (ids.length >= n) break;
            res = await seq.controlledEvaluate([[best.token, WANT]]);
            best = top2(res[0], ids.length);
        }
        return { prompt, ids, margins };
    });
}

// Next-token probabilities after every prefix of ids (teacher forcing): [ids.length][n_vocab], where n_vocab is
// one past the largest id in llama.cpp's lists (which cover the whole vocabulary).
export async function probs(llama, modelPath, ids, { threads = 1 } = {}) {
    return withContext(llama, modelPath, ids.length, threads, async (model, seq) => {
        const res = await seq.controlledEvaluate(ids.map((t) => [t, WANT]));
        let nVocab = 0;
        for (let i = 0; i < ids.length; i++) {
            const m = res[i]?.next?.probabilities;
            if (!m) throw new Error(`no probabilities at position ${i}`);
            for (const tok of m.keys()) nVocab = Math.max(nVocab, tok + 1);
        }
        return res.map((r) => {
            const row = new Array(nVocab).fill(0);
            for (const [tok, p] of r.next.probabilities) row[tok] = p;
            return row;
        });
    });
}

export function parseIds(s) {
    const ids = s.split(",").filter((x) => x !== "").map((x) => Number(x));
    if (ids.length === 0 || ids.some((t) => !Number.isInteger(t) || t < 0)) throw new Error(`bad id list ${s}`);
    return ids;
}
