/* cinfer router: an OpenAI-compatible front for several `cinfer serve` replicas (src/server/router.c).
 * Parses and checks the flags (every --replica URL), loads the replicas' vocabulary when --model is given
 * (for prefix keys over the same tokens as the replicas' prefix caches), serves until SIGINT/SIGTERM.
 * Under mpirun with --mpi-replicas PORT, rank 0 is the router and every other rank a data-parallel replica:
 * `cinfer serve` with the options after `--`, on port PORT + rank - 1 (mpi_replicas). */
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cinfer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "cli/textfile.h"
#include "core/check.h"
#include "core/mem.h"
#include "core/mpi.h"
#include "server/http.h"
#include "server/router.h"

#define ROUTER_N_SPECS 21

struct router_cli {
    const char *replicas[ROUTER_MAX_REPLICAS]; // as given (--replica, repeated or comma-separated)
    int n_given;
    char *urls[ROUTER_MAX_REPLICAS]; // checked and normalised (owned)
    int n;
    const char *host, *policy, *model_path, *tmpl_name, *tmpl_file, *api_key, *max_body, *allow_origin;
    int port, block_size, table_entries, balance_abs, health_ms, connect_ms, max_conn, timeout_s,
        request_timeout_s, http_threads, mpi_port;
    float kv_high, min_match;
};

static void specs_of(struct router_cli *c, struct arg_spec *specs) {
    const struct arg_spec s[] = {
        {"--host", NULL, ARG_STR, &c->host, 0, 0, "ADDR  address to listen on (default 127.0.0.1)"},
        {"--port", NULL, ARG_INT, &c->port, 0, 65535, "N  port (default 8090; 0: any free port)"},
        {"--policy", NULL, ARG_STR, &c->policy, 0, 0,
         "prefix|round-robin|least-loaded  how a replica is picked (default prefix: the replica that was "
         "sent the longest prefix of the prompt's KV blocks, within the load bound, else the least loaded)"},
        {"--block-size", NULL, ARG_INT, &c->block_size, 1, 4096,
         "N  the replicas' KV block size, tokens (serve's --block-size; default 16)"},
        {"--model", "-m", ARG_STR, &c->model_path, 0, 0,
         "FILE  the replicas' model: only its vocabulary and chat template are loaded, so prompts are "
         "tokenized as the replicas tokenize them (without it: keys over the prompt's bytes)"},
        {"--chat-template", NULL, ARG_STR, &c->tmpl_name, 0, 0,
         "NAME  the built-in chat template the replicas use (default: the model's own)"},
        {"--chat-template-file", NULL, ARG_STR, &c->tmpl_file, 0, 0,
         "FILE  the Jinja chat template the replicas were given with --chat-template-file"},
        {"--table-entries", NULL, ARG_INT, &c->table_entries, 1, 1 << 26,
         "N  prompt blocks remembered, least recently used forgotten first (default 262144)"},
        {"--balance-abs", NULL, ARG_INT, &c->balance_abs, 0, 1000000,
         "N  a prefix match is followed only while its replica has at most N more requests in flight than "
         "the least loaded (default 4)"},
        {"--kv-high", NULL, ARG_FLOAT, &c->kv_high, 0, 1,
         "F  nor when its KV cache usage (from its /metrics) is above F (default 0.95)"},
        {"--min-match", NULL, ARG_FLOAT, &c->min_match, 0, 1,
         "F  nor when the match covers less than F of the prompt's blocks (default 0.5: a shared chat "
         "preamble alone does not pull every conversation to one replica)"},
        {"--health-interval-ms", NULL, ARG_INT, &c->health_ms, 50, 3600000,
         "MS  between health checks (GET /health and /metrics of each replica; default 1000)"},
        {"--connect-timeout-ms", NULL, ARG_INT, &c->connect_ms, 10, 600000,
         "MS  to connect to a replica (default 1000)"},
        {"--api-key", NULL, ARG_STR, &c->api_key, 0, 0,
         "KEY  require it from clients on /v1/* (the client's Authorization and x-api-key headers are "
         "passed on to the replicas)"},
        {"--max-connections", NULL, ARG_INT, &c->max_conn, 1, 100000,
         "N  concurrent connections (default 1024)"},
        {"--http-threads", NULL, ARG_INT, &c->http_threads, 1, 256,
         "N  threads serving the connections (default 4)"},
        {"--timeout", NULL, ARG_INT, &c->timeout_s, 1, 86400,
         "S  close a connection that moves no data for S seconds while it is answered (default 300)"},
        {"--request-timeout", NULL, ARG_INT, &c->request_timeout_s, 1, 86400,
         "S  a whole request must arrive within S seconds (default 30)"},
        {"--max-body", NULL, ARG_STR, &c->max_body, 0, 0, "BYTES  request body limit (default 1M)"},
        {"--allow-origin", NULL, ARG_STR, &c->allow_origin, 0, 0,
         "ORIGIN  send CORS headers allowing ORIGIN"},
        {"--mpi-replicas", NULL, ARG_INT, &c->mpi_port, 1, 65535,
         "PORT  under `mpirun -np 1+N`: rank 0 routes, ranks 1..N run `cinfer serve` with the options after "
         "`--` on ports PORT..PORT+N-1 and are the replicas (instead of --replica)"},
    };
    _Static_assert(CI_ARRAY_LEN(s) == ROUTER_N_SPECS, "ROUTER_N_SPECS counts the flags above");
    memcpy(specs, s, sizeof s);
}

/* A replica's base URL: http(s)://host[:port] with nothing after it but an optional '/'.  NULL (message
 * printed) when it is not one. */
static char *check_url(const char *given) {
    CURLU *h = curl_url();
    char *scheme = NULL, *host = NULL, *path = NULL, *query = NULL, *out = NULL;
    const char *why = NULL;
    if (!h)
        why = "out of memory";
    else if (curl_url_set(h, CURLUPART_URL, given, 0) != CURLUE_OK)
        why = "not a URL (give http://HOST:PORT)";
    else if (curl_url_get(h, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
             (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0))
        why = "the scheme must be http or https";
    else if (curl_url_get(h, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host[0])
        why = "no host";
    else if (curl_url_get(h, CURLUPART_PATH, &path, 0) == CURLUE_OK && strcmp(path, "/") != 0 && path[0])
        why = "a replica is a server's base URL, without a path";
    else if (curl_url_get(h, CURLUPART_QUERY, &query, 0) == CURLUE_OK && query)
        why = "a replica's URL has no query";
    if (!why) {
        size_t n = strlen(given);
        while (n > 0 && given[n - 1] == '/')
            n--;
        out = ci_malloc(n + 1);
        if (out) {
            memcpy(out, given, n);
            out[n] = '\0';
        } else {
            why = "out of memory";
        }
    }
    if (why)
        fprintf(stderr, "cinfer router: --replica '%s': %s\n", given, why);
    curl_free(scheme);
    curl_free(host);
    curl_free(path);
    curl_free(query);
    curl_url_cleanup(h);
    return out;
}

/* Takes the --replica flags out of argv (args_parse takes each flag once); false on a usage error. */
static bool take_replicas(int *argc, char **argv, struct router_cli *c) {
    int w = 2;
    for (int i = 2; i < *argc; i++) {
        const char *v = NULL;
        if (strcmp(argv[i], "--replica") == 0) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "cinfer router: --replica needs a URL\n");
                return false;
            }
            v = argv[++i];
        } else if (strncmp(argv[i], "--replica=", 10) == 0) {
            v = argv[i] + 10;
        } else {
            argv[w++] = argv[i];
            continue;
        }
        // "URL,URL" gives several; each piece is checked later
        for (char *p = (char *)(uintptr_t)v, *tok; (tok = strsep(&p, ","));) {
            if (c->n_given == ROUTER_MAX_REPLICAS) {
                fprintf(stderr, "cinfer router: more than %d replicas\n", ROUTER_MAX_REPLICAS);
                return false;
            }
            c->replicas[c->n_given++] = tok;
        }
    }
    *argc = w;
    return true;
}

static int parse(int argc, char **argv, struct router_cli *c) {
    c->host = "127.0.0.1";
    c->policy = "prefix";
    c->max_body = "1M";
    c->port = 8090;
    c->block_size = 16;
    c->table_entries = 262144;
    c->balance_abs = 4;
    c->kv_high = 0.95f;
    c->min_match = 0.5f;
    c->health_ms = 1000;
    c->connect_ms = 1000;
    c->max_conn = 1024;
    c->timeout_s = 300;
    c->request_timeout_s = 30;
    c->http_threads = 4;
    struct arg_spec specs[ROUTER_N_SPECS];
    specs_of(c, specs);
    if (args_want_help(argc, argv, 2)) {
        args_usage("router",
                   "--replica URL [--replica URL ...] [--port N] [--policy P] [-m MODEL] [options]\n"
                   "  (--replica URL  a `cinfer serve` replica, http://HOST:PORT; repeat it or give "
                   "URL,URL,...)\n"
                   "       mpirun -np 1+N cinfer router --mpi-replicas PORT [options] -- SERVE_OPTIONS",
                   specs, ROUTER_N_SPECS);
        return 0;
    }
    const char *pos[1];
    int n_pos;
    if (!take_replicas(&argc, argv, c) ||
        !args_parse("router", argc, argv, 2, specs, ROUTER_N_SPECS, pos, 0, &n_pos))
        return 2;
    if (c->n_given == 0 && !c->mpi_port) {
        fprintf(stderr,
                "cinfer router: no replica: give --replica http://HOST:PORT (one per `cinfer serve`), "
                "or run under mpirun with --mpi-replicas PORT\n");
        return 2;
    }
    if (c->n_given > 0 && c->mpi_port) {
        fprintf(stderr, "cinfer router: give --replica or --mpi-replicas, not both\n");
        return 2;
    }
    enum router_policy_kind k;
    if (!router_policy_parse(c->policy, &k)) {
        fprintf(stderr, "cinfer router: --policy: '%s' is not prefix, round-robin or least-loaded\n",
                c->policy);
        return 2;
    }
    for (int i = 0; i < c->n_given; i++) {
        if (!(c->urls[i] = check_url(c->replicas[i])))
            return 2;
        c->n = i + 1;
        for (int j = 0; j < i; j++)
            if (strcmp(c->urls[j], c->urls[i]) == 0) {
                fprintf(stderr, "cinfer router: --replica '%s' is given twice\n", c->urls[i]);
                return 2;
            }
    }
    if (c->tmpl_name && c->tmpl_file) {
        fprintf(stderr, "cinfer router: give --chat-template or --chat-template-file, not both\n");
        return 2;
    }
    if ((c->tmpl_name || c->tmpl_file) && !c->model_path) {
        fprintf(stderr, "cinfer router: a chat template needs -m MODEL (the vocabulary to tokenize with)\n");
        return 2;
    }
    if (c->tmpl_name && !cinfer_chat_template_lookup(c->tmpl_name)) {
        fprintf(stderr, "cinfer router: --chat-template: '%s' is not a known template\n", c->tmpl_name);
        return 2;
    }
    return -1;
}

/* The replicas' chat template as `cinfer serve` picks it: --chat-template-file's Jinja template,
 * --chat-template's built-in, else the model's own Jinja template, else the built-in detected from the model
 * (chatml when none).  *bad: the file cannot be read or parsed (message printed). */
static const char *pick_template(const struct router_cli *c, const struct cinfer_model *m,
                                 struct cinfer_template **jinja, bool *bad) {
    *jinja = NULL;
    *bad = false;
    if (c->tmpl_file) {
        size_t n = 0;
        char *src = cli_read_text_file("router", c->tmpl_file, 16u << 20, &n);
        struct cinfer_error err = {0};
        *bad = !src || cinfer_template_parse(src, n, jinja, &err) != CINFER_OK;
        if (src && *bad)
            fprintf(stderr, "cinfer router: --chat-template-file %s: %s\n", c->tmpl_file, err.message);
        ci_free(src);
        return NULL;
    }
    if (c->tmpl_name)
        return cinfer_chat_template_lookup(c->tmpl_name);
    size_t len = 0;
    const char *src = cinfer_model_chat_template(m, &len);
    struct cinfer_error err = {0};
    if (src && cinfer_template_parse(src, len, jinja, &err) == CINFER_OK)
        return NULL;
    const char *t = cinfer_chat_template_detect(m);
    return t ? t : CINFER_CHAT_TEMPLATE_DEFAULT;
}

/* Data-parallel replicas under one mpirun (--mpi-replicas PORT).  MPI is only the rendezvous: the ranks
 * exchange host names and leave MPI again (MPI_Finalize), then rank r >= 1 runs `cinfer serve` with the
 * options after `--` and --port PORT + r - 1 (--host 0.0.0.0 when rank 0 is on another host, so the router
 * can reach it), and rank 0 routes to http://HOST_r:PORT + r - 1 (127.0.0.1 for ranks on its own host).  A
 * replica that fails to start exits non-zero, and mpirun then ends the job.  Returns -1 on rank 0 with
 * c->urls set, else the rank's exit status. */
static int mpi_replicas(struct router_cli *c, int serve_argc, char **serve_argv) {
    for (int i = 0; i < serve_argc; i++)
        if (!strcmp(serve_argv[i], "--port") || !strncmp(serve_argv[i], "--port=", 7) ||
            !strcmp(serve_argv[i], "--host") || !strncmp(serve_argv[i], "--host=", 7) ||
            !strcmp(serve_argv[i], "--tp") || !strncmp(serve_argv[i], "--tp=", 5)) {
            fprintf(stderr,
                    "cinfer router: --mpi-replicas sets each replica's --port and --host and runs "
                    "it as one process: '%s' is not a replica option here\n",
                    serve_argv[i]);
            return 2;
        }
    int rank = 0, size = 1;
    struct ci_err ce = {0};
    if (ci_mpi_init(&rank, &size, &ce) != CI_OK) {
        fprintf(stderr, "cinfer router: --mpi-replicas: %s\n", ce.msg);
        return 1;
    }
    enum { NAME = 256 };
    char mine[NAME] = {0};
    char *names = ci_calloc((size_t)size, NAME);
    if (!names || gethostname(mine, NAME - 1) != 0 || ci_mpi_allgather(mine, NAME, names, &ce) != CI_OK) {
        fprintf(stderr, "cinfer router: --mpi-replicas: rank %d: %s\n", rank,
                names ? (ce.msg[0] ? ce.msg : "gethostname failed") : "out of memory");
        ci_free(names);
        ci_mpi_abort(1);
        return 1;
    }
    ci_mpi_finalize();
    int rc = -1;
    if (size < 2 || size - 1 > ROUTER_MAX_REPLICAS || c->mpi_port + size - 2 > 65535) {
        if (rank == 0)
            fprintf(stderr,
                    "cinfer router: --mpi-replicas needs mpirun -np 1+N with 1 <= N <= %d replicas and ports "
                    "up to 65535 (this job has %d process%s)\n",
                    ROUTER_MAX_REPLICAS, size, size == 1 ? "" : "es");
        rc = 2;
    } else if (rank > 0) {
        bool local = strcmp(names + (size_t)rank * NAME, names) == 0;
        char port[16], a_cinfer[] = "cinfer", a_serve[] = "serve", a_port[] = "--port", a_host[] = "--host",
                       a_any[] = "0.0.0.0";
        snprintf(port, sizeof port, "%d", c->mpi_port + rank - 1);
        char **av = ci_calloc((size_t)serve_argc + 7, sizeof *av);
        if (!av) {
            fprintf(stderr, "cinfer router: rank %d: out of memory\n", rank);
            rc = 1;
        } else {
            int n = 0;
            av[n++] = a_cinfer;
            av[n++] = a_serve;
            for (int i = 0; i < serve_argc; i++)
                av[n++] = serve_argv[i];
            av[n++] = a_port;
            av[n++] = port;
            if (!local) {
                av[n++] = a_host;
                av[n++] = a_any;
            }
            rc = cmd_serve(n, av);
            ci_free(av);
        }
    } else {
        for (int r = 1; r < size && rc == -1; r++) {
            const char *host =
                strcmp(names + (size_t)r * NAME, names) == 0 ? "127.0.0.1" : names + (size_t)r * NAME;
            size_t len = strlen(host) + 32;
            if (!(c->urls[r - 1] = ci_malloc(len))) {
                fprintf(stderr, "cinfer router: out of memory\n");
                rc = 1;
                break;
            }
            snprintf(c->urls[r - 1], len, "http://%s:%d", host, c->mpi_port + r - 1);
            c->n = r;
        }
    }
    ci_free(names);
    return rc;
}

int cmd_router(int argc, char **argv) {
    struct router_cli c;
    memset(&c, 0, sizeof c);
    // Under --mpi-replicas, what follows `--` is the replicas' `cinfer serve` options.
    int serve_at = argc;
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--")) {
            serve_at = i;
            break;
        }
    int rc = parse(serve_at, argv, &c);
    if (rc < 0 && serve_at < argc && !c.mpi_port) {
        fprintf(stderr, "cinfer router: options after `--` are for --mpi-replicas' serve ranks\n");
        rc = 2;
    }
    if (rc < 0 && c.mpi_port)
        rc = mpi_replicas(&c, serve_at < argc ? argc - serve_at - 1 : 0, argv + serve_at + 1);
    struct cinfer_model *m = NULL;
    struct cinfer_template *jinja = NULL;
    struct router *r = NULL;
    struct http_server *http = NULL;
    struct ci_err ce = {0};
    if (rc >= 0)
        goto done;
    rc = 1;
    int64_t body_limit = 0;
    if (!engine_args_parse_bytes(c.max_body, &body_limit) || body_limit > (int64_t)1 << 30) {
        fprintf(stderr, "cinfer router: --max-body: '%s' is not a size from 1 byte to 1G\n", c.max_body);
        rc = 2;
        goto done;
    }
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "cinfer router: curl_global_init failed\n");
        goto done;
    }
    const char *tmpl = NULL;
    if (c.model_path) {
        struct cinfer_load_options lo = {NULL, false, true, NULL, 0, CINFER_PACK_LAZY};
        struct cinfer_error err = {0};
        if (cinfer_model_load_with(c.model_path, &lo, &m, &err) != CINFER_OK) {
            fprintf(stderr, "cinfer router: --model %s: %s\n", c.model_path, err.message);
            goto done;
        }
        bool bad = false;
        tmpl = pick_template(&c, m, &jinja, &bad);
        if (bad) {
            rc = 2;
            goto done;
        }
    }
    enum router_policy_kind kind;
    router_policy_parse(c.policy, &kind);
    struct router_config rcfg = {(const char *const *)c.urls,
                                 c.n,
                                 kind,
                                 c.block_size,
                                 c.table_entries,
                                 c.balance_abs,
                                 c.kv_high,
                                 c.min_match,
                                 c.health_ms,
                                 c.connect_ms,
                                 m,
                                 tmpl,
                                 jinja};
    int n_routes = 0;
    const struct http_route *table = router_table(&n_routes);
    const char *env_key = getenv("CINFER_API_KEY");
    struct http_options ho = {.host = c.host,
                              .port = c.port,
                              .api_key = c.api_key             ? c.api_key
                                         : env_key && *env_key ? env_key
                                                               : NULL,
                              .max_connections = c.max_conn,
                              .max_connections_per_ip = 0, // the router's clients are often one gateway
                              .timeout_s = c.timeout_s,
                              .request_timeout_s = c.request_timeout_s,
                              .n_threads = c.http_threads,
                              .max_body_bytes = (size_t)body_limit,
                              .allow_origin = c.allow_origin};
    if (router_create(&rcfg, &r, &ce) != CI_OK ||
        http_server_start(&ho, table, n_routes, r, &http, &ce) != CI_OK) {
        fprintf(stderr, "cinfer router: %s\n", ce.msg);
        goto done;
    }
    bool v6 = strchr(c.host, ':') != NULL;
    fprintf(stderr,
            "cinfer router: listening on http://%s%s%s:%d (%d replicas, policy %s, prompt keys over %s)\n",
            v6 ? "[" : "", c.host, v6 ? "]" : "", http_server_port(http), c.n, c.policy,
            m ? "the model's tokens" : "bytes (no --model)");
    fflush(stderr);
    int up = router_wait_health(r, 5000);
    fprintf(stderr, "cinfer router: ready (%d of %d replicas up)\n", up, c.n);
    fflush(stderr);
    int sig = 0;
    while (sigwait(&stop_signals, &sig) != 0)
        ;
    fprintf(stderr, "cinfer router: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
done:
    // The connections hold transfers of the router's upstream thread: the HTTP server goes first.
    http_server_free(http);
    router_free(r);
    cinfer_template_free(jinja);
    cinfer_model_free(m);
    for (int i = 0; i < c.n; i++)
        ci_free(c.urls[i]);
    if (rc == 0 && r)
        fprintf(stderr, "cinfer router: stopped\n");
    return rc;
}
