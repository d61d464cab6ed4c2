/* Fault injection, SQLite's discipline: the counted allocator (core/mem.h) fails the n-th allocation, for
 * n = 1, 2, 3, ... until the operation completes without reaching it, during model load (GGUF, and llama2.c
 * with tokenizer.bin), tokenizer build and encode (SentencePiece, byte-level BPE with PCRE2 pre-tokenizers),
 * engine creation, `cinfer quantize` (no partial output either), and whole requests through an in-process server (/v1/completions and
 * /v1/chat/completions, streaming and not, /tokenize).  Each failed run must return CI_ERR_NOMEM with a
 * message and leave ci_mem_in_use() where it was (LeakSanitizer checks the rest under make asan); a run that
 * absorbs a failure (a fallback) must still give the right result.  A request under a failure must get the
 * normal 200 or a well-formed OpenAI error (a 500 "out of memory" JSON body, or an SSE error event then
 * [DONE]), never a hang, a crash or a cut body, and the next request must succeed.  Prints PASS/FAIL lines.
 */
#include "test.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "cinfer.h"
#include "core/mem.h"
#include "format/gguf.h"
#include "server/http.h"
#include "server/routes.h"
#include "tokenizer/tokenizer.h"

#define MAX_N 100000 // no operation here comes near this many allocations

/* ---- the loop ---------------------------------------------------------------------------------------- */

struct fault_op {
    /* Runs the operation; on CI_OK its result stays in ctx.  err is filled on failure. */
    enum ci_status (*run)(void *ctx, struct ci_err *err);
    /* After CI_OK: whether the result is the one an unarmed run gives (absorbed: although an allocation
     * failed, the operation fell back on something else). */
    bool (*check)(void *ctx, bool absorbed);
    /* After CI_OK: frees the result. */
    void (*undo)(void *ctx);
    void *ctx;
};

/* Runs op with allocation n failing, for every n; returns how many allocations a complete run makes. */
static int fault_depth; // fault_loop within a check of an outer fault_loop: no notes

static uint64_t fault_loop(const char *what, const struct fault_op *op) {
    int absorbed = 0;
    fault_depth++;
    for (uint64_t n = 1; n <= MAX_N; n++) {
        size_t before = ci_mem_in_use();
        struct ci_err err = {0};
        ci_mem_fail_after(n);
        enum ci_status s = op->run(op->ctx, &err);
        ci_mem_fail_after(0);
        bool fired = ci_mem_fail_fired();
        uint64_t count = ci_mem_alloc_count();
        if (s == CI_OK) {
            if (!op->check(op->ctx, fired))
                TEST_FAILF("%s, allocation %llu failing: succeeded with a wrong result", what,
                           (unsigned long long)n);
            op->undo(op->ctx);
            absorbed += fired;
        } else if (!fired) {
            TEST_FAILF("%s: failed with no allocation failing (%s: %s)", what, ci_status_str(s), err.msg);
            break;
        } else if (s != CI_ERR_NOMEM || err.msg[0] == '\0') {
            TEST_FAILF("%s, allocation %llu failing: %s '%s' (want CI_ERR_NOMEM and a message)", what,
                       (unsigned long long)n, ci_status_str(s), err.msg);
        }
        if (ci_mem_in_use() != before) {
            TEST_FAILF("%s, allocation %llu failing: %zu bytes in use after, %zu before (a leak)", what,
                       (unsigned long long)n, ci_mem_in_use(), before);
            break;
        }
        if (!fired) {
            // A complete run made every allocation of the operation, and each failed once before.
            if (count != n - 1)
                TEST_FAILF("%s: %llu allocations in the complete run, %llu in the failing ones", what,
                           (unsigned long long)count, (unsigned long long)(n - 1));
            if (fault_depth == 1)
                printf("note: %s: %llu allocations, each failed once (%d absorbed by a fallback)\n", what,
                       (unsigned long long)(n - 1), absorbed);
            fault_depth--;
            return n - 1;
        }
        if (n == MAX_N)
            TEST_FAILF("%s: still allocating after %d allocations", what, MAX_N);
    }
    fault_depth--;
    return 0;
}

/* ---- model load ---------------------------------------------------------------------------------------- */

struct load_ctx {
    char model[512], tok[512];
    bool has_tok;
    struct cinfer_model *m;
    struct cinfer_model_info want;
};

static enum ci_status load_run(void *p, struct ci_err *err) {
    struct load_ctx *c = p;
    struct cinfer_error e = {0};
    enum cinfer_status s = cinfer_model_load(c->model, c->has_tok ? c->tok : NULL, &c->m, &e);
    if (s != CINFER_OK) {
        CHECK(c->m == NULL);
        ci_err_set(err, (enum ci_status)s, "%s", e.message);
    }
    return (enum ci_status)s;
}

static bool load_check(void *p, bool absorbed) {
    (void)absorbed;
    struct load_ctx *c = p;
    struct cinfer_model_info got;
    cinfer_model_info(c->m, &got);
    size_t n = 0;
    const char *piece = cinfer_token_piece(c->m, 1, &n);
    return got.n_vocab == c->want.n_vocab && got.n_layer == c->want.n_layer &&
           got.n_params == c->want.n_params && piece && n > 0 && cinfer_model_name(c->m) &&
           cinfer_token_is_eog(c->m, 2);
}

static void load_undo(void *p) {
    struct load_ctx *c = p;
    cinfer_model_free(c->m);
    c->m = NULL;
}

static void load_faults(const char *model, const char *tok) {
    struct load_ctx c = {.has_tok = tok != NULL};
    test_model_path(c.model, sizeof c.model, model);
    if (tok)
        test_model_path(c.tok, sizeof c.tok, tok);
    struct ci_err err = {0};
    if (load_run(&c, &err) != CI_OK) {
        TEST_FAILF("load %s: %s", model, err.msg);
        return;
    }
    cinfer_model_info(c.m, &c.want);
    load_undo(&c);
    struct fault_op op = {load_run, load_check, load_undo, &c};
    CHECK(fault_loop(model, &op) > 0);
}

TEST(model_load_gguf) {
    load_faults("stories260K.gguf", NULL);
}

TEST(model_load_llama2c_and_tokenizer_bin) {
    load_faults("stories260K.bin", "tok512.bin");
}

/* ---- quantize ------------------------------------------------------------------------------------------ */

struct quant_ctx {
    char in[512], out[512];
    void *want; // the file an unarmed run writes
    size_t want_n;
};

static enum ci_status quant_run(void *p, struct ci_err *err) {
    struct quant_ctx *q = p;
    struct cinfer_quantize_params prm;
    cinfer_quantize_params_default(&prm);
    prm.n_threads = 2;
    struct cinfer_error e = {0};
    enum cinfer_status s = cinfer_quantize(q->in, q->out, "Q4_K_M", &prm, NULL, &e);
    if (s != CINFER_OK) {
        if (access(q->out, F_OK) == 0)
            TEST_FAILF("quantize failed (%s) but left %s", e.message, q->out);
        ci_err_set(err, (enum ci_status)s, "%s", e.message);
    }
    return (enum ci_status)s;
}

static bool quant_check(void *p, bool absorbed) {
    (void)absorbed;
    struct quant_ctx *q = p;
    size_t n = 0;
    void *got = test_read_file(q->out, &n);
    bool same = got && n == q->want_n && memcmp(got, q->want, n) == 0;
    free(got);
    return same;
}

static void quant_undo(void *p) {
    remove(((struct quant_ctx *)p)->out);
}

TEST(quantize_model) {
    struct quant_ctx q = {0};
    test_model_path(q.in, sizeof q.in, "stories260K.gguf");
    test_tmp_path(q.out, sizeof q.out, "faults-q4_k_m.gguf");
    struct ci_err err = {0};
    if (quant_run(&q, &err) != CI_OK || !(q.want = test_read_file(q.out, &q.want_n))) {
        TEST_FAILF("quantize %s: %s", q.in, err.msg);
        return;
    }
    quant_undo(&q);
    struct fault_op op = {quant_run, quant_check, quant_undo, &q};
    CHECK(fault_loop("quantize", &op) > 0);
    free(q.want);
}

/* ---- tokenizer build and encode ------------------------------------------------------------------------ */

static const char sample_text[] =
    "Hello world!  It's 2024: naïve café, 日本語 and emoji 🦙\n\tdon't   stop.";

struct tok_ctx {
    struct gguf *g;
    struct tokenizer *t; // built by tok_build_run; the encoder's tokenizer for tok_encode_run
    int32_t want[256], *ids;
    int n_want, n_ids;
};

static enum ci_status tok_build_run(void *p, struct ci_err *err) {
    struct tok_ctx *c = p;
    return tokenizer_from_gguf(c->g, &c->t, err);
}

static enum ci_status tok_encode_run(void *p, struct ci_err *err);
static bool tok_encode_check(void *p, bool absorbed);
static void tok_encode_undo(void *p);

static bool tok_build_check(void *p, bool absorbed) {
    struct tok_ctx *c = p;
    int32_t *ids = NULL;
    int n = 0;
    struct ci_err err = {0};
    bool ok =
        tokenizer_encode(c->t, sample_text, strlen(sample_text), false, true, &ids, &n, &err) == CI_OK &&
        n == c->n_want && memcmp(ids, c->want, (size_t)n * sizeof *ids) == 0;
    ci_free(ids);
    // A build that absorbed a failure lost a PCRE2 JIT compilation: its encoder runs the interpreter, whose
    // backtracking frames come from the heap.  Fail those allocations too.
    if (ok && absorbed) {
        struct fault_op enc = {tok_encode_run, tok_encode_check, tok_encode_undo, c};
        ok = fault_loop("encode after a lost JIT compilation", &enc) > 0;
    }
    return ok;
}

static void tok_build_undo(void *p) {
    struct tok_ctx *c = p;
    tokenizer_free(c->t);
    c->t = NULL;
}

static enum ci_status tok_encode_run(void *p, struct ci_err *err) {
    struct tok_ctx *c = p;
    return tokenizer_encode(c->t, sample_text, strlen(sample_text), false, true, &c->ids, &c->n_ids, err);
}

static bool tok_encode_check(void *p, bool absorbed) {
    (void)absorbed;
    struct tok_ctx *c = p;
    return c->n_ids == c->n_want && memcmp(c->ids, c->want, (size_t)c->n_ids * sizeof *c->ids) == 0;
}

static void tok_encode_undo(void *p) {
    struct tok_ctx *c = p;
    ci_free(c->ids);
    c->ids = NULL;
}

static void tokenizer_faults(const char *vocab, enum tokenizer_type want_type) {
    char path[512], what[600];
    struct tok_ctx c = {0};
    struct ci_err err = {0};
    if (gguf_open(test_model_path(path, sizeof path, vocab), &c.g, &err) != CI_OK) {
        TEST_FAILF("open %s: %s", vocab, err.msg);
        return;
    }
    int32_t *ids = NULL;
    if (tokenizer_from_gguf(c.g, &c.t, &err) != CI_OK ||
        tokenizer_encode(c.t, sample_text, strlen(sample_text), false, true, &ids, &c.n_want, &err) !=
            CI_OK) {
        TEST_FAILF("%s: %s", vocab, err.msg);
        tokenizer_free(c.t);
        gguf_free(c.g);
        return;
    }
    CHECK(tokenizer_type(c.t) == want_type);
    CHECK(c.n_want > 0 && c.n_want <= 256);
    memcpy(c.want, ids, (size_t)(c.n_want < 256 ? c.n_want : 256) * sizeof *ids);
    ci_free(ids);
    snprintf(what, sizeof what, "%s encode", vocab);
    struct fault_op enc = {tok_encode_run, tok_encode_check, tok_encode_undo, &c};
    CHECK(fault_loop(what, &enc) > 0);
    tokenizer_free(c.t);
    c.t = NULL;
    snprintf(what, sizeof what, "%s build", vocab);
    struct fault_op build = {tok_build_run, tok_build_check, tok_build_undo, &c};
    CHECK(fault_loop(what, &build) > 0);
    gguf_free(c.g);
}

TEST(tokenizer_spm) {
    tokenizer_faults("ggml-vocab/ggml-vocab-llama-spm.gguf", TOKENIZER_TYPE_SPM);
}

TEST(tokenizer_bpe_gpt2) {
    tokenizer_faults("ggml-vocab/ggml-vocab-gpt-2.gguf", TOKENIZER_TYPE_BPE);
}

TEST(tokenizer_bpe_deepseek_llm) { // several pre-tokenizer regexes
    tokenizer_faults("ggml-vocab/ggml-vocab-deepseek-llm.gguf", TOKENIZER_TYPE_BPE);
}

/* ---- engine creation ----------------------------------------------------------------------------------- */

struct engine_ctx {
    struct cinfer_model *m;
    struct cinfer_engine_options o;
    struct cinfer_engine *e;
};

static enum ci_status engine_run(void *p, struct ci_err *err) {
    struct engine_ctx *c = p;
    struct cinfer_error e = {0};
    enum cinfer_status s = cinfer_engine_create(c->m, &c->o, &c->e, &e);
    if (s == CINFER_OK && (s = cinfer_engine_start(c->e, &e)) != CINFER_OK) {
        cinfer_engine_free(c->e);
        c->e = NULL;
    }
    if (s != CINFER_OK)
        ci_err_set(err, (enum ci_status)s, "%s", e.message);
    return (enum ci_status)s;
}

static bool engine_check(void *p, bool absorbed) {
    (void)absorbed;
    struct engine_ctx *c = p;
    struct cinfer_engine_info info;
    cinfer_engine_info(c->e, &info);
    return info.kv_blocks > 0 && info.n_ctx > 0;
}

static void engine_undo(void *p) {
    struct engine_ctx *c = p;
    cinfer_engine_free(c->e);
    c->e = NULL;
}

TEST(engine_create) {
    char path[512];
    struct engine_ctx c = {0};
    struct cinfer_error e = {0};
    if (cinfer_model_load(test_model_path(path, sizeof path, "stories260K.gguf"), NULL, &c.m, &e) !=
        CINFER_OK) {
        TEST_FAILF("load: %s", e.message);
        return;
    }
    cinfer_engine_options_default(&c.o);
    c.o.n_threads = 2;
    c.o.kv_mem_bytes = 4 << 20; // the whole 2048-token context
    struct fault_op op = {engine_run, engine_check, engine_undo, &c};
    CHECK(fault_loop("engine create and start", &op) > 0);
    c.o.prefix_cache = false;
    c.o.policy = "static";
    CHECK(fault_loop("engine create and start (static, no prefix cache)", &op) > 0);
    cinfer_model_free(c.m);
}

/* ---- requests through the server ----------------------------------------------------------------------- */

struct body {
    char *data;
    size_t len;
};

static size_t on_data(char *p, size_t size, size_t n, void *user) {
    struct body *b = user;
    size_t add = size * n;
    char *grown = realloc(b->data, b->len + add + 1);
    if (!grown)
        return 0;
    memcpy(grown + b->len, p, add);
    b->len += add;
    grown[b->len] = '\0';
    b->data = grown;
    return add;
}

/* POSTs body to path; returns the HTTP status (0 on a transport error: a reset, a cut body, a timeout). */
static long post(int port, const char *path, const char *body, struct body *out, char *why, size_t why_cap) {
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *h = curl_easy_init();
    if (!h) {
        snprintf(why, why_cap, "curl_easy_init failed");
        return 0;
    }
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    long status = 0;
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    else
        snprintf(why, why_cap, "curl: %.100s (%.120s)", curl_easy_strerror(rc), errbuf);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return status;
}

/* {"error":{"message": "...out of memory...", "type": string, "param", "code"}} */
static bool error_shape(const cJSON *j) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");
    return cJSON_IsObject(e) && cJSON_IsString(msg) && strstr(msg->valuestring, "out of memory") &&
           cJSON_IsString(type) && cJSON_HasObjectItem(e, "param") && cJSON_HasObjectItem(e, "code");
}

enum req_kind { REQ_COMPLETION, REQ_COMPLETION_STREAM, REQ_CHAT, REQ_CHAT_STREAM, REQ_TOKENIZE };

struct req {
    const char *name, *path, *body;
    enum req_kind kind;
};

/* Whether a 200 body is a complete answer; *errors counts error events (streams). */
static bool ok_body(const struct req *r, const char *data, int *errors, char *why, size_t why_cap) {
    *errors = 0;
    if (r->kind == REQ_COMPLETION_STREAM || r->kind == REQ_CHAT_STREAM) {
        // Events: "data: {json}\n\n" ..., the last one "data: [DONE]\n\n"; a JSON event is a chunk or an
        // error.
        const char *p = data;
        int chunks = 0;
        bool done = false;
        while (*p) {
            if (done || strncmp(p, "data: ", 6) != 0) {
                snprintf(why, why_cap, "not an SSE event at byte %td", p - data);
                return false;
            }
            const char *end = strstr(p, "\n\n");
            if (!end) {
                snprintf(why, why_cap, "an unterminated event at byte %td", p - data);
                return false;
            }
            if (end - p == 12 && strncmp(p + 6, "[DONE]", 6) == 0) {
                done = true;
            } else {
                cJSON *j = cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6));
                bool chunk = j && cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "choices"));
                bool err = j && error_shape(j);
                cJSON_Delete(j);
                if (!chunk && !err) {
                    snprintf(why, why_cap, "event at byte %td is neither a chunk nor an error", p - data);
                    return false;
                }
                chunks += chunk;
                *errors += err;
            }
            p = end + 2;
        }
        if (!done)
            snprintf(why, why_cap, "no [DONE]");
        return done && (chunks > 0 || *errors > 0);
    }
    cJSON *j = cJSON_Parse(data);
    const char *key = r->kind == REQ_TOKENIZE ? "tokens" : "choices";
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, key);
    bool ok = cJSON_IsArray(arr) && cJSON_GetArraySize(arr) > 0;
    if (ok && r->kind != REQ_TOKENIZE) {
        const cJSON *c0 = cJSON_GetArrayItem(arr, 0);
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(c0, "message");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(r->kind == REQ_CHAT ? msg : c0,
                                                             r->kind == REQ_CHAT ? "content" : "text");
        ok = cJSON_IsString(text) && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "usage"));
    }
    cJSON_Delete(j);
    if (!ok)
        snprintf(why, why_cap, "not a complete %s answer", r->name);
    return ok;
}

static void append(char *out, size_t cap, const char *s) {
    size_t n = strlen(out);
    snprintf(out + n, cap - n, "%s", s);
}

/* The answer of a complete 200 body, to compare with an unarmed run's (all generation requests are
 * greedy): choice 0's text (streams: its pieces joined), or the token list. */
static void answer(const struct req *r, const char *data, char *out, size_t cap) {
    out[0] = '\0';
    bool stream = r->kind == REQ_COMPLETION_STREAM || r->kind == REQ_CHAT_STREAM;
    bool chat = r->kind == REQ_CHAT || r->kind == REQ_CHAT_STREAM;
    for (const char *p = data; *p;) {
        const char *json = stream ? p + 6 : p, *end = stream ? strstr(p, "\n\n") : p + strlen(p);
        if (!end || (stream && strncmp(p, "data: ", 6) != 0))
            return;
        cJSON *j = cJSON_ParseWithLength(json, (size_t)(end - json));
        if (r->kind == REQ_TOKENIZE) {
            char *t = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(j, "tokens"));
            append(out, cap, t ? t : "");
            cJSON_free(t);
        }
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "choices")) {
            const cJSON *index = cJSON_GetObjectItemCaseSensitive(c, "index");
            const cJSON *in = chat ? cJSON_GetObjectItemCaseSensitive(c, stream ? "delta" : "message") : c;
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(in, chat ? "content" : "text");
            if (cJSON_IsNumber(index) && index->valueint == 0 && cJSON_IsString(text))
                append(out, cap, text->valuestring);
        }
        cJSON_Delete(j);
        p = stream ? end + 2 : end;
    }
}

/* Waits until the bytes in use are back to before (the connection and the request freed on every thread):
 * every allocation of the request has happened by then.  False after 20 s. */
static bool settle(size_t before) {
    for (int i = 0; i < 20000; i++) {
        if (ci_mem_in_use() == before)
            return true;
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    }
    return false;
}

/* One request with allocation n failing (0: none).  Returns false when the answer is wrong; *fired tells
 * whether the failure happened.  A complete answer must be want (when not NULL); it is left in got. */
static bool one_request(int port, const struct req *r, uint64_t n, bool *fired, int *n_errors,
                        const char *want, char *got, size_t got_cap) {
    size_t before = ci_mem_in_use();
    struct body b = {0};
    char why[256] = "";
    if (n)
        ci_mem_fail_after(n);
    long st = post(port, r->path, r->body, &b, why, sizeof why);
    bool settled = settle(before);
    ci_mem_fail_after(0);
    *fired = n && ci_mem_fail_fired();
    bool ok = false;
    int errors = 0;
    got[0] = '\0';
    if (st == 200) {
        ok = ok_body(r, b.data ? b.data : "", &errors, why, sizeof why);
        *n_errors += errors > 0;
        if (ok && errors == 0) {
            answer(r, b.data, got, got_cap);
            if (want && strcmp(got, want) != 0) {
                ok = false;
                snprintf(why, sizeof why, "answer '%.80s', want '%.80s'", got, want);
            }
        }
    } else if (st >= 500) {
        // A failure of ours: only an out-of-memory error, well formed.
        cJSON *j = cJSON_Parse(b.data ? b.data : "");
        ok = j && error_shape(j);
        cJSON_Delete(j);
        *n_errors += 1;
        if (!ok)
            snprintf(why, sizeof why, "status %ld without an 'out of memory' error body", st);
    } else if (st) {
        snprintf(why, sizeof why, "status %ld", st);
    }
    if (ok && (!*fired && (st != 200 || errors > 0))) {
        ok = false;
        snprintf(why, sizeof why, "status %ld / %d error events with no allocation failing", st, errors);
    }
    if (!settled) {
        ok = false;
        snprintf(why + strlen(why), sizeof why - strlen(why), "; %zu bytes in use after it, %zu before",
                 ci_mem_in_use(), before);
    }
    if (!ok)
        TEST_FAILF("%s, allocation %llu failing: %s; body: %.300s", r->name, (unsigned long long)n, why,
                   b.data ? b.data : "(none)");
    free(b.data);
    return ok;
}

TEST(server_requests) {
    static const struct req reqs[] = {
        {"completion", "/v1/completions",
         "{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"temperature\":0}", REQ_COMPLETION},
        {"completion, n = 2, with logprobs, echo and stop", "/v1/completions",
         "{\"prompt\":\"Once upon a time\",\"n\":2,\"max_tokens\":3,\"logprobs\":2,\"echo\":true,"
         "\"stop\":[\"zz\"],\"temperature\":0}",
         REQ_COMPLETION},
        {"streaming completion of 2 prompts", "/v1/completions",
         "{\"prompt\":[\"Once upon a time\",[1,403,407]],\"max_tokens\":4,\"stream\":true,\"stream_options\":"
         "{\"include_usage\":true},\"temperature\":0}",
         REQ_COMPLETION_STREAM},
        {"chat", "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"system\",\"content\":\"Be "
         "brief.\"},{\"role\":\"user\",\"content\":\"Hi\"}],"
         "\"max_tokens\":4,\"temperature\":0}",
         REQ_CHAT},
        {"streaming chat with logprobs", "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4,\"stream\":true,"
         "\"logprobs\":true,\"top_logprobs\":2,\"temperature\":0}",
         REQ_CHAT_STREAM},
        {"tokenize", "/tokenize", "{\"prompt\":\"Once upon a time\"}", REQ_TOKENIZE},
    };
    size_t baseline = ci_mem_in_use();
    char path[512];
    struct cinfer_model *m = NULL;
    struct cinfer_engine *e = NULL;
    struct routes *routes = NULL;
    struct http_server *http = NULL;
    struct cinfer_error ce = {0};
    struct ci_err err = {0};
    struct cinfer_engine_options eo;
    cinfer_engine_options_default(&eo);
    eo.n_threads = 1;
    eo.kv_mem_bytes = 4 << 20;
    int n_routes = 0;
    const struct http_route *table = routes_table(&n_routes);
    struct http_options ho = {.host = "127.0.0.1",
                              .port = 0,
                              .max_connections = 16,
                              .timeout_s = 60,
                              .request_timeout_s = 60,
                              .n_threads = 2,
                              .max_body_bytes = 1 << 20};
    if (cinfer_model_load(test_model_path(path, sizeof path, "stories260K.gguf"), NULL, &m, &ce) !=
            CINFER_OK ||
        cinfer_engine_create(m, &eo, &e, &ce) != CINFER_OK || cinfer_engine_start(e, &ce) != CINFER_OK) {
        TEST_FAILF("model and engine: %s", ce.message);
        goto done;
    }
    struct routes_config rc = {
        .chat_template = CINFER_CHAT_TEMPLATE_DEFAULT, .max_requests = 8, .max_seqs = eo.max_seqs};
    if (routes_create(&routes, &err) != CI_OK ||
        http_server_start(&ho, table, n_routes, routes, &http, &err) != CI_OK ||
        routes_ready(routes, m, e, &rc, &err) != CI_OK) {
        TEST_FAILF("server: %s", err.msg);
        goto done;
    }
    int port = http_server_port(http);
    for (size_t k = 0; k < sizeof reqs / sizeof reqs[0]; k++) {
        const struct req *r = &reqs[k];
        bool fired = false;
        int n_errors = 0, dummy = 0;
        char want[1024], got[1024];
        if (!one_request(port, r, 0, &fired, &dummy, NULL, want, sizeof want) || !want[0]) {
            TEST_FAILF("%s: no answer", r->name);
            continue;
        }
        uint64_t n = 1;
        for (; n <= MAX_N; n++) {
            bool ok = one_request(port, r, n, &fired, &n_errors, want, got, sizeof got);
            // Whatever happened, the server goes on serving.
            bool dummy_fired;
            if (!one_request(port, r, 0, &dummy_fired, &dummy, want, got, sizeof got) || !ok)
                break;
            if (!fired)
                break;
        }
        if (!fired)
            printf("note: %s: %llu allocations, each failed once (%d answered with an error)\n", r->name,
                   (unsigned long long)(n - 1), n_errors);
    }
done:
    http_server_free(http);
    cinfer_engine_free(e);
    cinfer_model_free(m);
    routes_free(routes);
    if (ci_mem_in_use() != baseline)
        TEST_FAILF("%zu bytes in use after the server and the engine are gone, %zu before", ci_mem_in_use(),
                   baseline);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    RUN(model_load_gguf);
    RUN(model_load_llama2c_and_tokenizer_bin);
    RUN(tokenizer_spm);
    RUN(tokenizer_bpe_gpt2);
    RUN(tokenizer_bpe_deepseek_llm);
    RUN(quantize_model);
    RUN(engine_create);
    RUN(server_requests);
    curl_global_cleanup();
    return test_exit_code();
}
