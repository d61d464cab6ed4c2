/* OpenAI request bodies: openai_parse for /v1/completions and /v1/chat/completions, openai_parse_tokenize
 * and openai_parse_detokenize, and the error body every rejection turns into.
 *
 * Input: byte 0 picks the endpoint (bits 0-1: completions, chat, tokenize, detokenize) and the model's
 * limits (bits 2-4: vocabulary size, bits 5-7: context length, from small tables with edge values); the
 * rest is the body.
 *
 * Properties checked:
 *   - an accepted request is within the documented limits (openai.h and README.md): n, prompts and
 *     choices, max_tokens within the context, every sampling parameter in its range, at most 4 stop
 *     strings of 1..256 bytes, logprobs in -1..20, logit_bias entries with ids in the vocabulary and
 *     biases in [-100, 100] (or -inf for a ban), token prompts non-empty with ids in the vocabulary,
 *     1..1024 chat messages with roles system/user/assistant/tool and non-NULL content;
 *   - accepted chat messages always format with the server's default chat template (one with a tool
 *     message is refused there with the role named: the built-in templates have no tool role);
 *   - a rejected request has status 400 (500 only for out of memory), a parameter name that fits, and an
 *     error body that is valid JSON and valid UTF-8 with error.message/type strings. */
#include <cjson/cJSON.h>
#include <math.h>

#include "fuzz.h"
#include "server/openai.h"

static const int vocab_sizes[8] = {32000, 1, 2, 512, 50257, 128256, 0x7fffffff, 100};
static const int ctx_sizes[8] = {2048, 1, 0, 4096, 128, 32768, 0x7fffffff, 16};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet();
    openai_init(); // cJSON allocates through ci_malloc, so the leak check sees it
    return 0;
}

static bool in_range(float v, double lo, double hi) {
    return isfinite(v) && v >= lo && v <= hi;
}

static void check_messages(const struct cinfer_chat_message *m, int n) {
    FUZZ_CHECK(n >= 1 && n <= OPENAI_MAX_MESSAGES, "%d messages", n);
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(m[i].role && m[i].content, "message %d: NULL field", i);
        FUZZ_CHECK(!strcmp(m[i].role, "system") || !strcmp(m[i].role, "user") ||
                       !strcmp(m[i].role, "assistant") || !strcmp(m[i].role, "tool"),
                   "message %d: role '%s'", i, m[i].role);
    }
    char *prompt = NULL;
    size_t len = 0;
    struct cinfer_error err = {0};
    bool tool = false; // the built-in templates have no tool role: refused with the role named (a 400)
    for (int i = 0; i < n; i++)
        tool = tool || !strcmp(m[i].role, "tool");
    enum cinfer_status s = cinfer_chat_apply(CINFER_CHAT_TEMPLATE_DEFAULT, m, n, true, &prompt, &len, &err);
    FUZZ_CHECK(tool ? s == CINFER_ERR_INVALID && strstr(err.message, "'tool'") : s == CINFER_OK,
               "accepted messages do not format: %s", err.message);
    cinfer_free(prompt);
}

static void check_ids(const cinfer_token *ids, int n, const struct openai_limits *lim) {
    FUZZ_CHECK(n >= 0 && (n == 0) == (ids == NULL), "%d ids", n);
    for (int i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < lim->n_vocab, "id %d of %d", ids[i], lim->n_vocab);
}

static void check_request(const struct openai_request *r, enum openai_endpoint ep,
                          const struct openai_limits *lim) {
    const struct cinfer_sampling *s = &r->sampling;
    FUZZ_CHECK(r->endpoint == ep, "endpoint");
    FUZZ_CHECK(r->n >= 1 && r->n <= OPENAI_MAX_N, "n = %d", r->n);
    FUZZ_CHECK(r->max_tokens == 0 ||
                   (r->max_tokens >= 1 && r->max_tokens <= (lim->n_ctx > 0 ? lim->n_ctx : 1)),
               "max_tokens = %d (context %d)", r->max_tokens, lim->n_ctx);
    FUZZ_CHECK(in_range(s->temperature, 0, 2) && in_range(s->top_p, 0, 1) && s->top_p > 0 &&
                   in_range(s->min_p, 0, 1) && in_range(s->presence_penalty, -2, 2) &&
                   in_range(s->frequency_penalty, -2, 2) && in_range(s->repetition_penalty, 0, 100) &&
                   s->repetition_penalty > 0 && s->top_k >= 0,
               "sampling parameter out of range");
    FUZZ_CHECK(r->has_seed || s->seed == 0, "seed without has_seed");
    FUZZ_CHECK(r->n_stop >= 0 && r->n_stop <= OPENAI_MAX_STOP, "%d stop strings", r->n_stop);
    for (int i = 0; i < r->n_stop; i++) {
        size_t l = r->stop[i] ? strlen(r->stop[i]) : 0;
        FUZZ_CHECK(l >= 1 && l <= OPENAI_MAX_STOP_BYTES, "stop %d of %zu bytes", i, l);
    }
    FUZZ_CHECK(r->logprobs >= -1 && r->logprobs <= OPENAI_MAX_LOGPROBS, "logprobs = %d", r->logprobs);
    FUZZ_CHECK(r->n_logit_bias >= 0 && r->n_logit_bias <= OPENAI_MAX_LOGIT_BIAS, "%d biases",
               r->n_logit_bias);
    for (int i = 0; i < r->n_logit_bias; i++) {
        const struct cinfer_logit_bias *b = &r->logit_bias[i];
        FUZZ_CHECK(b->token >= 0 && b->token < lim->n_vocab, "bias token %d", b->token);
        FUZZ_CHECK(in_range(b->bias, -100, 100) || b->bias == -INFINITY, "bias %g", (double)b->bias);
    }
    if (ep == OPENAI_COMPLETIONS) {
        FUZZ_CHECK(r->n_prompts >= 1 && r->n_prompts <= OPENAI_MAX_PROMPTS, "%d prompts", r->n_prompts);
        FUZZ_CHECK(r->n_prompts * r->n <= OPENAI_MAX_CHOICES, "%d choices", r->n_prompts * r->n);
        FUZZ_CHECK(r->messages == NULL && r->n_messages == 0, "messages in a completion");
        for (int i = 0; i < r->n_prompts; i++) {
            const struct openai_prompt *p = &r->prompts[i];
            FUZZ_CHECK((p->text != NULL) != (p->n_ids > 0), "prompt %d: text and ids", i);
            check_ids(p->ids, p->n_ids, lim);
        }
    } else {
        FUZZ_CHECK(r->prompts == NULL && r->n_prompts == 0 && !r->echo, "prompts in a chat");
        check_messages(r->messages, r->n_messages);
    }
}

/* Every string of a cJSON tree is valid UTF-8 without NUL. */
static void check_json_strings(const cJSON *j) {
    for (; j; j = j->next) {
        if (j->string)
            FUZZ_CHECK(fuzz_utf8_valid(j->string, strlen(j->string)), "key is not UTF-8");
        if (cJSON_IsString(j))
            FUZZ_CHECK(fuzz_utf8_valid(j->valuestring, strlen(j->valuestring)), "string is not UTF-8");
        check_json_strings(j->child);
    }
}

static void check_error(const struct openai_error *e, enum ci_status s) {
    FUZZ_CHECK(s == CI_ERR_INVALID || s == CI_ERR_NOMEM, "status %d", (int)s);
    FUZZ_CHECK(e->status == (s == CI_ERR_NOMEM ? 500 : 400), "HTTP %d for status %d", e->status, (int)s);
    FUZZ_CHECK(memchr(e->param, '\0', sizeof e->param) && memchr(e->message, '\0', sizeof e->message) &&
                   e->message[0] && e->type,
               "error fields");
    size_t len = 0;
    char *body = openai_error_json(e, &len);
    FUZZ_CHECK(body && strlen(body) == len, "error body");
    FUZZ_CHECK(fuzz_utf8_valid(body, len), "error body is not UTF-8: %s", body);
    cJSON *j = cJSON_Parse(body);
    FUZZ_CHECK(j != NULL, "error body is not JSON: %s", body);
    const cJSON *er = cJSON_GetObjectItemCaseSensitive(j, "error");
    FUZZ_CHECK(cJSON_IsObject(er) && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(er, "message")) &&
                   cJSON_IsString(cJSON_GetObjectItemCaseSensitive(er, "type")),
               "error body shape: %s", body);
    check_json_strings(j);
    cJSON_Delete(j);
    ci_free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_MEM_BEGIN();
    struct fuzz_in in = {data, size};
    unsigned head = fuzz_u8(&in);
    struct openai_limits lim = {vocab_sizes[(head >> 2) & 7], ctx_sizes[(head >> 5) & 7]};
    const uint8_t *b;
    size_t len = fuzz_bytes(&in, SIZE_MAX, &b);
    char *body = fuzz_strndup(b, len); // the server hands over a NUL-terminated body
    struct openai_error e;
    memset(&e, 0, sizeof e);
    enum ci_status s;
    switch (head & 3) {
    case 0:
    case 1: {
        enum openai_endpoint ep = (head & 3) == 0 ? OPENAI_COMPLETIONS : OPENAI_CHAT;
        struct openai_request r;
        s = openai_parse(ep, body, len, &lim, &r, &e);
        if (s == CI_OK) {
            check_request(&r, ep, &lim);
            openai_request_deinit(&r);
        }
        break;
    }
    case 2: {
        struct openai_tokenize t;
        s = openai_parse_tokenize(body, len, &t, &e);
        if (s == CI_OK) {
            FUZZ_CHECK((t.prompt != NULL) != (t.messages != NULL), "prompt and messages");
            if (t.messages)
                check_messages(t.messages, t.n_messages);
            openai_tokenize_deinit(&t);
        }
        break;
    }
    default: {
        struct openai_detokenize d;
        s = openai_parse_detokenize(body, len, &lim, &d, &e);
        if (s == CI_OK) {
            check_ids(d.ids, d.n_ids, &lim);
            openai_detokenize_deinit(&d);
        }
        break;
    }
    }
    if (s != CI_OK)
        check_error(&e, s);
    free(body);
    FUZZ_MEM_END();
    return 0;
}
