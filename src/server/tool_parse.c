/* Tool calls and reasoning in generated text.  See tool_parse.h.
 *
 * Every format is one scan from the start of the text that appends content segments, reasoning segments
 * and calls to a result, deciding at each marker from the text that follows it.  With partial set, the scan
 * stops (res.stop) at the first place whose meaning the rest of the text could still change: a marker that
 * is not closed yet, a tail that may be the start of a marker, a JSON value still open.  Everything before
 * that place was decided exactly as the final scan will decide it, which is what makes the partial results
 * prefixes of the final one. */
#include "server/tool_parse.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "core/mem.h"

#define NONE           ((size_t)-1)
#define JSON_MAX_DEPTH 128

/* ---- the result being built --------------------------------------------------------------------------- */

struct sb {
    char *p;
    size_t n, cap;
};

struct res {
    struct sb content, reasoning;
    struct tool_call *calls;
    int n_calls, cap_calls;
    bool oom;
    bool stop; // partial: nothing after this point is settled
};

static void sb_put(struct res *r, struct sb *b, const char *s, size_t n) {
    if (r->oom || n == 0)
        return;
    size_t need;
    if (!ci_add_size(b->n, n, &need) || !ci_add_size(need, 1, &need)) {
        r->oom = true;
        return;
    }
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < need)
            cap *= 2;
        char *g = ci_realloc(b->p, cap);
        if (!g) {
            r->oom = true;
            return;
        }
        b->p = g;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void put_content(struct res *r, const char *s, size_t n) {
    sb_put(r, &r->content, s, n);
}

/* Takes name and args (ci_malloc'ed); false when out of memory (both freed). */
static bool add_call(struct res *r, char *name, char *args) {
    if (r->n_calls == r->cap_calls) {
        int cap = r->cap_calls ? r->cap_calls * 2 : 4;
        struct tool_call *g = ci_realloc(r->calls, (size_t)cap * sizeof *g);
        if (!g) {
            ci_free(name);
            ci_free(args);
            r->oom = true;
            return false;
        }
        r->calls = g;
        r->cap_calls = cap;
    }
    r->calls[r->n_calls++] = (struct tool_call){name, args};
    return true;
}

/* ---- text helpers ------------------------------------------------------------------------------------- */

static size_t find(const char *t, size_t len, size_t from, const char *needle) {
    size_t nl = strlen(needle);
    if (from > len || len - from < nl)
        return NONE;
    const char *p = memmem(t + from, len - from, needle, nl);
    return p ? (size_t)(p - t) : NONE;
}

static bool starts(const char *t, size_t len, size_t at, const char *s) {
    size_t n = strlen(s);
    return at <= len && len - at >= n && memcmp(t + at, s, n) == 0;
}

/* t[at..len) is a proper prefix of s (not empty: "nothing yet" counts too). */
static bool prefix_of(const char *t, size_t len, size_t at, const char *s) {
    size_t n = len - at, sn = strlen(s);
    return n < sn && memcmp(t + at, s, n) == 0;
}

/* The length of the longest tail of t[from..len) that is a proper prefix of marker: held back while
 * streaming, since the next bytes may complete the marker. */
static size_t hold(const char *t, size_t len, size_t from, const char *marker) {
    size_t ml = strlen(marker), n = len - from;
    for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
        if (memcmp(t + len - k, marker, k) == 0)
            return k;
    return 0;
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_space(const char *t, size_t len, size_t i) {
    while (i < len && is_space(t[i]))
        i++;
    return i;
}

/* The extent of the JSON object or array starting at t[0] (after whitespace): 1 and *end past it when it
 * closes, 0 when the text ends inside it, -1 when it is not one (or its brackets do not match, or it nests
 * deeper than JSON_MAX_DEPTH).  Only brackets and strings are followed; cJSON judges the rest. */
static int json_span(const char *t, size_t n, size_t *end) {
    size_t i = skip_space(t, n, 0);
    if (i == n)
        return 0;
    if (t[i] != '{' && t[i] != '[')
        return -1;
    char stack[JSON_MAX_DEPTH];
    int d = 0;
    bool in_str = false, esc = false;
    for (; i < n; i++) {
        char c = t[i];
        if (in_str) {
            if (esc)
                esc = false;
            else if (c == '\\')
                esc = true;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            if (d == JSON_MAX_DEPTH)
                return -1;
            stack[d++] = c;
        } else if (c == '}' || c == ']') {
            if (stack[d - 1] != (c == '}' ? '{' : '['))
                return -1;
            if (--d == 0) {
                *end = i + 1;
                return 1;
            }
        }
    }
    return 0;
}

static cJSON *json_parse(const char *t, size_t n) {
    // cJSON needs the text NUL-terminated to reject trailing bytes: copy it.
    char *s = ci_malloc(n + 1);
    if (!s)
        return NULL;
    memcpy(s, t, n);
    s[n] = '\0';
    cJSON *v = cJSON_ParseWithOpts(s, NULL, true);
    ci_free(s);
    return v;
}

/* ---- calls from JSON ---------------------------------------------------------------------------------- */

/* The compact JSON text of an object, given as an object or as a string holding one. */
static char *args_text(const cJSON *a) {
    if (!a || cJSON_IsNull(a))
        return ci_strdup("{}");
    cJSON *parsed = NULL;
    if (cJSON_IsString(a)) {
        parsed = cJSON_Parse(a->valuestring);
        a = parsed;
    }
    char *out = NULL;
    if (cJSON_IsObject(a)) {
        char *p = cJSON_PrintUnformatted(a);
        out = p ? ci_strdup(p) : NULL;
        cJSON_free(p);
    }
    cJSON_Delete(parsed);
    return out;
}

/* One call object: {"name", "arguments" | "parameters"}, or OpenAI's {"type":"function","function":{...}}.
 * Appends it; false when it is not a call (or out of memory). */
static bool call_from_object(struct res *r, const cJSON *o) {
    if (!cJSON_IsObject(o))
        return false;
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(o, "function");
    if (cJSON_IsObject(fn))
        o = fn;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0] || strlen(name->valuestring) > 256)
        return false;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!a)
        a = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    char *args = args_text(a); // NULL: not an object (or out of memory: then too it stays text)
    if (!args)
        return false;
    char *nm = ci_strdup(name->valuestring);
    if (!nm) {
        ci_free(args);
        r->oom = true;
        return false;
    }
    return add_call(r, nm, args);
}

/* The calls in t[0..n): one call object or an array of them (empty arrays are not calls).  All of them or
 * none are appended. */
static bool calls_from_json(struct res *r, const char *t, size_t n) {
    cJSON *v = json_parse(t, n);
    if (!v)
        return false;
    int before = r->n_calls;
    bool ok;
    if (cJSON_IsArray(v)) {
        ok = cJSON_GetArraySize(v) > 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            if (!ok)
                break;
            ok = call_from_object(r, e);
        }
    } else {
        ok = call_from_object(r, v);
    }
    cJSON_Delete(v);
    if (!ok) { // undo the ones taken
        while (r->n_calls > before) {
            r->n_calls--;
            ci_free(r->calls[r->n_calls].name);
            ci_free(r->calls[r->n_calls].arguments);
        }
    }
    return ok;
}

/* Llama 3's "{...}; {...}" (or whitespace between): every value must be a call. */
static bool calls_from_json_seq(struct res *r, const char *t, size_t n) {
    int before = r->n_calls;
    size_t i = 0;
    bool any = false;
    for (;;) {
        while (i < n && (is_space(t[i]) || t[i] == ';'))
            i++;
        if (i == n)
            break;
        size_t end = 0;
        if (t[i] != '{' || json_span(t + i, n - i, &end) != 1 || !calls_from_json(r, t + i, end))
            goto undo;
        any = true;
        i += end;
    }
    if (any)
        return true;
undo:
    while (r->n_calls > before) {
        r->n_calls--;
        ci_free(r->calls[r->n_calls].name);
        ci_free(r->calls[r->n_calls].arguments);
    }
    return false;
}

/* ---- reasoning ---------------------------------------------------------------------------------------- */

/* A leading <think>...</think> (or, in_reasoning, the text up to </think>) into the reasoning; returns
 * where the rest begins. */
static size_t parse_think(const struct tool_parse_opts *o, struct res *r, const char *t, size_t len) {
    size_t i = 0;
    if (!o->in_reasoning) {
        size_t j = skip_space(t, len, 0);
        if (!starts(t, len, j, "<think>")) {
            if (o->partial && prefix_of(t, len, j, "<think>"))
                r->stop = true;
            return 0;
        }
        i = j + strlen("<think>");
    }
    size_t e = find(t, len, i, "</think>");
    if (e != NONE) {
        sb_put(r, &r->reasoning, t + i, e - i);
        return e + strlen("</think>");
    }
    size_t end = o->partial ? len - hold(t, len, i, "</think>") : len;
    sb_put(r, &r->reasoning, t + i, end - i);
    r->stop = o->partial;
    return len;
}

/* ---- the formats -------------------------------------------------------------------------------------- */

/* Text up to the end, holding back a tail that may begin marker. */
static void content_to_end(const struct tool_parse_opts *o, struct res *r, const char *t, size_t len,
                           size_t i, const char *marker) {
    size_t end = o->partial && marker ? len - hold(t, len, i, marker) : len;
    put_content(r, t + i, end - i);
}

static void parse_hermes(const struct tool_parse_opts *o, struct res *r, const char *t, size_t len,
                         size_t i) {
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    while (!r->oom) {
        size_t k = find(t, len, i, open);
        if (k == NONE) {
            content_to_end(o, r, t, len, i, open);
            return;
        }
        put_content(r, t + i, k - i);
        size_t a = k + strlen(open), e = find(t, len, a, close);
        if (e != NONE) {
            if (!calls_from_json(r, t + a, e - a))
                put_content(r, t + k, e + strlen(close) - k);
            i = e + strlen(close);
            continue;
        }
        if (o->partial) {
            r->stop = true;
            return;
        }
        // Never closed: a model that ended the text after the call (EOS before </tool_call>).
        if (!calls_from_json(r, t + a, len - a))
            put_content(r, t + k, len - k);
        return;
    }
}

static void parse_llama3(const struct tool_parse_opts *o, struct res *r, const char *t, size_t len,
                         size_t i) {
    static const char tag[] = "<|python_tag|>";
    size_t k = find(t, len, i, tag);
    size_t j = skip_space(t, len, i);
    if (j < (k == NONE ? len : k) && t[j] == '{' && k == NONE) { // the whole text may be the call(s)
        if (o->partial) {
            r->stop = true;
            return;
        }
        if (!calls_from_json_seq(r, t + j, len - j))
            put_content(r, t + i, len - i);
        return;
    }
    if (k == NONE) {
        content_to_end(o, r, t, len, i, tag);
        return;
    }
    put_content(r, t + i, k - i);
    if (o->partial) {
        r->stop = true;
        return;
    }
    size_t a = k + strlen(tag);
    if (!calls_from_json_seq(r, t + a, len - a))
        put_content(r, t + k, len - k);
}

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

/* After "[TOOL_CALLS]": name[ARGS]{...} or name[CALL_ID]id[ARGS]{...}.  Returns 1 (a call; *next past it),
 * 0 (undecided: the text ends first) or -1 (not this shape). */
static int mistral_named(struct res *r, const char *t, size_t len, size_t b, size_t *next) {
    size_t j = b;
    while (j < len && name_char(t[j]))
        j++;
    if (j == len)
        return 0;
    if (j == b || j - b > 256)
        return -1;
    size_t s = j;
    if (starts(t, len, s, "[CALL_ID]")) {
        s += strlen("[CALL_ID]");
        while (s < len && name_char(t[s]))
            s++;
        if (s == len)
            return 0;
    } else if (prefix_of(t, len, s, "[CALL_ID]")) {
        return 0;
    }
    if (!starts(t, len, s, "[ARGS]"))
        return prefix_of(t, len, s, "[ARGS]") ? 0 : -1;
    s += strlen("[ARGS]");
    size_t e = 0;
    int sp = json_span(t + s, len - s, &e);
    if (sp <= 0)
        return sp;
    size_t q = skip_space(t, len, s);
    if (t[q] != '{')
        return -1;
    cJSON *args = json_parse(t + s, e);
    char *a = args ? args_text(args) : NULL;
    cJSON_Delete(args);
    if (!a)
        return -1;
    char *name = ci_malloc(j - b + 1);
    if (!name) {
        ci_free(a);
        r->oom = true;
        return -1;
    }
    memcpy(name, t + b, j - b);
    name[j - b] = '\0';
    if (!add_call(r, name, a))
        return -1;
    *next = s + e;
    return 1;
}

static void parse_mistral(const struct tool_parse_opts *o, struct res *r, const char *t, size_t len,
                          size_t i) {
    static const char tag[] = "[TOOL_CALLS]";
    while (!r->oom) {
        size_t k = find(t, len, i, tag);
        if (k == NONE) {
            content_to_end(o, r, t, len, i, tag);
            return;
        }
        put_content(r, t + i, k - i);
        size_t a = k + strlen(tag), b = skip_space(t, len, a);
        int got;
        size_t next = 0;
        if (b == len) {
            got = 0;
        } else if (t[b] == '[' || t[b] == '{') {
            size_t e = 0;
            got = json_span(t + b, len - b, &e);
            if (got == 1 && !calls_from_json(r, t + b, e))
                got = -1;
            next = b + e;
        } else {
            got = mistral_named(r, t, len, b, &next);
        }
        if (got == 0) { // undecided
            if (o->partial)
                r->stop = true;
            else
                put_content(r, t + k, len - k);
            return;
        }
        if (got < 0) { // not a call: the marker is text
            put_content(r, t + k, a - k);
            i = a;
            continue;
        }
        i = next;
    }
}

#define DS_CALLS_BEGIN                                                                                       \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                          \
    "calls\xe2\x96\x81"                                                                                      \
    "begin\xef\xbd\x9c>"
#define DS_CALLS_END                                                                                         \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                          \
    "calls\xe2\x96\x81"                                                                                      \
    "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN                                                                                        \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                          \
    "call\xe2\x96\x81"                                                                                       \
    "begin\xef\xbd\x9c>"
#define DS_CALL_END                                                                                          \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                          \
    "call\xe2\x96\x81"                                                                                       \
    "end\xef\xbd\x9c>"
#define DS_SEP                                                                                               \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                          \
    "sep\xef\xbd\x9c>"

/* One DeepSeek call, t[0..n) between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>: R1's
 * "function<｜tool▁sep｜>NAME\n```json\n{...}\n```" or V3.1's "NAME<｜tool▁sep｜>{...}". */
static bool deepseek_call(struct res *r, const char *t, size_t n) {
    size_t s = find(t, n, 0, DS_SEP);
    if (s == NONE)
        return false;
    size_t a = s + strlen(DS_SEP), nb = 0, ne = s;
    while (nb < ne && is_space(t[nb]))
        nb++;
    while (ne > nb && is_space(t[ne - 1]))
        ne--;
    if (ne - nb == 8 && memcmp(t + nb, "function", 8) == 0) { // R1: the name is the next line
        nb = a;
        ne = nb;
        while (ne < n && t[ne] != '\n' && t[ne] != '`' && t[ne] != '{')
            ne++;
        a = ne;
        while (ne > nb && is_space(t[ne - 1]))
            ne--;
    }
    if (ne == nb || ne - nb > 256)
        return false;
    for (size_t i = nb; i < ne; i++)
        if (!name_char(t[i]))
            return false;
    // the arguments: the JSON object that follows (inside a ```json fence or not), then only fences/space
    size_t q = a;
    while (q < n && (is_space(t[q]) || t[q] == '`'))
        q++;
    if (starts(t, n, q, "json"))
        q += 4;
    size_t e = 0;
    if (q >= n || json_span(t + q, n - q, &e) != 1)
        return false;
    for (size_t i = q + e; i < n; i++)
        if (!is_space(t[i]) && t[i] != '`')
            return false;
    size_t o = skip_space(t, n, q);
    if (t[o] != '{')
        return false;
    cJSON *args = json_parse(t + q, e);
    char *at = args ? args_text(args) : NULL;
    cJSON_Delete(args);
    char *name = at ? ci_malloc(ne - nb + 1) : NULL;
    if (!name) {
        ci_free(at);
        return false;
    }
    memcpy(name, t + nb, ne - nb);
    name[ne - nb] = '\0';
    return add_call(r, name, at);
}

static void parse_deepseek(const struct tool_parse_opts *o, struct res *r, const char *t, size_t len,
                           size_t i) {
    while (!r->oom) {
        size_t k = find(t, len, i, DS_CALLS_BEGIN);
        if (k == NONE) {
            content_to_end(o, r, t, len, i, DS_CALLS_BEGIN);
            return;
        }
        put_content(r, t + i, k - i);
        i = k + strlen(DS_CALLS_BEGIN);
        // The section's markers are text unless its first entry is a call.
        int calls_before = r->n_calls;
        for (bool first = true;; first = false) {
            size_t j = skip_space(t, len, i), from = first ? k : j;
            if (starts(t, len, j, DS_CALLS_END)) {
                if (first || r->n_calls == calls_before)
                    put_content(r, t + from, j + strlen(DS_CALLS_END) - from);
                i = j + strlen(DS_CALLS_END);
                break;
            }
            if (starts(t, len, j, DS_CALL_BEGIN)) {
                size_t a = j + strlen(DS_CALL_BEGIN), e = find(t, len, a, DS_CALL_END);
                if (e == NONE) {
                    if (o->partial)
                        r->stop = true;
                    else
                        put_content(r, t + from, len - from);
                    return;
                }
                if (!deepseek_call(r, t + a, e - a))
                    put_content(r, t + from, e + strlen(DS_CALL_END) - from);
                i = e + strlen(DS_CALL_END);
                continue;
            }
            if (o->partial && (prefix_of(t, len, j, DS_CALL_BEGIN) || prefix_of(t, len, j, DS_CALLS_END))) {
                r->stop = true;
                return;
            }
            if (first) // anything else ends the section: it is text again
                put_content(r, t + k, j - k);
            i = j;
            break;
        }
    }
}

/* gpt-oss harmony: messages "<|channel|>CH[ to=functions.NAME][ <|constrain|>json]<|message|>BODY" ended by
 * <|end|>, <|call|> or <|return|> (or the text's end), the next one opened by <|start|>assistant. */
static void parse_harmony(const struct tool_parse_opts *o, struct res *r, const char *t, size_t len) {
    static const char *const ends[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
    size_t i = 0;
    while (!r->oom && i < len) {
        if (!starts(t, len, i, "<|")) {
            if (o->partial && prefix_of(t, len, i, "<|"))
                r->stop = true;
            else
                put_content(r, t + i, len - i); // not harmony: plain text
            return;
        }
        size_t m = find(t, len, i, "<|message|>");
        if (m == NONE) {
            if (o->partial)
                r->stop = true;
            else
                put_content(r, t + i, len - i);
            return;
        }
        // the header t[i..m): channel and recipient
        char channel[16] = "";
        size_t c = find(t, m, i, "<|channel|>");
        if (c != NONE) {
            size_t s = c + strlen("<|channel|>"), n = 0;
            while (s + n < m && n + 1 < sizeof channel && t[s + n] >= 'a' && t[s + n] <= 'z')
                n++;
            memcpy(channel, t + s, n);
            channel[n] = '\0';
        }
        size_t to = find(t, m, i, "to=functions."), nb = 0, ne = 0;
        if (to != NONE) {
            nb = ne = to + strlen("to=functions.");
            while (ne < m && name_char(t[ne]))
                ne++;
        }
        size_t b = m + strlen("<|message|>"), e = NONE, tl = 0;
        for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
            size_t f = find(t, len, b, ends[k]);
            if (f != NONE && (e == NONE || f < e)) {
                e = f;
                tl = strcmp(ends[k], "<|start|>") == 0 ? 0 : strlen(ends[k]);
            }
        }
        bool call = o->tools && to != NONE && ne > nb && ne - nb <= 256;
        bool think = !call && o->reasoning && strcmp(channel, "analysis") == 0;
        struct sb *into = think ? &r->reasoning : &r->content;
        if (e == NONE) {
            if (!o->partial) {
                e = len;
            } else {
                if (!call) { // the body so far, less a tail that may begin a terminator
                    size_t h = 0;
                    for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
                        size_t hk = hold(t, len, b, ends[k]);
                        h = hk > h ? hk : h;
                    }
                    sb_put(r, into, t + b, len - h - b);
                }
                r->stop = true;
                return;
            }
        }
        if (call) {
            size_t q = skip_space(t, e, b), end = 0;
            bool ok = false;
            if (q < e && t[q] == '{' && json_span(t + b, e - b, &end) == 1 &&
                skip_space(t, e, b + end) == e) {
                cJSON *args = json_parse(t + b, end);
                char *a = args ? args_text(args) : NULL;
                cJSON_Delete(args);
                char *name = a ? ci_malloc(ne - nb + 1) : NULL;
                if (name) {
                    memcpy(name, t + nb, ne - nb);
                    name[ne - nb] = '\0';
                    ok = add_call(r, name, a);
                } else {
                    ci_free(a);
                }
            }
            if (!ok)
                put_content(r, t + b, e - b);
        } else {
            sb_put(r, into, t + b, e - b);
        }
        i = e + tl;
    }
}

/* The whole text one JSON object: {"tool_calls": [...]}, {"tool_call": {...}}, {"name", "arguments"}, or
 * {"response": "..."} (the content). */
static void parse_generic(const struct tool_parse_opts *o, struct res *r, const char *t, size_t len,
                          size_t i) {
    size_t j = skip_space(t, len, i);
    if (j == len || t[j] != '{') {
        put_content(r, t + i, len - i);
        return;
    }
    if (o->partial) {
        r->stop = true;
        return;
    }
    cJSON *v = json_parse(t + j, len - j);
    bool done = false;
    if (cJSON_IsObject(v)) {
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(v, "tool_calls");
        const cJSON *call = cJSON_GetObjectItemCaseSensitive(v, "tool_call");
        const cJSON *resp = cJSON_GetObjectItemCaseSensitive(v, "response");
        int before = r->n_calls;
        if (cJSON_IsArray(calls) && cJSON_GetArraySize(calls) > 0) {
            done = true;
            const cJSON *e;
            cJSON_ArrayForEach(e, calls) {
                if (done)
                    done = call_from_object(r, e);
            }
            if (!done) {
                while (r->n_calls > before) {
                    r->n_calls--;
                    ci_free(r->calls[r->n_calls].name);
                    ci_free(r->calls[r->n_calls].arguments);
                }
            }
        } else if (cJSON_IsObject(call)) {
            done = call_from_object(r, call);
        } else if (cJSON_IsString(resp) && cJSON_GetArraySize(v) == 1) {
            put_content(r, resp->valuestring, strlen(resp->valuestring));
            done = true;
        } else if (cJSON_GetObjectItemCaseSensitive(v, "name")) {
            done = call_from_object(r, v);
        }
    }
    cJSON_Delete(v);
    if (!done)
        put_content(r, t + i, len - i);
}

/* ---- the entry points --------------------------------------------------------------------------------- */

static char *trimmed(struct res *r, const struct sb *b, size_t *n) {
    size_t s = 0, e = b->n;
    while (s < e && is_space(b->p[s]))
        s++;
    while (e > s && is_space(b->p[e - 1]))
        e--;
    char *out = ci_malloc(e - s + 1);
    if (!out) {
        r->oom = true;
        return NULL;
    }
    if (e > s)
        memcpy(out, b->p + s, e - s);
    out[e - s] = '\0';
    *n = e - s;
    return out;
}

enum ci_status tool_parse(const struct tool_parse_opts *o, const char *text, size_t len,
                          struct tool_parse_result *out) {
    memset(out, 0, sizeof *out);
    struct res r = {0};
    if (len > TOOL_PARSE_MAX_TEXT) {
        put_content(&r, text, len);
    } else if (o->format == TOOL_FORMAT_HARMONY && !o->in_reasoning) {
        parse_harmony(o, &r, text, len);
    } else {
        size_t i = o->reasoning ? parse_think(o, &r, text, len) : 0;
        if (!r.stop && !o->tools)
            put_content(&r, text + i, len - i);
        else if (!r.stop)
            switch (o->format) {
            case TOOL_FORMAT_HERMES:
                parse_hermes(o, &r, text, len, i);
                break;
            case TOOL_FORMAT_LLAMA3:
                parse_llama3(o, &r, text, len, i);
                break;
            case TOOL_FORMAT_MISTRAL:
                parse_mistral(o, &r, text, len, i);
                break;
            case TOOL_FORMAT_DEEPSEEK:
                parse_deepseek(o, &r, text, len, i);
                break;
            case TOOL_FORMAT_HARMONY: // in_reasoning with harmony: not a shape harmony writes
            case TOOL_FORMAT_GENERIC:
                parse_generic(o, &r, text, len, i);
                break;
            }
    }
    if (!r.oom) {
        out->content = trimmed(&r, &r.content, &out->content_len);
        out->reasoning = trimmed(&r, &r.reasoning, &out->reasoning_len);
    }
    out->calls = r.calls;
    out->n_calls = r.n_calls;
    ci_free(r.content.p);
    ci_free(r.reasoning.p);
    if (r.oom) {
        tool_parse_result_free(out);
        return CI_ERR_NOMEM;
    }
    return CI_OK;
}

void tool_parse_result_free(struct tool_parse_result *r) {
    for (int i = 0; i < r->n_calls; i++) {
        ci_free(r->calls[i].name);
        ci_free(r->calls[i].arguments);
    }
    ci_free(r->calls);
    ci_free(r->content);
    ci_free(r->reasoning);
    memset(r, 0, sizeof *r);
}

/* ---- detection ---------------------------------------------------------------------------------------- */

static bool has(const char *src, size_t len, const char *s) {
    return find(src, len, 0, s) != NONE;
}

enum tool_format tool_format_detect(const char *src, size_t len) {
    if (!src)
        return TOOL_FORMAT_GENERIC;
    if (has(src, len, "<|channel|>") && has(src, len, "<|message|>"))
        return TOOL_FORMAT_HARMONY;
    if (has(src, len, DS_CALLS_BEGIN) || has(src, len,
                                             "tool\xe2\x96\x81"
                                             "calls\xe2\x96\x81"
                                             "begin"))
        return TOOL_FORMAT_DEEPSEEK;
    if (has(src, len, "[TOOL_CALLS]"))
        return TOOL_FORMAT_MISTRAL;
    if (has(src, len, "<tool_call>"))
        return TOOL_FORMAT_HERMES;
    if (has(src, len, "<|start_header_id|>") &&
        (has(src, len, "<|python_tag|>") || has(src, len, "\"parameters\"") || has(src, len, "ipython")))
        return TOOL_FORMAT_LLAMA3;
    return TOOL_FORMAT_GENERIC;
}

const char *tool_format_name(enum tool_format f) {
    switch (f) {
    case TOOL_FORMAT_HERMES:
        return "hermes";
    case TOOL_FORMAT_LLAMA3:
        return "llama3";
    case TOOL_FORMAT_MISTRAL:
        return "mistral";
    case TOOL_FORMAT_HARMONY:
        return "harmony";
    case TOOL_FORMAT_DEEPSEEK:
        return "deepseek";
    case TOOL_FORMAT_GENERIC:
        break;
    }
    return "generic";
}

bool tool_template_thinks(const char *src, size_t len) {
    return src && has(src, len, "<think>");
}

bool tool_prompt_opens_think(const char *prompt, size_t len) {
    while (len && is_space(prompt[len - 1]))
        len--;
    return len >= 7 && memcmp(prompt + len - 7, "<think>", 7) == 0;
}

bool tool_format_needs_special(enum tool_format f) {
    return f == TOOL_FORMAT_HARMONY || f == TOOL_FORMAT_MISTRAL || f == TOOL_FORMAT_LLAMA3 ||
           f == TOOL_FORMAT_DEEPSEEK;
}

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void tool_call_id(uint64_t seed, int i, char out[30]) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    memcpy(out, "call_", 5);
    uint64_t h = 0;
    for (int k = 0; k < 24; k++) {
        if (k % 8 ==
            0) // 8 letters from each 64-bit draw (62^8 < 2^64: every letter is drawn from fresh bits)
            h = mix(seed ^ mix(((uint64_t)i << 8 | (uint64_t)k) + 1));
        out[5 + k] = al[h % 62];
        h /= 62;
    }
    out[29] = '\0';
}
