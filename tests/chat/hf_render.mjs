// Renders chat templates with @huggingface/jinja (the reference of tests/chat/templates_check.py).
//   node hf_render.mjs NPM_DIR JOBS.json OUT.json
// JOBS.json: {"templates": {name: source}, "contexts": [context, ...]}; OUT.json: {name: [{"ok": true,
// "text": ...} | {"ok": false, "error": ...}, ...]} in the contexts' order.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [npmDir, jobsPath, outPath] = process.argv.slice(2);
const entry = path.join(npmDir, "node_modules", "@huggingface", "jinja", "dist", "index.js");
const { Template } = await import(pathToFileURL(entry).href);
const jobs = JSON.parse(fs.readFileSync(jobsPath, "utf8"));
const out = {};
for (const [name, src] of Object.entries(jobs.templates)) {
    let tmpl = null, parseError = null;
    try {
        tmpl = new Template(src);
    } catch (e) {
        parseError = String(e && e.message ? e.message : e);
    }
    out[name] = jobs.contexts.map((ctx) => {
        if (!tmpl) return { ok: false, error: "parse: " + parseError };
        try {
            // a deep copy: a template must not see another render's changes
            return { ok: true, text: tmpl.render(JSON.parse(JSON.stringify(ctx))) };
        } catch (e) {
            return { ok: false, error: String(e && e.message ? e.message : e) };
        }
    });
}
fs.writeFileSync(outPath, JSON.stringify(out));
