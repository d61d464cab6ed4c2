/* cinfer bench serve: the serving load generator (see bench_serve.h and bench/serve.md).
 *
 * Concurrency model: one thread drives every transfer through libcurl's multi interface.  vLLM's client does
 * the same with one asyncio loop.  A thread per in-flight request would be simpler to write, but with
 * `--request-rate inf` and no --max-concurrency every request is in flight at once (hundreds of threads), the
 * timestamps would be taken on threads that compete with the server for the CPU, and fork() for gnuplot would
 * happen in a threaded process.  With one thread the arrival schedule is just the poll timeout, the cap on
 * in-flight requests is a counter (the semaphore), and all state is touched by one thread, so nothing is
 * locked.  Timestamps are taken in the write callback, i.e. when curl reads the bytes off the socket; bytes
 * that arrive in one read get one timestamp, exactly as they would for an asyncio reader.
 *
 * Measurement (per request, from the send time t0, which is when the transfer is handed to curl):
 *   TTFT  = first SSE event whose choices[0].text (or .delta.content) is non-empty − t0
 *   ITL   = every gap between consecutive content events (an event may carry several tokens)
 *   E2EL  = last byte received − t0
 *   TPOT  = (E2EL − TTFT) / (output tokens − 1), output tokens = usage.completion_tokens when the server sent
 *           usage, else the number of content events
 * A request succeeds when the transfer completed, the status was 2xx, no error event came and at least one
 * content event came.  Percentiles are numpy's linear interpolation (core/stats.h). */
#include "bench/serve.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/stats.h"
#include "bench/report.h"
#include "core/clock.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/status.h"
#include "engine/metrics.h"

#define SSE_MAX_BYTES    (8u << 20) // one SSE line or event; a longer one is a broken server, not a workload
#define ERR_BODY_MAX     240        // bytes of a non-2xx body kept for the error message
#define URL_MAX          2048
#define PROBE_WORDS_A    16
#define PROBE_WORDS_B    48
#define PROBE_MAX_TOKENS 4
#define N_HIST_BINS      40

/* Common English words: almost every one is a single token after a space in BPE and SentencePiece
 * vocabularies of real models, so the word count of a prompt controls its token count roughly; the
 * calibration against the server's usage makes it close (bench/serve.md). */
static const char *const WORDS[] = {
    "the",     "of",      "and",       "to",        "in",       "is",      "you",       "that",    "it",
    "he",      "was",     "for",       "on",        "are",      "as",      "with",      "his",     "they",
    "at",      "be",      "this",      "have",      "from",     "or",      "one",       "had",     "by",
    "word",    "but",     "not",       "what",      "all",      "were",    "we",        "when",    "your",
    "can",     "said",    "there",     "use",       "an",       "each",    "which",     "she",     "do",
    "how",     "their",   "if",        "will",      "up",       "other",   "about",     "out",     "many",
    "then",    "them",    "these",     "so",        "some",     "her",     "would",     "make",    "like",
    "him",     "into",    "time",      "has",       "look",     "two",     "more",      "write",   "go",
    "see",     "number",  "no",        "way",       "could",    "people",  "my",        "than",    "first",
    "water",   "been",    "call",      "who",       "oil",      "its",     "now",       "find",    "long",
    "down",    "day",     "did",       "get",       "come",     "made",    "may",       "part",    "over",
    "new",     "sound",   "take",      "only",      "little",   "work",    "know",      "place",   "year",
    "live",    "me",      "back",      "give",      "most",     "very",    "after",     "thing",   "our",
    "just",    "name",    "good",      "man",       "think",    "say",     "great",     "where",   "help",
    "through", "much",    "before",    "line",      "right",    "too",     "mean",      "old",     "any",
    "same",    "tell",    "boy",       "follow",    "came",     "want",    "show",      "also",    "around",
    "form",    "three",   "small",     "set",       "put",      "end",     "does",      "another", "well",
    "large",   "must",    "big",       "even",      "such",     "because", "turn",      "here",    "why",
    "ask",     "went",    "men",       "read",      "need",     "land",    "different", "home",    "us",
    "move",    "try",     "kind",      "hand",      "picture",  "again",   "change",    "off",     "play",
    "spell",   "air",     "away",      "animal",    "house",    "point",   "page",      "letter",  "mother",
    "answer",  "found",   "study",     "still",     "learn",    "should",  "world",     "high",    "every",
    "near",    "add",     "food",      "between",   "own",      "below",   "country",   "plant",   "last",
    "school",  "father",  "keep",      "tree",      "never",    "start",   "city",      "earth",   "eye",
    "light",   "thought", "head",      "under",     "story",    "saw",     "left",      "few",     "while",
    "along",   "might",   "close",     "something", "seem",     "next",    "hard",      "open",    "example",
    "begin",   "life",    "always",    "those",     "both",     "paper",   "together",  "got",     "group",
    "often",   "run",     "important", "until",     "children", "side",    "feet",      "car",     "mile",
    "night",   "walk",    "white",     "sea",
};
#define N_WORDS ((int)(sizeof WORDS / sizeof WORDS[0]))

bool bench_serve_parse_goodput(const char *spec, struct bench_serve_slo *slo, char *msg, size_t msg_size) {
    slo->ttft_ms = slo->tpot_ms = slo->e2el_ms = -1;
    slo->any = false;
    const char *p = spec;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *colon = strchr(p, ':');
        size_t key_len = colon ? (size_t)(colon - p) : 0;
        if (!colon || key_len == 0 || key_len > 8 || memchr(p, ' ', key_len) || memchr(p, ',', key_len)) {
            snprintf(msg, msg_size, "'%.120s': expected KEY:MS terms (keys ttft, tpot, e2el)", spec);
            return false;
        }
        char *end = NULL;
        errno = 0;
        double v = strtod(colon + 1, &end);
        if (errno || end == colon + 1 || (*end && *end != ' ' && *end != ',') || !(v > 0) || !isfinite(v)) {
            snprintf(msg, msg_size, "'%.*s': the SLO must be a positive number of milliseconds",
                     (int)(strcspn(p, " ,")), p);
            return false;
        }
        double *dst = NULL;
        if (key_len == 4 && !memcmp(p, "ttft", 4))
            dst = &slo->ttft_ms;
        else if (key_len == 4 && !memcmp(p, "tpot", 4))
            dst = &slo->tpot_ms;
        else if (key_len == 4 && !memcmp(p, "e2el", 4))
            dst = &slo->e2el_ms;
        if (!dst) {
            snprintf(msg, msg_size, "unknown SLO '%.*s' (use ttft, tpot or e2el)", (int)key_len, p);
            return false;
        }
        *dst = v;
        slo->any = true;
        p = end;
    }
    if (!slo->any) {
        snprintf(msg, msg_size, "no SLO given (e.g. --goodput ttft:500 tpot:50)");
        return false;
    }
    return true;
}

/* ---- workload ------------------------------------------------------------------------------------------ */

struct sreq {
    char *prompt;         // text, words separated by spaces
    int target_in;        // intended prompt tokens (used when the server reports no usage)
    int max_tokens;       // = the output length (ignore_eos asks the server to honour it)
    int group;            // shared-prefix: the group; else 0
    int64_t t_arrival_ns; // intended send time since the start of the run
};

struct workload {
    struct sreq *reqs; // [n] in arrival order
    int n;
};

/* How many words make about `tokens` prompt tokens: tokens ≈ overhead + tpw · words. */
struct calib {
    double tpw;      // tokens per word
    double overhead; // tokens a prompt costs beyond its words (BOS, template)
    bool measured;
};

static int words_for(const struct calib *c, double tokens, bool with_overhead) {
    double w = (tokens - (with_overhead ? c->overhead : 0)) / c->tpw;
    long r = lround(w);
    return r < 1 ? 1 : r > (1 << 24) ? (1 << 24) : (int)r;
}

/* Appends n_words random words (space separated) to buf[*len..), which has room for them. */
static void put_words(struct ci_rng *r, int n_words, char *buf, size_t *len) {
    for (int i = 0; i < n_words; i++) {
        const char *w = WORDS[ci_rng_u64(r) % (uint64_t)N_WORDS];
        size_t wl = strlen(w);
        if (*len > 0)
            buf[(*len)++] = ' ';
        memcpy(buf + *len, w, wl);
        *len += wl;
    }
    buf[*len] = '\0';
}

#define MAX_WORD_BYTES 10 // the longest word above is 9 letters, plus its space

static char *make_prompt(struct ci_rng *r, const char *prefix, int n_words) {
    size_t pre = prefix ? strlen(prefix) : 0, need;
    if (!ci_mul_size((size_t)n_words, MAX_WORD_BYTES, &need) || !ci_add_size(need, pre + 2, &need))
        return NULL;
    char *s = ci_malloc(need);
    if (!s)
        return NULL;
    size_t len = pre;
    if (pre)
        memcpy(s, prefix, pre);
    s[len] = '\0';
    put_words(r, n_words, s, &len);
    return s;
}

static int clamp_int(double v, int lo, int hi) {
    if (!(v >= lo))
        return lo;
    if (v > hi)
        return hi;
    return (int)lround(v);
}

static void workload_free(struct workload *w) {
    for (int i = 0; w->reqs && i < w->n; i++)
        ci_free(w->reqs[i].prompt);
    ci_free(w->reqs);
    w->reqs = NULL;
    w->n = 0;
}

/* Lengths, prompts and arrivals from the seed.  Arrivals come from their own stream so that a change of
 * dataset parameters leaves the arrival times as they were. */
static enum ci_status workload_build(const struct bench_serve_opts *o, const struct calib *cal,
                                     struct workload *w, struct ci_err *err) {
    enum ci_status st = CI_OK;
    char *prefixes = NULL; // [groups] prefix strings, each of prefix_stride bytes
    size_t prefix_stride = 0;
    struct ci_rng rl, rp, ra;
    ci_rng_seed(&rl, o->seed);
    ci_rng_seed(&rp, o->seed ^ 0x9e3779b97f4a7c15ull);
    ci_rng_seed(&ra, o->seed ^ 0xa5a5a5a55a5a5a5aull);
    w->n = 0;
    w->reqs = ci_calloc((size_t)o->num_prompts, sizeof *w->reqs);
    if (!w->reqs)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory for %d requests", o->num_prompts);

    if (o->dataset == BENCH_SERVE_SHARED_PREFIX) {
        int pw = words_for(cal, o->prefix_len, true);
        if (!ci_mul_size((size_t)pw, MAX_WORD_BYTES, &prefix_stride) ||
            !ci_add_size(prefix_stride, 2, &prefix_stride)) {
            st = ci_err_set(err, CI_ERR_INVALID, "--prefix-len %d is too long", o->prefix_len);
            goto fail;
        }
        prefixes = ci_calloc((size_t)o->groups, prefix_stride);
        if (!prefixes) {
            st = ci_err_set(err, CI_ERR_NOMEM, "out of memory for the shared prefixes");
            goto fail;
        }
        for (int g = 0; g < o->groups; g++) {
            size_t len = 0;
            put_words(&rp, pw, prefixes + (size_t)g * prefix_stride, &len);
        }
    }

    double t_s = 0;
    for (int i = 0; i < o->num_prompts; i++) {
        struct sreq *q = &w->reqs[i];
        int in = o->input_len, out = o->output_len;
        const char *prefix = NULL;
        int n_words;
        switch (o->dataset) {
        case BENCH_SERVE_RANDOM: {
            int lo = clamp_int(o->input_len * (1.0 - o->range_ratio), 1, 1 << 24);
            int hi = clamp_int(o->input_len * (1.0 + o->range_ratio), lo, 1 << 24);
            in = lo + (int)(ci_rng_u64(&rl) % (uint64_t)(hi - lo + 1));
            lo = clamp_int(o->output_len * (1.0 - o->range_ratio), 1, 1 << 24);
            hi = clamp_int(o->output_len * (1.0 + o->range_ratio), lo, 1 << 24);
            out = lo + (int)(ci_rng_u64(&rl) % (uint64_t)(hi - lo + 1));
            n_words = words_for(cal, in, true);
            break;
        }
        case BENCH_SERVE_SHAREGPT:
            // Log-normal around the medians, as ShareGPT's conversation lengths are: most short, a long tail.
            in = clamp_int(o->input_len * exp(o->input_sigma * ci_rng_normal(&rl)), 4, 16 * o->input_len);
            out = clamp_int(o->output_len * exp(o->output_sigma * ci_rng_normal(&rl)), 1, 16 * o->output_len);
            if (o->max_len > 1 && in + out > o->max_len) { // shrink both, keeping their ratio
                out = clamp_int((double)out * o->max_len / (in + out), 1, o->max_len - 1);
                in = o->max_len - out;
            }
            n_words = words_for(cal, in, true);
            break;
        case BENCH_SERVE_SHARED_PREFIX:
        default:
            // Round-robin over the groups, so each group's prompts are spread over the whole run.
            q->group = i % o->groups;
            prefix = prefixes + (size_t)q->group * prefix_stride;
            in = o->prefix_len + o->suffix_len;
            n_words = words_for(cal, o->suffix_len, false);
            break;
        }
        q->target_in = in;
        q->max_tokens = out;
        q->prompt = make_prompt(&rp, prefix, n_words);
        if (!q->prompt) {
            st = ci_err_set(err, CI_ERR_NOMEM, "out of memory for prompt %d", i);
            goto fail;
        }
        w->n = i + 1;
        q->t_arrival_ns = (int64_t)llround(t_s * 1e9);
        if (isfinite(o->rate))
            t_s += -log(1.0 - ci_rng_f64(&ra)) / o->rate; // exponential gap: a Poisson process of rate R
    }
    ci_free(prefixes);
    return CI_OK;
fail:
    ci_free(prefixes);
    workload_free(w);
    return st;
}

/* ---- SSE ------------------------------------------------------------------------------------------------
 * The text/event-stream format: lines end with CRLF, LF or CR; a line starting with ':' is a comment; a
 * "data:" field (one optional space after the colon) appends to the event's data, several joined by LF; a
 * blank line dispatches the event.  Other fields (event, id, retry) carry nothing for OpenAI streams. */

typedef bool (*sse_event_fn)(void *ctx, const char *data, size_t n);

struct sse {
    char *line; // the line being assembled
    size_t n_line, cap_line;
    char *data; // the event's data
    size_t n_data, cap_data;
    bool has_data, after_cr;
};

static bool buf_append(char **buf, size_t *n, size_t *cap, const char *src, size_t len) {
    if (len > SSE_MAX_BYTES || *n + len + 1 > SSE_MAX_BYTES)
        return false;
    if (*n + len + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *n + len + 1)
            c *= 2;
        char *b = ci_realloc(*buf, c);
        if (!b)
            return false;
        *buf = b;
        *cap = c;
    }
    if (len)
        memcpy(*buf + *n, src, len);
    *n += len;
    (*buf)[*n] = '\0';
    return true;
}

static bool sse_dispatch(struct sse *s, sse_event_fn fn, void *ctx) {
    bool ok = true;
    if (s->has_data)
        ok = fn(ctx, s->data ? s->data : "", s->n_data);
    s->n_data = 0;
    s->has_data = false;
    return ok;
}

static bool sse_line(struct sse *s, sse_event_fn fn, void *ctx) {
    size_t n = s->n_line;
    s->n_line = 0;
    if (n == 0)
        return sse_dispatch(s, fn, ctx);
    const char *l = s->line;
    if (l[0] == ':')
        return true;
    const char *colon = memchr(l, ':', n);
    size_t key_len = colon ? (size_t)(colon - l) : n;
    if (key_len != 4 || memcmp(l, "data", 4))
        return true;
    const char *v = colon ? colon + 1 : l + n;
    if (v < l + n && *v == ' ')
        v++;
    if (s->has_data && !buf_append(&s->data, &s->n_data, &s->cap_data, "\n", 1))
        return false;
    s->has_data = true;
    return buf_append(&s->data, &s->n_data, &s->cap_data, v, (size_t)(l + n - v));
}

/* False when an event callback failed or a line outgrew SSE_MAX_BYTES (or memory). */
static bool sse_feed(struct sse *s, const char *p, size_t n, sse_event_fn fn, void *ctx) {
    size_t i = 0;
    while (i < n) {
        char c = p[i];
        if (c == '\n' && s->after_cr) { // the LF of a CRLF split across two reads
            s->after_cr = false;
            i++;
            continue;
        }
        s->after_cr = false;
        if (c == '\r' || c == '\n') {
            s->after_cr = c == '\r';
            if (!sse_line(s, fn, ctx))
                return false;
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && p[j] != '\r' && p[j] != '\n')
            j++;
        if (!buf_append(&s->line, &s->n_line, &s->cap_line, p + i, j - i))
            return false;
        i = j;
    }
    return true;
}

/* End of stream: a last line or event without its terminator still counts (lenient with servers that close
 * right after the final data line). */
static bool sse_finish(struct sse *s, sse_event_fn fn, void *ctx) {
    if (s->n_line && !sse_line(s, fn, ctx))
        return false;
    return sse_dispatch(s, fn, ctx);
}

static void sse_deinit(struct sse *s) {
    ci_free(s->line);
    ci_free(s->data);
    memset(s, 0, sizeof *s);
}

/* ---- transfers ----------------------------------------------------------------------------------------- */

struct sres {
    int64_t t_start_ns; // send time since the start of the run
    int64_t ttft_ns;    // -1: no content came
    int64_t e2el_ns;
    int64_t *itl_ns; // [n_itl] gaps between consecutive content events
    int n_itl, cap_itl;
    int n_chunks;          // content events
    int prompt_tokens;     // usage.prompt_tokens; -1 when the server sent none
    int completion_tokens; // usage.completion_tokens; -1 when none
    int output_tokens;     // completion_tokens when present, else n_chunks
    int n_bad_events;      // events whose data was not JSON
    long http_status;      // 0: no response
    bool http_ok;          // transfer completed with 2xx and no error event
    bool ok;               // http_ok and at least one content event
    char error[256];
};

struct client {
    CURLM *multi;
    struct curl_slist *headers;
    char url[URL_MAX]; // the endpoint
    const char *model; // NULL: the field is left out
    bool chat, ignore_eos, stream_options;
    long timeout_ms;
};

struct xfer {
    CURL *easy;
    char *body;
    struct sres *res;
    struct sse sse;
    int64_t t_start_ns, t_last_ns, t_now_ns, t_prev_content_ns;
    long status;
    bool status_known, oom, overflow;
    char err_body[ERR_BODY_MAX + 1];
    size_t n_err_body;
    char curl_err[CURL_ERROR_SIZE];
};

static char *build_body(const struct client *cl, const char *prompt, int max_tokens) {
    char *s = NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    if (cl->model && !cJSON_AddStringToObject(o, "model", cl->model))
        goto done;
    if (cl->chat) {
        cJSON *msgs = cJSON_AddArrayToObject(o, "messages");
        cJSON *m = cJSON_CreateObject();
        if (!msgs || !m || !cJSON_AddItemToArray(msgs, m)) {
            cJSON_Delete(m);
            goto done;
        }
        if (!cJSON_AddStringToObject(m, "role", "user") || !cJSON_AddStringToObject(m, "content", prompt))
            goto done;
    } else if (!cJSON_AddStringToObject(o, "prompt", prompt)) {
        goto done;
    }
    if (!cJSON_AddNumberToObject(o, "max_tokens", max_tokens) ||
        !cJSON_AddNumberToObject(o, "temperature", 0) || !cJSON_AddTrueToObject(o, "stream"))
        goto done;
    if (cl->stream_options) {
        cJSON *so = cJSON_AddObjectToObject(o, "stream_options");
        if (!so || !cJSON_AddTrueToObject(so, "include_usage"))
            goto done;
    }
    if (cl->ignore_eos && !cJSON_AddTrueToObject(o, "ignore_eos"))
        goto done;
    s = cJSON_PrintUnformatted(o);
done:
    cJSON_Delete(o);
    return s;
}

static int json_int(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > 1e9)
        return -1;
    return (int)v->valuedouble;
}

static bool on_event(void *ctx, const char *data, size_t n) {
    struct xfer *x = ctx;
    struct sres *r = x->res;
    if (n == 6 && !memcmp(data, "[DONE]", 6))
        return true;
    cJSON *j = cJSON_ParseWithLength(data, n);
    if (!j || !cJSON_IsObject(j)) {
        r->n_bad_events++;
        cJSON_Delete(j);
        return true;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (e && !cJSON_IsNull(e) && !r->error[0]) {
        const cJSON *m = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "message") : e;
        snprintf(r->error, sizeof r->error, "error event in the stream: %s",
                 cJSON_IsString(m) ? m->valuestring : "(no message)");
    }
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    const cJSON *c0 = cJSON_IsArray(choices) ? cJSON_GetArrayItem(choices, 0) : NULL;
    if (c0) {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(c0, "text");
        if (!cJSON_IsString(text)) {
            const cJSON *delta = cJSON_GetObjectItemCaseSensitive(c0, "delta");
            text = delta ? cJSON_GetObjectItemCaseSensitive(delta, "content") : NULL;
        }
        if (cJSON_IsString(text) && text->valuestring[0]) {
            if (r->n_chunks == 0) {
                r->ttft_ns = x->t_now_ns - x->t_start_ns;
            } else {
                if (r->n_itl == r->cap_itl) {
                    int cap = r->cap_itl ? 2 * r->cap_itl : 64;
                    int64_t *p = cap > (1 << 26) ? NULL : ci_realloc(r->itl_ns, (size_t)cap * sizeof *p);
                    if (!p) {
                        x->oom = true;
                        cJSON_Delete(j);
                        return false;
                    }
                    r->itl_ns = p;
                    r->cap_itl = cap;
                }
                r->itl_ns[r->n_itl++] = x->t_now_ns - x->t_prev_content_ns;
            }
            x->t_prev_content_ns = x->t_now_ns;
            r->n_chunks++;
        }
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    if (cJSON_IsObject(u)) {
        int pt = json_int(u, "prompt_tokens"), ct = json_int(u, "completion_tokens");
        if (pt >= 0)
            r->prompt_tokens = pt;
        if (ct >= 0)
            r->completion_tokens = ct;
    }
    cJSON_Delete(j);
    return true;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud) {
    struct xfer *x = ud;
    size_t n = size * nmemb;
    int64_t now = ci_now_ns();
    x->t_last_ns = now;
    if (!x->status_known) {
        long code = 0;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
        x->status = code;
        x->status_known = true;
    }
    if (x->status < 200 || x->status > 299) {
        size_t k = n < ERR_BODY_MAX - x->n_err_body ? n : ERR_BODY_MAX - x->n_err_body;
        memcpy(x->err_body + x->n_err_body, ptr, k);
        x->n_err_body += k;
        return n;
    }
    x->t_now_ns = now;
    if (!sse_feed(&x->sse, ptr, n, on_event, x)) {
        if (!x->oom)
            x->overflow = true;
        return 0; // aborts the transfer (CURLE_WRITE_ERROR)
    }
    return n;
}

static void xfer_cleanup(struct client *cl, struct xfer *x) {
    if (x->easy) {
        curl_multi_remove_handle(cl->multi, x->easy);
        curl_easy_cleanup(x->easy);
    }
    cJSON_free(x->body);
    sse_deinit(&x->sse);
    x->easy = NULL;
    x->body = NULL;
}

/* Hands the request to curl.  False (with res->error set) when it could not even be started. */
static bool xfer_start(struct client *cl, struct xfer *x, const struct sreq *q, struct sres *r, int64_t t0,
                       int64_t now) {
    memset(x, 0, sizeof *x);
    x->res = r;
    r->t_start_ns = now - t0;
    r->ttft_ns = -1;
    r->prompt_tokens = r->completion_tokens = -1;
    x->t_start_ns = now;
    x->body = build_body(cl, q->prompt, q->max_tokens);
    x->easy = x->body ? curl_easy_init() : NULL;
    if (!x->easy) {
        snprintf(r->error, sizeof r->error, "out of memory building the request");
        goto fail;
    }
    CURL *e = x->easy;
    if (curl_easy_setopt(e, CURLOPT_URL, cl->url) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(x->body)) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, cl->headers) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_WRITEDATA, (void *)x) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_PRIVATE, (void *)x) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->curl_err) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, cl->timeout_ms) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 30000L) != CURLE_OK ||
        curl_multi_add_handle(cl->multi, e) != CURLM_OK) {
        snprintf(r->error, sizeof r->error, "could not set up the transfer");
        goto fail;
    }
    return true;
fail:
    xfer_cleanup(cl, x);
    return false;
}

static void xfer_finish(struct xfer *x, CURLcode rc) {
    struct sres *r = x->res;
    bool body_2xx = x->status_known && x->status >= 200 && x->status <= 299;
    if (rc == CURLE_OK && body_2xx && !sse_finish(&x->sse, on_event, x) && !x->oom)
        x->overflow = true;
    if (!x->status_known)
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
    r->http_status = x->status;
    r->e2el_ns = (x->t_last_ns ? x->t_last_ns : ci_now_ns()) - x->t_start_ns;
    r->output_tokens = r->completion_tokens >= 0 ? r->completion_tokens : r->n_chunks;
    if (x->oom) {
        snprintf(r->error, sizeof r->error, "out of memory reading the stream");
    } else if (x->overflow) {
        snprintf(r->error, sizeof r->error, "an SSE line or event exceeded %u bytes", SSE_MAX_BYTES);
    } else if (r->error[0]) {
        // an error event came in the stream
    } else if (x->status && (x->status < 200 || x->status > 299)) {
        for (size_t i = 0; i < x->n_err_body; i++)
            if ((unsigned char)x->err_body[i] < 0x20)
                x->err_body[i] = ' ';
        x->err_body[x->n_err_body] = '\0';
        snprintf(r->error, sizeof r->error, "HTTP %ld: %s", x->status, x->err_body);
    } else if (rc != CURLE_OK) {
        snprintf(r->error, sizeof r->error, "%s", x->curl_err[0] ? x->curl_err : curl_easy_strerror(rc));
    } else {
        r->http_ok = true;
        char *ctype = NULL;
        curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &ctype);
        if (r->n_chunks > 0)
            r->ok = true;
        else if (ctype && !strstr(ctype, "event-stream"))
            snprintf(r->error, sizeof r->error, "the response is not an SSE stream (Content-Type %.80s)",
                     ctype);
        else
            snprintf(r->error, sizeof r->error, "the stream carried no content");
    }
}

struct run_out {
    int64_t t_begin_ns, t_end_ns; // absolute: first send, last completion
    int peak_in_flight;
};

/* Sends reqs[0..n) at their arrival times, at most max_conc in flight (0: no cap), until every one has
 * finished; a request that cannot start yet for the cap waits and starts as soon as a slot frees, as in
 * vLLM (its latencies count from when it is actually sent).  Request failures land in res[]; the status is
 * only for failures of the client itself. */
static enum ci_status run_requests(struct client *cl, const struct sreq *reqs, struct sres *res, int n,
                                   int max_conc, bool progress, struct run_out *out, struct ci_err *err) {
    enum ci_status st = CI_OK;
    int next = 0, in_flight = 0, n_done = 0;
    memset(out, 0, sizeof *out);
    struct xfer *xs = ci_calloc((size_t)n, sizeof *xs);
    if (!xs)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory for %d transfers", n);
    int64_t t0 = ci_now_ns(), t_drawn = 0;
    out->t_begin_ns = t0;
    while (n_done < n) {
        int64_t now = ci_now_ns();
        while (next < n && (max_conc <= 0 || in_flight < max_conc) && t0 + reqs[next].t_arrival_ns <= now) {
            if (xfer_start(cl, &xs[next], &reqs[next], &res[next], t0, now)) {
                in_flight++;
                if (in_flight > out->peak_in_flight)
                    out->peak_in_flight = in_flight;
            } else {
                n_done++;
            }
            next++;
        }
        int running = 0;
        CURLMcode mc = curl_multi_perform(cl->multi, &running);
        if (mc != CURLM_OK) {
            st = ci_err_set(err, CI_ERR_INTERNAL, "curl: %s", curl_multi_strerror(mc));
            goto fail;
        }
        int n_finished = 0, n_queued = 0;
        CURLMsg *m;
        while ((m = curl_multi_info_read(cl->multi, &n_queued))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            char *priv = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
            struct xfer *x = (struct xfer *)(void *)priv;
            xfer_finish(x, m->data.result);
            xfer_cleanup(cl, x);
            in_flight--;
            n_done++;
            n_finished++;
        }
        now = ci_now_ns();
        if (n_finished)
            out->t_end_ns = now;
        if (progress && (n_finished || now - t_drawn > 200000000)) {
            char extra[32];
            snprintf(extra, sizeof extra, "%d in flight", in_flight);
            bench_progress_draw(NULL, n_done, n, extra, now - t0);
            t_drawn = now;
        }
        if (n_finished)
            continue; // slots freed: start whatever is due before sleeping
        int wait_ms = 200;
        if (next < n && (max_conc <= 0 || in_flight < max_conc)) {
            int64_t dt = t0 + reqs[next].t_arrival_ns - now;
            wait_ms = dt <= 0 ? 0 : dt >= 200000000 ? 200 : (int)((dt + 999999) / 1000000);
        }
        if (wait_ms > 0 && curl_multi_poll(cl->multi, NULL, 0, wait_ms, NULL) != CURLM_OK) {
            st = ci_err_set(err, CI_ERR_INTERNAL, "curl_multi_poll failed");
            goto fail;
        }
    }
    if (progress)
        bench_progress_clear();
fail:
    for (int i = 0; i < next; i++)
        xfer_cleanup(cl, &xs[i]);
    ci_free(xs);
    return st;
}

/* ---- statistics ---------------------------------------------------------------------------------------- */

struct dstats {
    double mean, median, std, p90, p99; // ms
};

/* Sorts v[0..n) and fills s (numpy semantics: population std, linear-interpolation percentiles; all 0 when
 * n == 0, as vLLM's np.mean(x or 0)). */
static void dstats_of(double *v, int n, struct dstats *s) {
    memset(s, 0, sizeof *s);
    if (n <= 0)
        return;
    ci_sort_doubles(v, n);
    double sum = 0, sq = 0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    s->mean = sum / n;
    for (int i = 0; i < n; i++)
        sq += (v[i] - s->mean) * (v[i] - s->mean);
    s->std = sqrt(sq / n);
    s->median = ci_quantile(v, n, 0.50);
    s->p90 = ci_quantile(v, n, 0.90);
    s->p99 = ci_quantile(v, n, 0.99);
}

struct summary {
    int n_total, n_ok, n_failed;
    double duration_s;
    long long in_tokens, out_tokens;
    double req_tput, out_tput, tot_tput, goodput; // per second; goodput NAN without SLOs
    struct dstats ttft, tpot, itl, e2el;
    int peak_in_flight;
    int n_in_estimated; // successful requests whose prompt tokens are the intended count (no usage)
    int n_out_from_chunks;
};

static double tpot_ms(const struct sres *r) {
    return r->output_tokens > 1 ? (double)(r->e2el_ns - r->ttft_ns) / 1e6 / (r->output_tokens - 1) : 0;
}

/* vLLM's goodput: a successful request is good when each constrained metric is within its SLO (TPOT of a
 * one-token request counts as 0). */
static bool meets_slo(const struct sres *r, const struct bench_serve_slo *slo) {
    if (slo->ttft_ms > 0 && (double)r->ttft_ns / 1e6 > slo->ttft_ms)
        return false;
    if (slo->tpot_ms > 0 && tpot_ms(r) > slo->tpot_ms)
        return false;
    if (slo->e2el_ms > 0 && (double)r->e2el_ns / 1e6 > slo->e2el_ms)
        return false;
    return true;
}

static enum ci_status summarize(const struct workload *w, const struct sres *res, const struct run_out *ro,
                                const struct bench_serve_slo *slo, struct summary *s, struct ci_err *err) {
    enum ci_status st = CI_OK;
    memset(s, 0, sizeof *s);
    s->n_total = w->n;
    s->peak_in_flight = ro->peak_in_flight;
    size_t n_itl = 0;
    for (int i = 0; i < w->n; i++)
        if (res[i].ok)
            n_itl += (size_t)res[i].n_itl;
    size_t n_buf = (size_t)w->n > n_itl ? (size_t)w->n : n_itl;
    double *buf = ci_malloc((n_buf ? n_buf : 1) * sizeof *buf);
    if (!buf)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory for the statistics");
    int n_good = 0;
    for (int i = 0; i < w->n; i++) {
        const struct sres *r = &res[i];
        if (!r->ok) {
            s->n_failed++;
            continue;
        }
        s->n_ok++;
        if (r->prompt_tokens >= 0) {
            s->in_tokens += r->prompt_tokens;
        } else {
            s->in_tokens += w->reqs[i].target_in;
            s->n_in_estimated++;
        }
        s->out_tokens += r->output_tokens;
        if (r->completion_tokens < 0)
            s->n_out_from_chunks++;
        if (slo->any && meets_slo(r, slo))
            n_good++;
    }
    s->duration_s = ro->t_end_ns > ro->t_begin_ns ? (double)(ro->t_end_ns - ro->t_begin_ns) * 1e-9 : 0;
    double d = s->duration_s > 0 ? s->duration_s : INFINITY;
    s->req_tput = s->n_ok / d;
    s->out_tput = (double)s->out_tokens / d;
    s->tot_tput = (double)(s->in_tokens + s->out_tokens) / d;
    s->goodput = slo->any ? n_good / d : NAN;

    int k = 0;
    for (int i = 0; i < w->n; i++)
        if (res[i].ok)
            buf[k++] = (double)res[i].ttft_ns / 1e6;
    dstats_of(buf, k, &s->ttft);
    k = 0;
    for (int i = 0; i < w->n; i++)
        if (res[i].ok && res[i].output_tokens > 1)
            buf[k++] = tpot_ms(&res[i]);
    dstats_of(buf, k, &s->tpot);
    k = 0;
    for (int i = 0; i < w->n; i++)
        if (res[i].ok)
            buf[k++] = (double)res[i].e2el_ns / 1e6;
    dstats_of(buf, k, &s->e2el);
    k = 0;
    for (int i = 0; i < w->n; i++)
        for (int j = 0; res[i].ok && j < res[i].n_itl; j++)
            buf[k++] = (double)res[i].itl_ns[j] / 1e6;
    dstats_of(buf, k, &s->itl);
    ci_free(buf);
    return st;
}

/* ---- report -------------------------------------------------------------------------------------------- */

/* Python's '{s:{c}^{n}}'.format(...) with n = 50, as vLLM prints its section rules. */
static void print_rule(const char *title, char fill) {
    int len = (int)strlen(title), pad = len < 50 ? 50 - len : 0;
    for (int i = 0; i < pad / 2; i++)
        putchar(fill);
    fputs(title, stdout);
    for (int i = 0; i < pad - pad / 2; i++)
        putchar(fill);
    putchar('\n');
}

static void print_int(const char *label, long long v) {
    printf("%-40s %-10lld\n", label, v);
}

static void print_f2(const char *label, double v) {
    printf("%-40s %-10.2f\n", label, v);
}

static void print_metric(const char *title, const char *name, const struct dstats *s) {
    char label[64];
    print_rule(title, '-');
    snprintf(label, sizeof label, "Mean %s (ms):", name);
    print_f2(label, s->mean);
    snprintf(label, sizeof label, "Median %s (ms):", name);
    print_f2(label, s->median);
    snprintf(label, sizeof label, "P90 %s (ms):", name);
    print_f2(label, s->p90);
    snprintf(label, sizeof label, "P99 %s (ms):", name);
    print_f2(label, s->p99);
}

static void print_summary(const struct bench_serve_opts *o, const struct summary *s) {
    print_rule(" Serving Benchmark Result ", '=');
    print_int("Successful requests:", s->n_ok);
    print_int("Failed requests:", s->n_failed);
    if (o->max_concurrency > 0)
        print_int("Maximum request concurrency:", o->max_concurrency);
    print_f2("Benchmark duration (s):", s->duration_s);
    print_int("Total input tokens:", s->in_tokens);
    print_int("Total generated tokens:", s->out_tokens);
    print_f2("Request throughput (req/s):", s->req_tput);
    if (o->slo.any)
        print_f2("Request goodput (req/s):", s->goodput);
    print_f2("Output token throughput (tok/s):", s->out_tput);
    print_int("Peak concurrent requests:", s->peak_in_flight);
    print_f2("Total Token throughput (tok/s):", s->tot_tput);
    print_metric("Time to First Token", "TTFT", &s->ttft);
    print_metric("Time per Output Token (excl. 1st token)", "TPOT", &s->tpot);
    print_metric("Inter-token Latency", "ITL", &s->itl);
    print_metric("End-to-end Latency", "E2EL", &s->e2el);
    print_rule("", '=');
    if (s->n_in_estimated)
        printf("note: %d successful requests had no usage: their input tokens are the intended counts\n",
               s->n_in_estimated);
    if (s->n_out_from_chunks)
        printf("note: %d successful requests had no usage: their output tokens are counted as content "
               "chunks\n",
               s->n_out_from_chunks);
}

/* The first 5 distinct error messages with their counts, on stderr (one pass: a run may have many). */
static void print_errors(const struct sres *res, int n) {
    const char *msg[5];
    int count[5], n_kinds = 0, n_other = 0;
    for (int i = 0; i < n; i++) {
        if (res[i].ok)
            continue;
        int k = 0;
        while (k < n_kinds && strcmp(msg[k], res[i].error))
            k++;
        if (k < n_kinds) {
            count[k]++;
        } else if (n_kinds < 5) {
            msg[n_kinds] = res[i].error;
            count[n_kinds++] = 1;
        } else {
            n_other++;
        }
    }
    for (int k = 0; k < n_kinds; k++)
        fprintf(stderr, "cinfer bench serve: %d failed request%s: %s\n", count[k], count[k] == 1 ? "" : "s",
                msg[k]);
    if (n_other)
        fprintf(stderr, "cinfer bench serve: %d more failed requests with other errors (see results.json)\n",
                n_other);
}

/* ---- files --------------------------------------------------------------------------------------------- */

static FILE *open_in(const char *dir, const char *name, struct ci_err *err) {
    char path[URL_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        ci_err_set(err, CI_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    return f;
}

static bool add_num(cJSON *o, const char *k, double v) {
    return cJSON_AddNumberToObject(o, k, v) != NULL; // NaN and infinities print as null
}

/* A float flag as the decimal the user typed (0.9f would print as 0.899999976). */
static double flag_value(float f) {
    char b[32];
    snprintf(b, sizeof b, "%.6g", (double)f);
    return strtod(b, NULL);
}

static bool add_stats(cJSON *o, const char *name, const struct dstats *s) {
    char k[32];
    const char *which[5] = {"mean", "median", "std", "p90", "p99"};
    const double v[5] = {s->mean, s->median, s->std, s->p90, s->p99};
    for (int i = 0; i < 5; i++) {
        snprintf(k, sizeof k, "%s_%s_ms", which[i], name);
        if (!add_num(o, k, v[i]))
            return false;
    }
    return true;
}

enum col {
    COL_INPUT,
    COL_TARGET_INPUT,
    COL_OUTPUT,
    COL_MAX_TOKENS,
    COL_CHUNKS,
    COL_TTFT,
    COL_TPOT,
    COL_E2EL,
    COL_START,
    COL_ARRIVAL,
    COL_STATUS,
    COL_COUNT
};

/* One number (or null) of request i for per-request array c. */
static cJSON *cell(const struct workload *w, const struct sres *r, int i, enum col c) {
    const struct sres *x = &r[i];
    switch (c) {
    case COL_INPUT:
        return x->prompt_tokens >= 0 ? cJSON_CreateNumber(x->prompt_tokens) : cJSON_CreateNull();
    case COL_TARGET_INPUT:
        return cJSON_CreateNumber(w->reqs[i].target_in);
    case COL_OUTPUT:
        return x->ok ? cJSON_CreateNumber(x->output_tokens) : cJSON_CreateNull();
    case COL_MAX_TOKENS:
        return cJSON_CreateNumber(w->reqs[i].max_tokens);
    case COL_CHUNKS:
        return cJSON_CreateNumber(x->n_chunks);
    case COL_TTFT:
        return x->ok ? cJSON_CreateNumber((double)x->ttft_ns * 1e-9) : cJSON_CreateNull();
    case COL_TPOT:
        return x->ok && x->output_tokens > 1 ? cJSON_CreateNumber(tpot_ms(x) * 1e-3) : cJSON_CreateNull();
    case COL_E2EL:
        return x->ok ? cJSON_CreateNumber((double)x->e2el_ns * 1e-9) : cJSON_CreateNull();
    case COL_START:
        return cJSON_CreateNumber((double)x->t_start_ns * 1e-9);
    case COL_ARRIVAL:
        return cJSON_CreateNumber((double)w->reqs[i].t_arrival_ns * 1e-9);
    case COL_STATUS:
    case COL_COUNT:
    default:
        return cJSON_CreateNumber((double)x->http_status);
    }
}

static const char *const COL_NAMES[COL_COUNT] = {
    "input_lens", "target_input_lens", "output_lens",   "max_tokens",  "chunks", "ttfts", "tpots",
    "e2els",      "start_times",       "arrival_times", "http_status",
};

/* results.json: the configuration, the summary (vLLM's key names, ms) and per-request arrays (seconds, as
 * vLLM's ttfts/itls; null where a failed request has no value). */
static enum ci_status write_json(const char *dir, const struct bench_serve_opts *o, const struct client *cl,
                                 const struct calib *cal, const struct workload *w, const struct sres *res,
                                 const struct summary *s, struct ci_err *err) {
    enum ci_status st = CI_OK;
    char *text = NULL;
    FILE *f = NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        goto nomem;
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tm);
    static const char *const DATASET_NAMES[] = {"random", "sharegpt-like", "shared-prefix"};
    bool ok = cJSON_AddStringToObject(root, "date", date) &&
              cJSON_AddStringToObject(root, "backend", cl->chat ? "openai-chat" : "openai") &&
              cJSON_AddStringToObject(root, "url", cl->url) &&
              (cl->model ? cJSON_AddStringToObject(root, "model_id", cl->model)
                         : cJSON_AddNullToObject(root, "model_id")) &&
              cJSON_AddStringToObject(root, "dataset", DATASET_NAMES[o->dataset]) &&
              add_num(root, "num_prompts", o->num_prompts) &&
              (isfinite(o->rate) ? add_num(root, "request_rate", o->rate)
                                 : cJSON_AddStringToObject(root, "request_rate", "inf") != NULL) &&
              (o->max_concurrency > 0 ? add_num(root, "max_concurrency", o->max_concurrency)
                                      : cJSON_AddNullToObject(root, "max_concurrency") != NULL) &&
              add_num(root, "seed", (double)o->seed) && add_num(root, "input_len", o->input_len) &&
              add_num(root, "output_len", o->output_len) &&
              add_num(root, "range_ratio", flag_value(o->range_ratio)) &&
              add_num(root, "input_sigma", flag_value(o->input_sigma)) &&
              add_num(root, "output_sigma", flag_value(o->output_sigma)) &&
              add_num(root, "groups", o->groups) && add_num(root, "prefix_len", o->prefix_len) &&
              add_num(root, "suffix_len", o->suffix_len) && add_num(root, "tokens_per_word", cal->tpw) &&
              add_num(root, "prompt_overhead_tokens", cal->overhead) &&
              cJSON_AddBoolToObject(root, "calibrated", cal->measured) &&
              cJSON_AddBoolToObject(root, "ignore_eos", cl->ignore_eos) &&
              cJSON_AddBoolToObject(root, "stream_options", cl->stream_options);
    if (!ok)
        goto nomem;
    if (o->slo.any) {
        cJSON *g = cJSON_AddObjectToObject(root, "goodput_slo_ms");
        if (!g || (o->slo.ttft_ms > 0 && !add_num(g, "ttft", o->slo.ttft_ms)) ||
            (o->slo.tpot_ms > 0 && !add_num(g, "tpot", o->slo.tpot_ms)) ||
            (o->slo.e2el_ms > 0 && !add_num(g, "e2el", o->slo.e2el_ms)))
            goto nomem;
    }
    ok = add_num(root, "duration", s->duration_s) && add_num(root, "completed", s->n_ok) &&
         add_num(root, "failed", s->n_failed) && add_num(root, "total_input_tokens", (double)s->in_tokens) &&
         add_num(root, "total_output_tokens", (double)s->out_tokens) &&
         add_num(root, "request_throughput", s->req_tput) && add_num(root, "request_goodput", s->goodput) &&
         add_num(root, "output_throughput", s->out_tput) &&
         add_num(root, "total_token_throughput", s->tot_tput) &&
         add_num(root, "peak_concurrency", s->peak_in_flight) && add_stats(root, "ttft", &s->ttft) &&
         add_stats(root, "tpot", &s->tpot) && add_stats(root, "itl", &s->itl) &&
         add_stats(root, "e2el", &s->e2el);
    if (!ok)
        goto nomem;
    for (int c = 0; c < COL_COUNT; c++) {
        cJSON *a = cJSON_AddArrayToObject(root, COL_NAMES[c]);
        if (!a)
            goto nomem;
        for (int i = 0; i < w->n; i++) {
            cJSON *v = cell(w, res, i, (enum col)c);
            if (!v || !cJSON_AddItemToArray(a, v)) {
                cJSON_Delete(v);
                goto nomem;
            }
        }
    }
    cJSON *itls = cJSON_AddArrayToObject(root, "itls");
    cJSON *errs = cJSON_AddArrayToObject(root, "errors");
    if (!itls || !errs)
        goto nomem;
    for (int i = 0; i < w->n; i++) {
        cJSON *a = cJSON_CreateArray();
        if (!a || !cJSON_AddItemToArray(itls, a)) {
            cJSON_Delete(a);
            goto nomem;
        }
        for (int j = 0; res[i].ok && j < res[i].n_itl; j++) {
            cJSON *v = cJSON_CreateNumber((double)res[i].itl_ns[j] * 1e-9);
            if (!v || !cJSON_AddItemToArray(a, v)) {
                cJSON_Delete(v);
                goto nomem;
            }
        }
        cJSON *e = cJSON_CreateString(res[i].ok ? "" : res[i].error);
        if (!e || !cJSON_AddItemToArray(errs, e)) {
            cJSON_Delete(e);
            goto nomem;
        }
    }
    text = cJSON_Print(root);
    if (!text)
        goto nomem;
    f = open_in(dir, "results.json", err);
    if (!f) {
        st = CI_ERR_IO;
        goto done;
    }
    if (fputs(text, f) < 0 || fputc('\n', f) < 0)
        st = ci_err_set(err, CI_ERR_IO, "cannot write %s/results.json: %s", dir, strerror(errno));
    goto done;
nomem:
    st = ci_err_set(err, CI_ERR_NOMEM, "out of memory building results.json");
done:
    if (f && fclose(f) != 0 && st == CI_OK)
        st = ci_err_set(err, CI_ERR_IO, "cannot write %s/results.json: %s", dir, strerror(errno));
    cJSON_free(text);
    cJSON_Delete(root);
    return st;
}

/* ---- plots (gnuplot) -------------------------------------------------------------------------------------
 * Data files and one script plots.gp go into dir; gnuplot runs there (so the script names plain files). */

/* TTFT CDF, ITL histogram and E2EL against send time.  False (after a warning) when gnuplot is missing or
 * failed; the data files and script stay in dir either way. */
static bool write_plots(const char *dir, const struct workload *w, const struct sres *res,
                        const struct summary *s) {
    struct ci_err err = {0};
    bool ok = false;
    double *v = NULL;
    FILE *f = NULL;
    size_t n_itl = 0;
    for (int i = 0; i < w->n; i++)
        if (res[i].ok)
            n_itl += (size_t)res[i].n_itl;
    size_t n_v = n_itl > (size_t)w->n ? n_itl : (size_t)w->n;
    v = ci_malloc((n_v ? n_v : 1) * sizeof *v);
    if (!v)
        goto done;

    int k = 0;
    for (int i = 0; i < w->n; i++)
        if (res[i].ok)
            v[k++] = (double)res[i].ttft_ns / 1e6;
    ci_sort_doubles(v, k);
    if (!(f = open_in(dir, "ttft_cdf.dat", &err)))
        goto done;
    fprintf(f, "# ttft_ms fraction_of_requests\n");
    for (int i = 0; i < k; i++)
        fprintf(f, "%.4f %.6f\n", v[i], (double)(i + 1) / k);
    fclose(f);

    k = 0;
    for (int i = 0; i < w->n; i++)
        for (int j = 0; res[i].ok && j < res[i].n_itl; j++)
            v[k++] = (double)res[i].itl_ns[j] / 1e6;
    // Bins up to 1.5 × p99 so that one stall does not squash the histogram into one bar.
    double hi = s->itl.p99 > 0 ? 1.5 * s->itl.p99 : 1.0, width = hi / N_HIST_BINS;
    int bins[N_HIST_BINS] = {0}, n_above = 0;
    for (int i = 0; i < k; i++) {
        if (v[i] > hi) {
            n_above++;
            continue;
        }
        int b = (int)(v[i] / width);
        bins[b < N_HIST_BINS ? b : N_HIST_BINS - 1]++;
    }
    if (!(f = open_in(dir, "itl_hist.dat", &err)))
        goto done;
    fprintf(f, "# bin_center_ms count (bin width %.4f ms; %d gaps above %.3f ms not shown)\n", width, n_above,
            hi);
    for (int b = 0; b < N_HIST_BINS; b++)
        fprintf(f, "%.4f %d\n", (b + 0.5) * width, bins[b]);
    fclose(f);

    int n_failed = 0;
    if (!(f = open_in(dir, "e2el.dat", &err)))
        goto done;
    fprintf(f, "# start_s e2el_ms ok\n");
    for (int i = 0; i < w->n; i++) {
        fprintf(f, "%.6f %.4f %d\n", (double)res[i].t_start_ns * 1e-9, (double)res[i].e2el_ns / 1e6,
                res[i].ok);
        n_failed += !res[i].ok;
    }
    fclose(f);

    const char *terminal = bench_gnuplot_terminal();
    if (!(f = open_in(dir, "plots.gp", &err)))
        goto done;
    fprintf(f, "# Written by cinfer bench serve; run `gnuplot plots.gp` in this directory to redraw.\n");
    fprintf(f, "set terminal %s size 900,560\nset grid\nunset key\n", terminal ? terminal : "pngcairo");
    if (s->n_ok > 0) {
        fprintf(f,
                "set output 'ttft_cdf.png'\nset title 'TTFT CDF (%d requests)'\nset xlabel 'TTFT (ms)'\n"
                "set ylabel 'fraction of requests'\nset yrange [0:1.02]\n"
                "plot 'ttft_cdf.dat' using 1:2 with steps lw 2 title 'TTFT'\nset yrange [*:*]\n",
                s->n_ok);
    }
    if (k > 0) {
        fprintf(
            f,
            "set output 'itl_hist.png'\nset title 'Inter-token latency (%d gaps%s)'\n"
            "set xlabel 'ITL (ms)'\nset ylabel 'gaps'\nset style fill solid 0.6\nset boxwidth %.6f\n"
            "set xrange [0:%.6f]\nplot 'itl_hist.dat' using 1:2 with boxes title 'ITL'\nset xrange [*:*]\n",
            k, n_above ? ", some above the x range" : "", width, hi);
    }
    fprintf(f,
            "set output 'e2el_vs_time.png'\nset title 'End-to-end latency by send time (%d requests)'\n"
            "set xlabel 'send time since the start (s)'\nset ylabel 'E2EL (ms)'\nset yrange [0:*]\n"
            "%splot 'e2el.dat' using 1:($3 == 1 ? $2 : 1/0) with points pt 7 ps 0.8 title 'ok'%s\n",
            w->n, n_failed ? "set key below\n" : "",
            n_failed ? ", '' using 1:($3 == 0 ? $2 : 1/0) with points pt 2 ps 1.2 lc rgb 'red' title "
                       "'failed'"
                     : "");
    if (fclose(f) != 0)
        goto done;
    f = NULL;
    ok = bench_gnuplot_run(dir, "plots.gp");
done:
    if (!ok && err.msg[0])
        fprintf(stderr, "cinfer bench serve: warning: plots: %s\n", err.msg);
    ci_free(v);
    return ok;
}

/* ---- set-up: endpoint, model discovery, initial test -------------------------------------------------- */

struct membuf {
    char *p;
    size_t n, cap;
};

static size_t collect(char *ptr, size_t size, size_t nmemb, void *ud) {
    struct membuf *b = ud;
    size_t n = size * nmemb;
    if (b->n + n + 1 > (1u << 20))
        return 0;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n + 1)
            c *= 2;
        char *q = ci_realloc(b->p, c);
        if (!q)
            return 0;
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, ptr, n);
    b->n += n;
    b->p[b->n] = '\0';
    return n;
}

/* The first model id of GET <base>/v1/models into out (vLLM's default when --model is not given).  False
 * when the server does not answer that route. */
static bool discover_model(const char *base, struct curl_slist *headers, char *out, size_t out_size) {
    char url[URL_MAX + 16];
    struct membuf b = {0};
    bool found = false;
    snprintf(url, sizeof url, "%s/v1/models", base);
    CURL *e = curl_easy_init();
    if (!e)
        return false;
    long code = 0;
    if (curl_easy_setopt(e, CURLOPT_URL, url) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_WRITEDATA, (void *)&b) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_TIMEOUT, 10L) == CURLE_OK && curl_easy_perform(e) == CURLE_OK &&
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code == 200 && b.p) {
        cJSON *j = cJSON_ParseWithLength(b.p, b.n);
        const cJSON *data = j ? cJSON_GetObjectItemCaseSensitive(j, "data") : NULL;
        const cJSON *m0 = cJSON_IsArray(data) ? cJSON_GetArrayItem(data, 0) : NULL;
        const cJSON *id = m0 ? cJSON_GetObjectItemCaseSensitive(m0, "id") : NULL;
        if (cJSON_IsString(id) && id->valuestring[0] && strlen(id->valuestring) < out_size) {
            snprintf(out, out_size, "%s", id->valuestring);
            found = true;
        }
        cJSON_Delete(j);
    }
    curl_easy_cleanup(e);
    ci_free(b.p);
    return found;
}

static void sres_free(struct sres *r, int n) {
    for (int i = 0; r && i < n; i++)
        ci_free(r[i].itl_ns);
}

/* One request of n_words words and PROBE_MAX_TOKENS tokens, alone. */
static enum ci_status probe(struct client *cl, struct ci_rng *rng, int n_words, struct sres *r,
                            struct ci_err *err) {
    struct sreq q = {0};
    struct run_out ro;
    q.max_tokens = PROBE_MAX_TOKENS;
    q.prompt = make_prompt(rng, NULL, n_words);
    if (!q.prompt)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    sres_free(r, 1);
    memset(r, 0, sizeof *r);
    enum ci_status st = run_requests(cl, &q, r, 1, 1, false, &ro, err);
    ci_free(q.prompt);
    return st;
}

/* A 400 or 422 is how servers refuse a field they do not know (pydantic-style validation). */
static bool refused_field(const struct sres *r) {
    return r->http_status == 400 || r->http_status == 422;
}

/* The initial test (as vLLM sends one before the run): proves the server answers, drops ignore_eos and then
 * stream_options if the server refuses them, and (unless disabled) measures tokens per word from the usage
 * of two prompts of different lengths. */
static enum ci_status initial_test(const struct bench_serve_opts *o, struct client *cl, struct calib *cal,
                                   struct ci_err *err) {
    enum ci_status st = CI_OK;
    struct sres a = {0}, b = {0};
    struct ci_rng rng;
    ci_rng_seed(&rng, o->seed ^ 0x5bd1e9955bd1e995ull);
    for (;;) {
        if ((st = probe(cl, &rng, PROBE_WORDS_A, &a, err)) != CI_OK)
            goto done;
        if (a.http_ok)
            break;
        if (refused_field(&a) && cl->ignore_eos) {
            fprintf(stderr,
                    "cinfer bench serve: the server refused the request (%s); retrying without "
                    "ignore_eos\n",
                    a.error);
            cl->ignore_eos = false;
            continue;
        }
        if (refused_field(&a) && cl->stream_options) {
            fprintf(stderr,
                    "cinfer bench serve: the server refused the request (%s); retrying without "
                    "stream_options\n",
                    a.error);
            cl->stream_options = false;
            continue;
        }
        st = ci_err_set(err, CI_ERR_IO, "initial test request to %s failed: %s", cl->url, a.error);
        goto done;
    }
    cal->tpw = o->tokens_per_word > 0 ? o->tokens_per_word : 1.0;
    cal->overhead = 0;
    cal->measured = false;
    if (o->tokens_per_word > 0 || o->no_calibrate)
        goto done;
    if (a.prompt_tokens < 0) {
        fprintf(stderr, "cinfer bench serve: the server sent no usage; assuming 1 token per word (set "
                        "--tokens-per-word)\n");
        goto done;
    }
    if ((st = probe(cl, &rng, PROBE_WORDS_B, &b, err)) != CI_OK)
        goto done;
    double tpw = (double)(b.prompt_tokens - a.prompt_tokens) / (PROBE_WORDS_B - PROBE_WORDS_A);
    if (!b.http_ok || b.prompt_tokens < 0 || !(tpw >= 0.2 && tpw <= 20)) {
        fprintf(stderr, "cinfer bench serve: could not calibrate tokens per word (%s); assuming 1\n",
                b.http_ok ? "implausible usage" : b.error);
        goto done;
    }
    cal->tpw = tpw;
    cal->overhead = a.prompt_tokens - tpw * PROBE_WORDS_A;
    if (cal->overhead < 0)
        cal->overhead = 0;
    cal->measured = true;
done:
    sres_free(&a, 1);
    sres_free(&b, 1);
    return st;
}

/* Every in-flight request holds a socket: lift the soft descriptor limit toward the hard one when the run
 * may need more than it allows (1024 is common; `--request-rate inf` with 2000 prompts is not). */
static void raise_fd_limit(int max_in_flight) {
    struct rlimit rl;
    rlim_t want = (rlim_t)max_in_flight + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

/* ---- the command --------------------------------------------------------------------------------------- */

static bool set_endpoint(const struct bench_serve_opts *o, struct client *cl, char *base, size_t base_size) {
    size_t n = strlen(o->url);
    while (n > 0 && o->url[n - 1] == '/')
        n--;
    if (n == 0 || n >= base_size || strlen(o->endpoint) >= URL_MAX - n || o->endpoint[0] != '/')
        return false;
    memcpy(base, o->url, n);
    base[n] = '\0';
    // A URL that already names the endpoint is taken as is; its base is what precedes /v1/.
    const char *v1 = strstr(base, "/v1/");
    if (n >= 12 && !strcmp(base + n - 12, "/completions")) {
        snprintf(cl->url, sizeof cl->url, "%s", base);
        if (v1)
            base[v1 - base] = '\0';
    } else {
        snprintf(cl->url, sizeof cl->url, "%s%s", base, o->endpoint);
    }
    cl->chat = strstr(cl->url, "/chat/completions") != NULL;
    return true;
}

int bench_serve_run(struct bench_serve_opts *o) {
    int rc = 1;
    struct client cl = {0};
    struct workload w = {0};
    struct sres *res = NULL;
    bool curl_up = false;
    char out_dir[URL_MAX], base[URL_MAX], model_buf[512];
    struct ci_err err = {0};
    if (o->input_len < 0)
        o->input_len = o->dataset == BENCH_SERVE_SHAREGPT ? 96 : 128;
    if (o->output_len < 0)
        o->output_len = o->dataset == BENCH_SERVE_SHARED_PREFIX ? 32 : 64;
    if (o->range_ratio < 0)
        o->range_ratio = 0.5f;
    if (o->input_sigma < 0)
        o->input_sigma = 0.9f;
    if (o->output_sigma < 0)
        o->output_sigma = 0.7f;
    if (o->groups < 0)
        o->groups = 4;
    if (o->prefix_len < 0)
        o->prefix_len = 192;
    if (o->suffix_len < 0)
        o->suffix_len = 16;
    if (!o->api_key)
        o->api_key = getenv("OPENAI_API_KEY");
    if (!set_endpoint(o, &cl, base, sizeof base)) {
        fprintf(stderr, "cinfer bench serve: --url/--endpoint: bad URL '%s' + '%s'\n", o->url, o->endpoint);
        rc = 2;
        goto done;
    }
    if (o->out_dir) {
        snprintf(out_dir, sizeof out_dir, "%s", o->out_dir);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char stamp[32];
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        snprintf(out_dir, sizeof out_dir, "bench/out/serve-%s", stamp);
    }

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "cinfer bench serve: curl_global_init failed\n");
        goto done;
    }
    curl_up = true;
    cl.ignore_eos = !o->no_ignore_eos;
    cl.stream_options = true;
    cl.timeout_ms = (long)(o->timeout_s * 1000);
    cl.multi = curl_multi_init();
    char auth[600];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key ? o->api_key : "");
    struct curl_slist *h = NULL;
    const char *hdrs[] = {"Content-Type: application/json", "Accept: text/event-stream",
                          "Expect:", // no 100-continue round trip before long prompts
                          o->api_key ? auth : NULL};
    for (int i = 0; i < 4 && cl.multi; i++) {
        if (!hdrs[i])
            continue;
        struct curl_slist *t = curl_slist_append(h, hdrs[i]);
        if (!t)
            break;
        h = t;
        cl.headers = h;
    }
    if (!cl.multi || !cl.headers) {
        fprintf(stderr, "cinfer bench serve: could not set up curl\n");
        goto done;
    }
    cl.model = o->model;
    if (!cl.model && discover_model(base, cl.headers, model_buf, sizeof model_buf))
        cl.model = model_buf;

    struct calib cal = {1.0, 0, false};
    if (!o->quiet)
        fprintf(stderr, "Starting initial single prompt test run against %s ...\n", cl.url);
    if (initial_test(o, &cl, &cal, &err) != CI_OK) {
        fprintf(stderr, "cinfer bench serve: %s\n", err.msg);
        goto done;
    }
    if (workload_build(o, &cal, &w, &err) != CI_OK) {
        fprintf(stderr, "cinfer bench serve: %s\n", err.msg);
        goto done;
    }
    res = ci_calloc((size_t)w.n, sizeof *res);
    if (!res) {
        fprintf(stderr, "cinfer bench serve: out of memory\n");
        goto done;
    }

    long long want_in = 0, want_out = 0;
    for (int i = 0; i < w.n; i++) {
        want_in += w.reqs[i].target_in;
        want_out += w.reqs[i].max_tokens;
    }
    printf("Endpoint: %s (model %s)\n", cl.url, cl.model ? cl.model : "not given");
    printf("Dataset: %s, %d prompts, seed %llu: about %lld input and %lld output tokens\n", o->dataset_name,
           w.n, (unsigned long long)o->seed, want_in, want_out);
    printf("Prompt tokens per word: %.3f (+%.1f per prompt), %s\n", cal.tpw, cal.overhead,
           cal.measured ? "measured from the server's usage" : "assumed");
    printf("Request fields: ignore_eos %s, stream_options %s\n", cl.ignore_eos ? "sent" : "not sent",
           cl.stream_options ? "sent" : "not sent");
    if (isfinite(o->rate))
        printf("Traffic request rate: %g\n", o->rate);
    else
        printf("Traffic request rate: inf\n");
    if (o->max_concurrency > 0)
        printf("Maximum request concurrency: %d\n", o->max_concurrency);
    else
        printf("Maximum request concurrency: None\n");
    fflush(stdout);

    raise_fd_limit(o->max_concurrency > 0 && o->max_concurrency < w.n ? o->max_concurrency : w.n);
    struct run_out ro;
    if (run_requests(&cl, w.reqs, res, w.n, o->max_concurrency, !o->quiet && isatty(2), &ro, &err) != CI_OK) {
        fprintf(stderr, "cinfer bench serve: %s\n", err.msg);
        goto done;
    }
    struct summary s;
    if (summarize(&w, res, &ro, &o->slo, &s, &err) != CI_OK) {
        fprintf(stderr, "cinfer bench serve: %s\n", err.msg);
        goto done;
    }
    print_summary(o, &s);
    fflush(stdout);
    print_errors(res, w.n);

    if (bench_mkdirs(out_dir, &err) != CI_OK ||
        write_json(out_dir, o, &cl, &cal, &w, res, &s, &err) != CI_OK) {
        fprintf(stderr, "cinfer bench serve: %s\n", err.msg);
        goto done;
    }
    bool plotted = !o->no_plots && write_plots(out_dir, &w, res, &s);
    printf("wrote %s (results.json%s)\n", out_dir,
           plotted ? ", ttft_cdf.png, itl_hist.png, e2el_vs_time.png" : "");
    if (s.n_ok == 0)
        fprintf(stderr, "cinfer bench serve: no request succeeded\n");
    rc = s.n_ok > 0 ? 0 : 1;
done:
    sres_free(res, w.n);
    ci_free(res);
    workload_free(&w);
    if (cl.multi)
        curl_multi_cleanup(cl.multi);
    curl_slist_free_all(cl.headers);
    if (curl_up)
        curl_global_cleanup();
    return rc;
}
