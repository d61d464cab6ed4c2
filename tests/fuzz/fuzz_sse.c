/* SSE framing and OpenAI response assembly (server/sse.c) with arbitrary token texts: bytes that are not
 * UTF-8, NULs, quotes, newlines, and the buffer taken by the connection in arbitrary pieces.
 *
 * Input: a list of operations.  Each starts with one byte (op = byte % 8) followed by its arguments:
 *   0 completion choice  1 chat delta  2 chat message   (a text: one length byte and its bytes, then a
 *                                                         flags byte: finish reason, role, NULL text)
 *   3 completion logprobs  4 chat logprobs               (a token text and up to 3 alternatives)
 *   5 usage  6 take (two bytes: how many bytes the connection reads)  7 [DONE]
 * Every event goes out through sse_buf_event as the server sends it.
 *
 * Properties checked:
 *   - sse_utf8_clean gives valid UTF-8 without NUL, the same bytes when the input was already that;
 *   - the bytes taken from the buffer, in whatever pieces, are exactly the events in order;
 *   - each event is "data: " + one line + "\n\n", the line parses as JSON, every string in it is valid
 *     UTF-8, and the texts read back equal the cleaned texts that went in; [DONE] is its own event. */
#include <cjson/cJSON.h>

#include "fuzz.h"
#include "server/openai.h"
#include "server/sse.h"

/* The cleaned text as the harness expects it, checked against the properties of sse_utf8_clean. */
static char *cleaned(const char *s, size_t n, size_t *out_len) {
    size_t l = 0;
    char *c = sse_utf8_clean(s, n, &l);
    FUZZ_CHECK(c != NULL && c[l] == '\0' && strlen(c) == l && l <= 3 * n, "clean of %zu bytes", n);
    FUZZ_CHECK(fuzz_utf8_valid(c, l), "cleaned text is not UTF-8");
    if (fuzz_utf8_valid(s, n) && !memchr(s, '\0', n))
        FUZZ_CHECK(l == n && memcmp(c, s, n) == 0, "clean changed valid UTF-8");
    *out_len = l;
    return c;
}

static void check_json_strings(const cJSON *j) {
    for (; j; j = j->next) {
        if (j->string)
            FUZZ_CHECK(fuzz_utf8_valid(j->string, strlen(j->string)), "key is not UTF-8");
        if (cJSON_IsString(j))
            FUZZ_CHECK(fuzz_utf8_valid(j->valuestring, strlen(j->valuestring)), "string is not UTF-8");
        check_json_strings(j->child);
    }
}

/* What an event's JSON must carry back: the path's string equals want. */
struct expect {
    const char *path[4]; // keys from the root; "#0" is array element 0
    char *want;          // cleaned text (owned)
};

static const cJSON *follow(const cJSON *j, const char *const *path) {
    for (int i = 0; i < 4 && path[i] && j; i++)
        j = path[i][0] == '#' ? cJSON_GetArrayItem(j, path[i][1] - '0')
                              : cJSON_GetObjectItemCaseSensitive(j, path[i]);
    return j;
}

#define MAX_EVENTS 128 // 64 operations, at most two events each

struct state {
    struct sse_buf sb;
    struct fuzz_buf sent;  // what the events amount to, built independently
    struct fuzz_buf taken; // what the connection read
    struct expect exp[MAX_EVENTS];
    int n_events;
};

/* Sends obj as the server does (and frees it); want (owned, may be NULL) is the text expected at path. */
static void send_event(struct state *st, cJSON *obj, const char *const *path, char *want) {
    FUZZ_CHECK(obj != NULL, "building an event failed");
    FUZZ_CHECK(sse_buf_event(&st->sb, obj), "sse_buf_event");
    char *json = cJSON_PrintUnformatted(obj);
    fuzz_buf_put(&st->sent, "data: ", 6);
    fuzz_buf_put(&st->sent, json, strlen(json));
    fuzz_buf_put(&st->sent, "\n\n", 2);
    ci_free(json);
    cJSON_Delete(obj);
    FUZZ_CHECK(st->n_events < MAX_EVENTS, "too many events");
    struct expect *e = &st->exp[st->n_events++];
    memset(e, 0, sizeof *e);
    if (path)
        memcpy(e->path, path, sizeof e->path);
    e->want = want;
}

static void take(struct state *st, size_t max) {
    char tmp[512];
    while (max > 0 && sse_buf_pending(&st->sb)) {
        size_t n = sse_buf_take(&st->sb, tmp, max < sizeof tmp ? max : sizeof tmp);
        FUZZ_CHECK(n > 0, "pending but nothing taken");
        fuzz_buf_put(&st->taken, tmp, n);
        max -= n;
    }
}

static char *text_arg(struct fuzz_in *in, size_t *n, char **clean, size_t *clean_len) {
    const uint8_t *p;
    *n = fuzz_lstr(in, &p);
    char *t = fuzz_strndup(p, *n);
    *clean = cleaned(t, *n, clean_len);
    return t;
}

static char *dup_clean(const char *c) {
    return fuzz_strndup(c, strlen(c));
}

static void op_choice(struct state *st, struct fuzz_in *in, enum sse_shape shape) {
    static const char *const reasons[4] = {NULL, "stop", "length", NULL};
    size_t n, cl;
    char *clean;
    char *text = text_arg(in, &n, &clean, &cl);
    unsigned f = fuzz_u8(in);
    bool null_text = shape == SSE_CHAT_DELTA && (f & 8);
    struct sse_head h = {"chatcmpl-1", shape == SSE_COMPLETION ? "text_completion" : "chat.completion.chunk",
                         1700000000, text}; // the model name too comes from outside (the request)
    cJSON *o = sse_object(&h);
    FUZZ_CHECK(o != NULL, "sse_object");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = sse_choice(shape, (int)(f >> 4), null_text ? NULL : text, n, f & 4, NULL, reasons[f & 3]);
    FUZZ_CHECK(c != NULL && cJSON_AddItemToArray(choices, c), "sse_choice");
    const char *model_path[4] = {"model", NULL, NULL, NULL};
    size_t ml;
    char *model = cleaned(text, strlen(text), &ml); // the model name is a C string: up to a NUL
    send_event(st, o, model_path, dup_clean(model));
    ci_free(model);
    // The same choice again, checked at its text this time.
    o = sse_object(&h);
    choices = cJSON_AddArrayToObject(o, "choices");
    c = sse_choice(shape, 0, null_text ? NULL : text, n, f & 4, NULL, reasons[f & 3]);
    FUZZ_CHECK(c != NULL && cJSON_AddItemToArray(choices, c), "sse_choice");
    const char *path[3][4] = {[SSE_COMPLETION] = {"choices", "#0", "text", NULL},
                              [SSE_CHAT_MESSAGE] = {"choices", "#0", "message", "content"},
                              [SSE_CHAT_DELTA] = {"choices", "#0", "delta", "content"}};
    if (null_text)
        send_event(st, o, NULL, NULL);
    else
        send_event(st, o, path[shape], dup_clean(clean));
    ci_free(clean);
    free(text);
}

static void op_logprobs(struct state *st, struct fuzz_in *in, bool chat) {
    size_t n, cl;
    char *clean;
    char *text = text_arg(in, &n, &clean, &cl);
    struct sse_top tok = {text, n, -(float)fuzz_u8(in) / 16};
    struct sse_top top[3];
    char *alt[3];
    int n_top = fuzz_u8(in) % 4;
    for (int i = 0; i < n_top; i++) {
        const uint8_t *p;
        size_t l = fuzz_lstr(in, &p);
        alt[i] = fuzz_strndup(p, l);
        top[i] = (struct sse_top){alt[i], l, -(float)i};
    }
    cJSON *lp = chat ? sse_chat_logprobs_new() : sse_completion_logprobs_new();
    bool ok = chat ? sse_chat_logprobs_add(lp, &tok, top, n_top)
                   : sse_completion_logprobs_add(lp, &tok, top, n_top, (long long)n);
    FUZZ_CHECK(lp && ok, "logprobs add");
    cJSON *c = sse_choice(chat ? SSE_CHAT_DELTA : SSE_COMPLETION, 0, "", 0, false, lp, NULL);
    FUZZ_CHECK(c != NULL, "sse_choice with logprobs");
    cJSON *o = cJSON_CreateObject();
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    FUZZ_CHECK(cJSON_AddItemToArray(choices, c), "add choice");
    // completions: logprobs.tokens[0]; chat: logprobs.content[0].token
    static const char *const cpath[4] = {"choices", "#0", "logprobs", "tokens"};
    static const char *const hpath[4] = {"choices", "#0", "logprobs", "content"};
    send_event(st, o, chat ? hpath : cpath, dup_clean(clean));
    for (int i = 0; i < n_top; i++)
        free(alt[i]);
    ci_free(clean);
    free(text);
}

static void check_stream(struct state *st) {
    FUZZ_CHECK(st->taken.n == st->sent.n &&
                   (st->sent.n == 0 || memcmp(st->taken.p, st->sent.p, st->sent.n) == 0),
               "taken bytes (%zu) differ from the events sent (%zu)", st->taken.n, st->sent.n);
    size_t pos = 0;
    int ev = 0;
    char *s = st->taken.p;
    while (pos < st->taken.n) {
        FUZZ_CHECK(st->taken.n - pos >= 8 && memcmp(s + pos, "data: ", 6) == 0, "event %d framing", ev);
        char *line = s + pos + 6;
        char *nl = memchr(line, '\n', st->taken.n - pos - 6);
        FUZZ_CHECK(nl && (size_t)(nl - s) + 1 < st->taken.n && nl[1] == '\n', "event %d not ended by \\n\\n",
                   ev);
        FUZZ_CHECK(!memchr(line, '\r', (size_t)(nl - line)) && !memchr(line, '\0', (size_t)(nl - line)),
                   "event %d holds CR or NUL", ev);
        *nl = '\0';
        if (strcmp(line, "[DONE]") != 0) {
            cJSON *j = cJSON_Parse(line);
            FUZZ_CHECK(j != NULL, "event %d is not JSON: %s", ev, line);
            FUZZ_CHECK(fuzz_utf8_valid(line, (size_t)(nl - line)), "event %d is not UTF-8", ev);
            check_json_strings(j);
            FUZZ_CHECK(ev < st->n_events, "more events than sent");
            if (st->exp[ev].want) {
                const cJSON *v = follow(j, st->exp[ev].path);
                if (cJSON_IsArray(v)) // tokens[] / content[]: the first entry (chat: its "token")
                    v = cJSON_GetArrayItem(v, 0);
                if (cJSON_IsObject(v))
                    v = cJSON_GetObjectItemCaseSensitive(v, "token");
                FUZZ_CHECK(cJSON_IsString(v) && strcmp(v->valuestring, st->exp[ev].want) == 0,
                           "event %d: text changed on the way", ev);
            }
            cJSON_Delete(j);
            ev++;
        }
        *nl = '\n';
        pos = (size_t)(nl - s) + 2;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet();
    openai_init(); // cJSON allocates through ci_malloc, so the leak check sees it
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_MEM_BEGIN();
    struct fuzz_in in = {data, size};
    struct state st;
    memset(&st, 0, sizeof st);
    sse_buf_init(&st.sb);
    for (int ops = 0; in.n > 0 && ops < 64; ops++) {
        switch (fuzz_u8(&in) % 8) {
        case 0:
            op_choice(&st, &in, SSE_COMPLETION);
            break;
        case 1:
            op_choice(&st, &in, SSE_CHAT_DELTA);
            break;
        case 2:
            op_choice(&st, &in, SSE_CHAT_MESSAGE);
            break;
        case 3:
            op_logprobs(&st, &in, false);
            break;
        case 4:
            op_logprobs(&st, &in, true);
            break;
        case 5: {
            cJSON *o = cJSON_CreateObject();
            FUZZ_CHECK(o && sse_add_usage(o, fuzz_u16(&in), fuzz_u16(&in)), "usage");
            send_event(&st, o, NULL, NULL);
            break;
        }
        case 6:
            take(&st, fuzz_u16(&in));
            break;
        default:
            FUZZ_CHECK(sse_buf_done(&st.sb), "done");
            fuzz_buf_put(&st.sent, "data: [DONE]\n\n", 14);
            break;
        }
    }
    take(&st, SIZE_MAX);
    FUZZ_CHECK(!sse_buf_pending(&st.sb), "bytes left after taking everything");
    check_stream(&st);
    for (int i = 0; i < st.n_events; i++)
        free(st.exp[i].want);
    free(st.sent.p);
    free(st.taken.p);
    sse_buf_deinit(&st.sb);
    FUZZ_MEM_END();
    return 0;
}
