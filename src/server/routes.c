/* The endpoints of `cinfer serve`.  See routes.h.
 *
 * A generation request becomes a struct gen: one engine submission per prompt (n samples each) and one
 * choice per (prompt, sample).  The handler submits everything before it answers, so a request that can
 * never run (context, pool, queue) gets a proper HTTP error; then it hands the gen to the HTTP layer either
 * as a streaming body whose fill callback turns engine events into SSE chunks, or as a deferred answer
 * whose poll callback assembles one JSON body when every choice is done.  Neither ever waits: the streams
 * wake the connection (http_waker_wake) whenever the engine has an event, and both look at the client
 * each time, so a client that goes away cancels its request (and the engine frees its KV blocks) within a
 * step or two.  Whatever happens, gen_free releases the streams, which cancels any sample still running. */
#include "server/routes.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/base64.h"
#include "core/clock.h"
#include "core/mem.h"
#include "server/anthropic.h"
#include "server/chat_prompt.h"
#include "server/openai.h"
#include "server/sse.h"
#include "server/tool_parse.h"
#include "server/webui.h"

// The page is linked in only when the build found src/server/webui.html: without it, / answers 404.
#pragma weak cinfer_webui_html
#pragma weak cinfer_webui_html_len

struct routes {
    atomic_bool ready;
    const struct cinfer_model *m;
    struct cinfer_engine *e;
    char *name;
    const char *tmpl;                    // the chat template's name (static storage)
    const struct cinfer_template *jinja; // the Jinja chat template, when there is one (the caller's)
    int max_requests, max_seqs;
    int n_ctx, n_vocab;
    int max_tokens_cap;           // the most tokens one sequence can hold: min(context, KV pool)
    enum tool_format tool_format; // how the model writes tool calls (from the template's text)
    bool thinks;                  // the template writes <think> blocks
    bool object_arguments; // the template reads tool-call arguments as objects (object_arguments_probe)
    bool reasoning_none;   // --reasoning-format none
    atomic_int n_inflight;
    atomic_uint_fast64_t next_id;
    uint64_t sig_key[2]; // the secret key of thinking blocks' signatures (anthropic_signature), random
};

/* ---- small helpers ------------------------------------------------------------------------------------ */

static const char oom_body[] =
    "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
// A stream's end when out of memory: whole events are queued or none (sse.h), so this always follows one.
static const char oom_events[] = "data: {\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                 "\"param\":null,\"code\":null}}\n\ndata: [DONE]\n\n";

// The same for /v1/messages (anthropic.h).
static const char anthropic_oom_body[] =
    "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"out of memory\"}}";
static const char anthropic_oom_events[] =
    "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"out of "
    "memory\"}}\n\n";

/* An error body, OpenAI's or (anthropic) Anthropic's. */
static void respond_api_error(struct http_response *res, const struct openai_error *e, bool anthropic) {
    res->status = e->status;
    res->content_type = "application/json";
    res->body = anthropic ? anthropic_error_json(e, &res->body_len) : openai_error_json(e, &res->body_len);
    if (!res->body) {
        res->status = 500;
        res->static_body = anthropic ? anthropic_oom_body : oom_body;
    }
    if (e->status == 429 || e->status == 503)
        res->retry_after_s = 1;
}

static void respond_error(struct http_response *res, const struct openai_error *e) {
    respond_api_error(res, e, false);
}

static void respond_status(struct http_response *res, enum cinfer_status s, const char *message) {
    struct openai_error e;
    openai_error_from_status(&e, s, message);
    respond_error(res, &e);
}

/* Takes obj. */
static void respond_json(struct http_response *res, cJSON *obj) {
    char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!text) {
        res->status = 500;
        res->static_body = oom_body;
        return;
    }
    res->status = 200;
    res->body = text;
    res->body_len = strlen(text);
}

static bool check_ready(struct routes *r, struct http_response *res) {
    if (atomic_load(&r->ready))
        return true;
    struct openai_error e;
    openai_error_set(&e, 503, NULL, "model_loading", "the model is loading");
    respond_error(res, &e);
    return false;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The text token id adds after token prev (-1: none), as the detokenizer renders it in a sequence: decoding
 * a token alone would show the leading space a SentencePiece vocabulary drops at the start of a text, or
 * drop one it keeps inside it.  Special tokens are rendered ("</s>"). */
static char *token_text(const struct cinfer_model *m, cinfer_token prev, cinfer_token id, size_t *len) {
    cinfer_token two[2] = {prev, id};
    int first = prev >= 0 ? 0 : 1;
    char *head = NULL, *both = NULL, *out = NULL;
    size_t n_head = 0, n_both = 0;
    if ((first == 1 || cinfer_detokenize(m, two, 1, true, &head, &n_head, NULL) == CINFER_OK) &&
        cinfer_detokenize(m, two + first, 2 - first, true, &both, &n_both, NULL) == CINFER_OK &&
        n_both >= n_head && (out = ci_malloc(n_both - n_head + 1))) {
        *len = n_both - n_head;
        memcpy(out, both + n_head, *len);
        out[*len] = '\0';
    }
    cinfer_free(head);
    cinfer_free(both);
    return out;
}

/* ---- a generation request ----------------------------------------------------------------------------- */

struct choice {
    int stream;  // index into gen.streams
    int sample;  // sample of that stream
    bool done;   // its final event was seen
    bool failed; // it ended in an error event
    const char *finish;
    char *text; // [cap] non-streaming: the text so far
    size_t len, cap;
    long long n_tokens;
    cinfer_token last; // the sequence's last token (the prompt's, then the sampled ones): logprobs' context
    long long text_offset; // bytes of the choice's text so far (echo included)
    cJSON *logprobs;       // non-streaming: every token's entry
    char error[256];
    // parsed answers (gen.parse), streaming: how much of the partial result was sent
    size_t sent_content, sent_reasoning;
    int sent_calls;
    // /v1/messages streaming: the content block now open (-1: none yet) and whether it is a text block
    int a_block;
    bool a_in_text;
    bool a_in_think; // the open block is the thinking block (its signature not sent yet)
};

struct gen {
    struct routes *r;
    struct openai_request q;
    bool chat, streaming;
    bool parse;                     // chat: the text is split into content, reasoning and tool calls
    struct tool_parse_opts popts;   // how (partial is set per call)
    uint64_t id_bits;               // the request's random bits (call ids)
    struct cinfer_stream **streams; // [n_streams] one per prompt
    int n_streams;
    char **echo; // [n_streams] the prompt's text (completions with echo), or NULL
    long long prompt_tokens;
    struct choice *ch; // [n_ch]
    int n_ch;
    int n_done;
    bool any_failed;
    char id[48];
    long long created;
    struct sse_buf out;
    size_t oom_off;           // streaming, out of memory: bytes of oom_events sent (after out's)
    bool oom;                 // streaming: out of memory, the stream ends with oom_events
    bool begun, ended;        // streaming: the opening chunks were written; [DONE] was written
    bool counted;             // holds one of the max_requests slots
    struct http_waker *waker; // the engine wakes the connection through it when an event is ready
    // POST /v1/messages (anthropic.h): the request (q moved into g->q), answered in Anthropic's shapes;
    // with stop strings, the sampled tokens, to tell which stop string ended the generation.
    bool anthropic;
    struct anthropic_request a;
    cinfer_token *out_ids; // [n_out_ids] the prompt's last token, then the sampled ones
    int n_out_ids, cap_out_ids;
};

static void gen_free(void *ctx) {
    struct gen *g = ctx;
    if (!g)
        return;
    for (int i = 0; g->streams && i < g->n_streams; i++) // streams is NULL when its allocation failed
        cinfer_stream_release(g->streams[i]);            // detaches the waker first
    http_waker_release(g->waker);
    for (int i = 0; g->echo && i < g->n_streams; i++)
        ci_free(g->echo[i]);
    for (int i = 0; g->ch && i < g->n_ch; i++) {
        ci_free(g->ch[i].text);
        cJSON_Delete(g->ch[i].logprobs);
    }
    ci_free(g->streams);
    ci_free(g->echo);
    ci_free(g->ch);
    sse_buf_deinit(&g->out);
    if (g->counted)
        atomic_fetch_sub(&g->r->n_inflight, 1);
    openai_request_deinit(&g->q);
    anthropic_request_deinit(&g->a);
    ci_free(g->out_ids);
    ci_free(g);
}

static void gen_cancel(struct gen *g) {
    for (int i = 0; i < g->n_streams; i++)
        if (g->streams[i])
            cinfer_stream_cancel(g->streams[i]);
}

static bool text_append(struct choice *c, const char *s, size_t n) {
    size_t need;
    if (!ci_add_size(c->len, n, &need) || !ci_add_size(need, 1, &need))
        return false;
    if (need > c->cap) {
        size_t cap = c->cap ? c->cap : 256;
        while (cap < need)
            cap *= 2;
        char *grown = ci_realloc(c->text, cap);
        if (!grown)
            return false;
        c->text = grown;
        c->cap = cap;
    }
    memcpy(c->text + c->len, s, n);
    c->len += n;
    c->text[c->len] = '\0';
    return true;
}

/* /v1/messages: keeps a sampled token, to find the stop string that ended the generation.  false: out of
 * memory. */
static bool anthropic_keep_token(struct gen *g, cinfer_token t) {
    if (g->n_out_ids == g->cap_out_ids) {
        int cap = g->cap_out_ids ? g->cap_out_ids * 2 : 64;
        cinfer_token *grown = ci_realloc(g->out_ids, (size_t)cap * sizeof *grown);
        if (!grown)
            return false;
        g->out_ids = grown;
        g->cap_out_ids = cap;
    }
    g->out_ids[g->n_out_ids++] = t;
    return true;
}

/* /v1/messages: the finished answer's id, stop_reason, stop_sequence and usage (tool_use: its content holds
 * a tool_use block).  A "stop" finish with stop strings given is a stop sequence when one of them is in the
 * generated tokens' text (the engine streams none of it), else the end of the model's turn.  false: out of
 * memory. */
static bool gen_anthropic_info(struct gen *g, bool tool_use, struct anthropic_info *info) {
    const struct choice *c = &g->ch[0];
    int stop = -1;
    if (c->finish && strcmp(c->finish, "stop") == 0 && g->q.n_stop && g->n_out_ids > 1) {
        // After the prompt's last token, as the text was streamed (token_text: a SentencePiece vocabulary
        // drops a leading space at the start of a text).
        char *head = NULL, *raw = NULL;
        size_t n_head = 0, n = 0;
        bool ok = cinfer_detokenize(g->r->m, g->out_ids, 1, true, &head, &n_head, NULL) == CINFER_OK &&
                  cinfer_detokenize(g->r->m, g->out_ids, g->n_out_ids, true, &raw, &n, NULL) == CINFER_OK &&
                  n >= n_head;
        if (ok)
            stop = anthropic_matched_stop(raw + n_head, n - n_head, g->q.stop, g->q.n_stop);
        cinfer_free(head);
        cinfer_free(raw);
        if (!ok)
            return false;
    }
    *info = (struct anthropic_info){g->id,
                                    g->r->name,
                                    anthropic_stop_reason(c->finish, stop >= 0, tool_use),
                                    stop >= 0 ? g->q.stop[stop] : NULL,
                                    g->prompt_tokens,
                                    c->n_tokens};
    return true;
}

static int answer_calls(const struct gen *g, const struct tool_parse_result *p);

/* /v1/messages: the message object, its content blocks from the generated text (anthropic_output_blocks). */
static cJSON *anthropic_response(struct gen *g) {
    const struct choice *c = &g->ch[0];
    struct anthropic_block *b = NULL;
    int n = 0;
    bool tool_use = false;
    cJSON *o = NULL;
    struct anthropic_info info;
    bool made;
    if (g->parse) { // the request offers tools: the answer split by the model's tool-call format
        struct tool_parse_result p;
        if (tool_parse(&g->popts, c->text ? c->text : "", c->len, &p) != CI_OK)
            return NULL;
        made = anthropic_blocks_from_parse(&p, answer_calls(g, &p),
                                           g->a.thinking == ANTHROPIC_THINKING_ENABLED, g->id_bits, &b, &n);
        for (int i = 0; made && i < n; i++)
            if (b[i].type == ANTHROPIC_BLOCK_THINKING)
                anthropic_signature(g->r->sig_key, b[i].text, b[i].len, b[i].signature);
        tool_parse_result_free(&p);
    } else {
        made = anthropic_output_blocks(&g->a, c->text ? c->text : "", c->len, &b, &n);
    }
    if (made) {
        for (int i = 0; i < n; i++)
            tool_use = tool_use || b[i].type == ANTHROPIC_BLOCK_TOOL_USE;
        if (gen_anthropic_info(g, tool_use, &info))
            o = anthropic_message(&info, b, n);
    }
    anthropic_blocks_free(b, n);
    return o;
}

static struct sse_head gen_head(const struct gen *g, bool chunk) {
    return (struct sse_head){
        g->id, g->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion",
        g->created, g->r->name};
}

/* A logprobs object holding one TOKEN event's entry (the sampled token and its alternatives). */
static bool add_logprobs(struct gen *g, struct choice *c, const struct cinfer_event *ev, cJSON *lp) {
    const struct cinfer_model *m = g->r->m;
    struct sse_top tok = {NULL, 0, ev->logprob};
    struct sse_top top[OPENAI_MAX_LOGPROBS];
    int n_top = ev->n_top < OPENAI_MAX_LOGPROBS ? ev->n_top : OPENAI_MAX_LOGPROBS;
    char *texts[OPENAI_MAX_LOGPROBS + 1] = {0};
    bool ok = (texts[0] = token_text(m, c->last, ev->token, &tok.len)) != NULL;
    tok.text = texts[0];
    for (int i = 0; ok && i < n_top; i++) {
        top[i].logprob = ev->top_logprobs[i];
        ok = (texts[i + 1] = token_text(m, c->last, ev->top_tokens[i], &top[i].len)) != NULL;
        top[i].text = texts[i + 1];
    }
    if (ok)
        ok = g->chat ? sse_chat_logprobs_add(lp, &tok, top, n_top)
                     : sse_completion_logprobs_add(lp, &tok, top, n_top, c->text_offset);
    for (int i = 0; i <= n_top; i++)
        ci_free(texts[i]);
    return ok;
}

/* Streaming: one chunk with choice index i. */
static bool emit_chunk(struct gen *g, int i, const char *text, size_t len, bool role, cJSON *logprobs,
                       const char *finish) {
    struct sse_head h = gen_head(g, true);
    cJSON *obj = sse_object(&h);
    cJSON *arr = obj ? cJSON_AddArrayToObject(obj, "choices") : NULL;
    cJSON *choice =
        sse_choice(g->chat ? SSE_CHAT_DELTA : SSE_COMPLETION, i, text, len, role, logprobs, finish);
    bool ok = arr && choice && cJSON_AddItemToArray(arr, choice);
    if (!ok && choice)
        cJSON_Delete(choice);
    ok = ok && sse_buf_event(&g->out, obj);
    cJSON_Delete(obj);
    return ok;
}

static bool emit_error(struct gen *g, const char *message) {
    struct openai_error e;
    openai_error_set(&e, 500, NULL, NULL, "%s", message);
    if (g->anthropic)
        return anthropic_stream_error(&g->out, &e);
    char *json = openai_error_json(&e, NULL);
    bool ok = json && sse_buf_data(&g->out, json, strlen(json));
    ci_free(json);
    return ok;
}

/* ---- parsed answers: content, reasoning and tool calls ------------------------------------------------ */

/* The calls an answer reports: all, or the first alone when the request set parallel_tool_calls false. */
static int answer_calls(const struct gen *g, const struct tool_parse_result *p) {
    return !g->q.parallel_tool_calls && p->n_calls > 1 ? 1 : p->n_calls;
}

/* {"index": k, "id", "type": "function", "function": {"name", "arguments"}} (index only in a delta; with
 * head false: {"index", "function": {"arguments"}}, a delta's later piece). */
static cJSON *call_object(const struct gen *g, int choice, int k, const struct tool_call *c, bool delta,
                          bool head, const char *args) {
    char id[30];
    tool_call_id(g->id_bits + (uint64_t)choice * 0x9E3779B97F4A7C15ull, k, id);
    cJSON *o = cJSON_CreateObject(), *fn = NULL;
    bool ok = o && (!delta || cJSON_AddNumberToObject(o, "index", k));
    if (ok && head)
        ok = cJSON_AddStringToObject(o, "id", id) && cJSON_AddStringToObject(o, "type", "function");
    ok = ok && (fn = cJSON_AddObjectToObject(o, "function")) != NULL;
    if (ok && head)
        ok = sse_add_string(fn, "name", c->name, strlen(c->name));
    ok = ok && sse_add_string(fn, "arguments", args, strlen(args));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Adds reasoning_content and tool_calls to a message, and makes its content null when it is empty and there
 * are calls (OpenAI's shape). */
static bool message_add_parsed(const struct gen *g, int choice, cJSON *msg,
                               const struct tool_parse_result *p) {
    int n = answer_calls(g, p);
    if (n > 0 && p->content_len == 0) {
        cJSON *null = cJSON_CreateNull();
        if (!null || !cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", null)) {
            cJSON_Delete(null);
            return false;
        }
    }
    if (p->reasoning_len > 0 && !sse_add_string(msg, "reasoning_content", p->reasoning, p->reasoning_len))
        return false;
    if (n == 0)
        return true;
    cJSON *arr = cJSON_AddArrayToObject(msg, "tool_calls");
    for (int k = 0; arr && k < n; k++) {
        cJSON *c = call_object(g, choice, k, &p->calls[k], false, true, p->calls[k].arguments);
        if (!c || !cJSON_AddItemToArray(arr, c)) {
            cJSON_Delete(c);
            return false;
        }
    }
    return arr != NULL;
}

static const char *parsed_finish(const struct gen *g, const struct choice *c,
                                 const struct tool_parse_result *p) {
    return answer_calls(g, p) > 0 && strcmp(c->finish, "stop") == 0 ? "tool_calls" : c->finish;
}

/* Streaming: one chunk whose delta holds key: a string s[0..n), or (key "tool_calls") the array item; lp
 * (taken) and finish as emit_chunk's. */
static bool emit_delta(struct gen *g, int i, const char *key, const char *s, size_t n, cJSON *item, cJSON *lp,
                       const char *finish) {
    struct sse_head h = gen_head(g, true);
    cJSON *obj = sse_object(&h);
    cJSON *arr = obj ? cJSON_AddArrayToObject(obj, "choices") : NULL;
    cJSON *choice = sse_choice(SSE_CHAT_DELTA, i, NULL, 0, false, lp, finish);
    cJSON *delta = cJSON_GetObjectItemCaseSensitive(choice, "delta");
    bool ok = arr && choice && cJSON_AddItemToArray(arr, choice);
    if (!ok)
        cJSON_Delete(choice);
    if (ok && key && item) {
        cJSON *calls = cJSON_AddArrayToObject(delta, key);
        ok = calls && cJSON_AddItemToArray(calls, item);
        item = ok ? NULL : item;
    } else if (ok && key) {
        ok = sse_add_string(delta, key, s, n);
    }
    cJSON_Delete(item);
    ok = ok && sse_buf_event(&g->out, obj);
    cJSON_Delete(obj);
    return ok;
}

/* Streaming: parses choice i's text so far (final: the whole text) and sends what grew since the last time:
 * reasoning, content, then each new call as two deltas (its head with empty arguments, then the arguments),
 * as OpenAI streams them.  lp (taken) rides on the first chunk, or on an empty one.  On the final pass the
 * finish reason follows in a chunk of its own. */
static bool emit_parsed(struct gen *g, int i, cJSON *lp, bool final) {
    struct choice *c = &g->ch[i];
    struct tool_parse_opts o = g->popts;
    o.partial = !final;
    struct tool_parse_result p;
    if (tool_parse(&o, c->text ? c->text : "", c->len, &p) != CI_OK) {
        cJSON_Delete(lp);
        return false;
    }
    bool ok = true;
    // The parser promises each partial result is a prefix of the next: only growth is sent.
    if (p.reasoning_len > c->sent_reasoning) {
        ok = emit_delta(g, i, "reasoning_content", p.reasoning + c->sent_reasoning,
                        p.reasoning_len - c->sent_reasoning, NULL, lp, NULL);
        lp = NULL;
        c->sent_reasoning = p.reasoning_len;
    }
    if (ok && p.content_len > c->sent_content) {
        ok = emit_delta(g, i, "content", p.content + c->sent_content, p.content_len - c->sent_content, NULL,
                        lp, NULL);
        lp = NULL;
        c->sent_content = p.content_len;
    }
    int n = answer_calls(g, &p);
    for (; ok && c->sent_calls < n; c->sent_calls++) {
        int k = c->sent_calls;
        cJSON *head = call_object(g, i, k, &p.calls[k], true, true, "");
        if (!head) {
            ok = false;
            break;
        }
        ok = emit_delta(g, i, "tool_calls", NULL, 0, head, lp, NULL); // takes lp
        lp = NULL;
        cJSON *args = ok ? call_object(g, i, k, &p.calls[k], true, false, p.calls[k].arguments) : NULL;
        ok = ok && args && emit_delta(g, i, "tool_calls", NULL, 0, args, NULL, NULL);
    }
    if (ok && lp) {
        ok = emit_delta(g, i, NULL, NULL, 0, NULL, lp, NULL);
        lp = NULL;
    }
    if (ok && final)
        ok = emit_delta(g, i, NULL, NULL, 0, NULL, NULL, parsed_finish(g, c, &p));
    cJSON_Delete(lp);
    tool_parse_result_free(&p);
    return ok;
}

/* /v1/messages streaming with tools or thinking: as emit_parsed, in Anthropic's events: the reasoning as a
 * thinking block's thinking deltas (thinking enabled), the content's growth as text deltas (a text block opened
 * first when none is open), each new call as a tool_use block (the block before
 * it stopped).  The blocks and their order are those of the non-streamed answer (anthropic_blocks_from_parse). */
static bool emit_parsed_anthropic(struct gen *g, int i, bool final) {
    struct choice *c = &g->ch[i];
    struct tool_parse_opts o = g->popts;
    o.partial = !final;
    struct tool_parse_result p;
    if (tool_parse(&o, c->text ? c->text : "", c->len, &p) != CI_OK)
        return false;
    bool ok = true;
    // The reasoning (thinking requested) leads the answer: its block comes first, and it is whole before
    // any content or call is reported (tool_parse.h's prefix property).
    if (g->a.thinking == ANTHROPIC_THINKING_ENABLED && p.reasoning_len > c->sent_reasoning &&
        c->sent_content == 0 && c->sent_calls == 0) {
        if (c->sent_reasoning == 0) {
            const struct anthropic_block think = {.type = ANTHROPIC_BLOCK_THINKING};
            ok = anthropic_stream_block(&g->out, c->a_block, &think);
            c->a_block++;
            c->a_in_text = false;
            c->a_in_think = true;
        }
        ok = ok && anthropic_stream_thinking(&g->out, c->a_block, p.reasoning + c->sent_reasoning,
                                             p.reasoning_len - c->sent_reasoning);
        c->sent_reasoning = p.reasoning_len;
    }
    // The thinking block is whole once anything follows it (or at the end): its signature closes it.
    if (c->a_in_think && (final || p.content_len > c->sent_content || answer_calls(g, &p) > c->sent_calls)) {
        char sig[ANTHROPIC_SIGNATURE_LEN];
        anthropic_signature(g->r->sig_key, p.reasoning, p.reasoning_len, sig);
        ok = ok && anthropic_stream_signature(&g->out, c->a_block, sig);
        c->a_in_think = false;
    }
    if (p.content_len > c->sent_content) {
        if (!c->a_in_text) {
            const struct anthropic_block text = {.type = ANTHROPIC_BLOCK_TEXT};
            ok = anthropic_stream_block(&g->out, c->a_block, &text);
            c->a_block++;
            c->a_in_text = true;
        }
        ok = ok && anthropic_stream_text(&g->out, c->a_block, p.content + c->sent_content,
                                         p.content_len - c->sent_content);
        c->sent_content = p.content_len;
    }
    for (int n_calls = answer_calls(g, &p); ok && c->sent_calls < n_calls; c->sent_calls++) {
        char id[32];
        anthropic_tool_use_id(g->id_bits, c->sent_calls, id);
        const struct anthropic_block call = {.type = ANTHROPIC_BLOCK_TOOL_USE,
                                             .id = id,
                                             .name = p.calls[c->sent_calls].name,
                                             .input_json = p.calls[c->sent_calls].arguments};
        ok = anthropic_stream_block(&g->out, c->a_block, &call);
        c->a_block++;
        c->a_in_text = false;
    }
    tool_parse_result_free(&p);
    return ok;
}

/* One event of choice i.  false: out of memory. */
static bool on_event(struct gen *g, int i, const struct cinfer_event *ev) {
    struct choice *c = &g->ch[i];
    bool want_lp = g->q.logprobs >= 0 && ev->kind == CINFER_EVENT_TOKEN;
    switch (ev->kind) {
    case CINFER_EVENT_TOKEN:
    case CINFER_EVENT_TEXT: {
        cJSON *lp = NULL;
        if (want_lp) {
            cJSON *into = g->streaming ? (g->chat ? sse_chat_logprobs_new() : sse_completion_logprobs_new())
                                       : c->logprobs;
            if (!into || !add_logprobs(g, c, ev, into)) {
                if (g->streaming)
                    cJSON_Delete(into);
                return false;
            }
            lp = g->streaming ? into : NULL;
        }
        if (ev->kind == CINFER_EVENT_TOKEN) {
            c->n_tokens++;
            c->last = ev->token;
            if (g->anthropic && g->q.n_stop && !anthropic_keep_token(g, ev->token))
                return false;
        }
        c->text_offset += (long long)ev->len;
        if (!g->streaming)
            return text_append(c, ev->text, ev->len);
        if (g->parse) {
            if (!text_append(c, ev->text, ev->len)) {
                cJSON_Delete(lp);
                return false;
            }
            if (g->anthropic)
                return ev->len == 0 || emit_parsed_anthropic(g, i, false);
            return (ev->len == 0 && !lp) || emit_parsed(g, i, lp, false);
        }
        if (ev->len == 0 && !lp)
            return true; // held-back bytes (a partial character or stop string): nothing to say yet
        if (g->anthropic)
            return anthropic_stream_text(&g->out, 0, ev->text, ev->len);
        return emit_chunk(g, i, ev->text, ev->len, false, lp, NULL);
    }
    case CINFER_EVENT_DONE:
    case CINFER_EVENT_ERROR:
        c->done = true;
        g->n_done++;
        c->finish = ev->finish_reason ? ev->finish_reason : "stop";
        if (ev->kind == CINFER_EVENT_ERROR || strcmp(c->finish, "cancelled") == 0 ||
            strcmp(c->finish, "error") == 0) {
            c->failed = g->any_failed = true;
            snprintf(c->error, sizeof c->error, "%.*s", (int)(ev->len < 200 ? ev->len : 200),
                     ev->kind == CINFER_EVENT_ERROR && ev->len ? ev->text : "the request was cancelled");
            return !g->streaming || emit_error(g, c->error);
        }
        if (g->streaming && g->parse)
            return g->anthropic ? emit_parsed_anthropic(g, i, true) : emit_parsed(g, i, NULL, true);
        return !g->streaming || g->anthropic ||
               emit_chunk(g, i, g->chat ? NULL : "", 0, false, NULL, c->finish);
    }
    return true;
}

/* Moves every event that is ready into g, never waiting; *progress tells whether there was any.  false:
 * out of memory. */
static bool gen_pump(struct gen *g, bool *progress) {
    *progress = false;
    for (int i = 0; i < g->n_ch; i++) {
        struct choice *c = &g->ch[i];
        struct cinfer_event ev;
        while (!c->done) {
            enum cinfer_status s = cinfer_stream_next(g->streams[c->stream], c->sample, &ev, 0);
            if (s == CINFER_ERR_BUSY)
                break;
            *progress = true;
            if (s == CINFER_ERR_NOMEM) // joining an event's text pieces: the event is lost
                return false;
            if (s != CINFER_OK) { // the stream is over without a final event (cannot happen)
                struct cinfer_event end = {.kind = CINFER_EVENT_ERROR, .text = "stream failed", .len = 13};
                return on_event(g, i, &end);
            }
            if (!on_event(g, i, &ev))
                return false;
        }
    }
    return true;
}

/* Streaming: the chunks that open every choice (chat: the assistant role; completions: the echo). */
static bool gen_begin(struct gen *g) {
    if (g->anthropic) {
        struct anthropic_info info = {g->id, g->r->name, NULL, NULL, g->prompt_tokens, 0};
        g->ch[0].a_block = g->parse ? -1 : 0; // with tools the first block waits for what the answer holds
        g->ch[0].a_in_text = !g->parse;
        return anthropic_stream_start(&g->out, &info, !g->parse);
    }
    for (int i = 0; i < g->n_ch; i++) {
        const char *echo = g->echo ? g->echo[g->ch[i].stream] : NULL;
        if (g->chat && !emit_chunk(g, i, "", 0, true, NULL, NULL))
            return false;
        if (echo && !emit_chunk(g, i, echo, strlen(echo), false, NULL, NULL))
            return false;
    }
    return true;
}

static long long gen_completion_tokens(const struct gen *g) {
    long long n = 0;
    for (int i = 0; i < g->n_ch; i++)
        n += g->ch[i].n_tokens;
    return n;
}

static bool gen_end(struct gen *g) {
    if (g->anthropic) { // after an error event the stream just ends
        struct anthropic_info info;
        g->ended = true;
        const struct choice *c = &g->ch[0];
        return g->any_failed || (gen_anthropic_info(g, g->parse && c->sent_calls > 0, &info) &&
                                 anthropic_stream_end(&g->out, &info, c->a_block));
    }
    if (g->q.include_usage) {
        struct sse_head h = gen_head(g, true);
        cJSON *obj = sse_object(&h);
        bool ok = obj && cJSON_AddArrayToObject(obj, "choices") &&
                  sse_add_usage(obj, g->prompt_tokens, gen_completion_tokens(g)) &&
                  sse_buf_event(&g->out, obj);
        cJSON_Delete(obj);
        if (!ok)
            return false;
    }
    g->ended = true;
    return sse_buf_done(&g->out);
}

/* The streaming body: SSE chunks as the engine produces tokens. */
static ssize_t gen_fill(void *ctx, struct http_conn *conn, char *buf, size_t max) {
    struct gen *g = ctx;
    for (;;) {
        if (sse_buf_pending(&g->out))
            return (ssize_t)sse_buf_take(&g->out, buf, max);
        const char *oom = g->anthropic ? anthropic_oom_events : oom_events;
        size_t oom_len = g->anthropic ? sizeof anthropic_oom_events - 1 : sizeof oom_events - 1;
        if (g->oom && g->oom_off < oom_len) {
            size_t n = oom_len - g->oom_off;
            n = n < max ? n : max;
            memcpy(buf, oom + g->oom_off, n);
            g->oom_off += n;
            return (ssize_t)n;
        }
        if (g->ended)
            return 0;
        if (http_conn_gone(conn)) {
            gen_cancel(g);
            if (!http_conn_stopping(conn))
                return HTTP_FILL_ERROR;
            // Shutting down: the client is still there, so end the stream properly (an error, then [DONE]).
            if (!emit_error(g, "the server is shutting down") || (!g->anthropic && !sse_buf_done(&g->out)))
                g->oom = true;
            g->ended = true;
            continue;
        }
        bool ok = true, progress = true;
        if (!g->begun) {
            g->begun = true;
            ok = gen_begin(g);
        } else if (g->n_done == g->n_ch || g->any_failed) {
            if (g->any_failed)
                gen_cancel(g);
            ok = gen_end(g);
        } else {
            ok = gen_pump(g, &progress);
        }
        if (!ok) { // out of memory: the client still gets whole events, an error and [DONE]
            gen_cancel(g);
            g->oom = g->ended = true;
            continue;
        }
        if (!progress)
            return HTTP_FILL_WAIT; // the engine wakes the connection with the next event
    }
}

/* The whole answer as one JSON object. */
static cJSON *gen_response(struct gen *g) {
    struct sse_head h = gen_head(g, false);
    cJSON *obj = sse_object(&h);
    cJSON *arr = obj ? cJSON_AddArrayToObject(obj, "choices") : NULL;
    if (!arr)
        goto fail;
    for (int i = 0; i < g->n_ch; i++) {
        struct choice *c = &g->ch[i];
        struct tool_parse_result p;
        bool parsed = g->parse && tool_parse(&g->popts, c->text ? c->text : "", c->len, &p) == CI_OK;
        if (g->parse && !parsed)
            goto fail;
        cJSON *choice = sse_choice(g->chat ? SSE_CHAT_MESSAGE : SSE_COMPLETION, i,
                                   parsed    ? p.content
                                   : c->text ? c->text
                                             : "",
                                   parsed ? p.content_len : c->len, false, c->logprobs,
                                   parsed ? parsed_finish(g, c, &p) : c->finish);
        c->logprobs = NULL;
        if (choice && parsed &&
            !message_add_parsed(g, i, cJSON_GetObjectItemCaseSensitive(choice, "message"), &p)) {
            cJSON_Delete(choice);
            choice = NULL;
        }
        if (parsed)
            tool_parse_result_free(&p);
        if (!choice)
            goto fail;
        if (!cJSON_AddItemToArray(arr, choice)) {
            cJSON_Delete(choice);
            goto fail;
        }
    }
    if (!sse_add_usage(obj, g->prompt_tokens, gen_completion_tokens(g)))
        goto fail;
    return obj;
fail:
    cJSON_Delete(obj);
    return NULL;
}

/* Tokens of a prompt string, with BOS as the vocabulary asks (special-token texts parsed). */
static enum cinfer_status tokenize(const struct routes *r, const char *text, bool add_special,
                                   cinfer_token **ids, int *n, struct cinfer_error *err) {
    return cinfer_tokenize(r->m, text, strlen(text), add_special, ids, n, err);
}

/* The prompt text of a chat request (chat_prompt.h), with the served model's template. */
static enum cinfer_status apply_template(const struct routes *r, const struct http_request *req,
                                         const struct cinfer_chat_message *msgs, int n,
                                         bool add_generation_prompt, char **out, struct openai_error *oe) {
    const struct chat_prompt cp = {r->m, r->tmpl, r->jinja, r->object_arguments};
    return chat_prompt_render(&cp, req->body, req->body_len, msgs, n, add_generation_prompt, out, oe);
}

/* A request's "model" (NULL: absent) must name the served model: else 404, as vLLM. */
static bool model_served(const struct routes *r, const char *model, struct openai_error *oe) {
    if (!model || strcmp(model, r->name) == 0)
        return true;
    openai_error_set(oe, 404, "model", "model_not_found",
                     "The model '%.200s' does not exist (this server has '%.64s').", model, r->name);
    return false;
}

/* One of the --max-requests slots (the caller gives it back by decrementing n_inflight), or 429. */
static bool take_request_slot(struct routes *r, struct openai_error *oe) {
    if (atomic_fetch_add(&r->n_inflight, 1) < r->max_requests)
        return true;
    atomic_fetch_sub(&r->n_inflight, 1);
    openai_error_set(oe, 429, NULL, "rate_limit_exceeded",
                     "too many requests in flight (%d, --max-requests): retry later", r->max_requests);
    return false;
}

/* tool_choice "required" or a named function: a GBNF grammar that lets the model write only calls (of that
 * function, or of any of the tools) in the template's format (r->tool_format), each call's arguments one JSON
 * object its "parameters" schema accepts (any object when it has none), given to the engine as a request's
 * "grammar" is; with parallel_tool_calls, one call or more where the format holds several (Hermes).  Forced for the formats written in plain text:
 * Hermes/Qwen <tool_call> blocks, Llama 3's {"name", "parameters"} object and the generic {"name",
 * "arguments"} object; the formats made of special tokens (harmony, Mistral, DeepSeek) are not, and such a
 * request runs as "auto" (the calls the model writes are parsed).  A request's own "grammar" wins over this
 * one.  *out: the grammar (ci_malloc'ed) or NULL; false: a schema that cannot be compiled (400 naming tools,
 * or 500) in oe. */
static bool tool_choice_grammar(const struct routes *r, const struct openai_request *q, char **out,
                                struct openai_error *oe) {
    *out = NULL;
    const char *open = NULL, *close = NULL, *args_key = "arguments";
    switch (r->tool_format) {
    case TOOL_FORMAT_HERMES:
        open = "\"<tool_call>\\n\" ";
        close = " \"\\n</tool_call>\"";
        break;
    case TOOL_FORMAT_LLAMA3:
        args_key = "parameters";
        break;
    case TOOL_FORMAT_GENERIC:
        break;
    default:
        return true;
    }
    for (int i = 0; i < q->n_tools; i++) // names go into the grammar's literals as they are
        for (const char *c = q->tool_names[i]; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                  *c == '_' || *c == '-' || *c == '.'))
                return true; // not forced: such a request runs as "auto"
    const char *any = "{\"type\":\"object\"}";
    const char **schemas = ci_calloc((size_t)q->n_tools, sizeof *schemas);
    if (!schemas) {
        openai_error_set(oe, 500, NULL, NULL, "out of memory");
        return false;
    }
    for (int i = 0; i < q->n_tools; i++)
        schemas[i] = q->tool_params[i] ? q->tool_params[i] : any;
    char *rules = NULL;
    size_t n_rules = 0;
    struct cinfer_error ce = {0};
    enum cinfer_status s = cinfer_json_schemas_gbnf(schemas, q->n_tools, &rules, &n_rules, &ce);
    ci_free(schemas);
    if (s != CINFER_OK) {
        openai_error_set(oe, s == CINFER_ERR_NOMEM ? 500 : 400, s == CINFER_ERR_NOMEM ? NULL : "tools", NULL,
                         "a tool's parameters cannot be enforced for tool_choice: %s", ce.message);
        return false;
    }
    // call ::= one alternative per allowed tool: {"name": "NAME", "arguments": <its schema's value>}
    size_t cap = n_rules + 256 + (size_t)q->n_tools * 256, n = 0;
    char *g = ci_malloc(cap);
    if (!g) {
        cinfer_free(rules);
        openai_error_set(oe, 500, NULL, NULL, "out of memory");
        return false;
    }
    // several calls only where the format has room for them (one JSON object is one call)
    bool several = q->parallel_tool_calls && r->tool_format == TOOL_FORMAT_HERMES;
    n += (size_t)snprintf(g + n, cap - n, "root ::= call%s\ncall ::= %s(", several ? " (\"\\n\" call)*" : "",
                          open ? open : "");
    bool first = true;
    for (int i = 0; i < q->n_tools; i++) {
        if (q->tool_choice == OPENAI_TOOL_NAMED && strcmp(q->tool_names[i], q->tool_name) != 0)
            continue; // names are [A-Za-z0-9_-]: no escaping inside the literal
        n += (size_t)snprintf(g + n, cap - n, "%s\"{\\\"name\\\": \\\"%s\\\", \\\"%s\\\": \" schema%d \"}\"",
                              first ? "" : " | ", q->tool_names[i], args_key, i);
        first = false;
    }
    n += (size_t)snprintf(g + n, cap - n, ")%s\n", close ? close : "");
    memcpy(g + n, rules, n_rules + 1);
    cinfer_free(rules);
    *out = g;
    return true;
}

/* /v1/messages: the rendered prompt followed by the request's prefill (anthropic.h), replacing *prompt.
 * false: out of memory (oe filled). */
static bool add_prefill(const struct anthropic_request *a, char **prompt, struct openai_error *oe) {
    if (!a->prefill)
        return true;
    size_t n = strlen(*prompt), k = strlen(a->prefill);
    char *both = ci_malloc(n + k + 1);
    if (!both) {
        openai_error_set(oe, 500, NULL, NULL, "out of memory");
        return false;
    }
    memcpy(both, *prompt, n);
    memcpy(both + n, a->prefill, k + 1);
    ci_free(*prompt);
    *prompt = both;
    return true;
}

/* Parses, tokenizes and submits; on failure fills oe and returns NULL.  a: a parsed /v1/messages request
 * (taken, even on failure), run as a chat request whose template sees a->chat_json; NULL: parse req. */
static struct gen *gen_start(struct routes *r, enum openai_endpoint ep, const struct http_request *req,
                             struct anthropic_request *a, struct openai_error *oe) {
    struct gen *g = ci_calloc(1, sizeof *g);
    cinfer_token *ids = NULL;
    char *prompt = NULL;
    if (!g) {
        if (a)
            anthropic_request_deinit(a);
        openai_error_set(oe, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    g->r = r;
    g->chat = ep == OPENAI_CHAT;
    sse_buf_init(&g->out);
    struct openai_limits lim = {r->n_vocab, r->n_ctx};
    struct http_request chat_req = *req; // what the chat template reads its messages and tools from
    if (a) {
        g->anthropic = true;
        g->a = *a;
        g->q = a->q;
        memset(&g->a.q, 0, sizeof g->a.q);
        memset(a, 0, sizeof *a);
        chat_req.body = g->a.chat_json;
        chat_req.body_len = g->a.chat_json_len;
    } else if (openai_parse(ep, req->body, req->body_len, &lim, &g->q, oe) != CI_OK) {
        goto fail;
    }
    struct openai_request *q = &g->q;
    g->streaming = q->stream;
    if (!model_served(r, q->model, oe))
        goto fail;
    if (q->n > r->max_seqs) {
        openai_error_set(oe, 400, "n", NULL,
                         "n = %d exceeds the %d sequences the engine runs at once (--max-seqs)", q->n,
                         r->max_seqs);
        goto fail;
    }
    if (!take_request_slot(r, oe))
        goto fail;
    g->counted = true;
    g->n_streams = g->chat ? 1 : q->n_prompts;
    g->n_ch = g->n_streams * q->n;
    g->streams = ci_calloc((size_t)g->n_streams, sizeof *g->streams);
    g->ch = ci_calloc((size_t)g->n_ch, sizeof *g->ch);
    if (q->echo)
        g->echo = ci_calloc((size_t)g->n_streams, sizeof *g->echo);
    if (!g->streams || !g->ch || (q->echo && !g->echo)) {
        openai_error_set(oe, 500, NULL, NULL, "out of memory");
        goto fail;
    }
    uint64_t id_bits = splitmix64((uint64_t)ci_now_ns() ^ atomic_fetch_add(&r->next_id, 1) << 40);
    if (g->anthropic)
        snprintf(g->id, sizeof g->id, "msg_%016llx", (unsigned long long)id_bits);
    else
        snprintf(g->id, sizeof g->id, "%s-%016llx", g->chat ? "chatcmpl" : "cmpl",
                 (unsigned long long)id_bits);
    g->created = (long long)time(NULL);
    g->id_bits = id_bits;

    struct cinfer_request_options ro;
    cinfer_request_options_default(&ro);
    ro.n = q->n;
    ro.sampling = q->sampling;
    if (!q->has_seed) // OpenAI's default: a fresh draw for every request
        ro.sampling.seed = splitmix64(id_bits);
    ro.stop = (const char *const *)q->stop;
    ro.n_stop = q->n_stop;
    ro.ignore_eos = q->ignore_eos;
    ro.logit_bias = q->logit_bias;
    ro.n_logit_bias = q->n_logit_bias;
    ro.logprobs = q->logprobs;
    ro.spec_k = q->spec_k;
    ro.grammar = q->grammar;
    ro.grammar_kind = q->grammar_kind;
    // The formats made of special tokens need their text (parsed away again: tool_parse.h).
    ro.render_special = g->chat && tool_format_needs_special(r->tool_format) &&
                        ((q->n_tools > 0 && q->tool_choice != OPENAI_TOOL_NONE) ||
                         (r->tool_format == TOOL_FORMAT_HARMONY && !r->reasoning_none));
    if (!q->grammar && (q->tool_choice == OPENAI_TOOL_REQUIRED || q->tool_choice == OPENAI_TOOL_NAMED)) {
        if (!tool_choice_grammar(r, q, &q->grammar, oe))
            goto fail;
        q->grammar_kind = CINFER_GRAMMAR_GBNF;
        snprintf(q->grammar_param, sizeof q->grammar_param, "tool_choice");
        ro.grammar = q->grammar; // owned by the request from here on
        ro.grammar_kind = q->grammar_kind;
    }
    if (q->grammar) { // compiled (and cached) before anything is submitted, so a bad one is a 400 naming it
        struct cinfer_error ce = {0};
        enum cinfer_status s = cinfer_engine_check_grammar_kind(r->e, q->grammar_kind, q->grammar, &ce);
        if (s != CINFER_OK) {
            if (openai_http_status(s) == 400) // a limit of the grammar is no context_length_exceeded
                openai_error_set(oe, 400, q->grammar_param, NULL, "%s", ce.message);
            else
                openai_error_from_status(oe, s, ce.message);
            goto fail;
        }
    }
    for (int p = 0; p < g->n_streams; p++) {
        struct cinfer_error ce = {0};
        int n_ids = 0;
        enum cinfer_status s = CINFER_OK;
        const cinfer_token *use = NULL;
        if (g->chat) {
            if ((s = apply_template(r, &chat_req, q->messages, q->n_messages, true, &prompt, oe)) !=
                CINFER_OK)
                goto fail;
            if (g->anthropic && !add_prefill(&g->a, &prompt, oe))
                goto fail;
            // How the answer is split (tool_parse.h): calls when the request has tools it lets the model
            // use, reasoning when the template thinks (or its prompt opened <think>) unless turned off.
            bool opens = tool_prompt_opens_think(prompt, strlen(prompt));
            g->popts.format = r->tool_format;
            g->popts.tools = q->n_tools > 0 && q->tool_choice != OPENAI_TOOL_NONE;
            g->popts.reasoning =
                !r->reasoning_none && (r->thinks || opens || r->tool_format == TOOL_FORMAT_HARMONY);
            g->popts.in_reasoning = g->popts.reasoning && opens;
            if (g->anthropic) { // tool_use blocks; reasoning a thinking block when the request asks for it
                g->popts.tools = g->a.n_tools > 0 && g->a.tool_choice != ANTHROPIC_TOOL_NONE;
                if (g->a.thinking != ANTHROPIC_THINKING_ENABLED)
                    g->popts.reasoning = g->popts.in_reasoning = false;
                // budget_tokens: the <think> block ends (its end marker forced) once it holds that many
                // tokens.  Harmony's analysis channel ends in control tokens, which are not forced.
                if (g->popts.reasoning && r->tool_format != TOOL_FORMAT_HARMONY) {
                    ro.think_start = "<think>";
                    ro.think_end = "\n</think>\n\n";
                    ro.think_budget = g->a.thinking_budget;
                    ro.think_open = opens;
                }
            }
            g->parse = g->popts.tools || g->popts.reasoning;
            s = tokenize(r, prompt, true, &ids, &n_ids, &ce);
            use = ids;
        } else if (q->prompts[p].text) {
            s = tokenize(r, q->prompts[p].text, true, &ids, &n_ids, &ce);
            use = ids;
        } else {
            use = q->prompts[p].ids;
            n_ids = q->prompts[p].n_ids;
        }
        if (s != CINFER_OK) {
            openai_error_from_status(oe, s, ce.message);
            goto fail;
        }
        if (n_ids == 0) {
            openai_error_set(oe, 400, g->chat ? "messages" : "prompt", NULL,
                             "the prompt is empty (and the vocabulary adds no BOS token)");
            goto fail;
        }
        if (g->echo) {
            if (q->prompts[p].text)
                g->echo[p] = ci_strdup(q->prompts[p].text);
            else if (cinfer_detokenize(r->m, use, n_ids, false, &g->echo[p], &(size_t){0}, &ce) != CINFER_OK)
                g->echo[p] = NULL;
            if (!g->echo[p]) {
                openai_error_set(oe, 500, NULL, NULL, "out of memory");
                goto fail;
            }
        }
        // Chat's default is the rest of the context (as far as the KV pool can hold one sequence).
        ro.max_tokens = q->max_tokens > 0               ? q->max_tokens
                        : !g->chat                      ? 16
                        : r->max_tokens_cap - n_ids > 0 ? r->max_tokens_cap - n_ids
                                                        : 1;
        if (g->anthropic && ro.max_tokens > r->max_tokens_cap - n_ids) // Anthropic's max_tokens is a ceiling
            ro.max_tokens = r->max_tokens_cap - n_ids > 0 ? r->max_tokens_cap - n_ids : 1;
        s = cinfer_engine_submit(r->e, use, n_ids, &ro, &g->streams[p], &ce);
        if (s != CINFER_OK) {
            openai_error_from_status(oe, s, ce.message);
            goto fail;
        }
        g->prompt_tokens += n_ids;
        cinfer_token last = use[n_ids - 1];
        if (g->anthropic && q->n_stop && !anthropic_keep_token(g, last)) {
            openai_error_set(oe, 500, NULL, NULL, "out of memory");
            goto fail;
        }
        cinfer_free(ids);
        ids = NULL;
        ci_free(prompt);
        prompt = NULL;
        for (int k = 0; k < q->n; k++) {
            struct choice *c = &g->ch[p * q->n + k];
            c->stream = p;
            c->sample = k;
            c->last = last;
            if (g->echo)
                c->text_offset = (long long)strlen(g->echo[p]);
            if (!g->streaming && q->logprobs >= 0 &&
                !(c->logprobs = g->chat ? sse_chat_logprobs_new() : sse_completion_logprobs_new())) {
                openai_error_set(oe, 500, NULL, NULL, "out of memory");
                goto fail;
            }
            if (!g->streaming && g->echo && !text_append(c, g->echo[p], strlen(g->echo[p]))) {
                openai_error_set(oe, 500, NULL, NULL, "out of memory");
                goto fail;
            }
        }
    }
    return g;
fail:
    cinfer_free(ids);
    ci_free(prompt);
    gen_free(g);
    return NULL;
}

/* The non-streaming answer, once every choice is done (or the request failed, or the client left). */
static bool gen_poll(void *ctx, struct http_conn *conn, struct http_response *res) {
    struct gen *g = ctx;
    bool ok = true, gone = false, progress = true;
    while (ok && progress && g->n_done < g->n_ch && !g->any_failed && !(gone = http_conn_gone(conn)))
        ok = gen_pump(g, &progress);
    if (ok && !gone && !g->any_failed && g->n_done < g->n_ch)
        return false; // the engine wakes the connection with the next event
    if (!ok || gone || g->any_failed) {
        gen_cancel(g);
        const char *why = !ok ? "out of memory" : gone ? "the server is shutting down" : NULL;
        for (int i = 0; !why && i < g->n_ch; i++)
            if (g->ch[i].failed)
                why = g->ch[i].error;
        struct openai_error oe;
        openai_error_set(&oe, !ok ? 500 : 503, NULL, NULL, "%s", why ? why : "the request failed");
        respond_api_error(res, &oe, g->anthropic);
    } else if (g->anthropic) {
        respond_json(res, anthropic_response(g));
        if (!res->body) // respond_json's out-of-memory answer is OpenAI's
            res->static_body = anthropic_oom_body;
    } else {
        respond_json(res, gen_response(g));
    }
    return true;
}

static void handle_generate(struct routes *r, enum openai_endpoint ep, const struct http_request *req,
                            struct anthropic_request *a, struct http_response *res) {
    struct openai_error oe;
    struct gen *g = gen_start(r, ep, req, a, &oe);
    if (!g) {
        respond_api_error(res, &oe, a != NULL);
        return;
    }
    // Nothing waits on a thread: the engine's events wake the connection, which then reads them.
    g->waker = http_conn_waker(req->conn);
    for (int i = 0; i < g->n_streams; i++)
        cinfer_stream_set_notify(g->streams[i], http_waker_wake, g->waker);
    if (g->streaming) {
        res->status = 200;
        res->content_type = "text/event-stream";
        res->fill = gen_fill;
        res->fill_ctx = g;
        res->fill_free = gen_free;
    } else {
        res->poll = gen_poll;
        res->poll_ctx = g;
        res->poll_free = gen_free;
    }
}

static void on_completions(void *app, const struct http_request *req, struct http_response *res) {
    if (check_ready(app, res))
        handle_generate(app, OPENAI_COMPLETIONS, req, NULL, res);
}

static void on_chat(void *app, const struct http_request *req, struct http_response *res) {
    if (check_ready(app, res))
        handle_generate(app, OPENAI_CHAT, req, NULL, res);
}

/* ---- the Anthropic Messages API (anthropic.h) --------------------------------------------------------- */

/* Parses a /v1/messages body after the readiness and model checks; false with the error answered. */
static bool anthropic_start(struct routes *r, const struct http_request *req, bool count_only,
                            struct anthropic_request *a, struct http_response *res) {
    struct openai_error oe;
    if (!atomic_load(&r->ready)) {
        openai_error_set(&oe, 503, NULL, NULL, "the model is loading");
        respond_api_error(res, &oe, true);
        return false;
    }
    struct openai_limits lim = {r->n_vocab, r->n_ctx};
    if (anthropic_parse(req->body, req->body_len, count_only, &lim, a, &oe) != CI_OK) {
        respond_api_error(res, &oe, true);
        return false;
    }
    if (!model_served(r, a->q.model, &oe)) {
        anthropic_request_deinit(a);
        respond_api_error(res, &oe, true);
        return false;
    }
    return true;
}

static void on_messages(void *app, const struct http_request *req, struct http_response *res) {
    struct anthropic_request a;
    if (anthropic_start(app, req, false, &a, res))
        handle_generate(app, OPENAI_CHAT, req, &a, res);
}

/* {"input_tokens"}: the prompt's tokens, counted as /v1/messages counts them (usage.input_tokens). */
static void on_count_tokens(void *app, const struct http_request *req, struct http_response *res) {
    struct routes *r = app;
    struct anthropic_request a;
    if (!anthropic_start(r, req, true, &a, res))
        return;
    struct http_request chat_req = *req;
    chat_req.body = a.chat_json;
    chat_req.body_len = a.chat_json_len;
    struct openai_error oe;
    struct cinfer_error ce = {0};
    char *prompt = NULL;
    cinfer_token *ids = NULL;
    int n = 0;
    enum cinfer_status s = apply_template(r, &chat_req, a.q.messages, a.q.n_messages, true, &prompt, &oe);
    if (s == CINFER_OK && !add_prefill(&a, &prompt, &oe))
        s = CINFER_ERR_NOMEM;
    if (s == CINFER_OK && (s = tokenize(r, prompt, true, &ids, &n, &ce)) != CINFER_OK)
        openai_error_from_status(&oe, s, ce.message);
    if (s != CINFER_OK) {
        respond_api_error(res, &oe, true);
    } else {
        cJSON *o = cJSON_CreateObject();
        if (o && !cJSON_AddNumberToObject(o, "input_tokens", n)) {
            cJSON_Delete(o);
            o = NULL;
        }
        respond_json(res, o);
        if (!res->body)
            res->static_body = anthropic_oom_body;
    }
    cinfer_free(ids);
    ci_free(prompt);
    anthropic_request_deinit(&a);
}

/* ---- the other endpoints ------------------------------------------------------------------------------ */

static cJSON *model_object(const struct routes *r) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !sse_add_string(o, "id", r->name, strlen(r->name)) ||
        !cJSON_AddStringToObject(o, "object", "model") ||
        !cJSON_AddNumberToObject(o, "created", (double)time(NULL)) ||
        !cJSON_AddStringToObject(o, "owned_by", "cinfer") ||
        !sse_add_string(o, "root", r->name, strlen(r->name)) ||
        !cJSON_AddNumberToObject(o, "max_model_len", r->n_ctx)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static void on_models(void *app, const struct http_request *req, struct http_response *res) {
    (void)req;
    struct routes *r = app;
    if (!check_ready(r, res))
        return;
    cJSON *list = cJSON_CreateObject();
    cJSON *data =
        list && cJSON_AddStringToObject(list, "object", "list") ? cJSON_AddArrayToObject(list, "data") : NULL;
    cJSON *m = data ? model_object(r) : NULL;
    if (!m || !cJSON_AddItemToArray(data, m)) {
        cJSON_Delete(m);
        cJSON_Delete(list);
        list = NULL;
    }
    respond_json(res, list);
}

static void on_model(void *app, const struct http_request *req, struct http_response *res) {
    struct routes *r = app;
    if (!check_ready(r, res))
        return;
    const char *name = req->path + strlen("/v1/models/");
    if (strcmp(name, r->name) != 0) {
        struct openai_error e;
        openai_error_set(&e, 404, "model", "model_not_found", "The model '%.200s' does not exist.", name);
        respond_error(res, &e);
        return;
    }
    respond_json(res, model_object(r));
}

static void on_health(void *app, const struct http_request *req, struct http_response *res) {
    (void)req;
    struct routes *r = app;
    bool ready = atomic_load(&r->ready);
    const char *failure = ready ? cinfer_engine_failure(r->e) : NULL;
    if (failure) { // the server cannot serve any more: tell the orchestrator to restart it
        cJSON *o = cJSON_CreateObject();
        if (o && (!cJSON_AddStringToObject(o, "status", "error") ||
                  !cJSON_AddStringToObject(o, "message", failure))) {
            cJSON_Delete(o);
            o = NULL;
        }
        respond_json(res, o);
        if (res->status == 200)
            res->status = 503;
        return;
    }
    res->status = ready ? 200 : 503;
    res->static_body = ready ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}";
    if (!ready)
        res->retry_after_s = 1;
}

static void on_metrics(void *app, const struct http_request *req, struct http_response *res) {
    (void)req;
    struct routes *r = app;
    if (!check_ready(r, res))
        return;
    char *text = NULL;
    size_t len = 0;
    enum cinfer_status s = cinfer_engine_metrics(r->e, &text, &len);
    if (s != CINFER_OK) {
        respond_status(res, s, "cannot format the metrics");
        return;
    }
    // The engine's buffer is not ours to hand to the HTTP layer's ci_free: copy it.
    res->body = ci_malloc(len + 1);
    if (res->body) {
        memcpy(res->body, text, len);
        res->body[len] = '\0';
        res->body_len = len;
        res->status = 200;
        res->content_type = "text/plain; version=0.0.4";
    } else {
        res->status = 500;
        res->static_body = oom_body;
    }
    cinfer_free(text);
}

static void on_index(void *app, const struct http_request *req, struct http_response *res) {
    (void)app;
    (void)req;
    // Through volatile: the compiler assumes a declared object's address is never NULL, but a weak one's is.
    const char *volatile page = cinfer_webui_html;
    const size_t *volatile page_len = &cinfer_webui_html_len;
    if (!page || !page_len) {
        struct openai_error e;
        openai_error_set(&e, 404, NULL, "not_found", "this build has no web UI (src/server/webui.html)");
        respond_error(res, &e);
        return;
    }
    res->status = 200;
    res->content_type = "text/html; charset=utf-8";
    res->static_body = page;
}

static void on_tokenize(void *app, const struct http_request *req, struct http_response *res) {
    struct routes *r = app;
    if (!check_ready(r, res))
        return;
    struct openai_tokenize t;
    struct openai_error oe;
    struct cinfer_error ce = {0};
    cinfer_token *ids = NULL;
    char *templated = NULL;
    int n = 0;
    if (openai_parse_tokenize(req->body, req->body_len, &t, &oe) != CI_OK) {
        respond_error(res, &oe);
        return;
    }
    if (t.messages && apply_template(r, req, t.messages, t.n_messages, t.add_generation_prompt, &templated,
                                     &oe) != CINFER_OK) {
        respond_error(res, &oe);
        goto done;
    }
    enum cinfer_status s = tokenize(r, templated ? templated : t.prompt, t.add_special, &ids, &n, &ce);
    if (s != CINFER_OK) {
        respond_status(res, s, ce.message);
        goto done;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "tokens") : NULL;
    for (int i = 0; arr && i < n; i++) {
        cJSON *v = cJSON_CreateNumber(ids[i]);
        if (!v || !cJSON_AddItemToArray(arr, v)) {
            cJSON_Delete(v);
            arr = NULL;
        }
    }
    if (!arr || !cJSON_AddNumberToObject(o, "count", n) ||
        !cJSON_AddNumberToObject(o, "max_model_len", r->n_ctx)) {
        cJSON_Delete(o);
        o = NULL;
    }
    respond_json(res, o);
done:
    cinfer_free(ids);
    ci_free(templated);
    openai_tokenize_deinit(&t);
}

/* POST /apply-template, as llama-server's: the prompt a chat request's messages (with its tools, tool_choice,
 * chat_template_kwargs and reasoning_effort) render to through the chat template, without generating:
 * {"prompt": TEXT}.  The request is validated as /v1/chat/completions validates it; "add_generation_prompt"
 * (default true) as /tokenize takes it.  For comparing templates with llama.cpp and debugging prompts. */
static void on_apply_template(void *app, const struct http_request *req, struct http_response *res) {
    struct routes *r = app;
    if (!check_ready(r, res))
        return;
    struct openai_request q;
    struct openai_error oe;
    struct openai_limits lim = {r->n_vocab, r->n_ctx};
    char *prompt = NULL;
    if (openai_parse(OPENAI_CHAT, req->body, req->body_len, &lim, &q, &oe) != CI_OK) {
        respond_error(res, &oe);
        return;
    }
    bool add_generation_prompt = true;
    cJSON *body = cJSON_ParseWithLength(req->body, req->body_len);
    const cJSON *agp = cJSON_GetObjectItemCaseSensitive(body, "add_generation_prompt");
    if (agp && !cJSON_IsNull(agp) && !cJSON_IsBool(agp)) {
        openai_error_set(&oe, 400, "add_generation_prompt", NULL,
                         "'add_generation_prompt' must be a boolean");
        respond_error(res, &oe);
        goto done;
    }
    if (cJSON_IsBool(agp))
        add_generation_prompt = cJSON_IsTrue(agp);
    if (!model_served(r, q.model, &oe) ||
        apply_template(r, req, q.messages, q.n_messages, add_generation_prompt, &prompt, &oe) != CINFER_OK) {
        respond_error(res, &oe);
        goto done;
    }
    cJSON *o = cJSON_CreateObject();
    if (o && !cJSON_AddStringToObject(o, "prompt", prompt)) {
        cJSON_Delete(o);
        o = NULL;
    }
    respond_json(res, o);
done:
    cJSON_Delete(body);
    ci_free(prompt);
    openai_request_deinit(&q);
}

static void on_detokenize(void *app, const struct http_request *req, struct http_response *res) {
    struct routes *r = app;
    if (!check_ready(r, res))
        return;
    struct openai_detokenize d;
    struct openai_error oe;
    struct openai_limits lim = {r->n_vocab, r->n_ctx};
    if (openai_parse_detokenize(req->body, req->body_len, &lim, &d, &oe) != CI_OK) {
        respond_error(res, &oe);
        return;
    }
    char *text = NULL;
    size_t len = 0;
    struct cinfer_error ce = {0};
    enum cinfer_status s =
        d.n_ids ? cinfer_detokenize(r->m, d.ids, d.n_ids, false, &text, &len, &ce) : CINFER_OK;
    if (s != CINFER_OK) {
        respond_status(res, s, ce.message);
    } else {
        cJSON *o = cJSON_CreateObject();
        if (o && !sse_add_string(o, "prompt", text ? text : "", len)) {
            cJSON_Delete(o);
            o = NULL;
        }
        respond_json(res, o);
    }
    cinfer_free(text);
    openai_detokenize_deinit(&d);
}

/* ---- /v1/embeddings ----------------------------------------------------------------------------------- */

/* One embedding request per input, all submitted at once (the engine batches them with everything else);
 * the answer is assembled when every one is done, as gen_poll does. */
struct embed {
    struct routes *r;
    struct openai_embeddings q;
    struct cinfer_stream **streams; // [q.n_inputs]
    bool *done;                     // [q.n_inputs]
    int n_done;
    char error[256]; // the first failure
    long long prompt_tokens;
    bool counted;
    struct http_waker *waker;
};

static void embed_free(void *ctx) {
    struct embed *em = ctx;
    if (!em)
        return;
    for (int i = 0; em->streams && i < em->q.n_inputs; i++)
        cinfer_stream_release(em->streams[i]);
    http_waker_release(em->waker);
    ci_free(em->streams);
    ci_free(em->done);
    if (em->counted)
        atomic_fetch_sub(&em->r->n_inflight, 1);
    openai_embeddings_deinit(&em->q);
    ci_free(em);
}

/* The first `dims` values scaled to unit length (OpenAI's embeddings are normalized; a shortened one is
 * normalized again), as a JSON array of numbers or a base64 string of little-endian float32. */
static cJSON *embedding_value(const float *v, int dims, bool base64) {
    double ss = 0;
    for (int i = 0; i < dims; i++)
        ss += (double)v[i] * v[i];
    float scale = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    float *unit = ci_malloc((size_t)dims * sizeof *unit);
    if (!unit)
        return NULL;
    for (int i = 0; i < dims; i++)
        unit[i] = v[i] * scale;
    cJSON *out = NULL;
    if (base64) { // the wire format is little-endian float32, which is this machine's (x86-64) layout
        char *text = ci_malloc(base64_encoded_len((size_t)dims * sizeof *unit) + 1);
        if (text) {
            base64_encode(unit, (size_t)dims * sizeof *unit, text);
            out = cJSON_CreateString(text);
        }
        ci_free(text);
    } else {
        out = cJSON_CreateArray();
        for (int i = 0; out && i < dims; i++) {
            cJSON *x = cJSON_CreateNumber(unit[i]);
            if (!x || !cJSON_AddItemToArray(out, x)) {
                cJSON_Delete(x);
                cJSON_Delete(out);
                out = NULL;
            }
        }
    }
    ci_free(unit);
    return out;
}

static cJSON *embed_response(const struct embed *em) {
    cJSON *o = cJSON_CreateObject(), *data = o ? cJSON_AddArrayToObject(o, "data") : NULL;
    for (int i = 0; data && i < em->q.n_inputs; i++) {
        const float *v = NULL;
        int n = 0;
        cinfer_stream_embedding(em->streams[i], &v, &n);
        cJSON *item = cJSON_CreateObject(),
              *vec = v ? embedding_value(v, em->q.dimensions ? em->q.dimensions : n, em->q.base64) : NULL;
        if (!item || !vec || !cJSON_AddStringToObject(item, "object", "embedding") ||
            !cJSON_AddNumberToObject(item, "index", i) || !cJSON_AddItemToObject(item, "embedding", vec) ||
            !cJSON_AddItemToArray(data, item)) {
            if (item && !cJSON_GetObjectItemCaseSensitive(item, "embedding"))
                cJSON_Delete(vec);
            cJSON_Delete(item);
            data = NULL;
        }
    }
    cJSON *usage = data ? cJSON_CreateObject() : NULL;
    if (!usage || !cJSON_AddStringToObject(o, "object", "list") ||
        !sse_add_string(o, "model", em->r->name, strlen(em->r->name)) ||
        !cJSON_AddNumberToObject(usage, "prompt_tokens", (double)em->prompt_tokens) ||
        !cJSON_AddNumberToObject(usage, "total_tokens", (double)em->prompt_tokens) ||
        !cJSON_AddItemToObject(o, "usage", usage)) {
        if (o && usage && !cJSON_GetObjectItemCaseSensitive(o, "usage"))
            cJSON_Delete(usage);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static bool embed_poll(void *ctx, struct http_conn *conn, struct http_response *res) {
    struct embed *em = ctx;
    bool gone = false;
    for (int i = 0; i < em->q.n_inputs && !(gone = http_conn_gone(conn)); i++) {
        struct cinfer_event ev;
        while (!em->done[i]) {
            enum cinfer_status s = cinfer_stream_next(em->streams[i], 0, &ev, 0);
            if (s == CINFER_ERR_BUSY)
                break;
            if (s != CINFER_OK || ev.kind == CINFER_EVENT_ERROR || ev.kind == CINFER_EVENT_DONE) {
                em->done[i] = true;
                em->n_done++;
                const float *v;
                int n;
                if (!em->error[0] && (s != CINFER_OK || ev.kind == CINFER_EVENT_ERROR ||
                                      cinfer_stream_embedding(em->streams[i], &v, &n) != CINFER_OK))
                    snprintf(em->error, sizeof em->error, "%.200s",
                             s == CINFER_OK && ev.kind == CINFER_EVENT_ERROR ? ev.text
                                                                             : "the request failed");
            }
        }
    }
    if (!gone && !em->error[0] && em->n_done < em->q.n_inputs)
        return false; // the engine wakes the connection with the next event
    if (gone || em->error[0]) {
        for (int i = 0; i < em->q.n_inputs; i++)
            cinfer_stream_cancel(em->streams[i]);
        struct openai_error oe;
        openai_error_set(&oe, 503, NULL, NULL, "%s", gone ? "the server is shutting down" : em->error);
        respond_error(res, &oe);
    } else {
        respond_json(res, embed_response(em));
    }
    return true;
}

static void on_embeddings(void *app, const struct http_request *req, struct http_response *res) {
    struct routes *r = app;
    if (!check_ready(r, res))
        return;
    struct openai_error oe;
    struct cinfer_model_info mi;
    cinfer_model_info(r->m, &mi);
    struct openai_limits lim = {r->n_vocab, r->n_ctx};
    struct embed *em = ci_calloc(1, sizeof *em);
    if (!em) {
        openai_error_set(&oe, 500, NULL, NULL, "out of memory");
        respond_error(res, &oe);
        return;
    }
    em->r = r;
    cinfer_token *ids = NULL;
    if (openai_parse_embeddings(req->body, req->body_len, &lim, mi.n_embd, &em->q, &oe) != CI_OK)
        goto fail;
    if (!model_served(r, em->q.model, &oe) || !take_request_slot(r, &oe))
        goto fail;
    em->counted = true;
    em->streams = ci_calloc((size_t)em->q.n_inputs, sizeof *em->streams);
    em->done = ci_calloc((size_t)em->q.n_inputs, sizeof *em->done);
    if (!em->streams || !em->done) {
        openai_error_set(&oe, 500, NULL, NULL, "out of memory");
        goto fail;
    }
    struct cinfer_request_options ro;
    cinfer_request_options_default(&ro);
    ro.embedding = true;
    for (int i = 0; i < em->q.n_inputs; i++) {
        const struct openai_prompt *in = &em->q.inputs[i];
        struct cinfer_error ce = {0};
        int n_ids = in->n_ids;
        enum cinfer_status s = in->text ? tokenize(r, in->text, true, &ids, &n_ids, &ce) : CINFER_OK;
        if (s == CINFER_OK && n_ids == 0) {
            openai_error_set(&oe, 400, "input", NULL,
                             "input %d is empty (and the vocabulary adds no BOS token)", i);
            goto fail;
        }
        if (s == CINFER_OK)
            s = cinfer_engine_submit(r->e, in->text ? ids : in->ids, n_ids, &ro, &em->streams[i], &ce);
        if (s != CINFER_OK) {
            openai_error_from_status(&oe, s, ce.message);
            goto fail;
        }
        em->prompt_tokens += n_ids;
        cinfer_free(ids);
        ids = NULL;
    }
    em->waker = http_conn_waker(req->conn);
    for (int i = 0; i < em->q.n_inputs; i++)
        cinfer_stream_set_notify(em->streams[i], http_waker_wake, em->waker);
    res->poll = embed_poll;
    res->poll_ctx = em;
    res->poll_free = embed_free;
    return;
fail:
    cinfer_free(ids);
    embed_free(em);
    respond_error(res, &oe);
}

static const struct http_route table[] = {
    {"/", "GET", false, on_index},
    {"/health", "GET", false, on_health},
    {"/metrics", "GET", false, on_metrics},
    {"/v1/models", "GET", true, on_models},
    {"/v1/models/", "GET", true, on_model},
    {"/v1/completions", "POST", true, on_completions},
    {"/v1/chat/completions", "POST", true, on_chat},
    {"/v1/embeddings", "POST", true, on_embeddings},
    {"/v1/messages", "POST", true, on_messages},
    {"/v1/messages/count_tokens", "POST", true, on_count_tokens},
    {"/tokenize", "POST", true, on_tokenize},
    {"/apply-template", "POST", true, on_apply_template},
    {"/detokenize", "POST", true, on_detokenize},
};

const struct http_route *routes_table(int *n_routes) {
    *n_routes = (int)(sizeof table / sizeof table[0]);
    return table;
}

enum ci_status routes_create(struct routes **out, struct ci_err *err) {
    openai_init();
    struct routes *r = ci_calloc(1, sizeof *r);
    if (!r)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    atomic_init(&r->ready, false);
    atomic_init(&r->n_inflight, 0);
    atomic_init(&r->next_id, 0);
    // Thinking signatures' key: random bytes, or (without /dev/urandom) bits of the clock and an address.
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(r->sig_key, sizeof r->sig_key, 1, f) != 1) {
        r->sig_key[0] = splitmix64((uint64_t)ci_now_ns());
        r->sig_key[1] = splitmix64(r->sig_key[0] ^ (uint64_t)(uintptr_t)r);
    }
    if (f)
        fclose(f);
    *out = r;
    return CI_OK;
}

enum ci_status routes_ready(struct routes *r, const struct cinfer_model *m, struct cinfer_engine *e,
                            const struct routes_config *c, struct ci_err *err) {
    const char *name = c->served_name ? c->served_name : cinfer_model_name(m);
    if (!(r->name = ci_strdup(name ? name : "cinfer")))
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    struct cinfer_model_info mi;
    struct cinfer_engine_info ei;
    cinfer_model_info(m, &mi);
    cinfer_engine_info(e, &ei);
    r->m = m;
    r->e = e;
    r->tmpl = c->chat_template;
    r->jinja = c->jinja;
    r->max_requests = c->max_requests;
    r->max_seqs = c->max_seqs;
    r->n_ctx = ei.n_ctx;
    r->n_vocab = mi.n_vocab;
    int64_t pool = (int64_t)ei.kv_blocks * ei.kv_block_size;
    r->max_tokens_cap = pool < ei.n_ctx ? (int)pool : ei.n_ctx;
    r->tool_format = c->jinja ? tool_format_detect(c->jinja_src, c->jinja_src_len) : TOOL_FORMAT_GENERIC;
    r->thinks = c->jinja && tool_template_thinks(c->jinja_src, c->jinja_src_len);
    r->object_arguments = c->jinja && chat_prompt_object_arguments(m, c->jinja);
    r->reasoning_none = c->reasoning_none;
    atomic_store(&r->ready, true); // publishes the fields above to the connection threads
    return CI_OK;
}

void routes_free(struct routes *r) {
    if (!r)
        return;
    ci_free(r->name);
    ci_free(r);
}
