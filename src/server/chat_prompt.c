/* Chat prompts (chat_prompt.h): the Jinja context built from the request, then the template. */
#include "server/chat_prompt.h"

#include <cjson/cJSON.h>
#include <string.h>

/* An assistant message's tool_calls[].function.arguments, which OpenAI sends as JSON text, replaced by the
 * value that text holds, as transformers documents tool calls for chat templates (and vLLM and llama.cpp pass
 * them): templates write them with `arguments | tojson` or walk `arguments.items()`, and a string there would
 * be quoted twice.  Only for a template that reads them so (object_arguments_probe); text that is not JSON
 * stays as sent.  false: out of memory. */
static bool tool_arguments_parsed(cJSON *m) {
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *c;
    if (!cJSON_IsArray(calls))
        return true;
    cJSON_ArrayForEach(c, calls) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsString(args))
            continue;
        cJSON *v = cJSON_ParseWithOpts(args->valuestring, NULL, true);
        if (!v)
            continue; // not JSON (or no memory to tell): the template gets the text
        if (!cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", v)) {
            cJSON_Delete(v);
            return false;
        }
    }
    return true;
}

/* The variables a Jinja chat template sees, as JSON text (cJSON_free it): "messages" (the request's, with
 * each role and content as validated into msgs: "developer" read as "system", text parts joined; content
 * null or absent stays null, or is "" with null_as_empty (*had_null tells whether there was one); tool_calls'
 * arguments as JSON values where the template reads them so (tool_arguments_parsed); the other fields, such
 * as name, tool_call_id, as sent), "tools" (as sent, when present), "add_generation_prompt", then the
 * members of "chat_template_kwargs" (e.g. enable_thinking).  NULL when out of memory. */
static char *jinja_context(const char *body, size_t body_len, const struct cinfer_chat_message *msgs, int n,
                           bool add_generation_prompt, bool object_arguments, bool null_as_empty,
                           bool *had_null) {
    cJSON *req = cJSON_ParseWithLength(body, body_len);
    cJSON *ctx = cJSON_CreateObject(), *arr = ctx ? cJSON_AddArrayToObject(ctx, "messages") : NULL;
    char *text = NULL;
    if (!arr)
        goto done;
    const cJSON *raw = cJSON_GetObjectItemCaseSensitive(req, "messages");
    for (int i = 0; i < n; i++) {
        const cJSON *src = cJSON_IsArray(raw) ? cJSON_GetArrayItem(raw, i) : NULL;
        cJSON *m = src && cJSON_IsObject(src) ? cJSON_Duplicate(src, true) : cJSON_CreateObject();
        if (!m || !cJSON_AddItemToArray(arr, m)) {
            cJSON_Delete(m);
            goto done;
        }
        if (object_arguments && !tool_arguments_parsed(m))
            goto done;
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(src, "content");
        bool null_content = !content || cJSON_IsNull(content);
        *had_null = *had_null || null_content;
        cJSON_DeleteItemFromObjectCaseSensitive(m, "role");
        cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
        if (!cJSON_AddStringToObject(m, "role", msgs[i].role) ||
            !(null_content && !null_as_empty ? cJSON_AddNullToObject(m, "content")
                                             : cJSON_AddStringToObject(m, "content", msgs[i].content)))
            goto done;
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(req, "tool_choice");
    bool hide = cJSON_IsString(choice) && strcmp(choice->valuestring, "none") == 0; // as vLLM and llama.cpp
    const cJSON *effort = cJSON_GetObjectItemCaseSensitive(req, "reasoning_effort");
    if (cJSON_IsString(effort) && !cJSON_AddStringToObject(ctx, "reasoning_effort", effort->valuestring))
        goto done;
    if (tools && !cJSON_IsNull(tools) && !hide) {
        cJSON *t = cJSON_Duplicate(tools, true);
        if (!t || !cJSON_AddItemToObject(ctx, "tools", t)) {
            cJSON_Delete(t);
            goto done;
        }
    }
    if (!cJSON_AddBoolToObject(ctx, "add_generation_prompt", add_generation_prompt))
        goto done;
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(req, "chat_template_kwargs");
    if (cJSON_IsObject(kw)) {
        for (const cJSON *k = kw->child; k; k = k->next) {
            cJSON *v = cJSON_Duplicate(k, true);
            cJSON_DeleteItemFromObjectCaseSensitive(ctx, k->string);
            if (!v || !cJSON_AddItemToObject(ctx, k->string, v)) {
                cJSON_Delete(v);
                goto done;
            }
        }
    }
    text = cJSON_PrintUnformatted(ctx);
done:
    cJSON_Delete(req);
    cJSON_Delete(ctx);
    return text;
}

enum cinfer_status chat_prompt_render(const struct chat_prompt *cp, const char *body, size_t body_len,
                                      const struct cinfer_chat_message *msgs, int n,
                                      bool add_generation_prompt, char **out, struct openai_error *oe) {
    struct cinfer_error ce = {0};
    size_t len = 0;
    enum cinfer_status s;
    if (cp->jinja) {
        // A template that cannot take a null content (Qwen3's, gpt-oss's, Phi-3.5's: '+' or a filter on it, an
        // assistant turn of tool calls as OpenAI's SDKs send it) is rendered again with "" there, as llama.cpp
        // gives every tool-calling template; only after it failed, so one that renders null keeps what Hugging
        // Face renders.
        bool had_null = false;
        struct cinfer_error first = {0};
        s = CINFER_ERR_NOMEM;
        for (int pass = 0; pass < 2; pass++) {
            char *ctx = jinja_context(body, body_len, msgs, n, add_generation_prompt, cp->object_arguments,
                                      pass == 1, &had_null);
            if (!ctx) {
                openai_error_set(oe, 500, NULL, NULL, "out of memory");
                return CINFER_ERR_NOMEM;
            }
            s = cinfer_template_render(cp->jinja, cp->m, ctx, strlen(ctx), out, &len, &ce);
            cJSON_free(ctx);
            if (s == CINFER_OK || s == CINFER_ERR_NOMEM || !had_null)
                break;
            if (pass == 0)
                first = ce; // the error to report if "" fails too
            else
                ce = first;
        }
    } else {
        s = cinfer_chat_apply(cp->tmpl, msgs, n, add_generation_prompt, out, &len, &ce);
    }
    if (s != CINFER_OK)
        openai_error_set(oe, s == CINFER_ERR_NOMEM ? 500 : 400, s == CINFER_ERR_NOMEM ? NULL : "messages",
                         NULL, "%s", ce.message);
    return s;
}

/* Whether the template reads tool-call arguments as an object, as llama.cpp's template capabilities tell it
 * (supports_object_arguments): rendered once with a call whose arguments are the object {"probe_arg": MARK},
 * the object's value shows in the prompt.  A template that writes the arguments as text ('...' + arguments,
 * functionary v3.2) shows none, and keeps getting them as the JSON text OpenAI sends; so does one that cannot
 * render the probe. */
bool chat_prompt_object_arguments(const struct cinfer_model *m, const struct cinfer_template *jinja) {
    static const char ctx[] =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": "
        "\"\", "
        "\"tool_calls\": [{\"id\": \"abcdefghi\", \"type\": \"function\", \"function\": {\"name\": "
        "\"probe_fn\", "
        "\"arguments\": {\"probe_arg\": \"cinfer1probe2mark\"}}}]}, {\"role\": \"tool\", \"tool_call_id\": "
        "\"abcdefghi\", \"name\": \"probe_fn\", \"content\": \"ok\"}], \"tools\": [{\"type\": \"function\", "
        "\"function\": {\"name\": \"probe_fn\", \"description\": \"A probe\", \"parameters\": {\"type\": "
        "\"object\", \"properties\": {\"probe_arg\": {\"type\": \"string\"}}, \"required\": "
        "[\"probe_arg\"]}}}], "
        "\"add_generation_prompt\": true}";
    struct cinfer_error ce = {0};
    char *out = NULL;
    size_t len = 0;
    bool found = false;
    if (cinfer_template_render(jinja, m, ctx, sizeof ctx - 1, &out, &len, &ce) == CINFER_OK)
        found = strstr(out, "cinfer1probe2mark") != NULL;
    cinfer_free(out);
    return found;
}
