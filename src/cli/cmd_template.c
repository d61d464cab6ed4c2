/* cinfer template: render a Jinja chat template (a model's own, or a file) with a conversation, and print the
 * prompt exactly (no newline added), for testing templates and comparing with other renderers. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/textfile.h"
#include "core/clock.h"
#include "core/mem.h"

/* Adds the JSON text (or, with a leading '@', the file's) to ctx under key; merge: its members instead. */
static bool add_json(cJSON *ctx, const char *key, const char *text, bool merge) {
    size_t len = 0;
    char *owned = NULL;
    if (text[0] == '@') {
        if (!(owned = cli_read_text_file("template", text + 1, 64u << 20, &len)))
            return false;
        text = owned;
    }
    cJSON *j = cJSON_Parse(text);
    ci_free(owned);
    if (!j || (merge && !cJSON_IsObject(j))) {
        fprintf(stderr, "cinfer template: --%s: not %s\n", key, merge ? "a JSON object" : "valid JSON");
        cJSON_Delete(j);
        return false;
    }
    if (!merge) {
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, key);
        cJSON_AddItemToObject(ctx, key, j);
        return true;
    }
    while (j->child) {
        cJSON *item = cJSON_DetachItemViaPointer(j, j->child);
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, item->string);
        cJSON_AddItemToObject(ctx, item->string, item);
    }
    cJSON_Delete(j);
    return true;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* --time N: the template parsed and rendered N more times; the median, minimum and maximum of each on stderr
 * (a render includes reading the context's JSON text, as a server request does). */
static bool time_template(const char *src, size_t src_len, const struct cinfer_model *m, const char *ctx_text,
                          int n) {
    int64_t *parse_ns = ci_malloc((size_t)n * sizeof *parse_ns),
            *render_ns = ci_malloc((size_t)n * sizeof *render_ns);
    bool ok = parse_ns && render_ns;
    for (int i = 0; ok && i < n; i++) {
        struct cinfer_template *t = NULL;
        struct cinfer_error err = {0};
        char *out = NULL;
        int64_t t0 = ci_now_ns();
        ok = cinfer_template_parse(src, src_len, &t, &err) == CINFER_OK;
        int64_t t1 = ci_now_ns();
        ok = ok && cinfer_template_render(t, m, ctx_text, strlen(ctx_text), &out, NULL, &err) == CINFER_OK;
        int64_t t2 = ci_now_ns();
        parse_ns[i] = t1 - t0;
        render_ns[i] = t2 - t1;
        cinfer_free(out);
        cinfer_template_free(t);
    }
    if (ok) {
        qsort(parse_ns, (size_t)n, sizeof *parse_ns, cmp_i64);
        qsort(render_ns, (size_t)n, sizeof *render_ns, cmp_i64);
        fprintf(stderr,
                "template timing: %d runs: render median %.1f us (min %.1f, max %.1f); parse median %.1f us "
                "(min %.1f, max %.1f)\n",
                n, render_ns[n / 2] / 1e3, render_ns[0] / 1e3, render_ns[n - 1] / 1e3, parse_ns[n / 2] / 1e3,
                parse_ns[0] / 1e3, parse_ns[n - 1] / 1e3);
    }
    ci_free(parse_ns);
    ci_free(render_ns);
    return ok;
}

int cmd_template(int argc, char **argv) {
    const char *model_path = NULL, *file = NULL, *messages = NULL, *kwargs = NULL, *tools = NULL,
               *context = NULL;
    bool add_gen = false;
    int n_time = 0;
    struct arg_spec specs[] = {
        {"--model", "-m", ARG_STR, &model_path, 0, 0,
         "FILE  a GGUF model or vocab: its tokenizer.chat_template, bos_token, eos_token"},
        {"--file", NULL, ARG_STR, &file, 0, 0, "FILE  a Jinja template file (overrides the model's)"},
        {"--messages", NULL, ARG_STR, &messages, 0, 0, "JSON  the messages array (@FILE: read from FILE)"},
        {"--add-generation-prompt", NULL, ARG_FLAG, &add_gen, 0, 0,
         "    end with the assistant's turn opening"},
        {"--tools", NULL, ARG_STR, &tools, 0, 0, "JSON  the tools array (@FILE)"},
        {"--kwargs", NULL, ARG_STR, &kwargs, 0, 0,
         "JSON  template keyword arguments merged into the context, e.g. {\"enable_thinking\":false} "
         "(@FILE)"},
        {"--context", NULL, ARG_STR, &context, 0, 0,
         "JSON  the whole context object (@FILE); the options above are added to it"},
        {"--time", NULL, ARG_INT, &n_time, 1, 1 << 20,
         "N  then parse and render N more times and print the median, min and max times to stderr"},
    };
    int n_specs = sizeof specs / sizeof specs[0];
    const char *usage =
        "(-m MODEL | --file T.jinja) --messages JSON [--add-generation-prompt] [--kwargs JSON]";
    if (args_want_help(argc, argv, 2)) {
        args_usage("template", usage, specs, n_specs);
        return 0;
    }
    int n_pos;
    if (!args_parse("template", argc, argv, 2, specs, n_specs, NULL, 0, &n_pos))
        return 2;
    if (!model_path && !file) {
        fprintf(stderr, "cinfer template: usage: cinfer template %s\n", usage);
        return 2;
    }
    int rc = 1;
    struct cinfer_model *m = NULL;
    struct cinfer_template *t = NULL;
    struct cinfer_error err = {0};
    char *src = NULL, *ctx_text = NULL, *out = NULL;
    size_t src_len = 0, out_len = 0;
    cJSON *ctx = cJSON_CreateObject();
    if (!ctx)
        goto done;
    if (context) {
        cJSON_Delete(ctx);
        ctx = cJSON_CreateObject();
        if (!add_json(ctx, "context", context, true))
            goto done;
    }
    if ((messages && !add_json(ctx, "messages", messages, false)) ||
        (tools && !add_json(ctx, "tools", tools, false)))
        goto done;
    if (!context || add_gen) {
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, "add_generation_prompt");
        cJSON_AddBoolToObject(ctx, "add_generation_prompt", add_gen);
    }
    if (kwargs && !add_json(ctx, "kwargs", kwargs, true))
        goto done;
    if (model_path) {
        struct cinfer_load_options lo = {NULL, true, true, NULL, 0, CINFER_PACK_LAZY};
        if (cinfer_model_load_with(model_path, &lo, &m, &err) != CINFER_OK) {
            fprintf(stderr, "cinfer: %s\n", err.message);
            goto done;
        }
    }
    if (file) {
        if (!(src = cli_read_text_file("template", file, 16u << 20, &src_len)))
            goto done;
    } else {
        const char *s = cinfer_model_chat_template(m, &src_len);
        if (!s) {
            fprintf(stderr, "cinfer template: the model has no chat template (give --file)\n");
            goto done;
        }
        if (!(src = ci_malloc(src_len + 1)))
            goto done;
        memcpy(src, s, src_len);
        src[src_len] = '\0';
    }
    if (cinfer_template_parse(src, src_len, &t, &err) != CINFER_OK) {
        fprintf(stderr, "cinfer template: %s\n", err.message);
        goto done;
    }
    if (!(ctx_text = cJSON_PrintUnformatted(ctx)))
        goto done;
    if (cinfer_template_render(t, m, ctx_text, strlen(ctx_text), &out, &out_len, &err) != CINFER_OK) {
        fprintf(stderr, "cinfer template: %s\n", err.message);
        goto done;
    }
    fwrite(out, 1, out_len, stdout);
    rc = fflush(stdout) == 0 ? 0 : 1;
    if (rc == 0 && n_time > 0 && !time_template(src, src_len, m, ctx_text, n_time)) {
        fprintf(stderr, "cinfer template: --time: out of memory\n");
        rc = 1;
    }
done:
    cinfer_free(out);
    cJSON_free(ctx_text);
    cJSON_Delete(ctx);
    ci_free(src);
    cinfer_template_free(t);
    cinfer_model_free(m);
    return rc;
}
