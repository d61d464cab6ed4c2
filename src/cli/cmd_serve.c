/* cinfer serve: an OpenAI-compatible HTTP server (src/server/) over the serving engine.  The HTTP daemon
 * starts first, so /health answers 503 while the model loads; then the engine runs on its own thread and
 * the connection threads submit to it.  SIGINT/SIGTERM stop it gracefully: no new connections, every
 * in-flight request cancelled, everything freed, exit 0. */
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "cli/textfile.h"
#include "cli/tp.h"
#include "core/check.h"
#include "core/mem.h"
#include "server/http.h"
#include "server/routes.h"

/* The first line of path, without trailing whitespace; NULL (message printed) when unreadable or empty. */
static char *read_key_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cinfer serve: --api-key-file: cannot open '%s'\n", path);
        return NULL;
    }
    char line[1024];
    char *key = NULL;
    if (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
            line[--n] = '\0';
        if (n)
            key = ci_strdup(line);
    }
    fclose(f);
    if (!key)
        fprintf(stderr, "cinfer serve: --api-key-file: '%s' holds no key on its first line\n", path);
    return key;
}

static void list_templates(void) {
    fprintf(stderr, "  known templates:");
    for (int t = 0; t < cinfer_chat_n_templates(); t++)
        fprintf(stderr, " %s", cinfer_chat_template_name(t));
    fprintf(stderr, "\n");
}

/* The model's template, by its GGUF tokenizer.chat_template; chatml (with a warning) when unrecognised. */
static const char *detect_template(const struct cinfer_model *m) {
    const char *t = cinfer_chat_template_detect(m);
    if (!t) {
        size_t len = 0;
        fprintf(stderr,
                "cinfer serve: warning: %s; chat requests use %s (choose one with --chat-template NAME)\n",
                cinfer_model_chat_template(m, &len) ? "the model's chat template is not one cinfer recognises"
                                                    : "the model has no chat template",
                CINFER_CHAT_TEMPLATE_DEFAULT);
        t = CINFER_CHAT_TEMPLATE_DEFAULT;
    }
    return t;
}

struct loader {
    const char *model_path;
    struct cinfer_load_options lo; // the tokenizer, and --tp's world
    struct cinfer_engine_options eo;
    struct engine_args *ea; // --draft-model is loaded with the model
    pthread_t main;         // signalled with SIGUSR1 when done
    struct cinfer_model *m;
    struct cinfer_engine *e;
    struct cinfer_error err;
    bool ok;
};

static void *load_model(void *arg) {
    struct loader *ld = arg;
    ld->ok = engine_args_load_draft(ld->ea, &ld->err) &&
             ((ld->eo.draft_model = ld->ea->o.draft_model), true) &&
             cinfer_model_load_with(ld->model_path, &ld->lo, &ld->m, &ld->err) == CINFER_OK &&
             cinfer_engine_create(ld->m, &ld->eo, &ld->e, &ld->err) == CINFER_OK &&
             cinfer_engine_start(ld->e, &ld->err) == CINFER_OK;
    pthread_kill(ld->main, SIGUSR1);
    return NULL;
}

/* Everything the flags decide: their values as given, then what serve_parse makes of them. */
struct serve_config {
    struct engine_args ea;
    const char *model_path, *tok_path, *served, *tmpl_name, *host, *api_key, *key_file, *max_body;
    const char *tmpl_file; // --chat-template-file
    const char *allow_origin;
    const char *reasoning_format; // --reasoning-format
    int port, max_conn, max_conn_ip, timeout_s, request_timeout_s, http_threads, max_requests;
    struct cli_dist dist; // --tp, --pp, --dist-timeout
    // decided by serve_parse
    const char *tmpl;              // the canonical template name, when --chat-template was given
    char *key;                     // the API key or NULL (owned)
    struct cinfer_template *jinja; // the --chat-template-file template, parsed (owned)
    char *jinja_src;               // and its text (owned)
    size_t jinja_src_len;
    struct http_options http;
};

#define SERVE_N_SPECS (18 + CLI_DIST_N_SPECS)

/* The flags of serve (before the shared engine flags), with their defaults set in c. */
static void serve_specs(struct serve_config *c, struct arg_spec *specs) {
    c->host = "127.0.0.1";
    c->max_body = "1M";
    c->port = 8080;
    c->max_conn = 1024;
    c->max_conn_ip = -1;
    c->timeout_s = 300;
    c->request_timeout_s = 30;
    c->http_threads = 4;
    c->max_requests = 128;
    const struct arg_spec s[] = {
        {"--model", "-m", ARG_STR, &c->model_path, 0, 0,
         "FILE  model (GGUF or llama2.c checkpoint; a bert encoder serves /v1/embeddings only)"},
        {"--tokenizer", NULL, ARG_STR, &c->tok_path, 0, 0, "FILE  tokenizer.bin (llama2.c checkpoints)"},
        {"--host", NULL, ARG_STR, &c->host, 0, 0,
         "ADDR  address to listen on (default 127.0.0.1: this host only)"},
        {"--port", NULL, ARG_INT, &c->port, 0, 65535, "N  port (default 8080; 0: any free port)"},
        {"--api-key", NULL, ARG_STR, &c->api_key, 0, 0,
         "KEY  require 'Authorization: Bearer KEY' or 'x-api-key: KEY' on /v1/*, /tokenize, /detokenize "
         "(default: $CINFER_API_KEY)"},
        {"--api-key-file", NULL, ARG_STR, &c->key_file, 0, 0, "FILE  the key from the first line of FILE"},
        {"--served-model-name", NULL, ARG_STR, &c->served, 0, 0,
         "NAME  model name of the API (default: the model's)"},
        {"--chat-template", NULL, ARG_STR, &c->tmpl_name, 0, 0,
         "NAME  a built-in chat template (default: the model's own Jinja template; without one, the built-in "
         "detected from the model, else chatml); a FILE ending in .jinja is read as --chat-template-file"},
        {"--chat-template-file", NULL, ARG_STR, &c->tmpl_file, 0, 0,
         "FILE  a Jinja chat template to use instead of the model's"},
        {"--max-connections", NULL, ARG_INT, &c->max_conn, 1, 100000,
         "N  concurrent connections (default 1024)"},
        {"--max-connections-per-ip", NULL, ARG_INT, &c->max_conn_ip, 0, 100000,
         "N  concurrent connections from one client address (default: a quarter of --max-connections; 0: "
         "no limit)"},
        {"--http-threads", NULL, ARG_INT, &c->http_threads, 1, 256,
         "N  threads serving the connections, event-driven (default 4)"},
        {"--request-timeout", NULL, ARG_INT, &c->request_timeout_s, 1, 86400,
         "S  a whole request must arrive within S seconds of connecting or of the previous answer (default "
         "30)"},
        {"--max-requests", NULL, ARG_INT, &c->max_requests, 1, 100000,
         "N  generation requests in flight; more get 429 (default 128)"},
        {"--timeout", NULL, ARG_INT, &c->timeout_s, 1, 86400,
         "S  close a connection that moves no data for S seconds while it is answered (default 300)"},
        {"--max-body", NULL, ARG_STR, &c->max_body, 0, 0,
         "BYTES  request body limit; larger get 413 (default 1M)"},
        {"--allow-origin", NULL, ARG_STR, &c->allow_origin, 0, 0,
         "ORIGIN  send CORS headers allowing ORIGIN (default: none)"},
        {"--reasoning-format", NULL, ARG_STR, &c->reasoning_format, 0, 0,
         "deepseek|none  chat answers: a model's <think> block (or harmony's analysis channel) goes to "
         "message.reasoning_content (deepseek, the default) or stays in the content (none).  Tool calls in "
         "the model's own format (Hermes/Qwen, Llama 3, Mistral, gpt-oss, DeepSeek, JSON; told from the chat "
         "template) become message.tool_calls when the request has tools"},
        CLI_DIST_SPECS(&c->dist),
    };
    _Static_assert(CI_ARRAY_LEN(s) == SERVE_N_SPECS, "SERVE_N_SPECS counts the flags above");
    c->dist = (struct cli_dist)CLI_DIST_DEFAULT;
    memcpy(specs, s, sizeof s);
}

/* Parses and checks the flags into c.  Returns -1 to go on, else the exit status (0 after --help, 2 on a
 * usage error, 1 out of memory). */
static int serve_parse(int argc, char **argv, struct serve_config *c) {
    memset(c, 0, sizeof *c);
    engine_args_init(&c->ea);
    c->ea.pack_mode = CINFER_PACK_EAGER; // packed while it loads, before it is ready: no request waits
    struct arg_spec specs[SERVE_N_SPECS + ENGINE_ARGS_N_SPECS];
    serve_specs(c, specs);
    engine_args_specs(&c->ea, specs + SERVE_N_SPECS);
    int n_specs = SERVE_N_SPECS + ENGINE_ARGS_N_SPECS;
    if (args_want_help(argc, argv, 2)) {
        args_usage("serve", "-m MODEL [--host ADDR] [--port N] [--api-key KEY] [engine options]", specs,
                   n_specs);
        return 0;
    }
    const char *pos[1];
    int n_pos;
    if (!args_parse("serve", argc, argv, 2, specs, n_specs, pos, 0, &n_pos) ||
        !engine_args_finish("serve", &c->ea))
        return 2;
    if (!c->model_path) {
        fprintf(stderr, "cinfer serve: -m MODEL is required\n");
        return 2;
    }
    int64_t body_limit = 0;
    if (!engine_args_parse_bytes(c->max_body, &body_limit) || body_limit > (int64_t)1 << 30) {
        fprintf(stderr, "cinfer serve: --max-body: '%s' is not a size from 1 byte to 1G\n", c->max_body);
        return 2;
    }
    if (c->api_key && c->key_file) {
        fprintf(stderr, "cinfer serve: give --api-key or --api-key-file, not both\n");
        return 2;
    }
    // --chat-template FILE.jinja: the file, as --chat-template-file (no built-in name ends so)
    size_t tn = c->tmpl_name ? strlen(c->tmpl_name) : 0;
    if (tn > 6 && strcmp(c->tmpl_name + tn - 6, ".jinja") == 0 &&
        !cinfer_chat_template_lookup(c->tmpl_name) && !c->tmpl_file) {
        c->tmpl_file = c->tmpl_name;
        c->tmpl_name = NULL;
    }
    if (c->tmpl_name && !(c->tmpl = cinfer_chat_template_lookup(c->tmpl_name))) {
        fprintf(stderr, "cinfer serve: --chat-template: '%s' is not a known template\n", c->tmpl_name);
        list_templates();
        return 2;
    }
    if (c->reasoning_format && strcmp(c->reasoning_format, "none") != 0 &&
        strcmp(c->reasoning_format, "deepseek") != 0 && strcmp(c->reasoning_format, "auto") != 0) {
        fprintf(stderr, "cinfer serve: --reasoning-format: '%s' is not deepseek, auto or none\n",
                c->reasoning_format);
        return 2;
    }
    if (c->tmpl_name && c->tmpl_file) {
        fprintf(stderr, "cinfer serve: give --chat-template or --chat-template-file, not both\n");
        return 2;
    }
    if (c->tmpl_file) {
        size_t len = 0;
        char *src = cli_read_text_file("serve", c->tmpl_file, 16u << 20, &len);
        if (!src)
            return 2;
        struct cinfer_error err = {0};
        enum cinfer_status s = cinfer_template_parse(src, len, &c->jinja, &err);
        c->jinja_src = src; // kept: the server reads its markers (tool-call format, <think>)
        c->jinja_src_len = len;
        if (s != CINFER_OK) {
            fprintf(stderr, "cinfer serve: --chat-template-file %s: %s\n", c->tmpl_file, err.message);
            return s == CINFER_ERR_NOMEM ? 1 : 2;
        }
    }
    if (c->key_file && !(c->key = read_key_file(c->key_file)))
        return 2;
    const char *env_key = getenv("CINFER_API_KEY");
    const char *key = c->api_key ? c->api_key : env_key && *env_key ? env_key : NULL;
    if (!c->key && key && !(c->key = ci_strdup(key)))
        return 1;
    int per_ip = c->max_conn_ip >= 0 ? c->max_conn_ip : c->max_conn >= 4 ? c->max_conn / 4 : 1;
    c->http =
        (struct http_options){.host = c->host,
                              .port = c->port,
                              .api_key = c->key,
                              .max_connections = c->max_conn,
                              .max_connections_per_ip = per_ip, // by default one address never takes all
                              .timeout_s = c->timeout_s,
                              .request_timeout_s = c->request_timeout_s,
                              .n_threads = c->http_threads,
                              .max_body_bytes = (size_t)body_limit,
                              .allow_origin = c->allow_origin};
    return -1;
}

/* Loads the model and starts the engine on a thread of its own while this one waits for signals, so
 * SIGINT/SIGTERM stop the server at once even when a load takes long.  Returns the signal that came first:
 * SIGUSR1 when the load finished (ld->ok says how), else SIGINT or SIGTERM (the loader is then left
 * running, detached, to the process exit). */
static int load_or_stop(struct loader *ld, const sigset_t *wait_signals) {
    ld->main = pthread_self();
    pthread_t loader_thread;
    if (pthread_create(&loader_thread, NULL, load_model, ld) != 0) {
        snprintf(ld->err.message, sizeof ld->err.message, "cannot start the loader thread");
        return SIGUSR1;
    }
    int sig = 0;
    while (sigwait(wait_signals, &sig) != 0 || (sig != SIGUSR1 && sig != SIGINT && sig != SIGTERM))
        ;
    if (sig == SIGUSR1)
        pthread_join(loader_thread, NULL);
    else
        pthread_detach(loader_thread);
    return sig;
}

/* The routes and the HTTP daemon, listening before the model loads (/health answers 503 meanwhile). */
static bool start_http(const struct serve_config *c, struct routes **routes, struct http_server **http) {
    struct ci_err ce = {0};
    int n_routes = 0;
    const struct http_route *table = routes_table(&n_routes);
    if (routes_create(routes, &ce) != CI_OK ||
        http_server_start(&c->http, table, n_routes, *routes, http, &ce) != CI_OK) {
        fprintf(stderr, "cinfer serve: %s\n", ce.msg);
        return false;
    }
    bool v6 = strchr(c->http.host, ':') != NULL;
    fprintf(stderr, "cinfer serve: listening on http://%s%s%s:%d (loading %s)\n", v6 ? "[" : "", c->http.host,
            v6 ? "]" : "", http_server_port(*http), c->model_path);
    if (c->key)
        fprintf(stderr, "cinfer serve: API key required on /v1/*, /tokenize and /detokenize\n");
    fflush(stderr);
    return true;
}

/* The chat template: --chat-template-file's Jinja template, else --chat-template's built-in, else the model's
 * own Jinja template (parsed into *jinja), else (no template, or one that does not parse, with a warning) the
 * built-in detected from it.  Returns the built-in's name, or a description of the Jinja template in use. */
static const char *pick_template(const struct serve_config *c, const struct cinfer_model *m,
                                 struct cinfer_template **jinja) {
    *jinja = NULL;
    if (c->jinja)
        return "from --chat-template-file (Jinja)";
    if (c->tmpl)
        return c->tmpl;
    size_t len = 0;
    const char *src = cinfer_model_chat_template(m, &len);
    if (src) {
        struct cinfer_error err = {0};
        if (cinfer_template_parse(src, len, jinja, &err) == CINFER_OK)
            return "the model's own (Jinja)";
        fprintf(stderr,
                "cinfer serve: warning: the model's chat template does not parse (%s): falling back to the "
                "built-in template detected from it\n",
                err.message);
    }
    return detect_template(m);
}

static void print_ready(const struct serve_config *c, const struct cinfer_model *m, struct cinfer_engine *e,
                        const char *tmpl) {
    struct cinfer_engine_info info;
    cinfer_engine_info(e, &info);
    fprintf(stderr, "cinfer serve: model '%s' ready (chat template %s, context %d, policy %s, %d threads)\n",
            c->served ? c->served : cinfer_model_name(m), tmpl, info.n_ctx, c->ea.o.policy,
            c->ea.o.n_threads);
    engine_args_report_pool("serve", &info);
    fflush(stderr);
}

/* A --tp rank other than 0: no HTTP; it loads its shard and runs rank 0's forward passes until rank 0
 * stops.  SIGINT/SIGTERM are blocked (mpirun sends them to every rank): rank 0 shuts down and then tells
 * this rank to stop, and a rank 0 that dies makes mpirun end the job. */
static int serve_worker(struct serve_config *c, struct cinfer_tp *tp, const struct cinfer_load_options *lo) {
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    struct cinfer_model *m = NULL;
    struct cinfer_error err = {0};
    int rc = 1;
    if (cinfer_model_load_with(c->model_path, lo, &m, &err) == CINFER_OK &&
        cinfer_tp_worker(tp, m, c->ea.o.n_threads, &err) == CINFER_OK)
        rc = 0;
    else
        fprintf(stderr, "cinfer serve (a --tp worker): %s\n", err.message);
    cinfer_model_free(m);
    cinfer_tp_end(tp, rc == 0);
    return rc;
}

static void serve_config_free(struct serve_config *c) {
    engine_args_free(&c->ea);
    cinfer_template_free(c->jinja);
    ci_free(c->jinja_src);
    ci_free(c->key);
}

int cmd_serve(int argc, char **argv) {
    struct serve_config c;
    int status = serve_parse(argc, argv, &c);
    if (status >= 0) {
        cinfer_template_free(c.jinja);
        ci_free(c.jinja_src);
        ci_free(c.key);
        return status;
    }
    struct cinfer_tp *tp = NULL;
    struct cinfer_load_options lo = {c.tok_path, false, false, NULL, 0, c.ea.pack_mode};
    if (!cli_tp_start("serve", &c.dist, argc, argv, &tp, &lo)) {
        serve_config_free(&c);
        cinfer_tp_end(tp, false);
        return 1;
    }
    if (cinfer_tp_rank(tp) > 0) {
        status = serve_worker(&c, tp, &lo);
        serve_config_free(&c);
        return status;
    }
    // Every thread started from here on (HTTP, engine, kernel pool) inherits this mask, so the signals
    // reach only the sigwaits below.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    sigset_t wait_signals = stop_signals; // and SIGUSR1: the model is loaded (or failed to load)
    sigaddset(&wait_signals, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &wait_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    struct ci_err ce = {0};
    struct routes *routes = NULL;
    struct http_server *http = NULL;
    struct cinfer_model *m = NULL;
    struct cinfer_engine *e = NULL;
    struct cinfer_template *model_jinja = NULL; // the model's own template, parsed
    if (!start_http(&c, &routes, &http))
        goto done;

    struct loader *ld = ci_calloc(1, sizeof *ld);
    if (!ld) {
        fprintf(stderr, "cinfer serve: out of memory\n");
        goto done;
    }
    ld->model_path = c.model_path;
    ld->lo = lo;
    ld->eo = c.ea.o;
    ld->ea = &c.ea;
    int sig = load_or_stop(ld, &wait_signals);
    if (sig != SIGUSR1) { // the loader still runs and owns ld: both are left to the process exit
        fprintf(stderr, "cinfer serve: %s while loading the model: stopped\n",
                sig == SIGINT ? "SIGINT" : "SIGTERM");
        http_server_free(http);
        routes_free(routes);
        ci_free(c.key);
        fflush(stderr);
        exit(0);
    }
    m = ld->m;
    e = ld->e;
    bool loaded = ld->ok;
    if (!loaded)
        fprintf(stderr, "cinfer serve: %s\n", ld->err.message);
    ci_free(ld);
    if (!loaded)
        goto done;
    const char *tmpl = pick_template(&c, m, &model_jinja);
    size_t model_src_len = 0;
    const char *model_src = cinfer_model_chat_template(m, &model_src_len);
    struct routes_config rc_cfg = {c.served,
                                   tmpl,
                                   c.max_requests,
                                   c.ea.o.max_seqs,
                                   c.jinja ? c.jinja : model_jinja,
                                   c.jinja       ? c.jinja_src
                                   : model_jinja ? model_src
                                                 : NULL,
                                   c.jinja ? c.jinja_src_len : model_src_len,
                                   c.reasoning_format && strcmp(c.reasoning_format, "none") == 0};
    if (routes_ready(routes, m, e, &rc_cfg, &ce) != CI_OK) {
        fprintf(stderr, "cinfer serve: %s\n", ce.msg);
        goto done;
    }
    print_ready(&c, m, e, tmpl);
    if (tp) { // --tp/--pp: a failed engine means ranks out of step (one lost, hung, or failed): end them all
        const char *why = NULL;
        struct timespec tick = {0, 200 * 1000 * 1000};
        while ((sig = sigtimedwait(&stop_signals, NULL, &tick)) < 0 && !(why = cinfer_engine_failure(e)))
            ;
        if (why) {
            fprintf(stderr, "cinfer serve: %s: ending every rank\n", why);
            goto done;
        }
    } else {
        while (sigwait(&stop_signals, &sig) != 0)
            ;
    }
    fprintf(stderr, "cinfer serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
done:
    // Order matters: the connections hold engine streams, so the HTTP server (which cancels and releases
    // them) goes before the engine, and the engine before the model.
    http_server_free(http);
    cinfer_engine_free(e); // with --tp: the other ranks free their forward pass too
    if (tp && m) {
        struct cinfer_model_info mi;
        cinfer_model_info(m, &mi);
        cli_tp_report("serve", tp, mi.n_layer);
    }
    cinfer_model_free(m);
    engine_args_free(&c.ea);
    routes_free(routes);
    cinfer_template_free(model_jinja);
    cinfer_template_free(c.jinja);
    ci_free(c.jinja_src);
    ci_free(c.key);
    cinfer_tp_end(tp, rc == 0); // rank 0 tells the others to stop
    if (rc == 0)
        fprintf(stderr, "cinfer serve: stopped\n");
    return rc;
}
