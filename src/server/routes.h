/* The endpoints of `cinfer serve`: /v1/completions, /v1/chat/completions, /v1/models, /tokenize,
 * /detokenize, /health, /metrics and the web UI at /.  Handlers run on the HTTP layer's connection threads:
 * they parse (openai.c), template (the Jinja template through cinfer_template_render, else
 * tokenizer/chat.c's built-ins) and tokenize, submit to the engine through the public
 * API, and wait on the request's stream, answering as one JSON body or as server-sent events (sse.c).
 *
 * Life: routes_create before the HTTP server starts (everything but / and /health answers 503 "loading"),
 * routes_ready once the model and the engine are up, routes_free after the HTTP server is gone.  The model
 * and engine stay the caller's. */
#ifndef CINFER_SERVER_ROUTES_H
#define CINFER_SERVER_ROUTES_H

#include "cinfer.h"
#include "core/status.h"
#include "server/http.h"

struct routes_config {
    const char *served_name;   // the model name of responses and /v1/models (NULL: the model's)
    const char *chat_template; // a built-in template's name (the caller resolves names and detection)
    int max_requests;          // generation requests in flight at once; more get 429
    int max_seqs;              // the engine's running sequences: n above it is refused (400)
    // A Jinja chat template (the model's own or --chat-template-file's; NULL: use chat_template), rendered
    // with the request's messages, tools and chat_template_kwargs.  The caller's, outliving the server.
    const struct cinfer_template *jinja;
    // The Jinja template's source (NULL: none), read for the markers that tell how the model writes tool
    // calls and whether it thinks (tool_parse.h); the caller's, outliving the server.
    const char *jinja_src;
    size_t jinja_src_len;
    bool reasoning_none; // --reasoning-format none: <think> blocks stay in the content
};

struct routes;

enum ci_status routes_create(struct routes **out, struct ci_err *err);
/* The route table to give http_server_start, with the struct routes as its app. */
const struct http_route *routes_table(int *n_routes);
/* Starts answering with model m and engine e (both must outlive the HTTP server). */
enum ci_status routes_ready(struct routes *r, const struct cinfer_model *m, struct cinfer_engine *e,
                            const struct routes_config *c, struct ci_err *err);
void routes_free(struct routes *r);

#endif
