/* Anthropic Messages request bodies (anthropic_parse, for /v1/messages and /v1/messages/count_tokens), the
 * error body every rejection turns into, and the answer's formatting.
 *
 * Input: byte 0 bit 0 picks count_tokens (max_tokens and stream not read); the rest is the body.
 *
 * Properties checked:
 *   - an accepted request is within the documented limits: a model, max_tokens in [1, 2^30] (0 for
 *     count_tokens, which never streams), temperature in [0, 1], top_p in (0, 1], top_k >= 0, at most 4 stop
 *     sequences of 1..256 bytes, n = 1, no logprobs; 1..1024 chat messages with roles system (first only),
 *     user, assistant, tool and non-NULL content;
 *   - the chat template's view (chat_json) is a JSON object whose "messages" are parallel to the engine's
 *     (same roles and contents), tool messages carry a tool_call_id, tool calls' arguments are JSON objects,
 *     "tools" holds n_tools function tools, and tool_choice "tool" names one of them;
 *   - a rejected request has status 400 (500 only for out of memory) and an Anthropic error body
 *     {"type":"error","error":{"type","message"}} that is valid JSON and valid UTF-8;
 *   - the body's bytes as generated text: the message object and the streaming events are whole
 *     "event: <type>\ndata: <json>\n\n" blocks of valid UTF-8 JSON whose data type names the event. */
#include <cjson/cJSON.h>
#include <math.h>

#include "fuzz.h"
#include "server/anthropic.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet();
    openai_init(); // cJSON allocates through ci_malloc, so the leak check sees it
    return 0;
}

/* Every string of a cJSON tree is valid UTF-8. */
static void check_json_strings(const cJSON *j) {
    for (; j; j = j->next) {
        if (j->string)
            FUZZ_CHECK(fuzz_utf8_valid(j->string, strlen(j->string)), "key is not UTF-8");
        if (cJSON_IsString(j))
            FUZZ_CHECK(fuzz_utf8_valid(j->valuestring, strlen(j->valuestring)), "string is not UTF-8");
        check_json_strings(j->child);
    }
}

static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void check_request(const struct anthropic_request *a, bool count_only) {
    const struct openai_request *q = &a->q;
    const struct cinfer_sampling *s = &q->sampling;
    FUZZ_CHECK(q->model && q->endpoint == OPENAI_CHAT && q->n == 1 && q->logprobs == -1, "request basics");
    FUZZ_CHECK(count_only ? q->max_tokens == 0 && !q->stream
                          : q->max_tokens >= 1 && q->max_tokens <= (1 << 30),
               "max_tokens = %d", q->max_tokens);
    FUZZ_CHECK(isfinite(s->temperature) && s->temperature >= 0 && s->temperature <= 1 && s->top_p > 0 &&
                   s->top_p <= 1 && s->top_k >= 0,
               "sampling out of range");
    FUZZ_CHECK(q->n_stop >= 0 && q->n_stop <= OPENAI_MAX_STOP, "%d stop sequences", q->n_stop);
    for (int i = 0; i < q->n_stop; i++) {
        size_t l = strlen(q->stop[i]);
        FUZZ_CHECK(l >= 1 && l <= OPENAI_MAX_STOP_BYTES, "stop %d of %zu bytes", i, l);
    }
    FUZZ_CHECK(q->n_messages >= 1 && q->n_messages <= OPENAI_MAX_MESSAGES, "%d messages", q->n_messages);
    cJSON *chat = cJSON_ParseWithLength(a->chat_json, a->chat_json_len);
    FUZZ_CHECK(cJSON_IsObject(chat), "chat_json is not an object");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(chat, "messages");
    FUZZ_CHECK(cJSON_GetArraySize(msgs) == q->n_messages, "chat_json has %d messages, the request %d",
               cJSON_GetArraySize(msgs), q->n_messages);
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const char *role = q->messages[i].role, *content = q->messages[i].content;
        FUZZ_CHECK(role && content, "message %d: NULL field", i);
        FUZZ_CHECK((i == 0 && !strcmp(role, "system")) || !strcmp(role, "user") ||
                       !strcmp(role, "assistant") || !strcmp(role, "tool"),
                   "message %d: role '%s'", i, role);
        FUZZ_CHECK(str(m, "role") && !strcmp(str(m, "role"), role), "message %d: roles differ", i);
        FUZZ_CHECK(str(m, "content") && !strcmp(str(m, "content"), content), "message %d: contents differ",
                   i);
        if (!strcmp(role, "tool"))
            FUZZ_CHECK(str(m, "tool_call_id") && *str(m, "tool_call_id"), "message %d: no tool_call_id", i);
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *c;
        FUZZ_CHECK(!calls || !strcmp(role, "assistant"), "message %d: tool calls of a %s", i, role);
        cJSON_ArrayForEach(c, calls) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
            cJSON *args = str(f, "arguments") ? cJSON_Parse(str(f, "arguments")) : NULL;
            FUZZ_CHECK(str(c, "id") && str(f, "name") && cJSON_IsObject(args), "message %d: a bad tool call",
                       i);
            cJSON_Delete(args);
        }
        i++;
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(chat, "tools"), *t;
    FUZZ_CHECK(cJSON_GetArraySize(tools) == a->n_tools && a->n_tools <= ANTHROPIC_MAX_TOOLS, "%d tools",
               a->n_tools);
    bool named = false;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        FUZZ_CHECK(str(t, "type") && !strcmp(str(t, "type"), "function") && str(f, "name") &&
                       cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(f, "parameters")),
                   "a bad tool");
        named = named || (a->tool_name && !strcmp(a->tool_name, str(f, "name")));
    }
    FUZZ_CHECK((a->tool_choice == ANTHROPIC_TOOL_TOOL) == (a->tool_name != NULL) && (!a->tool_name || named),
               "tool_choice");
    FUZZ_CHECK(!a->prefill || a->prefill[0], "an empty prefill");
    cJSON_Delete(chat);
}

static void check_error(const struct openai_error *e, enum ci_status s) {
    FUZZ_CHECK(s == CI_ERR_INVALID || s == CI_ERR_NOMEM, "status %d", (int)s);
    FUZZ_CHECK(e->status == (s == CI_ERR_NOMEM ? 500 : 400), "HTTP %d for status %d", e->status, (int)s);
    size_t len = 0;
    char *body = anthropic_error_json(e, &len);
    FUZZ_CHECK(body && strlen(body) == len && fuzz_utf8_valid(body, len), "error body");
    cJSON *j = cJSON_Parse(body);
    const cJSON *er = cJSON_GetObjectItemCaseSensitive(j, "error");
    FUZZ_CHECK(str(j, "type") && !strcmp(str(j, "type"), "error") && str(er, "type") && str(er, "message") &&
                   !strcmp(str(er, "type"), anthropic_error_type(e->status)),
               "error body shape: %s", body);
    check_json_strings(j);
    cJSON_Delete(j);
    ci_free(body);
}

/* The queued events: whole "event: <type>\ndata: <json>\n\n" blocks, the data's type naming the event. */
static void check_events(struct sse_buf *b) {
    char *all = malloc(b->len - b->off + 1);
    FUZZ_CHECK(all, "out of memory");
    size_t n = sse_buf_take(b, all, b->len - b->off);
    all[n] = '\0';
    FUZZ_CHECK(fuzz_utf8_valid(all, n), "events are not UTF-8");
    for (char *p = all; *p;) {
        char *end = strstr(p, "\n\n");
        FUZZ_CHECK(end && !strncmp(p, "event: ", 7), "not an event block: %.80s", p);
        *end = '\0';
        char *nl = strchr(p, '\n');
        FUZZ_CHECK(nl && !strncmp(nl + 1, "data: ", 6) && !strchr(nl + 1, '\n'), "event lines: %.80s", p);
        *nl = '\0';
        cJSON *d = cJSON_Parse(nl + 7);
        FUZZ_CHECK(str(d, "type") && !strcmp(str(d, "type"), p + 7), "event %s: data %.80s", p + 7, nl + 7);
        check_json_strings(d);
        cJSON_Delete(d);
        p = end + 2;
    }
    free(all);
}

static void check_answer(const struct anthropic_request *a, const char *text, size_t len) {
    struct anthropic_block *b = NULL;
    int n = 0;
    FUZZ_CHECK(anthropic_output_blocks(a, text, len, &b, &n) && n >= 1, "no content blocks");
    int stop = anthropic_matched_stop(text, len, a->q.stop, a->q.n_stop);
    FUZZ_CHECK(stop >= -1 && stop < a->q.n_stop, "matched stop %d", stop);
    struct anthropic_info info = {"msg_0",
                                  a->q.model,
                                  anthropic_stop_reason("stop", stop >= 0, false),
                                  stop >= 0 ? a->q.stop[stop] : NULL,
                                  7,
                                  9};
    cJSON *m = anthropic_message(&info, b, n);
    FUZZ_CHECK(m && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "content")) == n,
               "message object");
    check_json_strings(m);
    cJSON_Delete(m);
    anthropic_blocks_free(b, n);
    struct sse_buf buf;
    sse_buf_init(&buf);
    struct openai_error e;
    openai_error_set(&e, 500, NULL, NULL, "%.*s", (int)(len < 100 ? len : 100), text);
    FUZZ_CHECK(anthropic_stream_start(&buf, &info, true) &&
                   (len == 0 || anthropic_stream_text(&buf, 0, text, len)) &&
                   anthropic_stream_end(&buf, &info, 0) && anthropic_stream_error(&buf, &e),
               "stream events");
    check_events(&buf);
    sse_buf_deinit(&buf);

    // With tools: the text split by a tool-call format into text and tool_use blocks, as a message and as
    // the events of a stream that opens each block in turn.
    // Every third input also separates a <think> block into a thinking block.
    bool think = len % 3 == 0;
    struct tool_parse_opts po = {
        .format = len % 2 ? TOOL_FORMAT_HERMES : TOOL_FORMAT_GENERIC, .tools = true, .reasoning = think};
    struct tool_parse_result p;
    if (tool_parse(&po, text, len, &p) != CI_OK)
        return;
    FUZZ_CHECK(anthropic_blocks_from_parse(&p, p.n_calls, think, 42, &b, &n) && n >= 1 &&
                   n == p.n_calls + (p.content_len > 0 || p.n_calls == 0) + (think && p.reasoning_len > 0),
               "blocks from a parse");
    m = anthropic_message(&info, b, n);
    FUZZ_CHECK(m && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "content")) == n,
               "message object");
    check_json_strings(m);
    cJSON_Delete(m);
    sse_buf_init(&buf);
    bool ok = anthropic_stream_start(&buf, &info, false);
    for (int k = 0; ok && k < n; k++) {
        ok = anthropic_stream_block(&buf, k - 1, &b[k]);
        if (ok && b[k].type == ANTHROPIC_BLOCK_TEXT && b[k].len)
            ok = anthropic_stream_text(&buf, k, b[k].text, b[k].len);
    }
    FUZZ_CHECK(ok && anthropic_stream_end(&buf, &info, n - 1), "stream events with blocks");
    check_events(&buf);
    sse_buf_deinit(&buf);
    anthropic_blocks_free(b, n);
    tool_parse_result_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_MEM_BEGIN();
    struct fuzz_in in = {data, size};
    bool count_only = fuzz_u8(&in) & 1;
    const uint8_t *b;
    size_t len = fuzz_bytes(&in, SIZE_MAX, &b);
    char *body = fuzz_strndup(b, len); // the server hands over a NUL-terminated body
    struct anthropic_request a;
    struct openai_error e;
    memset(&e, 0, sizeof e);
    enum ci_status s = anthropic_parse(body, len, count_only, &(struct openai_limits){32000, 2048}, &a, &e);
    if (s == CI_OK) {
        check_request(&a, count_only);
        check_answer(&a, body, len);
        anthropic_request_deinit(&a);
    } else {
        check_error(&e, s);
    }
    free(body);
    FUZZ_MEM_END();
    return 0;
}
