/* Chat prompts (chat_prompt.h): the Jinja context built from the request, then the template. */
#include "server/chat_prompt.h"

#include <cjson/cJSON.h>
#include <string.h>

/* The variables a Jinja chat template sees, as JSON text (cJSON_free it): "messages" (the request's, with
 * each role and content as validated into msgs: "developer" read as "system", text parts joined; content
 * null or absent stays null; the other fields, such as tool_calls, name, tool_call_id, as sent), "tools" (as
 * sent, when present), "add_generation_prompt", then the members of "chat_template_kwargs" (e.g.
 * enable_thinking).  NULL when out of memory. */
static char *jinja_context(const char *body, size_t body_len, const struct cinfer_chat_message *msgs, int n,
                           bool add_generation_prompt) {
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
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(src, "content");
        bool null_content = !content || cJSON_IsNull(content);
        cJSON_DeleteItemFromObjectCaseSensitive(m, "role");
        cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
        if (!cJSON_AddStringToObject(m, "role", msgs[i].role) ||
            !(null_content ? cJSON_AddNullToObject(m, "content")
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
        char *ctx = jinja_context(body, body_len, msgs, n, add_generation_prompt);
        if (!ctx) {
            openai_error_set(oe, 500, NULL, NULL, "out of memory");
            return CINFER_ERR_NOMEM;
        }
        s = cinfer_template_render(cp->jinja, cp->m, ctx, strlen(ctx), out, &len, &ce);
        cJSON_free(ctx);
    } else {
        s = cinfer_chat_apply(cp->tmpl, msgs, n, add_generation_prompt, out, &len, &ce);
    }
    if (s != CINFER_OK)
        openai_error_set(oe, s == CINFER_ERR_NOMEM ? 500 : 400, s == CINFER_ERR_NOMEM ? NULL : "messages",
                         NULL, "%s", ce.message);
    return s;
}
