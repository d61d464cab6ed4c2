/* The OpenAI wire format: parses and validates the JSON bodies of /v1/completions, /v1/chat/completions,
 * /tokenize and /detokenize (cJSON) into plain request structs, formats OpenAI-shaped error bodies
 * {"error":{"message","type","param","code"}}, and holds the one table that maps an engine status to an HTTP
 * status.  Nothing here touches the engine: the caller turns a request into cinfer_engine_submit calls.
 *
 * Ownership: every pointer inside a parsed request is owned by it and released by its *_deinit; strings
 * returned by openai_error_json are ci_malloc'ed (ci_free).  Thread-safe once openai_init has run. */
#ifndef CINFER_SERVER_OPENAI_H
#define CINFER_SERVER_OPENAI_H

#include <stdbool.h>
#include <stddef.h>

#include "cinfer.h"
#include "core/status.h"

// Request limits (documented in README.md, "cinfer serve"); each is checked with the parameter named.
#define OPENAI_MAX_N          16        // samples per prompt
#define OPENAI_MAX_PROMPTS    32        // prompts in one /v1/completions request
#define OPENAI_MAX_CHOICES    64        // prompts × n
#define OPENAI_MAX_STOP       4         // stop strings
#define OPENAI_MAX_STOP_BYTES 256       // bytes per stop string
#define OPENAI_MAX_LOGIT_BIAS 300       // logit_bias entries
#define OPENAI_MAX_LOGPROBS   20        // logprobs (completions) / top_logprobs (chat)
#define OPENAI_MAX_MESSAGES   1024      // chat messages
#define OPENAI_MAX_GRAMMAR    (1 << 20) // bytes of a "grammar"
#define OPENAI_MAX_INPUTS     256       // inputs in one /v1/embeddings request
#define OPENAI_MAX_TOOLS      128       // function tools in one request

enum openai_endpoint { OPENAI_COMPLETIONS, OPENAI_CHAT };

/* "tool_choice": auto (the default with tools), none (the default without: the template does not see the
 * tools and no call is parsed), required (at least one call), or one named function. */
enum openai_tool_choice { OPENAI_TOOL_AUTO, OPENAI_TOOL_NONE, OPENAI_TOOL_REQUIRED, OPENAI_TOOL_NAMED };

struct openai_prompt {
    char *text;        // a text prompt (NUL-terminated), or NULL for a token prompt
    cinfer_token *ids; // [n_ids] the token prompt, used as given (no BOS added)
    int n_ids;
};

struct openai_request {
    enum openai_endpoint endpoint;
    char *model; // NULL when absent
    // completions: prompts
    struct openai_prompt *prompts; // [n_prompts]
    int n_prompts;
    // chat: messages (role and content owned here)
    struct cinfer_chat_message *messages; // [n_messages]
    int n_messages;
    int max_tokens; // 0: not given (the endpoint's default)
    int n;
    struct cinfer_sampling sampling;
    bool has_seed;
    char *stop[OPENAI_MAX_STOP];
    int n_stop;
    bool ignore_eos;
    bool stream;
    bool include_usage; // stream_options.include_usage
    bool echo;          // completions: the prompt's text before the completion
    int spec_k;         // speculative decoding: 0: the server's; > 0: at most this many drafts; -1: off
    int logprobs;       // -1: none; otherwise the top alternatives per token (0..OPENAI_MAX_LOGPROBS)
    struct cinfer_logit_bias *logit_bias; // [n_logit_bias]
    int n_logit_bias;
    // The output constraint, from whichever one request field gave it (at most one may): llama.cpp's
    // "grammar" / "json_schema", OpenAI's "response_format", vLLM's "guided_json" / "guided_regex" /
    // "guided_choice" / "guided_grammar" / "structured_outputs".  Compiled by the engine.
    char *grammar;                         // its text (NULL: none)
    enum cinfer_grammar_kind grammar_kind; // what the text is (GBNF, JSON Schema, regex)
    char grammar_param[32];                // the field it came from, for errors
    // chat: tools (validated: {"type":"function","function":{"name","description","parameters"}}, names
    // unique; the template gets them as sent) and how the model may call them
    int n_tools;
    enum openai_tool_choice tool_choice;
    char *tool_name;          // OPENAI_TOOL_NAMED: the function's name
    char **tool_names;        // [n_tools] each tool's function name
    char **tool_params;       // [n_tools] its "parameters" schema as JSON text (NULL: none given)
    bool parallel_tool_calls; // default true
    char *reasoning_effort;   // "low", "medium" or "high" (NULL when absent): passed to the template
};

/* {"prompt": "..."} or {"messages": [...], "add_generation_prompt"}, with "add_special_tokens". */
struct openai_tokenize {
    char *prompt;                         // NULL when messages are given
    struct cinfer_chat_message *messages; // [n_messages]
    int n_messages;
    bool add_special;
    bool add_generation_prompt;
};

struct openai_detokenize {
    cinfer_token *ids; // [n_ids]
    int n_ids;
};

/* /v1/embeddings: {"input": a string, a list of strings, a list of token ids or a list of such lists,
 * "model", "encoding_format": "float" | "base64", "dimensions"}. */
struct openai_embeddings {
    char *model;                  // NULL when absent
    struct openai_prompt *inputs; // [n_inputs]
    int n_inputs;
    bool base64;    // encoding_format "base64": the little-endian float32 bytes, base64-encoded
    int dimensions; // 0: the model's; else the first `dimensions` values, normalized again
};

/* An error for the client. */
struct openai_error {
    int status;       // HTTP status
    const char *type; // "invalid_request_error", "authentication_error", ... (static)
    const char *code; // NULL or "context_length_exceeded", "invalid_api_key", ... (static)
    char param[64];   // the parameter at fault ("" when none)
    char message[384];
};

/* What validation needs to know of the model. */
struct openai_limits {
    int n_vocab;
    int n_ctx;
};

/* Routes cJSON's allocations through ci_malloc/ci_free.  Call once, before any other thread uses cJSON. */
void openai_init(void);

/* Parses a request body (len bytes; body[len] must be NUL).  CI_ERR_INVALID with err filled (status 400,
 * the parameter named) on bad JSON or a bad parameter; CI_ERR_NOMEM (500).  *out is valid only on CI_OK. */
enum ci_status openai_parse(enum openai_endpoint ep, const char *body, size_t len,
                            const struct openai_limits *lim, struct openai_request *out,
                            struct openai_error *err);
void openai_request_deinit(struct openai_request *r);

enum ci_status openai_parse_tokenize(const char *body, size_t len, struct openai_tokenize *out,
                                     struct openai_error *err);
void openai_tokenize_deinit(struct openai_tokenize *t);
enum ci_status openai_parse_detokenize(const char *body, size_t len, const struct openai_limits *lim,
                                       struct openai_detokenize *out, struct openai_error *err);
void openai_detokenize_deinit(struct openai_detokenize *d);

enum ci_status openai_parse_embeddings(const char *body, size_t len, const struct openai_limits *lim,
                                       int n_embd, struct openai_embeddings *out, struct openai_error *err);
void openai_embeddings_deinit(struct openai_embeddings *e);

/* The status → HTTP table: INVALID/FORMAT/UNSUPPORTED/LIMIT → 400, BUSY → 429, CANCELLED → 503 (shutting
 * down), NOMEM/IO/INTERNAL → 500. */
int openai_http_status(enum cinfer_status s);
/* Fills e for an HTTP status; type follows the status (400/404/405/413: invalid_request_error, 401:
 * authentication_error, 429: rate_limit_error, 5xx: server_error).  param may be NULL, code may be NULL. */
void openai_error_set(struct openai_error *e, int status, const char *param, const char *code,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* An engine status and its message (a cinfer_engine_submit failure).  LIMIT is context_length_exceeded. */
void openai_error_from_status(struct openai_error *e, enum cinfer_status s, const char *message);
/* The body {"error":{...}}; NULL when out of memory. */
char *openai_error_json(const struct openai_error *e, size_t *len);

/* Request readers shared by the OpenAI and Anthropic parsers (anthropic.c): a member absent or null is "not
 * given"; bad fills err with a 400 naming param and returns CI_ERR_INVALID; nomem a 500, CI_ERR_NOMEM. */
struct cJSON;
bool openai_absent(const struct cJSON *v);
enum ci_status openai_bad(struct openai_error *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
enum ci_status openai_nomem(struct openai_error *err);

#endif
