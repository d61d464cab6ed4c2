// Runs many llama.cpp jobs in one process (loading llama.cpp once), for tests/llamacpp/llamacpp_check.py.
//   node tests/llamacpp/batch.mjs JOBS.json
// JOBS.json: [{"model": PATH, "kind": "probs", "ids": [...]} |
//             {"model": PATH, "kind": "greedy", "n": N, "prompt_ids": [...] | "prompt_text": TEXT | neither}]
// Prints one JSON array with, per job, {"probs": ...} or {"prompt": [...], "ids": [...], "margins": [...]}
// (as nlc.mjs returns them), or {"error": MESSAGE} if that job failed.
import fs from "node:fs";
import { greedy, openLlama, probs } from "./nlc.mjs";

if (process.argv.length !== 3) {
    console.error("usage: batch.mjs JOBS.json");
    process.exit(2);
}
const jobs = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const llama = await openLlama();
const results = [];
for (const job of jobs) {
    try {
        if (job.kind === "probs") results.push({ probs: await probs(llama, job.model, job.ids) });
        else if (job.kind === "greedy")
            results.push(
                await greedy(llama, job.model, {
                    n: job.n ?? 32,
                    promptIds: job.prompt_ids ?? null,
                    promptText: job.prompt_text ?? null,
                })
            );
        else throw new Error(`unknown job kind ${job.kind}`);
    } catch (e) {
        results.push({ error: String(e && e.message ? e.message : e) });
    }
}
process.stdout.write(JSON.stringify(results) + "\n");
await llama.dispose();
