// The web UI in a real browser: headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core) opens
// the page a running `cinfer serve` sends for GET /, chats with the model and watches the dashboard.  Started by
// tests/webui/test_webui.sh, which installs playwright-core and starts the server; prints PASS/FAIL lines.
//   env: CINFER_URL (server), WEBUI_NPM (dir holding node_modules/playwright-core), WEBUI_SHOT (screenshot .png),
//        WEBUI_PROFILE (an empty dir for the browser profile), CINFER_API_KEY (only if the server wants one),
//        CHROMIUM (default /usr/bin/chromium)
import { createRequire } from "node:module";
import path from "node:path";

const URL_BASE = (process.env.CINFER_URL || "").replace(/\/+$/, "");
const require = createRequire(path.resolve(process.env.WEBUI_NPM || ".", "package.json"));
const { chromium } = require("playwright-core");
const KEY = process.env.CINFER_API_KEY || "";

let failed = 0;
const pass = (name, note) => console.log(`PASS webui_${name}${note ? ` (${note})` : ""}`);
const fail = (name, why) => {
    failed++;
    console.log(`FAIL webui_${name}: ${String(why).split("\n")[0]}`);
};
async function step(name, fn) {
    try {
        const note = await fn();
        pass(name, note);
        return true;
    } catch (e) {
        fail(name, e && e.message ? e.message : e);
        return false;
    }
}
function check(cond, why) {
    if (!cond) throw new Error(why);
}

const ctx = await chromium.launchPersistentContext(process.env.WEBUI_PROFILE, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"],
    viewport: { width: 1280, height: 800 },
});
const page = ctx.pages()[0] || (await ctx.newPage());
page.setDefaultTimeout(20000);

const pageErrors = [];
const consoleErrors = [];
const foreign = [];
const origin = new URL(URL_BASE).origin;
page.on("pageerror", (e) => pageErrors.push(e.message));
page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
page.on("request", (r) => {
    const u = r.url();
    if (!u.startsWith(origin + "/") && !u.startsWith("data:") && !u.startsWith("blob:")) foreign.push(u);
});
const chatBodies = [];
page.on("request", (r) => {
    if (r.method() === "POST" && r.url().endsWith("/v1/chat/completions"))
        chatBodies.push({ body: r.postDataJSON(), auth: r.headers()["authorization"] || "" });
});

const lastReply = () => page.locator("#log .msg.assistant").last();
// Sends a message and waits until the reply is no longer streaming; returns the reply's final state.
async function chat(text, { maxTokens, temperature, stopAfterChunks, timeout = 90000 } = {}) {
    if (maxTokens !== undefined) await page.fill("#max-tokens", String(maxTokens));
    if (temperature !== undefined) await page.fill("#temperature", String(temperature));
    const before = await page.locator("#log .msg.assistant").count();
    let atClick = null;
    await page.fill("#prompt", text);
    await page.click("#send");
    await page.waitForFunction((n) => document.querySelectorAll("#log .msg.assistant").length > n, before);
    if (stopAfterChunks) {
        await page.waitForFunction(
            (k) => {
                const m = [...document.querySelectorAll("#log .msg.assistant")].pop();
                return m.dataset.state !== "streaming" || Number(m.dataset.chunks) >= k;
            },
            stopAfterChunks,
            { timeout },
        );
        // Read the count and press Stop in one go inside the page, so no chunk can slip in between.
        atClick = await page.evaluate(() => {
            const b = document.querySelector("#stop");
            const m = [...document.querySelectorAll("#log .msg.assistant")].pop();
            if (b.disabled) return null;
            b.click();
            return Number(m.dataset.chunks);
        });
    }
    await page.waitForFunction(
        () => [...document.querySelectorAll("#log .msg.assistant")].pop().dataset.state !== "streaming",
        null,
        { timeout },
    );
    const m = lastReply();
    return {
        state: await m.getAttribute("data-state"),
        chunks: Number(await m.getAttribute("data-chunks")),
        text: await m.locator(".content").textContent(),
        stats: await m.locator(".stats").textContent(),
        error: (await m.locator(".error").count()) ? await m.locator(".error").textContent() : "",
        chunksAtStop: atClick,
    };
}
const dd = (id) => page.textContent("#" + id);
const isNum = (s) => /^-?[\d,]+(\.\d+)?%?$/.test((s || "").trim());

try {
    await step("page_loads", async () => {
        if (KEY) // stored the way the page stores it, before the page's first requests go out
            await ctx.addInitScript((k) => {
                try {
                    if (localStorage.getItem("cinfer.apiKey") === null) localStorage.setItem("cinfer.apiKey", k);
                } catch (e) { /* about:blank has no storage */ }
            }, KEY);
        const r = await page.goto(URL_BASE + "/", { waitUntil: "load" });
        check(r && r.ok(), `GET / answered ${r && r.status()}`);
        check((await page.title()) === "cinfer", `title is '${await page.title()}'`);
        check(await page.isVisible("#prompt"), "no message box");
        check((await page.inputValue("#api-key")) === KEY, "the stored API key is not in its field");
    });

    await step("sse_parser", () =>
        page.evaluate(() => {
            const { SSEParser } = window.cinferWebui;
            const p = new SSEParser();
            const got = [];
            // Events split at every awkward place: inside a field, between \r and \n, a comment, a multi-line
            // data field, a field without a space after the colon, another field name, no closing blank line.
            const chunks = ["data: {\"a\"", ":1}\r", "\n\r\n: keep-alive\n\nevent: x\ndata: l1\ndata:l2\n",
                "\nid: 7\n\n", "data: [DONE]\n\n", "data: tail"];
            for (const c of chunks) got.push(...p.push(c));
            got.push(...p.end());
            const want = ['{"a":1}', "l1\nl2", "[DONE]", "tail"];
            if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error("got " + JSON.stringify(got));
        }),
    );

    await step("prom_parser", () =>
        page.evaluate(() => {
            const { parseProm, metric } = window.cinferWebui;
            const text = [
                "# HELP cinfer:generation_tokens_total Tokens generated.",
                "# TYPE cinfer:generation_tokens_total counter",
                'cinfer:generation_tokens_total{model_name="a",path="x\\"}{,y"} 100',
                'cinfer:generation_tokens_total{model_name="b"} 23 1700000000000',
                "cinfer:num_requests_running 2",
                "  cinfer:kv_cache_usage_perc{pool=\"0\",} 0.25",
                'cinfer:kv_cache_usage_perc{pool="1"} 0.75',
                "cinfer:prefix_cache_hits 7",
                "cinfer_num_preemptions_total 3",
                'cinfer:ttft_seconds_bucket{le="0.5"} 3',
                'cinfer:ttft_seconds_bucket{le="+Inf"} 4',
                "cinfer:ttft_seconds_sum 1.5e0",
                "cinfer:ttft_seconds_count 4",
                "cinfer:weird NaN",
                "cinfer:inf +Inf",
                "this line is broken {",
                'cinfer:bad{x="unterminated} 5',
                "# EOF",
                "",
            ].join("\n");
            const m = parseProm(text);
            const got = {
                gen: metric(m, "cinfer:generation_tokens_total"),
                genNoSuffix: metric(m, "cinfer:generation_tokens"),
                label: m.get("cinfer:generation_tokens_total")[0].labels.path,
                running: metric(m, "cinfer:num_requests_running"),
                kvMax: metric(m, "cinfer:kv_cache_usage_perc", "max"),
                hitsWithSuffix: metric(m, "cinfer:prefix_cache_hits_total"),
                underscore: metric(m, "cinfer:num_preemptions_total"),
                inf: metric(m, "cinfer:inf"),
                buckets: m.get("cinfer:ttft_seconds_bucket").length,
                sum: metric(m, "cinfer:ttft_seconds_sum"),
                count: metric(m, "cinfer:ttft_seconds_count"),
                weird: metric(m, "cinfer:weird"),
                missing: metric(m, "cinfer:nope"),
                bad: m.has("cinfer:bad") || m.has("this"),
            };
            const want = { gen: 123, genNoSuffix: 123, label: 'x"}{,y', running: 2, kvMax: 0.75, hitsWithSuffix: 7, underscore: 3,
                inf: Infinity, buckets: 2, sum: 1.5, count: 4, weird: null, missing: null, bad: false };
            for (const k of Object.keys(want))
                if (!Object.is(got[k], want[k])) throw new Error(`${k}: got ${got[k]}, want ${want[k]}`);
        }),
    );

    await step("models_listed", async () => {
        await page.waitForFunction(() => document.querySelector("#model").value !== "");
        return "model " + (await page.inputValue("#model"));
    });

    await step("dashboard_live", async () => {
        await page.waitForFunction(() => document.querySelector("#dash-status").textContent === "live");
        // A rate needs two polls.
        await page.waitForFunction(() => /\d/.test(document.querySelector("#m-gen-tps").textContent), null,
            { timeout: 10000 });
        for (const id of ["m-running", "m-waiting", "m-kv", "m-preempt", "m-gen-tps", "m-prompt-tps"])
            check(isNum(await dd(id)), `#${id} shows '${await dd(id)}'`);
        check(/%$/.test(await dd("m-kv")), `KV usage '${await dd("m-kv")}' is not a percentage`);
    });

    // Record every length the reply's text takes while it streams.
    await page.evaluate(() => {
        window.__lens = [];
        new MutationObserver(() => {
            const m = [...document.querySelectorAll("#log .msg.assistant")].pop();
            if (!m) return;
            const n = m.querySelector(".content").textContent.length;
            const a = window.__lens;
            if (n && a[a.length - 1] !== n) a.push(n);
        }).observe(document.querySelector("#log"), { subtree: true, childList: true, characterData: true });
    });
    const prompt1 = "Once upon a time";
    let r1 = null;
    await step("chat_streams", async () => {
        r1 = await chat(prompt1, { maxTokens: 120, temperature: 0.8 });
        check(r1.state === "done", `reply ended '${r1.state}': ${r1.error}`);
        check(r1.text.trim().length > 0, "empty reply");
        const lens = await page.evaluate(() => window.__lens);
        check(r1.chunks >= 2, `only ${r1.chunks} content chunk(s) arrived`);
        // How many separate renders the reply took depends on timing (a fast model may deliver every chunk
        // within one frame), so it is reported, not asserted: tests are not timed.
        console.log(`NOTE webui: reply rendered in ${lens.length} step(s)`);
        for (let i = 1; i < lens.length; i++) check(lens[i] > lens[i - 1], `text shrank: ${lens.join(",")}`);
        check(lens[lens.length - 1] === r1.text.length, "last recorded length is not the final text's");
        return `${r1.chunks} chunks, ${lens.length} visible steps, ${r1.text.length} chars`;
    });

    await step("chat_request", () => {
        check(chatBodies.length === 1, `${chatBodies.length} chat requests sent`);
        const b = chatBodies[0].body;
        check(b.stream === true, "stream is not true");
        check(b.max_tokens === 120 && b.temperature === 0.8, `max_tokens ${b.max_tokens}, temperature ${b.temperature}`);
        check(typeof b.model === "string" && b.model.length > 0, "no model");
        check(b.messages.length === 1 && b.messages[0].role === "user" && b.messages[0].content === prompt1,
            "messages " + JSON.stringify(b.messages));
        check(chatBodies[0].auth === (KEY ? "Bearer " + KEY : ""), "Authorization " + chatBodies[0].auth);
    });

    await step("chat_stats", () => {
        check(r1 && /TTFT \d[\d,]* ms/.test(r1.stats), `stats '${r1 && r1.stats}' lack TTFT`);
        check(/[\d.]+ tok\/s/.test(r1.stats), `stats '${r1.stats}' lack tok/s`);
        check(/\d+ tokens?/.test(r1.stats), `stats '${r1.stats}' lack a token count`);
        return r1.stats;
    });

    await step("dashboard_counts_tokens", async () => {
        await page.waitForFunction(() => /[1-9]/.test(document.querySelector("#m-gen-total").textContent), null,
            { timeout: 5000 });
        return `gen ${await dd("m-gen-total")}, prompt ${await dd("m-prompt-total")}`;
    });

    await step("sparkline_drawn", async () => {
        const painted = await page.evaluate(() => {
            const c = document.querySelector("#spark");
            const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 3; i < d.length; i += 4) if (d[i]) n++;
            return n;
        });
        check(painted > 0, "the tokens/s sparkline is blank");
    });

    await step("screenshot", async () => {
        await page.screenshot({ path: process.env.WEBUI_SHOT });
        return process.env.WEBUI_SHOT;
    });

    await step("chat_history_and_stop", async () => {
        const r = await chat("Tell me more about it", { maxTokens: 120, stopAfterChunks: 1 });
        const b = chatBodies[chatBodies.length - 1].body;
        check(b.messages.length === 3 && b.messages[1].role === "assistant" && b.messages[1].content === r1.text,
            "the second request does not carry the first turn: " + JSON.stringify(b.messages).slice(0, 200));
        check(r.state === "stopped" || r.state === "done", `reply ended '${r.state}': ${r.error}`);
        if (r.state === "stopped") check(/stopped/.test(r.stats), `stats '${r.stats}' do not say stopped`);
        // A reply may end by itself around the click, but not stream on well past it.
        if (r.chunksAtStop !== null)
            check(r.state === "stopped" || r.chunks <= r.chunksAtStop + 8,
                `Stop was pressed after ${r.chunksAtStop} chunks and the reply went on to ${r.chunks}`);
        check(await page.isEnabled("#send"), "Send stays disabled");
        check(!(await page.isEnabled("#stop")), "Stop stays enabled");
        // The server must let go of an aborted request (and keep serving).
        await page.waitForFunction(() => document.querySelector("#m-running").textContent === "0", null,
            { timeout: 15000 });
        if (r.state === "stopped") return `stopped after ${r.chunks} chunk(s)`;
        return r.chunksAtStop === null ? "finished before Stop could be pressed" : "finished as Stop was pressed";
    });

    await step("no_page_errors", () => {
        check(!pageErrors.length, "uncaught: " + pageErrors.join(" | "));
        check(!consoleErrors.length, "console: " + consoleErrors.join(" | "));
    });
    await step("no_foreign_requests", () => check(!foreign.length, "requested " + foreign.join(", ")));

    if (KEY)
        await step("chat_wrong_key_shown", async () => {
            await page.fill("#api-key", "not-" + KEY);
            await page.press("#api-key", "Tab");
            const r = await chat("who am I?");
            await page.fill("#api-key", KEY);
            await page.press("#api-key", "Tab");
            await page.fill("#prompt", "");
            check(r.state === "error" && /HTTP 401: \S/.test(r.error), `state '${r.state}', error '${r.error}'`);
            return r.error;
        });

    // The error paths, with the chat endpoint answered by the test itself.
    await step("chat_error_shown", async () => {
        await page.route("**/v1/chat/completions", (route) =>
            route.fulfill({ status: 401, contentType: "application/json",
                body: JSON.stringify({ error: { message: "Invalid API key given", type: "invalid_request_error" } }) }));
        const r = await chat("hello?");
        await page.unrouteAll();
        check(r.state === "error", `state '${r.state}'`);
        check(/HTTP 401/.test(r.error) && /Invalid API key given/.test(r.error), `error shown: '${r.error}'`);
        check((await page.inputValue("#prompt")) === "hello?", "the failed message was not put back");
    });

    await step("chat_stream_error_shown", async () => {
        const ev = (o) => "data: " + JSON.stringify(o) + "\n\n";
        await page.route("**/v1/chat/completions", (route) =>
            route.fulfill({ status: 200, contentType: "text/event-stream",
                body: ev({ choices: [{ index: 0, delta: { content: "partial" } }] }) +
                    ev({ error: { message: "engine overloaded", type: "server_error" } }) }));
        await page.fill("#prompt", "");
        const r = await chat("again");
        await page.unrouteAll();
        check(r.state === "error" && /engine overloaded/.test(r.error), `state '${r.state}', error '${r.error}'`);
        check(r.text === "partial", `text '${r.text}'`);
    });

    // Reasoning and tool calls, streamed in OpenAI's delta shapes: the reasoning in a collapsed block above
    // the reply, each call (its arguments arriving in pieces) below it, and the call kept in the history the
    // next request sends.
    await step("chat_reasoning_and_tool_calls_shown", async () => {
        const ev = (d, finish = null) => "data: " + JSON.stringify({ choices: [{ index: 0, delta: d, finish_reason: finish }] }) + "\n\n";
        let second = null;
        await page.route("**/v1/chat/completions", (route) => {
            if (second === null) second = false;
            else second = JSON.parse(route.request().postData());
            route.fulfill({ status: 200, contentType: "text/event-stream",
                body: ev({ role: "assistant", content: "" }) + ev({ reasoning_content: "The user wants" }) +
                    ev({ reasoning_content: " the weather." }) +
                    ev({ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "get_weather", arguments: "" } }] }) +
                    ev({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }) +
                    ev({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }) + ev({}, "tool_calls") +
                    "data: [DONE]\n\n" });
        });
        await page.fill("#prompt", "");
        const r = await chat("weather?");
        const m = lastReply();
        const think = (await m.locator("details").count()) ? await m.locator("details > div").textContent() : "";
        const open = await m.locator("details").evaluate((e) => e.open).catch(() => null);
        const calls = (await m.locator(".calls").count()) ? await m.locator(".calls").textContent() : "";
        check(r.state === "done" && r.text === "", `state '${r.state}', text '${r.text}'`);
        check(think === "The user wants the weather." && open === false, `reasoning '${think}', open ${open}`);
        check(calls.includes('get_weather({"city":"Paris"})'), `calls '${calls}'`);
        check(/tool_calls/.test(r.stats), `stats '${r.stats}'`);
        await chat("and tomorrow?");
        await page.unrouteAll();
        const prev = second && second.messages[second.messages.length - 2];
        check(prev && prev.role === "assistant" && prev.tool_calls && prev.tool_calls[0].function.name === "get_weather" &&
            prev.tool_calls[0].function.arguments === '{"city":"Paris"}', JSON.stringify(second && second.messages));
    });

    await step("api_key_sent_and_stored", async () => {
        let auth = null;
        await page.route("**/v1/chat/completions", (route) => {
            auth = route.request().headers()["authorization"];
            route.fulfill({ status: 200, contentType: "text/event-stream",
                body: 'data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n' });
        });
        await page.fill("#api-key", "sk-webui-test");
        await page.press("#api-key", "Tab");
        await page.fill("#prompt", "");
        const r = await chat("key?");
        await page.unrouteAll();
        check(auth === "Bearer sk-webui-test", `Authorization '${auth}'`);
        check(r.state === "done" && r.text === "ok", `state '${r.state}', text '${r.text}'`);
        await page.reload({ waitUntil: "load" });
        const kept = await page.inputValue("#api-key");
        await page.fill("#api-key", KEY);
        await page.press("#api-key", "Tab");
        check(kept === "sk-webui-test", `after a reload the key field holds '${kept}'`);
    });
} catch (e) {
    fail("harness", e && e.stack ? e.stack : e);
} finally {
    await ctx.close();
}
process.exit(failed ? 1 : 0);
