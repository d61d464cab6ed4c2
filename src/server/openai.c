/* OpenAI request parsing and validation (cJSON), error bodies and the status → HTTP table.  Every value from
 * the body is checked for type and range here, with the offending parameter named, so that what reaches
 * cinfer_engine_submit is already sane; the engine still re-checks what only it knows (context, KV pool). */
#include "server/openai.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "server/json_check.h"
#include "server/sse.h"

/* cJSON_Parse answers NULL both for bad JSON and when out of memory: this thread's allocation failures tell
 * them apart (parse_root). */
static _Thread_local bool json_nomem;

static void *json_malloc(size_t n) {
    void *p = ci_malloc(n);
    if (!p)
        json_nomem = true;
    return p;
}

void openai_init(void) {
    cJSON_Hooks h = {json_malloc, ci_free};
    cJSON_InitHooks(&h);
}

/* ---- errors ------------------------------------------------------------------------------------------- */

static const char *type_for(int status) {
    switch (status) {
    case 401:
        return "authentication_error";
    case 429:
        return "rate_limit_error";
    default:
        return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

void openai_error_set(struct openai_error *e, int status, const char *param, const char *code,
                      const char *fmt, ...) {
    e->status = status;
    e->type = type_for(status);
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

int openai_http_status(enum cinfer_status s) {
    switch (s) {
    case CINFER_OK:
        return 200;
    case CINFER_ERR_INVALID:
    case CINFER_ERR_FORMAT:
    case CINFER_ERR_UNSUPPORTED:
    case CINFER_ERR_LIMIT:
        return 400;
    case CINFER_ERR_BUSY:
        return 429;
    case CINFER_ERR_CANCELLED:
        return 503;
    case CINFER_ERR_NOMEM:
    case CINFER_ERR_IO:
    case CINFER_ERR_INTERNAL:
        break;
    }
    return 500;
}

void openai_error_from_status(struct openai_error *e, enum cinfer_status s, const char *message) {
    const char *code = NULL;
    if (s == CINFER_ERR_LIMIT)
        code = "context_length_exceeded";
    else if (s == CINFER_ERR_BUSY)
        code = "rate_limit_exceeded";
    openai_error_set(e, openai_http_status(s), NULL, code, "%s", message && *message ? message : "error");
}

char *openai_error_json(const struct openai_error *e, size_t *len) {
    char *out = NULL;
    // Both may hold bytes of the request (a role, a key's path) and may have been cut inside a character to
    // fit: clean them so the body stays UTF-8.
    char *msg = sse_utf8_clean(e->message, strlen(e->message), NULL);
    char *param = sse_utf8_clean(e->param, strlen(e->param), NULL);
    cJSON *root = cJSON_CreateObject();
    cJSON *er = cJSON_AddObjectToObject(root, "error");
    if (!msg || !param || !er || !cJSON_AddStringToObject(er, "message", msg) ||
        !cJSON_AddStringToObject(er, "type", e->type ? e->type : type_for(e->status)))
        goto done;
    if (!(param[0] ? cJSON_AddStringToObject(er, "param", param) : cJSON_AddNullToObject(er, "param")) ||
        !(e->code ? cJSON_AddStringToObject(er, "code", e->code) : cJSON_AddNullToObject(er, "code")))
        goto done;
    out = cJSON_PrintUnformatted(root);
    if (out && len)
        *len = strlen(out);
done:
    ci_free(msg);
    ci_free(param);
    cJSON_Delete(root);
    return out;
}

/* ---- value readers: absent and null mean "not given" -------------------------------------------------- */

bool openai_absent(const cJSON *v) {
    return !v || cJSON_IsNull(v);
}

enum ci_status openai_bad(struct openai_error *err, const char *param, const char *fmt, ...) {
    char msg[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    openai_error_set(err, 400, param, NULL, "%s", msg);
    return CI_ERR_INVALID;
}

enum ci_status openai_nomem(struct openai_error *err) {
    openai_error_set(err, 500, NULL, NULL, "out of memory");
    return CI_ERR_NOMEM;
}

static bool integral(const cJSON *v, double lo, double hi) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && floor(v->valuedouble) == v->valuedouble &&
           v->valuedouble >= lo && v->valuedouble <= hi;
}

/* An integer in [lo, hi]; *out untouched when absent. */
static enum ci_status get_int(const cJSON *o, const char *key, int lo, int hi, int *out, bool *given,
                              struct openai_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (given)
        *given = !openai_absent(v);
    if (openai_absent(v))
        return CI_OK;
    if (!integral(v, lo, hi))
        return openai_bad(err, key, "'%s' must be an integer in [%d, %d]", key, lo, hi);
    *out = (int)v->valuedouble;
    return CI_OK;
}

/* A number in [lo, hi] (open at lo when lo_open). */
static enum ci_status get_float(const cJSON *o, const char *key, double lo, bool lo_open, double hi,
                                float *out, struct openai_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (openai_absent(v))
        return CI_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble > hi ||
        (lo_open ? v->valuedouble <= lo : v->valuedouble < lo))
        return openai_bad(err, key, "'%s' must be a number in %s%g, %g]", key, lo_open ? "(" : "[", lo, hi);
    *out = (float)v->valuedouble;
    return CI_OK;
}

static enum ci_status get_bool(const cJSON *o, const char *key, bool *out, struct openai_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (openai_absent(v))
        return CI_OK;
    if (!cJSON_IsBool(v))
        return openai_bad(err, key, "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return CI_OK;
}

static enum ci_status parse_root(const char *body, size_t len, cJSON **out, struct openai_error *err) {
    *out = NULL;
    if (memchr(body, '\0', len))
        return openai_bad(err, NULL, "the request body holds a NUL byte");
    const char *end = NULL;
    // len + 1 takes in the NUL, so trailing garbage after the value is rejected.
    json_nomem = false;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len + 1, &end, true);
    if (!root && json_nomem)
        return openai_nomem(err);
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        return openai_bad(err, NULL, "the request body is not valid JSON (near byte %zu)", at);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return openai_bad(err, NULL, "the request body must be a JSON object");
    }
    // cJSON would cut a string at an escaped NUL and the rest would vanish unnoticed: refuse it instead.
    char where[128];
    if (json_find_nul_escape(body, len, where, sizeof where)) {
        cJSON_Delete(root);
        return openai_bad(err, where[0] ? where : NULL,
                          "'%s' holds a NUL character (\\u0000), which is not supported",
                          where[0] ? where : "the request");
    }
    *out = root;
    return CI_OK;
}

static enum ci_status dup_string(const char *s, char **out, struct openai_error *err) {
    if (!(*out = ci_strdup(s)))
        return openai_nomem(err);
    return CI_OK;
}

/* [0, n_vocab) integers of an array (may be empty). */
static enum ci_status token_array(const cJSON *arr, const char *param, int n_vocab, cinfer_token **ids,
                                  int *n, struct openai_error *err) {
    int count = cJSON_GetArraySize(arr);
    *ids = NULL;
    *n = 0;
    if (count == 0)
        return CI_OK;
    cinfer_token *t = ci_malloc((size_t)count * sizeof *t);
    if (!t)
        return openai_nomem(err);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
        if (!integral(v, 0, (double)n_vocab - 1)) {
            ci_free(t);
            return openai_bad(err, param, "'%s': element %d is not a token id in [0, %d)", param, i, n_vocab);
        }
        t[i++] = (cinfer_token)v->valuedouble;
    }
    *ids = t;
    *n = i;
    return CI_OK;
}

/* ---- messages ----------------------------------------------------------------------------------------- */

/* Concatenates the text parts [{"type":"text","text":"..."}] of a content array, joined by "\n". */
static enum ci_status content_parts(const cJSON *arr, const char *param, char **out,
                                    struct openai_error *err) {
    size_t total = 1;
    const cJSON *p;
    int i = 0;
    cJSON_ArrayForEach(p, arr) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (cJSON_IsObject(p) && cJSON_IsString(type) && strcmp(type->valuestring, "text") != 0)
            return openai_bad(
                err, param,
                "'%s': part %d is of type '%.32s', which is not supported (only \"text\" parts are)", param,
                i, type->valuestring);
        if (!cJSON_IsObject(p) || !cJSON_IsString(type) || !cJSON_IsString(text))
            return openai_bad(
                err, param,
                "'%s': part %d is not {\"type\": \"text\", \"text\": ...} (only text is supported)", param,
                i);
        total += strlen(text->valuestring) + 1;
        i++;
    }
    char *s = ci_malloc(total);
    if (!s)
        return openai_nomem(err);
    size_t o = 0;
    i = 0;
    cJSON_ArrayForEach(p, arr) {
        const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        size_t l = strlen(t);
        if (i++)
            s[o++] = '\n';
        memcpy(s + o, t, l);
        o += l;
    }
    s[o] = '\0';
    *out = s;
    return CI_OK;
}

static void messages_free(struct cinfer_chat_message *m, int n) {
    for (int i = 0; i < n; i++) {
        ci_free((char *)(uintptr_t)m[i].role);
        ci_free((char *)(uintptr_t)m[i].content);
    }
    ci_free(m);
}

/* An assistant message's "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}];
 * their ids are added to ids[*n_ids] (pointers into the cJSON tree). */
static enum ci_status check_tool_calls(const cJSON *calls, int i, const char ***ids, int *n_ids, int *cap,
                                       struct openai_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    if (!cJSON_IsArray(calls))
        return openai_bad(err, param, "'%s' must be an array of tool calls", param);
    int k = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        snprintf(param, sizeof param, "messages[%d].tool_calls[%d]", i, k);
        if (!cJSON_IsObject(c) || !cJSON_IsString(id) || !id->valuestring[0])
            return openai_bad(err, param, "'%s' must be an object with an \"id\" string", param);
        if (!openai_absent(type) && (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0))
            return openai_bad(err, param, "'%s': type must be \"function\"", param);
        if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || !name->valuestring[0])
            return openai_bad(err, param, "'%s' must have a function with a \"name\" string", param);
        if (!openai_absent(args) && !cJSON_IsString(args) && !cJSON_IsObject(args))
            return openai_bad(err, param, "'%s': function.arguments must be a string (JSON text)", param);
        if (*n_ids == *cap) {
            int nc = *cap ? *cap * 2 : 16;
            const char **g = ci_realloc((void *)*ids, (size_t)nc * sizeof *g);
            if (!g)
                return openai_nomem(err);
            *ids = g;
            *cap = nc;
        }
        (*ids)[(*n_ids)++] = id->valuestring;
        k++;
    }
    return CI_OK;
}

static enum ci_status parse_messages(const cJSON *root, struct cinfer_chat_message **out, int *n_out,
                                     struct openai_error *err) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "messages");
    *out = NULL;
    *n_out = 0;
    if (openai_absent(arr))
        return openai_bad(err, "messages", "'messages' is required");
    int count = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
    if (!cJSON_IsArray(arr) || count < 1 || count > OPENAI_MAX_MESSAGES)
        return openai_bad(err, "messages", "'messages' must be an array of 1 to %d messages",
                          OPENAI_MAX_MESSAGES);
    struct cinfer_chat_message *m = ci_calloc((size_t)count, sizeof *m);
    if (!m)
        return openai_nomem(err);
    const char **call_ids = NULL; // every tool call id of the assistant messages so far
    int n_ids = 0, cap_ids = 0;
    enum ci_status s = CI_OK;
    int i = 0;
    const cJSON *msg;
    cJSON_ArrayForEach(msg, arr) {
        char param[64];
        snprintf(param, sizeof param, "messages[%d].role", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        if (!cJSON_IsObject(msg)) {
            s = openai_bad(err, "messages", "'messages': element %d is not an object", i);
            goto fail;
        }
        if (!cJSON_IsString(role)) {
            s = openai_bad(err, param, "'%s' must be a string", param);
            goto fail;
        }
        const char *r = role->valuestring;
        if (strcmp(r, "developer") == 0) // OpenAI's newer name for the system role
            r = "system";
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0 &&
            strcmp(r, "tool") != 0) {
            s = openai_bad(err, param,
                           "'%s': role '%.32s' is not supported (system, developer, user, assistant, tool)",
                           param, role->valuestring);
            goto fail;
        }
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
        if (!openai_absent(calls)) {
            if (strcmp(r, "assistant") != 0) {
                snprintf(param, sizeof param, "messages[%d].tool_calls", i);
                s = openai_bad(err, param, "'%s': only assistant messages have tool calls", param);
                goto fail;
            }
            if ((s = check_tool_calls(calls, i, &call_ids, &n_ids, &cap_ids, err)) != CI_OK)
                goto fail;
        }
        if (strcmp(r, "tool") == 0) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "tool_call_id");
            snprintf(param, sizeof param, "messages[%d].tool_call_id", i);
            if (!cJSON_IsString(id)) {
                s = openai_bad(err, param,
                               "'%s' is required for a tool message (the id of the call it answers)", param);
                goto fail;
            }
            bool found = false;
            for (int k = 0; k < n_ids && !found; k++)
                found = strcmp(call_ids[k], id->valuestring) == 0;
            if (!found) {
                s = openai_bad(err, param,
                               "'%s': '%.64s' is the id of no tool call of an earlier assistant message",
                               param, id->valuestring);
                goto fail;
            }
        }
        char *text = NULL;
        if ((s = dup_string(r, &text, err)) != CI_OK)
            goto fail;
        m[i].role = text;
        snprintf(param, sizeof param, "messages[%d].content", i);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        text = NULL;
        if (openai_absent(content))
            s = dup_string("", &text, err);
        else if (cJSON_IsString(content))
            s = dup_string(content->valuestring, &text, err);
        else if (cJSON_IsArray(content))
            s = content_parts(content, param, &text, err);
        else
            s = openai_bad(err, param, "'%s' must be a string or an array of text parts", param);
        m[i].content = text;
        if (s != CI_OK)
            goto fail;
        i++;
    }
    ci_free((void *)call_ids);
    *out = m;
    *n_out = count;
    return CI_OK;
fail:
    ci_free((void *)call_ids);
    messages_free(m, count);
    return s;
}

/* ---- tools -------------------------------------------------------------------------------------------- */

/* OpenAI's rule for function names: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'. */
static bool function_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

static const cJSON *tool_function(const cJSON *tools, const char *name) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return fn;
    }
    return NULL;
}

/* "tools", "tool_choice", "parallel_tool_calls" and "reasoning_effort". */
static enum ci_status parse_tools(const cJSON *root, struct openai_request *r, struct openai_error *err) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    char param[64];
    if (!openai_absent(tools)) {
        int count = cJSON_IsArray(tools) ? cJSON_GetArraySize(tools) : -1;
        if (count < 0 || count > OPENAI_MAX_TOOLS)
            return openai_bad(err, "tools", "'tools' must be an array of at most %d tools", OPENAI_MAX_TOOLS);
        int i = 0;
        const cJSON *t;
        if (count > 0 && (!(r->tool_names = ci_calloc((size_t)count, sizeof *r->tool_names)) ||
                          !(r->tool_params = ci_calloc((size_t)count, sizeof *r->tool_params))))
            return openai_nomem(err);
        cJSON_ArrayForEach(t, tools) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            snprintf(param, sizeof param, "tools[%d]", i);
            if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0)
                return openai_bad(err, param, "'%s' must be {\"type\": \"function\", \"function\": {...}}",
                                  param);
            snprintf(param, sizeof param, "tools[%d].function", i);
            if (!cJSON_IsObject(fn))
                return openai_bad(err, param, "'%s' must be an object", param);
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
            const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
            const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
            snprintf(param, sizeof param, "tools[%d].function.name", i);
            if (!cJSON_IsString(name) || !function_name_ok(name->valuestring))
                return openai_bad(err, param, "'%s' is required: 1 to 64 letters, digits, '_' or '-'", param);
            if (tool_function(tools, name->valuestring) != fn)
                return openai_bad(err, param, "'%s': another tool is named '%s' too", param,
                                  name->valuestring);
            snprintf(param, sizeof param, "tools[%d].function.description", i);
            if (!openai_absent(desc) && !cJSON_IsString(desc))
                return openai_bad(err, param, "'%s' must be a string", param);
            snprintf(param, sizeof param, "tools[%d].function.parameters", i);
            if (!openai_absent(params) && !cJSON_IsObject(params))
                return openai_bad(err, param, "'%s' must be a JSON Schema object", param);
            r->n_tools = i + 1; // what deinit frees
            if (dup_string(name->valuestring, &r->tool_names[i], err) != CI_OK)
                return CI_ERR_NOMEM;
            if (cJSON_IsObject(params)) {
                char *text = cJSON_PrintUnformatted(params);
                enum ci_status s = text ? dup_string(text, &r->tool_params[i], err) : openai_nomem(err);
                cJSON_free(text);
                if (s != CI_OK)
                    return s;
            }
            i++;
        }
        r->n_tools = count;
    }
    r->tool_choice = r->n_tools > 0 ? OPENAI_TOOL_AUTO : OPENAI_TOOL_NONE;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (cJSON_IsString(tc)) {
        const char *v = tc->valuestring;
        if (strcmp(v, "none") == 0)
            r->tool_choice = OPENAI_TOOL_NONE;
        else if (strcmp(v, "auto") == 0)
            r->tool_choice = r->n_tools > 0 ? OPENAI_TOOL_AUTO : OPENAI_TOOL_NONE;
        else if (strcmp(v, "required") == 0)
            r->tool_choice = OPENAI_TOOL_REQUIRED;
        else
            return openai_bad(
                err, "tool_choice",
                "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                "\"function\": {\"name\": ...}}");
    } else if (!openai_absent(tc)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
        const cJSON *name =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tc, "function"), "name");
        if (!cJSON_IsObject(tc) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 ||
            !cJSON_IsString(name))
            return openai_bad(
                err, "tool_choice",
                "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                "\"function\": {\"name\": ...}}");
        const cJSON *fn = r->n_tools > 0 ? tool_function(tools, name->valuestring) : NULL;
        if (!fn)
            return openai_bad(err, "tool_choice",
                              "'tool_choice' names the function '%.64s', which is not in 'tools'",
                              name->valuestring);
        r->tool_choice = OPENAI_TOOL_NAMED;
        enum ci_status s = dup_string(name->valuestring, &r->tool_name, err);
        if (s != CI_OK)
            return s;
    }
    if (r->tool_choice == OPENAI_TOOL_REQUIRED && r->n_tools == 0)
        return openai_bad(err, "tool_choice", "'tool_choice' is \"required\" but the request has no 'tools'");
    r->parallel_tool_calls = true;
    enum ci_status s = get_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, err);
    if (s != CI_OK)
        return s;
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(root, "reasoning_effort");
    if (!openai_absent(re)) {
        if (!cJSON_IsString(re) ||
            (strcmp(re->valuestring, "low") != 0 && strcmp(re->valuestring, "medium") != 0 &&
             strcmp(re->valuestring, "high") != 0))
            return openai_bad(err, "reasoning_effort",
                              "'reasoning_effort' must be \"low\", \"medium\" or \"high\"");
        return dup_string(re->valuestring, &r->reasoning_effort, err);
    }
    return CI_OK;
}

/* ---- /v1/completions prompts -------------------------------------------------------------------------- */

static bool token_prompt_shape(const cJSON *v) {
    return cJSON_IsArray(v) && (cJSON_GetArraySize(v) == 0 || cJSON_IsNumber(cJSON_GetArrayItem(v, 0)));
}

static enum ci_status one_prompt(const cJSON *v, const char *param, int n_vocab, struct openai_prompt *p,
                                 struct openai_error *err) {
    if (cJSON_IsString(v))
        return dup_string(v->valuestring, &p->text, err);
    if (!token_prompt_shape(v))
        return openai_bad(err, param, "'%s' must be a string or an array of token ids", param);
    enum ci_status s = token_array(v, param, n_vocab, &p->ids, &p->n_ids, err);
    if (s == CI_OK && p->n_ids == 0)
        return openai_bad(err, param, "'%s' is an empty list of token ids", param);
    return s;
}

static enum ci_status parse_prompts(const cJSON *root, int n_vocab, struct openai_request *r,
                                    struct openai_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (openai_absent(v))
        return openai_bad(err, "prompt", "'prompt' is required");
    bool list = cJSON_IsArray(v) && !token_prompt_shape(v);
    int count = list ? cJSON_GetArraySize(v) : 1;
    if (count < 1 || count > OPENAI_MAX_PROMPTS)
        return openai_bad(err, "prompt", "'prompt' must hold 1 to %d prompts", OPENAI_MAX_PROMPTS);
    if (!(r->prompts = ci_calloc((size_t)count, sizeof *r->prompts)))
        return openai_nomem(err);
    r->n_prompts = count;
    if (!list)
        return one_prompt(v, "prompt", n_vocab, &r->prompts[0], err);
    int i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, v) {
        char param[32];
        snprintf(param, sizeof param, "prompt[%d]", i);
        enum ci_status s = one_prompt(p, param, n_vocab, &r->prompts[i++], err);
        if (s != CI_OK)
            return s;
    }
    return CI_OK;
}

/* ---- the shared sampling parameters ------------------------------------------------------------------- */

static enum ci_status parse_stop(const cJSON *root, struct openai_request *r, struct openai_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (openai_absent(v))
        return CI_OK;
    const cJSON *one[1] = {v};
    int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
    if (!cJSON_IsString(v) && !cJSON_IsArray(v))
        return openai_bad(err, "stop", "'stop' must be a string or an array of strings");
    if (count > OPENAI_MAX_STOP)
        return openai_bad(err, "stop", "'stop' holds %d strings, at most %d are allowed", count,
                          OPENAI_MAX_STOP);
    for (int i = 0; i < count; i++) {
        const cJSON *s = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, i) : one[0];
        size_t n = cJSON_IsString(s) ? strlen(s->valuestring) : 0;
        if (!cJSON_IsString(s) || n < 1 || n > OPENAI_MAX_STOP_BYTES)
            return openai_bad(err, "stop", "'stop': each stop string must be a string of 1 to %d bytes",
                              OPENAI_MAX_STOP_BYTES);
        if (dup_string(s->valuestring, &r->stop[i], err) != CI_OK)
            return CI_ERR_NOMEM;
        r->n_stop = i + 1;
    }
    return CI_OK;
}

static enum ci_status parse_logit_bias(const cJSON *root, int n_vocab, struct openai_request *r,
                                       struct openai_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (openai_absent(v))
        return CI_OK;
    if (!cJSON_IsObject(v))
        return openai_bad(err, "logit_bias", "'logit_bias' must be an object mapping token ids to biases");
    int count = cJSON_GetArraySize(v);
    if (count > OPENAI_MAX_LOGIT_BIAS)
        return openai_bad(err, "logit_bias", "'logit_bias' has %d entries, at most %d are allowed", count,
                          OPENAI_MAX_LOGIT_BIAS);
    if (count == 0)
        return CI_OK;
    if (!(r->logit_bias = ci_calloc((size_t)count, sizeof *r->logit_bias)))
        return openai_nomem(err);
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, v) {
        const char *k = e->string;
        char *end = NULL;
        long id = k && *k >= '0' && *k <= '9' ? strtol(k, &end, 10) : -1;
        if (!end || *end || id < 0 || id >= n_vocab)
            return openai_bad(err, "logit_bias", "'logit_bias': key '%.32s' is not a token id in [0, %d)",
                              k ? k : "", n_vocab);
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < -100 || e->valuedouble > 100)
            return openai_bad(err, "logit_bias",
                              "'logit_bias': the bias of token %ld must be a number in [-100, 100]", id);
        r->logit_bias[i].token = (cinfer_token)id;
        // -100 bans the token outright, as OpenAI documents, whatever the logits' scale.
        r->logit_bias[i].bias = e->valuedouble <= -100 ? -INFINITY : (float)e->valuedouble;
        i++;
    }
    r->n_logit_bias = i;
    return CI_OK;
}

/* One output constraint found in a request field. */
struct constraint {
    const char *param;
    enum cinfer_grammar_kind kind;
    char *text; // owned
};

/* A GBNF literal holding s (UTF-8; the GBNF parser checks it). */
static void gbnf_literal(char *dst, const char *s) {
    char *d = dst;
    *d++ = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            *d++ = '\\';
            *d++ = (char)*p;
        } else if (*p < 0x20 || *p == 0x7F) {
            d += sprintf(d, "\\x%02X", *p);
        } else {
            *d++ = (char)*p;
        }
    }
    *d++ = '"';
    *d = 0;
}

/* vLLM's guided_choice: a list of strings, the output exactly one of them. */
static enum ci_status choice_grammar(const cJSON *v, const char *param, char **out,
                                     struct openai_error *err) {
    if (!cJSON_IsArray(v) || !v->child)
        return openai_bad(err, param, "'%s' must be a non-empty array of strings", param);
    size_t need = 16;
    for (const cJSON *e = v->child; e; e = e->next) {
        if (!cJSON_IsString(e))
            return openai_bad(err, param, "'%s' must be a non-empty array of strings", param);
        need += 4 * strlen(e->valuestring) + 8;
        if (need > OPENAI_MAX_GRAMMAR)
            return openai_bad(err, param, "'%s' is too large", param);
    }
    char *g = ci_malloc(need);
    if (!g)
        return openai_nomem(err);
    char *d = g + sprintf(g, "root ::= ");
    for (const cJSON *e = v->child; e; e = e->next) {
        if (e != v->child)
            d += sprintf(d, " | ");
        gbnf_literal(d, e->valuestring);
        d += strlen(d);
    }
    *d = 0;
    *out = g;
    return CI_OK;
}

/* A JSON Schema given as an object (or, as vLLM allows, JSON text): its text. */
static enum ci_status schema_text(const cJSON *v, const char *param, char **out, struct openai_error *err) {
    if (cJSON_IsString(v)) {
        if (strlen(v->valuestring) > OPENAI_MAX_GRAMMAR)
            return openai_bad(err, param, "'%s' is larger than %d bytes", param, OPENAI_MAX_GRAMMAR);
        return dup_string(v->valuestring, out, err);
    }
    if (!cJSON_IsObject(v) && !cJSON_IsBool(v))
        return openai_bad(err, param, "'%s' must be a JSON Schema (an object)", param);
    char *t = cJSON_PrintUnformatted(v);
    if (!t)
        return openai_nomem(err);
    size_t n = strlen(t);
    if (n > OPENAI_MAX_GRAMMAR) {
        cJSON_free(t);
        return openai_bad(err, param, "'%s' is larger than %d bytes", param, OPENAI_MAX_GRAMMAR);
    }
    enum ci_status s = dup_string(t, out, err);
    cJSON_free(t);
    return s;
}

static enum ci_status text_field(const cJSON *v, const char *param, const char *what, char **out,
                                 struct openai_error *err) {
    if (!cJSON_IsString(v))
        return openai_bad(err, param, "'%s' must be a string (%s)", param, what);
    size_t n = strlen(v->valuestring);
    if (n > OPENAI_MAX_GRAMMAR)
        return openai_bad(err, param, "'%s' is %zu bytes, at most %d are allowed", param, n,
                          OPENAI_MAX_GRAMMAR);
    return dup_string(v->valuestring, out, err);
}

/* The constraint a field gives (c->text NULL: none, as for "" or response_format text). */
static enum ci_status parse_constraint(const cJSON *root, const char *param, struct constraint *c,
                                       struct openai_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, param);
    c->param = param;
    c->text = NULL;
    if (openai_absent(v))
        return CI_OK;
    if (!strcmp(param, "grammar") || !strcmp(param, "guided_grammar")) {
        c->kind = CINFER_GRAMMAR_GBNF;
        if (cJSON_IsString(v) && !v->valuestring[0])
            return CI_OK;
        return text_field(v, param, "a GBNF grammar", &c->text, err);
    }
    if (!strcmp(param, "guided_regex")) {
        c->kind = CINFER_GRAMMAR_REGEX;
        return text_field(v, param, "a regular expression", &c->text, err);
    }
    if (!strcmp(param, "guided_choice")) {
        c->kind = CINFER_GRAMMAR_GBNF;
        return choice_grammar(v, param, &c->text, err);
    }
    if (!strcmp(param, "json_schema") || !strcmp(param, "guided_json")) {
        c->kind = CINFER_GRAMMAR_JSON_SCHEMA;
        return schema_text(v, param, &c->text, err);
    }
    if (!strcmp(param, "response_format")) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
        if (!cJSON_IsObject(v) || !cJSON_IsString(t))
            return openai_bad(err, param, "'response_format' must be an object with a 'type'");
        c->kind = CINFER_GRAMMAR_JSON_SCHEMA;
        if (!strcmp(t->valuestring, "text"))
            return CI_OK;
        if (!strcmp(t->valuestring, "json_object")) { // llama.cpp's extension: an optional "schema"
            const cJSON *sc = cJSON_GetObjectItemCaseSensitive(v, "schema");
            if (!openai_absent(sc))
                return schema_text(sc, param, &c->text, err);
            return dup_string("{\"type\":\"object\"}", &c->text, err);
        }
        if (!strcmp(t->valuestring, "json_schema")) {
            const cJSON *js = cJSON_GetObjectItemCaseSensitive(v, "json_schema");
            if (!cJSON_IsObject(js))
                return openai_bad(err, param,
                                  "'response_format.json_schema' must be an object with a 'schema'");
            const cJSON *sc = cJSON_GetObjectItemCaseSensitive(js, "schema");
            if (openai_absent(sc))
                return openai_bad(err, param, "'response_format.json_schema.schema' is missing");
            return schema_text(sc, param, &c->text, err);
        }
        return openai_bad(err, param,
                          "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
    }
    // vLLM's structured_outputs: {"json" | "regex" | "choice" | "grammar" | "json_object": ...}
    if (!cJSON_IsObject(v))
        return openai_bad(err, param, "'structured_outputs' must be an object");
    static const char *const KEYS[] = {"json", "regex", "choice", "grammar", "json_object"};
    int found = 0;
    for (const cJSON *k = v->child; k; k = k->next) {
        int i = 0;
        while (i < 5 && strcmp(k->string, KEYS[i]))
            i++;
        if (i == 5 || openai_absent(k))
            continue;
        if (found++) {
            ci_free(c->text);
            c->text = NULL;
            return openai_bad(err, param,
                              "'structured_outputs' may give only one of json, regex, choice, grammar");
        }
        enum ci_status s;
        c->kind = i == 0 || i == 4 ? CINFER_GRAMMAR_JSON_SCHEMA
                  : i == 1         ? CINFER_GRAMMAR_REGEX
                                   : CINFER_GRAMMAR_GBNF;
        s = i == 0   ? schema_text(k, param, &c->text, err)
            : i == 1 ? text_field(k, param, "a regular expression", &c->text, err)
            : i == 2 ? choice_grammar(k, param, &c->text, err)
            : i == 3 ? text_field(k, param, "a GBNF grammar", &c->text, err)
                     : (cJSON_IsTrue(k) ? dup_string("{\"type\":\"object\"}", &c->text, err) : CI_OK);
        if (s != CI_OK)
            return s;
    }
    return CI_OK;
}

/* The output constraint: at most one of the fields that give one.  Its syntax and meaning are checked by
 * the engine (cinfer_engine_check_grammar_kind), whose errors the route reports against the field. */
static enum ci_status parse_grammar(const cJSON *root, struct openai_request *r, struct openai_error *err) {
    static const char *const FIELDS[] = {"grammar",        "json_schema",       "response_format",
                                         "guided_json",    "guided_regex",      "guided_choice",
                                         "guided_grammar", "structured_outputs"};
    const char *first = NULL;
    for (size_t i = 0; i < sizeof FIELDS / sizeof *FIELDS; i++) {
        struct constraint c;
        enum ci_status s = parse_constraint(root, FIELDS[i], &c, err);
        if (s != CI_OK)
            return s;
        if (!c.text)
            continue;
        if (first) {
            ci_free(c.text);
            return openai_bad(err, FIELDS[i], "'%s' and '%s' both constrain the output: give at most one",
                              first, FIELDS[i]);
        }
        first = FIELDS[i];
        r->grammar = c.text;
        r->grammar_kind = c.kind;
        snprintf(r->grammar_param, sizeof r->grammar_param, "%s", FIELDS[i]);
    }
    return CI_OK;
}

static enum ci_status parse_seed(const cJSON *root, struct openai_request *r, struct openai_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "seed");
    if (openai_absent(v))
        return CI_OK;
    if (!integral(v, -9223372036854775808.0, 18446744073709551615.0))
        return openai_bad(err, "seed", "'seed' must be an integer");
    r->has_seed = true;
    r->sampling.seed = v->valuedouble < 0                         ? (uint64_t)(int64_t)v->valuedouble
                       : v->valuedouble >= 18446744073709551615.0 ? UINT64_MAX
                                                                  : (uint64_t)v->valuedouble;
    return CI_OK;
}

static enum ci_status parse_logprobs(const cJSON *root, enum openai_endpoint ep, struct openai_request *r,
                                     struct openai_error *err) {
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
    if (ep == OPENAI_COMPLETIONS) {
        if (openai_absent(lp))
            return CI_OK;
        if (cJSON_IsBool(lp)) // lenient: true means the sampled token only
            r->logprobs = cJSON_IsTrue(lp) ? 0 : -1;
        else if (!integral(lp, 0, OPENAI_MAX_LOGPROBS))
            return openai_bad(err, "logprobs", "'logprobs' must be an integer in [0, %d]",
                              OPENAI_MAX_LOGPROBS);
        else
            r->logprobs = (int)lp->valuedouble;
        return CI_OK;
    }
    bool want = false;
    int top = 0;
    bool top_given = false;
    enum ci_status s;
    if ((s = get_bool(root, "logprobs", &want, err)) != CI_OK ||
        (s = get_int(root, "top_logprobs", 0, OPENAI_MAX_LOGPROBS, &top, &top_given, err)) != CI_OK)
        return s;
    if (top_given && top > 0 && !want)
        return openai_bad(err, "top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
    r->logprobs = want ? top : -1;
    return CI_OK;
}

/* Speculative decoding per request: {"speculative": {"n_max": N}} or llama.cpp's flat "speculative.n_max":
 * at most N drafts per step (0 turns it off for the request). */
static enum ci_status parse_speculative(const cJSON *root, struct openai_request *r,
                                        struct openai_error *err) {
    int n = 0;
    bool given = false;
    enum ci_status s = get_int(root, "speculative.n_max", 0, 32, &n, &given, err);
    if (s != CI_OK)
        return s;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "speculative");
    if (!openai_absent(o)) {
        if (!cJSON_IsObject(o))
            return openai_bad(err, "speculative", "'speculative' must be an object such as {\"n_max\": 4}");
        for (const cJSON *it = o->child; it; it = it->next)
            if (!it->string || strcmp(it->string, "n_max") != 0)
                return openai_bad(err, "speculative", "'speculative' knows only 'n_max', not '%s'",
                                  it->string ? it->string : "");
        bool in_object = false;
        if ((s = get_int(o, "n_max", 0, 32, &n, &in_object, err)) != CI_OK) {
            snprintf(err->param, sizeof err->param, "speculative.n_max");
            return s;
        }
        given = given || in_object;
    }
    if (given)
        r->spec_k = n > 0 ? n : -1;
    return CI_OK;
}

enum ci_status openai_parse(enum openai_endpoint ep, const char *body, size_t len,
                            const struct openai_limits *lim, struct openai_request *out,
                            struct openai_error *err) {
    memset(out, 0, sizeof *out);
    out->endpoint = ep;
    out->n = 1;
    out->logprobs = -1;
    // OpenAI's defaults, not the CLI's: plain sampling at temperature 1 with nothing truncated.
    out->sampling = (struct cinfer_sampling){.temperature = 1.0f,
                                             .top_k = 0,
                                             .top_p = 1.0f,
                                             .min_p = 0.0f,
                                             .repetition_penalty = 1.0f,
                                             .presence_penalty = 0.0f,
                                             .frequency_penalty = 0.0f,
                                             .seed = 0};
    cJSON *root = NULL;
    enum ci_status s = parse_root(body, len, &root, err);
    if (s != CI_OK)
        return s;
    struct cinfer_sampling *sp = &out->sampling;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!openai_absent(model) && !cJSON_IsString(model)) {
        s = openai_bad(err, "model", "'model' must be a string");
        goto fail;
    }
    if (cJSON_IsString(model) && (s = dup_string(model->valuestring, &out->model, err)) != CI_OK)
        goto fail;
    if (ep == OPENAI_COMPLETIONS)
        s = parse_prompts(root, lim->n_vocab, out, err);
    else if ((s = parse_messages(root, &out->messages, &out->n_messages, err)) == CI_OK)
        s = parse_tools(root, out, err);
    if (s != CI_OK)
        goto fail;
    int max_ctx = lim->n_ctx > 0 ? lim->n_ctx : 1;
    bool given = false;
    if (ep == OPENAI_CHAT &&
        (s = get_int(root, "max_completion_tokens", 1, max_ctx, &out->max_tokens, &given, err)) != CI_OK)
        goto fail;
    if (!given && (s = get_int(root, "max_tokens", 1, max_ctx, &out->max_tokens, NULL, err)) != CI_OK)
        goto fail;
    int top_k = 0;
    if ((s = get_int(root, "n", 1, OPENAI_MAX_N, &out->n, NULL, err)) != CI_OK ||
        (s = get_float(root, "temperature", 0, false, 2, &sp->temperature, err)) != CI_OK ||
        (s = get_float(root, "top_p", 0, true, 1, &sp->top_p, err)) != CI_OK ||
        (s = get_int(root, "top_k", -1, 1 << 30, &top_k, NULL, err)) != CI_OK ||
        (s = get_float(root, "min_p", 0, false, 1, &sp->min_p, err)) != CI_OK ||
        (s = get_float(root, "presence_penalty", -2, false, 2, &sp->presence_penalty, err)) != CI_OK ||
        (s = get_float(root, "frequency_penalty", -2, false, 2, &sp->frequency_penalty, err)) != CI_OK ||
        (s = get_float(root, "repetition_penalty", 0, true, 100, &sp->repetition_penalty, err)) != CI_OK ||
        (s = parse_seed(root, out, err)) != CI_OK || (s = parse_stop(root, out, err)) != CI_OK ||
        (s = get_bool(root, "ignore_eos", &out->ignore_eos, err)) != CI_OK ||
        (s = get_bool(root, "stream", &out->stream, err)) != CI_OK ||
        (s = parse_logprobs(root, ep, out, err)) != CI_OK ||
        (s = parse_logit_bias(root, lim->n_vocab, out, err)) != CI_OK ||
        (s = parse_grammar(root, out, err)) != CI_OK || (s = parse_speculative(root, out, err)) != CI_OK)
        goto fail;
    sp->top_k = top_k < 0 ? 0 : top_k; // vLLM's -1 means off, as 0 does here
    if (ep == OPENAI_COMPLETIONS && (s = get_bool(root, "echo", &out->echo, err)) != CI_OK)
        goto fail;
    if (out->n_prompts * out->n > OPENAI_MAX_CHOICES) {
        s = openai_bad(err, "n", "%d prompts × n = %d gives more than %d choices", out->n_prompts, out->n,
                       OPENAI_MAX_CHOICES);
        goto fail;
    }
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (!openai_absent(so)) {
        if (!cJSON_IsObject(so)) {
            s = openai_bad(err, "stream_options", "'stream_options' must be an object");
            goto fail;
        }
        if ((s = get_bool(so, "include_usage", &out->include_usage, err)) != CI_OK) {
            snprintf(err->param, sizeof err->param, "stream_options.include_usage");
            goto fail;
        }
    }
    cJSON_Delete(root);
    return CI_OK;
fail:
    cJSON_Delete(root);
    openai_request_deinit(out);
    return s;
}

void openai_request_deinit(struct openai_request *r) {
    ci_free(r->model);
    for (int i = 0; r->prompts && i < r->n_prompts; i++) {
        ci_free(r->prompts[i].text);
        ci_free(r->prompts[i].ids);
    }
    ci_free(r->prompts);
    messages_free(r->messages, r->n_messages);
    for (int i = 0; i < r->n_stop; i++)
        ci_free(r->stop[i]);
    ci_free(r->logit_bias);
    ci_free(r->grammar);
    ci_free(r->tool_name);
    for (int i = 0; i < r->n_tools; i++) {
        ci_free(r->tool_names ? r->tool_names[i] : NULL);
        ci_free(r->tool_params ? r->tool_params[i] : NULL);
    }
    ci_free(r->tool_names);
    ci_free(r->tool_params);
    ci_free(r->reasoning_effort);
    memset(r, 0, sizeof *r);
}

/* ---- /tokenize and /detokenize ------------------------------------------------------------------------ */

enum ci_status openai_parse_tokenize(const char *body, size_t len, struct openai_tokenize *out,
                                     struct openai_error *err) {
    memset(out, 0, sizeof *out);
    out->add_special = true;
    out->add_generation_prompt = true;
    cJSON *root = NULL;
    enum ci_status s = parse_root(body, len, &root, err);
    if (s != CI_OK)
        return s;
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!openai_absent(prompt)) {
        if (!cJSON_IsString(prompt))
            s = openai_bad(err, "prompt", "'prompt' must be a string");
        else
            s = dup_string(prompt->valuestring, &out->prompt, err);
    } else if (!openai_absent(cJSON_GetObjectItemCaseSensitive(root, "messages"))) {
        s = parse_messages(root, &out->messages, &out->n_messages, err);
    } else {
        s = openai_bad(err, "prompt", "give 'prompt' (a string) or 'messages'");
    }
    if (s == CI_OK && out->messages) { // the tools go to the template: checked as for a chat request
        struct openai_request tools = {0};
        s = parse_tools(root, &tools, err);
        openai_request_deinit(&tools);
    }
    if (s == CI_OK)
        s = get_bool(root, "add_special_tokens", &out->add_special, err);
    if (s == CI_OK)
        s = get_bool(root, "add_generation_prompt", &out->add_generation_prompt, err);
    cJSON_Delete(root);
    if (s != CI_OK)
        openai_tokenize_deinit(out);
    return s;
}

void openai_tokenize_deinit(struct openai_tokenize *t) {
    ci_free(t->prompt);
    messages_free(t->messages, t->n_messages);
    memset(t, 0, sizeof *t);
}

enum ci_status openai_parse_detokenize(const char *body, size_t len, const struct openai_limits *lim,
                                       struct openai_detokenize *out, struct openai_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = NULL;
    enum ci_status s = parse_root(body, len, &root, err);
    if (s != CI_OK)
        return s;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!cJSON_IsArray(v))
        s = openai_bad(err, "tokens", "'tokens' must be an array of token ids");
    else
        s = token_array(v, "tokens", lim->n_vocab, &out->ids, &out->n_ids, err);
    cJSON_Delete(root);
    return s;
}

void openai_detokenize_deinit(struct openai_detokenize *d) {
    ci_free(d->ids);
    memset(d, 0, sizeof *d);
}

/* ---- /v1/embeddings ----------------------------------------------------------------------------------- */

enum ci_status openai_parse_embeddings(const char *body, size_t len, const struct openai_limits *lim,
                                       int n_embd, struct openai_embeddings *out, struct openai_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = NULL;
    enum ci_status s = parse_root(body, len, &root, err);
    if (s != CI_OK)
        return s;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "input");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "encoding_format");
    bool given = false;
    if (!openai_absent(model) && !cJSON_IsString(model))
        s = openai_bad(err, "model", "'model' must be a string");
    else if (!openai_absent(model))
        s = dup_string(model->valuestring, &out->model, err);
    if (s == CI_OK && openai_absent(v))
        s = openai_bad(err, "input", "'input' is required");
    bool list = cJSON_IsArray(v) && !token_prompt_shape(v);
    int count = list ? cJSON_GetArraySize(v) : 1;
    if (s == CI_OK && (count < 1 || count > OPENAI_MAX_INPUTS))
        s = openai_bad(err, "input", "'input' must hold 1 to %d inputs", OPENAI_MAX_INPUTS);
    if (s == CI_OK && !(out->inputs = ci_calloc((size_t)count, sizeof *out->inputs)))
        s = openai_nomem(err);
    if (s == CI_OK)
        out->n_inputs = count;
    const cJSON *item = list ? v->child : v;
    for (int i = 0; s == CI_OK && i < count; i++, item = item->next) {
        char param[32];
        snprintf(param, sizeof param, list ? "input[%d]" : "input", i);
        if ((s = one_prompt(item, param, lim->n_vocab, &out->inputs[i], err)) == CI_OK &&
            out->inputs[i].text && !out->inputs[i].text[0])
            s = openai_bad(err, param, "'%s' is an empty string", param);
    }
    if (s == CI_OK && !openai_absent(fmt)) {
        if (!cJSON_IsString(fmt) ||
            (strcmp(fmt->valuestring, "float") != 0 && strcmp(fmt->valuestring, "base64") != 0))
            s = openai_bad(err, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        else
            out->base64 = strcmp(fmt->valuestring, "base64") == 0;
    }
    if (s == CI_OK)
        s = get_int(root, "dimensions", 1, n_embd, &out->dimensions, &given, err);
    cJSON_Delete(root);
    if (s != CI_OK)
        openai_embeddings_deinit(out);
    return s;
}

void openai_embeddings_deinit(struct openai_embeddings *e) {
    for (int i = 0; e->inputs && i < e->n_inputs; i++) {
        ci_free(e->inputs[i].text);
        ci_free(e->inputs[i].ids);
    }
    ci_free(e->inputs);
    ci_free(e->model);
    memset(e, 0, sizeof *e);
}
