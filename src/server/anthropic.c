/* The Anthropic Messages wire format.  See anthropic.h.
 *
 * A request is converted, not interpreted: its system prompt and messages become OpenAI-shaped chat
 * messages (the shape every Jinja chat template of an open model is written for) and the rest of the server
 * runs them as it runs /v1/chat/completions. */
#include "server/anthropic.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/hash.h"
#include "core/mem.h"
#include "server/json_check.h"

/* ---- errors ------------------------------------------------------------------------------------------- */

const char *anthropic_error_type(int status) {
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
    case 529:
        return "overloaded_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

char *anthropic_error_json(const struct openai_error *e, size_t *len) {
    char *out = NULL;
    char *msg = sse_utf8_clean(e->message, strlen(e->message), NULL);
    cJSON *root = cJSON_CreateObject();
    cJSON *er = NULL;
    if (msg && root && cJSON_AddStringToObject(root, "type", "error") &&
        (er = cJSON_AddObjectToObject(root, "error")) &&
        cJSON_AddStringToObject(er, "type", anthropic_error_type(e->status)) &&
        cJSON_AddStringToObject(er, "message", msg))
        out = cJSON_PrintUnformatted(root);
    if (out && len)
        *len = strlen(out);
    ci_free(msg);
    cJSON_Delete(root);
    return out;
}

bool anthropic_path(const char *path) {
    static const char p[] = "/v1/messages";
    return path && strncmp(path, p, sizeof p - 1) == 0 &&
           (path[sizeof p - 1] == '\0' || path[sizeof p - 1] == '/');
}

/* ---- parsing ------------------------------------------------------------------------------------------ */

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool is_type(const cJSON *block, const char *type) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(block, "type");
    return cJSON_IsString(t) && strcmp(t->valuestring, type) == 0;
}

/* A growing text: the text blocks of one message joined by "\n". */
struct text {
    char *s;
    size_t len, cap;
    int n_parts;
};

static bool text_add(struct text *t, const char *s) {
    size_t n = strlen(s), need;
    if (!ci_add_size(t->len, n, &need) || !ci_add_size(need, 2, &need))
        return false;
    if (need > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < need)
            cap *= 2;
        char *grown = ci_realloc(t->s, cap);
        if (!grown)
            return false;
        t->s = grown;
        t->cap = cap;
    }
    if (t->n_parts++)
        t->s[t->len++] = '\n';
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
    return true;
}

/* A string or a list of text blocks {"type":"text","text"} (other keys, such as cache_control, ignored),
 * into t.  what names the value in errors. */
static enum ci_status text_content(const cJSON *v, const char *what, struct text *t,
                                   struct openai_error *err) {
    if (cJSON_IsString(v))
        return text_add(t, v->valuestring) ? CI_OK : openai_nomem(err);
    if (!cJSON_IsArray(v))
        return openai_bad(err, what, "'%s' must be a string or an array of text blocks", what);
    int j = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, v) {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(b, "text");
        if (!cJSON_IsObject(b) || !is_type(b, "text") || !cJSON_IsString(text))
            return openai_bad(
                err, what, "'%s[%d]' must be a text block {\"type\": \"text\", \"text\": ...}%s", what, j,
                is_type(b, "image") || is_type(b, "document") ? " (images and documents are not supported)"
                                                              : "");
        if (!text_add(t, text->valuestring))
            return openai_nomem(err);
        j++;
    }
    return CI_OK;
}

/* A new chat message {"role", "content"} (content NULL: null) appended to arr; NULL when out of memory. */
static cJSON *add_message(cJSON *arr, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddItemToArray(arr, m)) {
        cJSON_Delete(m);
        return NULL;
    }
    if (!cJSON_AddStringToObject(m, "role", role) ||
        !(content ? cJSON_AddStringToObject(m, "content", content) : cJSON_AddNullToObject(m, "content")))
        return NULL;
    return m;
}

/* One tool_use block → an OpenAI tool call {"id","type":"function","function":{"name","arguments"}},
 * the arguments being the input as JSON text. */
static enum ci_status tool_call(const cJSON *b, const char *param, cJSON *calls, struct openai_error *err) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
    if (!cJSON_IsString(id) || !id->valuestring[0])
        return openai_bad(err, param, "'%s.id' must be a non-empty string", param);
    if (!cJSON_IsString(name) || !name->valuestring[0])
        return openai_bad(err, param, "'%s.name' must be a non-empty string", param);
    if (!cJSON_IsObject(input))
        return openai_bad(err, param, "'%s.input' must be an object", param);
    char *args = cJSON_PrintUnformatted(input);
    cJSON *c = cJSON_CreateObject(), *f = NULL;
    bool ok = args && c && cJSON_AddItemToArray(calls, c);
    if (!ok)
        cJSON_Delete(c);
    ok = ok && cJSON_AddStringToObject(c, "id", id->valuestring) &&
         cJSON_AddStringToObject(c, "type", "function") && (f = cJSON_AddObjectToObject(c, "function")) &&
         cJSON_AddStringToObject(f, "name", name->valuestring) &&
         cJSON_AddStringToObject(f, "arguments", args);
    cJSON_free(args);
    return ok ? CI_OK : openai_nomem(err);
}

/* One tool_result block → a message {"role":"tool","tool_call_id","content"[,"is_error":true]}. */
static enum ci_status tool_result(const cJSON *b, const char *param, cJSON *out, struct openai_error *err) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(b, "content");
    const cJSON *is_error = cJSON_GetObjectItemCaseSensitive(b, "is_error");
    if (!cJSON_IsString(id) || !id->valuestring[0])
        return openai_bad(err, param, "'%s.tool_use_id' must be a non-empty string", param);
    if (!openai_absent(is_error) && !cJSON_IsBool(is_error))
        return openai_bad(err, param, "'%s.is_error' must be a boolean", param);
    // it answers a tool_use block of an earlier assistant message (Anthropic's API checks this too)
    bool found = false;
    const cJSON *prev, *call;
    cJSON_ArrayForEach(prev, out) {
        cJSON_ArrayForEach(call, cJSON_GetObjectItemCaseSensitive(prev, "tool_calls")) {
            found = found || strcmp(str_of(call, "id") ? str_of(call, "id") : "", id->valuestring) == 0;
        }
    }
    if (!found)
        return openai_bad(err, param,
                          "'%s.tool_use_id': '%.64s' is the id of no tool_use block of an earlier "
                          "assistant message",
                          param, id->valuestring);
    struct text t = {0};
    char what[160];
    snprintf(what, sizeof what, "%s.content", param);
    enum ci_status s = openai_absent(content) ? (text_add(&t, "") ? CI_OK : openai_nomem(err))
                                              : text_content(content, what, &t, err);
    cJSON *m = s == CI_OK ? add_message(out, "tool", t.s ? t.s : "") : NULL;
    if (s == CI_OK && (!m || !cJSON_AddStringToObject(m, "tool_call_id", id->valuestring) ||
                       (cJSON_IsTrue(is_error) && !cJSON_AddTrueToObject(m, "is_error"))))
        s = openai_nomem(err);
    ci_free(t.s);
    return s;
}

/* A thinking block of an earlier assistant turn ({"type":"thinking","thinking","signature"}) into think: the
 * assistant message's reasoning_content, which thinking templates show for the turns they keep (as the
 * OpenAI path passes reasoning_content through).  The signature is required, as Anthropic does, and
 * accepted whatever it holds: cinfer's own (anthropic_signature) only labels the text, it guards nothing. */
static enum ci_status thinking_block(const cJSON *b, const char *bp, struct text *think,
                                     struct openai_error *err) {
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(b, "thinking");
    const cJSON *sig = cJSON_GetObjectItemCaseSensitive(b, "signature");
    if (!cJSON_IsString(th))
        return openai_bad(err, bp, "'%s.thinking' must be a string", bp);
    if (!cJSON_IsString(sig))
        return openai_bad(err, bp, "'%s.signature' must be a string", bp);
    return text_add(think, th->valuestring) ? CI_OK : openai_nomem(err);
}

/* Message i of the request → one or more chat messages appended to out. */
static enum ci_status one_message(const cJSON *msg, int i, cJSON *out, struct openai_error *err) {
    char param[96];
    snprintf(param, sizeof param, "messages[%d]", i);
    if (!cJSON_IsObject(msg))
        return openai_bad(err, param, "'%s' must be an object", param);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
    snprintf(param, sizeof param, "messages[%d].role", i);
    if (!cJSON_IsString(role))
        return openai_bad(err, param, "'%s' must be a string", param);
    bool user = strcmp(role->valuestring, "user") == 0;
    if (!user && strcmp(role->valuestring, "assistant") != 0)
        return openai_bad(err, param,
                          "'%s': role '%.32s' is not supported (user, assistant; the system prompt is "
                          "the top-level 'system')",
                          param, role->valuestring);
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (cJSON_IsString(content))
        return add_message(out, role->valuestring, content->valuestring) ? CI_OK : openai_nomem(err);
    if (!cJSON_IsArray(content))
        return openai_bad(err, param, "'%s' must be a string or an array of content blocks", param);
    struct text t = {0}, think = {0};
    cJSON *calls = cJSON_CreateArray();
    enum ci_status s = calls ? CI_OK : openai_nomem(err);
    int j = 0, n_results = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        if (s != CI_OK)
            break;
        char bp[128];
        snprintf(bp, sizeof bp, "messages[%d].content[%d]", i, j++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        if (!cJSON_IsObject(b) || !cJSON_IsString(type)) {
            s = openai_bad(err, bp, "'%s' must be a content block with a string 'type'", bp);
        } else if (strcmp(type->valuestring, "text") == 0) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(b, "text");
            s = !cJSON_IsString(text)              ? openai_bad(err, bp, "'%s.text' must be a string", bp)
                : !text_add(&t, text->valuestring) ? openai_nomem(err)
                                                   : CI_OK;
        } else if (strcmp(type->valuestring, "tool_use") == 0) {
            s = user ? openai_bad(err, bp, "'%s': tool_use blocks belong to assistant messages", bp)
                     : tool_call(b, bp, calls, err);
        } else if (strcmp(type->valuestring, "tool_result") == 0) {
            s = !user ? openai_bad(err, bp, "'%s': tool_result blocks belong to user messages", bp)
                      : tool_result(b, bp, out, err);
            n_results++;
        } else if (!user && strcmp(type->valuestring, "thinking") == 0) {
            s = thinking_block(b, bp, &think, err);
        } else if (!user && strcmp(type->valuestring, "redacted_thinking") == 0) {
            // Anthropic's encrypted reasoning: nothing a template can show; cinfer never writes one
            const cJSON *data = cJSON_GetObjectItemCaseSensitive(b, "data");
            if (!cJSON_IsString(data))
                s = openai_bad(err, bp, "'%s.data' must be a string", bp);
        } else {
            s = openai_bad(
                err, bp,
                "'%s': content blocks of type '%.32s' are not supported (text, tool_use, tool_result)", bp,
                type->valuestring);
        }
    }
    int n_calls = calls ? cJSON_GetArraySize(calls) : 0;
    if (s == CI_OK && (t.n_parts > 0 || (n_calls == 0 && n_results == 0) || !user)) {
        // An assistant turn of tool calls alone gets content "" rather than null: templates such as Qwen3's
        // apply string tests to every assistant content, and null fails them.
        cJSON *m = add_message(out, role->valuestring, t.s ? t.s : "");
        if (!m || (think.n_parts && !cJSON_AddStringToObject(m, "reasoning_content", think.s)))
            s = openai_nomem(err);
        else if (n_calls && cJSON_AddItemToObject(m, "tool_calls", calls))
            calls = NULL;
        else if (n_calls)
            s = openai_nomem(err);
    }
    cJSON_Delete(calls);
    ci_free(t.s);
    ci_free(think.s);
    return s;
}

/* tools → OpenAI function tools {"type":"function","function":{"name","description","parameters"}}, and
 * each tool's name and input_schema text into r->q (tool_names, tool_params: what a forced tool_choice
 * enforces, as for /v1/chat/completions). */
static enum ci_status parse_tools(const cJSON *root, struct anthropic_request *r, cJSON *chat,
                                  struct openai_error *err) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (openai_absent(tools))
        return CI_OK;
    int count = cJSON_IsArray(tools) ? cJSON_GetArraySize(tools) : -1;
    if (count < 0 || count > ANTHROPIC_MAX_TOOLS)
        return openai_bad(err, "tools", "'tools' must be an array of at most %d tools", ANTHROPIC_MAX_TOOLS);
    cJSON *arr = cJSON_AddArrayToObject(chat, "tools");
    if (!arr)
        return openai_nomem(err);
    if (count > 0 && (!(r->q.tool_names = ci_calloc((size_t)count, sizeof *r->q.tool_names)) ||
                      !(r->q.tool_params = ci_calloc((size_t)count, sizeof *r->q.tool_params))))
        return openai_nomem(err);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char p[48];
        snprintf(p, sizeof p, "tools[%d]", i++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        if (!cJSON_IsObject(t))
            return openai_bad(err, p, "'%s' must be an object", p);
        if (!openai_absent(type) && !is_type(t, "custom"))
            return openai_bad(err, p, "'%s': tools of type '%.32s' are not supported (custom tools only)", p,
                              cJSON_IsString(type) ? type->valuestring : "?");
        size_t n = cJSON_IsString(name) ? strlen(name->valuestring) : 0;
        if (n < 1 || n > 128)
            return openai_bad(err, p, "'%s.name' must be a string of 1 to 128 characters", p);
        if (!openai_absent(desc) && !cJSON_IsString(desc))
            return openai_bad(err, p, "'%s.description' must be a string", p);
        if (!cJSON_IsObject(schema))
            return openai_bad(err, p, "'%s.input_schema' must be an object (a JSON schema)", p);
        cJSON *o = cJSON_CreateObject(), *f = NULL, *params = cJSON_Duplicate(schema, true);
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            cJSON_Delete(params);
            return openai_nomem(err);
        }
        if (!params || !cJSON_AddStringToObject(o, "type", "function") ||
            !(f = cJSON_AddObjectToObject(o, "function")) ||
            !cJSON_AddStringToObject(f, "name", name->valuestring) ||
            (cJSON_IsString(desc) && !cJSON_AddStringToObject(f, "description", desc->valuestring)) ||
            !cJSON_AddItemToObject(f, "parameters", params)) {
            if (f && !cJSON_GetObjectItemCaseSensitive(f, "parameters"))
                cJSON_Delete(params);
            return openai_nomem(err);
        }
        r->q.n_tools = i; // what openai_request_deinit frees
        if (!(r->q.tool_names[i - 1] = ci_strdup(name->valuestring)) ||
            !(r->q.tool_params[i - 1] = cJSON_PrintUnformatted(schema)))
            return openai_nomem(err);
    }
    r->n_tools = count;
    r->q.tool_choice = count > 0 ? OPENAI_TOOL_AUTO : OPENAI_TOOL_NONE;
    return CI_OK;
}

static enum ci_status parse_tool_choice(const cJSON *root, struct anthropic_request *r,
                                        struct openai_error *err) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    r->q.parallel_tool_calls = true;
    if (openai_absent(tc))
        return CI_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    const cJSON *dp = cJSON_GetObjectItemCaseSensitive(tc, "disable_parallel_tool_use");
    static const char *const names[] = {"auto", "any", "tool", "none"};
    int k = -1;
    for (int i = 0; cJSON_IsObject(tc) && cJSON_IsString(type) && i < 4; i++)
        if (strcmp(type->valuestring, names[i]) == 0)
            k = i;
    if (k < 0)
        return openai_bad(err, "tool_choice",
                          "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
    if (!openai_absent(dp) && !cJSON_IsBool(dp))
        return openai_bad(err, "tool_choice", "'tool_choice.disable_parallel_tool_use' must be a boolean");
    r->tool_choice = (enum anthropic_tool_choice)k;
    r->q.parallel_tool_calls = !cJSON_IsTrue(dp);
    // The same enforcement as OpenAI's: any → "required", tool → a named function, none → none.
    r->q.tool_choice = k == ANTHROPIC_TOOL_ANY    ? OPENAI_TOOL_REQUIRED
                       : k == ANTHROPIC_TOOL_TOOL ? OPENAI_TOOL_NAMED
                       : k == ANTHROPIC_TOOL_NONE ? OPENAI_TOOL_NONE
                                                  : r->q.tool_choice;
    if ((k == ANTHROPIC_TOOL_ANY || k == ANTHROPIC_TOOL_TOOL) && r->n_tools == 0)
        return openai_bad(err, "tool_choice", "'tool_choice' of type '%s' needs 'tools'", names[k]);
    if (k != ANTHROPIC_TOOL_TOOL)
        return CI_OK;
    if (!cJSON_IsString(name))
        return openai_bad(err, "tool_choice", "'tool_choice.name' must be a string (the tool to call)");
    const cJSON *t;
    bool found = false;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(root, "tools")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(t, "name");
        found = found || (cJSON_IsString(n) && strcmp(n->valuestring, name->valuestring) == 0);
    }
    if (!found)
        return openai_bad(err, "tool_choice", "'tool_choice.name': no tool is named '%.64s'",
                          name->valuestring);
    return (r->tool_name = ci_strdup(name->valuestring)) && (r->q.tool_name = ci_strdup(name->valuestring))
               ? CI_OK
               : openai_nomem(err);
}

static enum ci_status get_number(const cJSON *root, const char *key, double lo, bool lo_open, double hi,
                                 float *out, struct openai_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (openai_absent(v))
        return CI_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble > hi ||
        (lo_open ? v->valuedouble <= lo : v->valuedouble < lo))
        return openai_bad(err, key, "'%s' must be a number in %s%g, %g]", key, lo_open ? "(" : "[", lo, hi);
    *out = (float)v->valuedouble;
    return CI_OK;
}

static bool integral(const cJSON *v, double lo, double hi) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && floor(v->valuedouble) == v->valuedouble &&
           v->valuedouble >= lo && v->valuedouble <= hi;
}

static enum ci_status parse_sampling(const cJSON *root, bool count_only, struct openai_request *q,
                                     struct openai_error *err) {
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "max_tokens");
    if (!count_only) {
        // Anthropic requires it; a value past what the context holds is cut to fit when the prompt is known.
        if (openai_absent(mt))
            return openai_bad(err, "max_tokens", "'max_tokens' is required");
        if (!integral(mt, 1, 1 << 30))
            return openai_bad(err, "max_tokens", "'max_tokens' must be an integer in [1, %d]", 1 << 30);
        q->max_tokens = (int)mt->valuedouble;
    }
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(root, "top_k");
    if (!openai_absent(tk) && !integral(tk, 0, 1 << 30))
        return openai_bad(err, "top_k", "'top_k' must be an integer in [0, %d]", 1 << 30);
    if (!openai_absent(tk))
        q->sampling.top_k = (int)tk->valuedouble;
    enum ci_status s;
    if ((s = get_number(root, "temperature", 0, false, 1, &q->sampling.temperature, err)) != CI_OK ||
        (s = get_number(root, "top_p", 0, true, 1, &q->sampling.top_p, err)) != CI_OK)
        return s;
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (!openai_absent(stream) && !cJSON_IsBool(stream))
        return openai_bad(err, "stream", "'stream' must be a boolean");
    q->stream = !count_only && cJSON_IsTrue(stream);
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    if (!openai_absent(md) && !cJSON_IsObject(md))
        return openai_bad(err, "metadata", "'metadata' must be an object");
    // llama.cpp's extension, as on /v1/chat/completions: a GBNF grammar the answer must follow.
    const cJSON *gr = cJSON_GetObjectItemCaseSensitive(root, "grammar");
    if (!openai_absent(gr) && (!cJSON_IsString(gr) || strlen(gr->valuestring) > OPENAI_MAX_GRAMMAR))
        return openai_bad(err, "grammar", "'grammar' must be a string of at most %d bytes",
                          OPENAI_MAX_GRAMMAR);
    if (cJSON_IsString(gr) && gr->valuestring[0] && !(q->grammar = ci_strdup(gr->valuestring)))
        return openai_nomem(err);
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop_sequences");
    if (openai_absent(stop))
        return CI_OK;
    int count = cJSON_IsArray(stop) ? cJSON_GetArraySize(stop) : -1;
    if (count < 0 || count > OPENAI_MAX_STOP)
        return openai_bad(err, "stop_sequences", "'stop_sequences' must be an array of at most %d strings",
                          OPENAI_MAX_STOP);
    const cJSON *v;
    cJSON_ArrayForEach(v, stop) {
        size_t n = cJSON_IsString(v) ? strlen(v->valuestring) : 0;
        if (n < 1 || n > OPENAI_MAX_STOP_BYTES)
            return openai_bad(err, "stop_sequences",
                              "'stop_sequences': each must be a string of 1 to %d bytes",
                              OPENAI_MAX_STOP_BYTES);
        if (!(q->stop[q->n_stop] = ci_strdup(v->valuestring)))
            return openai_nomem(err);
        q->n_stop++;
    }
    return CI_OK;
}

/* "thinking": {"type": "enabled", "budget_tokens": N} (N >= 1024 and, on /v1/messages, below max_tokens, as
 * Anthropic requires) or {"type": "disabled"}: the template's enable_thinking (chat_template_kwargs of the
 * chat view), and with "enabled" the answer's reasoning comes back as a thinking block. */
static enum ci_status parse_thinking(const cJSON *root, bool count_only, struct anthropic_request *r,
                                     cJSON *chat, struct openai_error *err) {
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(root, "thinking");
    if (openai_absent(th))
        return CI_OK;
    const char *type = str_of(th, "type");
    if (!cJSON_IsObject(th) || !type || (strcmp(type, "enabled") != 0 && strcmp(type, "disabled") != 0))
        return openai_bad(err, "thinking",
                          "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or "
                          "{\"type\": \"disabled\"}");
    bool on = strcmp(type, "enabled") == 0;
    if (on) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(th, "budget_tokens");
        if (!integral(b, 1024, 1 << 30))
            return openai_bad(err, "thinking.budget_tokens",
                              "'thinking.budget_tokens' must be an integer of at least 1024");
        r->thinking_budget = (int)b->valuedouble;
        if (!count_only && r->thinking_budget >= r->q.max_tokens)
            return openai_bad(err, "thinking.budget_tokens",
                              "'thinking.budget_tokens' (%d) must be less than 'max_tokens' (%d)",
                              r->thinking_budget, r->q.max_tokens);
        if (r->tool_choice == ANTHROPIC_TOOL_ANY || r->tool_choice == ANTHROPIC_TOOL_TOOL)
            return openai_bad(
                err, "thinking",
                "thinking may not be enabled when 'tool_choice' forces tool use (as Anthropic's "
                "API: use tool_choice auto or none)");
    }
    r->thinking = on ? ANTHROPIC_THINKING_ENABLED : ANTHROPIC_THINKING_DISABLED;
    cJSON *kw = cJSON_AddObjectToObject(chat, "chat_template_kwargs");
    return kw && cJSON_AddBoolToObject(kw, "enable_thinking", on) ? CI_OK : openai_nomem(err);
}

/* The chat messages' roles and texts, for the engine and the built-in templates. */
static enum ci_status fill_messages(const cJSON *arr, struct openai_request *q, struct openai_error *err) {
    int count = cJSON_GetArraySize(arr);
    if (count < 1 || count > OPENAI_MAX_MESSAGES)
        return openai_bad(err, "messages", "the conversation makes %d chat messages, 1 to %d are allowed",
                          count, OPENAI_MAX_MESSAGES);
    if (!(q->messages = ci_calloc((size_t)count, sizeof *q->messages)))
        return openai_nomem(err);
    const cJSON *m;
    cJSON_ArrayForEach(m, arr) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        struct cinfer_chat_message *out = &q->messages[q->n_messages++];
        out->role = ci_strdup(role->valuestring);
        out->content = ci_strdup(cJSON_IsString(content) ? content->valuestring : "");
        if (!out->role || !out->content)
            return openai_nomem(err);
    }
    return CI_OK;
}

enum ci_status anthropic_parse(const char *body, size_t len, bool count_only, const struct openai_limits *lim,
                               struct anthropic_request *out, struct openai_error *err) {
    (void)lim;
    memset(out, 0, sizeof *out);
    struct openai_request *q = &out->q;
    q->endpoint = OPENAI_CHAT;
    q->n = 1;
    q->logprobs = -1;
    q->sampling = (struct cinfer_sampling){.temperature = 1.0f, .top_p = 1.0f, .repetition_penalty = 1.0f};
    if (memchr(body, '\0', len))
        return openai_bad(err, NULL, "the request body holds a NUL byte");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len + 1, &end, true);
    cJSON *chat = NULL;
    enum ci_status s = CI_OK;
    char where[128];
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        s = openai_bad(err, NULL, "the request body is not valid JSON (near byte %zu)", at);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        s = openai_bad(err, NULL, "the request body must be a JSON object");
        goto done;
    }
    if (json_find_nul_escape(body, len, where, sizeof where)) {
        s = openai_bad(err, where[0] ? where : NULL,
                       "'%s' holds a NUL character (\\u0000), which is not supported",
                       where[0] ? where : "the request");
        goto done;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsString(model)) {
        s = openai_bad(err, "model", "'model' is required (a string)");
        goto done;
    }
    if (!(q->model = ci_strdup(model->valuestring))) {
        s = openai_nomem(err);
        goto done;
    }
    cJSON *arr = (chat = cJSON_CreateObject()) ? cJSON_AddArrayToObject(chat, "messages") : NULL;
    if (!arr) {
        s = openai_nomem(err);
        goto done;
    }
    const cJSON *system = cJSON_GetObjectItemCaseSensitive(root, "system");
    if (!openai_absent(system)) {
        struct text t = {0};
        if ((s = text_content(system, "system", &t, err)) == CI_OK && t.len > 0 &&
            !add_message(arr, "system", t.s))
            s = openai_nomem(err);
        ci_free(t.s);
        if (s != CI_OK)
            goto done;
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    int count = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : 0;
    if (count < 1 || count > OPENAI_MAX_MESSAGES) {
        s = openai_bad(err, "messages", "'messages' is required: an array of 1 to %d messages",
                       OPENAI_MAX_MESSAGES);
        goto done;
    }
    int i = 0;
    const cJSON *msg;
    cJSON_ArrayForEach(msg, msgs) {
        if ((s = one_message(msg, i++, arr, err)) != CI_OK)
            goto done;
    }
    // A final assistant turn of text is a prefill: the answer continues it (anthropic.h).
    cJSON *last = cJSON_GetArrayItem(arr, cJSON_GetArraySize(arr) - 1);
    const char *role = str_of(last, "role"), *content = str_of(last, "content");
    if (role && strcmp(role, "assistant") == 0 && content &&
        !cJSON_GetObjectItemCaseSensitive(last, "tool_calls")) {
        if (content[0] && !(out->prefill = ci_strdup(content))) {
            s = openai_nomem(err);
            goto done;
        }
        cJSON_DeleteItemFromArray(arr, cJSON_GetArraySize(arr) - 1);
    }
    if ((s = parse_tools(root, out, chat, err)) != CI_OK ||
        (s = parse_tool_choice(root, out, err)) != CI_OK ||
        (s = parse_sampling(root, count_only, q, err)) != CI_OK ||
        (s = parse_thinking(root, count_only, out, chat, err)) != CI_OK ||
        (s = fill_messages(arr, q, err)) != CI_OK)
        goto done;
    if (!(out->chat_json = cJSON_PrintUnformatted(chat))) {
        s = openai_nomem(err);
        goto done;
    }
    out->chat_json_len = strlen(out->chat_json);
done:
    cJSON_Delete(root);
    cJSON_Delete(chat);
    if (s != CI_OK)
        anthropic_request_deinit(out);
    return s;
}

void anthropic_request_deinit(struct anthropic_request *r) {
    openai_request_deinit(&r->q);
    cJSON_free(r->chat_json);
    ci_free(r->tool_name);
    ci_free(r->prefill);
    memset(r, 0, sizeof *r);
}

/* ---- the answer --------------------------------------------------------------------------------------- */

bool anthropic_output_blocks(const struct anthropic_request *r, const char *text, size_t len,
                             struct anthropic_block **out, int *n) {
    (void)r; // a tool-call parser reads r->n_tools, r->tool_choice and r->tool_name here
    *out = NULL;
    *n = 0;
    struct anthropic_block *b = ci_calloc(1, sizeof *b);
    if (!b || !(b->text = ci_malloc(len + 1))) {
        ci_free(b);
        return false;
    }
    b->type = ANTHROPIC_BLOCK_TEXT;
    if (len)
        memcpy(b->text, text, len);
    b->text[len] = '\0';
    b->len = len;
    *out = b;
    *n = 1;
    return true;
}

void anthropic_signature(const uint64_t key[2], const char *text, size_t n,
                         char out[ANTHROPIC_SIGNATURE_LEN]) {
    // Two independently keyed 64-bit hashes, each also over the other key, so neither half reveals a key.
    uint64_t a = ci_hash_bytes(ci_hash_bytes(key[0], text, n), &key[1], sizeof key[1]);
    uint64_t b = ci_hash_bytes(ci_hash_bytes(key[1], text, n), &key[0], sizeof key[0]);
    snprintf(out, ANTHROPIC_SIGNATURE_LEN, "cinfer1.%016llx%016llx", (unsigned long long)a,
             (unsigned long long)b);
}

void anthropic_tool_use_id(uint64_t seed, int k, char out[32]) {
    char call[30];
    tool_call_id(seed, k, call); // "call_" and 24 characters
    snprintf(out, 32, "toolu_%s", call + 5);
}

static char *dup_n(const char *s, size_t n) {
    char *d = ci_malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

bool anthropic_blocks_from_parse(const struct tool_parse_result *p, int n_calls, bool thinking, uint64_t seed,
                                 struct anthropic_block **out, int *n) {
    bool think = thinking && p->reasoning_len > 0;
    bool text = p->content_len > 0 || n_calls == 0;
    int total = (think ? 1 : 0) + (text ? 1 : 0) + n_calls;
    struct anthropic_block *b = ci_calloc((size_t)total, sizeof *b);
    *out = b;
    *n = 0;
    if (!b)
        return false;
    if (think) {
        b[0].type = ANTHROPIC_BLOCK_THINKING;
        if (!(b[0].text = dup_n(p->reasoning, p->reasoning_len)))
            return false;
        b[0].len = p->reasoning_len;
        *n = 1;
    }
    if (text) {
        struct anthropic_block *t = &b[(*n)++];
        t->type = ANTHROPIC_BLOCK_TEXT;
        if (!(t->text = dup_n(p->content, p->content_len)))
            return false;
        t->len = p->content_len;
    }
    for (int k = 0; k < n_calls; k++) {
        struct anthropic_block *t = &b[(*n)++];
        char id[32];
        anthropic_tool_use_id(seed, k, id);
        t->type = ANTHROPIC_BLOCK_TOOL_USE;
        if (!(t->id = dup_n(id, strlen(id))) ||
            !(t->name = dup_n(p->calls[k].name, strlen(p->calls[k].name))) ||
            !(t->input_json = dup_n(p->calls[k].arguments, strlen(p->calls[k].arguments))))
            return false;
    }
    return true;
}

void anthropic_blocks_free(struct anthropic_block *b, int n) {
    for (int i = 0; b && i < n; i++) {
        ci_free(b[i].text);
        ci_free(b[i].id);
        ci_free(b[i].name);
        ci_free(b[i].input_json);
    }
    ci_free(b);
}

int anthropic_matched_stop(const char *raw, size_t n, char *const *stops, int n_stop) {
    int best = -1;
    size_t best_at = 0;
    for (int i = 0; i < n_stop; i++) {
        size_t k = strlen(stops[i]);
        for (size_t at = 0; k && at + k <= n && (best < 0 || at < best_at); at++)
            if (memcmp(raw + at, stops[i], k) == 0) {
                best = i;
                best_at = at;
                break;
            }
    }
    return best;
}

const char *anthropic_stop_reason(const char *finish, bool stop_sequence, bool tool_use) {
    if (finish && strcmp(finish, "length") == 0)
        return "max_tokens";
    if (tool_use)
        return "tool_use";
    return stop_sequence ? "stop_sequence" : "end_turn";
}

static bool add_usage(cJSON *o, long long in, long long out) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    return u && cJSON_AddNumberToObject(u, "input_tokens", (double)in) &&
           cJSON_AddNumberToObject(u, "output_tokens", (double)out);
}

static bool add_or_null(cJSON *o, const char *key, const char *s) {
    return s ? sse_add_string(o, key, s, strlen(s)) : cJSON_AddNullToObject(o, key) != NULL;
}

static cJSON *block_json(const struct anthropic_block *b) {
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL;
    if (ok && b->type == ANTHROPIC_BLOCK_TEXT) {
        ok = cJSON_AddStringToObject(o, "type", "text") &&
             sse_add_string(o, "text", b->text ? b->text : "", b->len);
    } else if (ok && b->type == ANTHROPIC_BLOCK_THINKING) {
        ok = cJSON_AddStringToObject(o, "type", "thinking") &&
             sse_add_string(o, "thinking", b->text ? b->text : "", b->len) &&
             cJSON_AddStringToObject(o, "signature", b->signature);
    } else if (ok) {
        cJSON *input = cJSON_Parse(b->input_json ? b->input_json : "{}");
        ok = cJSON_AddStringToObject(o, "type", "tool_use") && add_or_null(o, "id", b->id) &&
             add_or_null(o, "name", b->name) && input && cJSON_AddItemToObject(o, "input", input);
        if (!ok && input && !cJSON_GetObjectItemCaseSensitive(o, "input"))
            cJSON_Delete(input);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The message object; content holds the blocks (none for the streaming opening). */
static cJSON *message_object(const struct anthropic_info *info, const struct anthropic_block *b, int n,
                             bool start) {
    cJSON *o = cJSON_CreateObject(), *content = NULL;
    bool ok = o && add_or_null(o, "id", info->id) && cJSON_AddStringToObject(o, "type", "message") &&
              cJSON_AddStringToObject(o, "role", "assistant") && add_or_null(o, "model", info->model) &&
              (content = cJSON_AddArrayToObject(o, "content"));
    for (int i = 0; ok && i < n; i++) {
        cJSON *bj = block_json(&b[i]);
        ok = bj && cJSON_AddItemToArray(content, bj);
        if (!ok)
            cJSON_Delete(bj);
    }
    ok = ok && add_or_null(o, "stop_reason", start ? NULL : info->stop_reason) &&
         add_or_null(o, "stop_sequence", start ? NULL : info->stop_sequence) &&
         add_usage(o, info->input_tokens, start ? 0 : info->output_tokens);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *anthropic_message(const struct anthropic_info *info, const struct anthropic_block *b, int n) {
    return message_object(info, b, n, false);
}

/* Events queued together: each "event: <type>\ndata: <json>\n\n". */
struct events {
    char *s;
    size_t len, cap;
    bool ok;
};

static void events_add(struct events *ev, const char *type, cJSON *data) {
    char *json = ev->ok && data ? cJSON_PrintUnformatted(data) : NULL;
    cJSON_Delete(data);
    if (!json) {
        ev->ok = false;
        return;
    }
    size_t n = strlen("event: \ndata: \n\n") + strlen(type) + strlen(json), need = ev->len + n + 1;
    if (need > ev->cap) {
        size_t cap = ev->cap ? ev->cap * 2 : 256;
        while (cap < need)
            cap *= 2;
        char *grown = ci_realloc(ev->s, cap);
        if (!grown) {
            cJSON_free(json);
            ev->ok = false;
            return;
        }
        ev->s = grown;
        ev->cap = cap;
    }
    ev->len += (size_t)snprintf(ev->s + ev->len, ev->cap - ev->len, "event: %s\ndata: %s\n\n", type, json);
    cJSON_free(json);
}

static bool events_flush(struct events *ev, struct sse_buf *b) {
    bool ok = ev->ok && sse_buf_append(b, ev->s, ev->len);
    ci_free(ev->s);
    return ok;
}

/* {"type": type} plus, when given, "index": index. */
static cJSON *event_object(const char *type, int index) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "type", type) ||
        (index >= 0 && !cJSON_AddNumberToObject(o, "index", index))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* content_block_start of blk at index (a tool_use block with input {}, then its input as one delta). */
static void block_start(struct events *ev, int index, const struct anthropic_block *blk) {
    cJSON *cb = event_object("content_block_start", index), *block = NULL;
    if (cb && blk->type == ANTHROPIC_BLOCK_TOOL_USE) {
        char empty[] = "{}";
        struct anthropic_block head = *blk;
        head.input_json = empty;
        block = block_json(&head);
    } else if (cb) { // a text or thinking block starts empty; its text follows as deltas
        struct anthropic_block head = {.type = blk->type};
        block = block_json(&head);
    }
    if (!block || !cJSON_AddItemToObject(cb, "content_block", block)) {
        cJSON_Delete(block);
        cJSON_Delete(cb);
        cb = NULL;
    }
    events_add(ev, "content_block_start", cb);
    if (blk->type != ANTHROPIC_BLOCK_TOOL_USE)
        return;
    cJSON *o = event_object("content_block_delta", index),
          *d = o ? cJSON_AddObjectToObject(o, "delta") : NULL;
    const char *json = blk->input_json ? blk->input_json : "{}";
    if (!d || !cJSON_AddStringToObject(d, "type", "input_json_delta") ||
        !sse_add_string(d, "partial_json", json, strlen(json))) {
        cJSON_Delete(o);
        o = NULL;
    }
    events_add(ev, "content_block_delta", o);
}

bool anthropic_stream_block(struct sse_buf *b, int stop, const struct anthropic_block *blk) {
    struct events ev = {.ok = true};
    if (stop >= 0)
        events_add(&ev, "content_block_stop", event_object("content_block_stop", stop));
    block_start(&ev, stop + 1, blk);
    return events_flush(&ev, b);
}

bool anthropic_stream_start(struct sse_buf *b, const struct anthropic_info *info, bool open_text) {
    struct events ev = {.ok = true};
    cJSON *start = event_object("message_start", -1), *msg = message_object(info, NULL, 0, true);
    if (!start || !msg || !cJSON_AddItemToObject(start, "message", msg)) {
        if (start && !cJSON_GetObjectItemCaseSensitive(start, "message"))
            cJSON_Delete(msg);
        cJSON_Delete(start);
        start = NULL;
    }
    events_add(&ev, "message_start", start);
    const struct anthropic_block text = {.type = ANTHROPIC_BLOCK_TEXT};
    if (open_text)
        block_start(&ev, 0, &text);
    events_add(&ev, "ping", event_object("ping", -1));
    return events_flush(&ev, b);
}

static bool stream_delta(struct sse_buf *b, int index, const char *type, const char *key, const char *text,
                         size_t n) {
    struct events ev = {.ok = true};
    cJSON *o = event_object("content_block_delta", index),
          *d = o ? cJSON_AddObjectToObject(o, "delta") : NULL;
    if (!d || !cJSON_AddStringToObject(d, "type", type) || !sse_add_string(d, key, text, n)) {
        cJSON_Delete(o);
        o = NULL;
    }
    events_add(&ev, "content_block_delta", o);
    return events_flush(&ev, b);
}

bool anthropic_stream_text(struct sse_buf *b, int index, const char *text, size_t n) {
    return stream_delta(b, index, "text_delta", "text", text, n);
}

bool anthropic_stream_thinking(struct sse_buf *b, int index, const char *text, size_t n) {
    return stream_delta(b, index, "thinking_delta", "thinking", text, n);
}

bool anthropic_stream_signature(struct sse_buf *b, int index, const char *signature) {
    return stream_delta(b, index, "signature_delta", "signature", signature, strlen(signature));
}

bool anthropic_stream_end(struct sse_buf *b, const struct anthropic_info *info, int last) {
    struct events ev = {.ok = true};
    const struct anthropic_block text = {.type = ANTHROPIC_BLOCK_TEXT};
    if (last < 0) {
        block_start(&ev, 0, &text);
        last = 0;
    }
    events_add(&ev, "content_block_stop", event_object("content_block_stop", last));
    cJSON *md = event_object("message_delta", -1), *d = md ? cJSON_AddObjectToObject(md, "delta") : NULL,
          *u = d ? cJSON_AddObjectToObject(md, "usage") : NULL;
    if (!u || !add_or_null(d, "stop_reason", info->stop_reason) ||
        !add_or_null(d, "stop_sequence", info->stop_sequence) ||
        !cJSON_AddNumberToObject(u, "output_tokens", (double)info->output_tokens)) {
        cJSON_Delete(md);
        md = NULL;
    }
    events_add(&ev, "message_delta", md);
    events_add(&ev, "message_stop", event_object("message_stop", -1));
    return events_flush(&ev, b);
}

bool anthropic_stream_error(struct sse_buf *b, const struct openai_error *e) {
    char *json = anthropic_error_json(e, NULL);
    struct events ev = {.ok = json != NULL};
    events_add(&ev, "error", json ? cJSON_Parse(json) : NULL);
    ci_free(json);
    return events_flush(&ev, b);
}
