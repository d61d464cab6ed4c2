/* The Anthropic Messages wire format (POST /v1/messages, /v1/messages/count_tokens): parses and validates a
 * request body into what the engine runs (an openai_request: chat messages, max_tokens, sampling, stop
 * strings) and the OpenAI-shaped chat body the Jinja chat template renders (tool_use blocks become
 * assistant "tool_calls", tool_result blocks become "tool" messages, tools become OpenAI function tools),
 * and formats the answers: the message object, the streaming events (event: message_start ...
 * message_stop) and the error bodies {"type":"error","error":{"type","message"}}.
 *
 * Nothing here touches the engine.  Ownership: a parsed request owns everything it points to
 * (anthropic_request_deinit); strings returned are ci_malloc'ed (ci_free); cJSON objects returned are the
 * caller's (cJSON_Delete). */
#ifndef CINFER_SERVER_ANTHROPIC_H
#define CINFER_SERVER_ANTHROPIC_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "server/openai.h"
#include "server/sse.h"
#include "server/tool_parse.h"

#define ANTHROPIC_MAX_TOOLS 128 // tools in one request

enum anthropic_tool_choice {
    ANTHROPIC_TOOL_AUTO,
    ANTHROPIC_TOOL_ANY,
    ANTHROPIC_TOOL_TOOL,
    ANTHROPIC_TOOL_NONE
};

/* Extended thinking ("thinking" in the request). */
enum anthropic_thinking {
    ANTHROPIC_THINKING_ABSENT,
    ANTHROPIC_THINKING_ENABLED,
    ANTHROPIC_THINKING_DISABLED
};

struct anthropic_request {
    // What the engine runs: messages with OpenAI roles (system, user, assistant, tool) and their text,
    // max_tokens (0 for count_tokens), sampling, stop strings (stop_sequences), stream.  n is 1.
    struct openai_request q;
    // The chat template's view, OpenAI-shaped: {"messages":[...], "tools":[...]} as JSON text; its
    // "messages" are parallel to q.messages.
    char *chat_json;
    size_t chat_json_len;
    // The final assistant message's text (Anthropic's prefill), taken out of the conversation: the prompt is
    // the template's with the generation prompt, then this text, and the answer continues it.  NULL when
    // the conversation ends with a user turn (or with an assistant turn of tool calls, kept as a message).
    char *prefill;
    int n_tools;
    enum anthropic_tool_choice tool_choice; // ANTHROPIC_TOOL_AUTO when absent
    char *tool_name;                        // tool_choice {"type":"tool","name"}, else NULL
    // "thinking": passed to the template as chat_template_kwargs.enable_thinking (absent: not passed);
    // enabled: the answer's reasoning is a thinking block, ended (its end marker forced by the engine) once
    // it holds budget_tokens tokens.
    enum anthropic_thinking thinking;
    int thinking_budget; // budget_tokens (enabled), else 0
};

/* Parses a /v1/messages body (len bytes, body[len] == NUL); count_only: a count_tokens body, where
 * max_tokens and stream are not read.  Also read: llama.cpp's "grammar" (GBNF), as on /v1/chat/completions.
 * CI_ERR_INVALID with err (400, the parameter named) on bad JSON, a
 * missing or bad field, or an unsupported content block (image, document, ...); CI_ERR_NOMEM (500). */
enum ci_status anthropic_parse(const char *body, size_t len, bool count_only, const struct openai_limits *lim,
                               struct anthropic_request *out, struct openai_error *err);
void anthropic_request_deinit(struct anthropic_request *r);

/* Anthropic's error type for an HTTP status: 400/413 invalid_request_error (413: request_too_large),
 * 401 authentication_error, 403 permission_error, 404 not_found_error, 429 rate_limit_error, 503/529
 * overloaded_error, other 5xx api_error. */
const char *anthropic_error_type(int status);
/* {"type":"error","error":{"type","message"}}; NULL when out of memory. */
char *anthropic_error_json(const struct openai_error *e, size_t *len);
/* True for the paths whose errors are Anthropic-shaped (/v1/messages and everything under it). */
bool anthropic_path(const char *path);

/* ---- the answer --------------------------------------------------------------------------------------- */

enum anthropic_block_type { ANTHROPIC_BLOCK_TEXT, ANTHROPIC_BLOCK_TOOL_USE, ANTHROPIC_BLOCK_THINKING };

#define ANTHROPIC_SIGNATURE_LEN 48 // a thinking block's signature, NUL included

/* A thinking block's signature: "cinfer1." and 32 hex digits of a keyed hash of the thinking text (key: the
 * server's random secret), the same for the same text on one server.  Opaque to clients, as Anthropic's;
 * a 128-bit keyed hash, not a cryptographic MAC. */
void anthropic_signature(const uint64_t key[2], const char *text, size_t n,
                         char out[ANTHROPIC_SIGNATURE_LEN]);

/* One content block of the assistant's answer. */
struct anthropic_block {
    enum anthropic_block_type type;
    char *text; // TEXT, THINKING: [len] bytes (NUL-terminated)
    size_t len;
    char signature[ANTHROPIC_SIGNATURE_LEN]; // THINKING: its signature ("" until the caller signs it)
    char *id, *name;                         // TOOL_USE: "toolu_…" and the tool's name
    char *input_json;                        // TOOL_USE: the input object as JSON text
};

/* The answer's content blocks when the request offers no tools: one text block holding the whole text.
 * false: out of memory. */
bool anthropic_output_blocks(const struct anthropic_request *r, const char *text, size_t len,
                             struct anthropic_block **out, int *n);
/* The content blocks of an answer split by the tool-call parser (tool_parse.h, the model's own format): with
 * thinking, a thinking block with the reasoning when there is any ({"type":"thinking","thinking","signature"},
 * the signature the caller's to fill, anthropic_signature); a text block with the content when there is any (or when there are no calls), then a
 * tool_use block for each of the first n_calls calls, ids from seed (anthropic_tool_use_id); the caller
 * answers stop_reason "tool_use" when there is one.  false: out of memory. */
bool anthropic_blocks_from_parse(const struct tool_parse_result *p, int n_calls, bool thinking, uint64_t seed,
                                 struct anthropic_block **out, int *n);
/* "toolu_" and 24 letters and digits derived from seed and the call's index k (tool_call_id's bits). */
void anthropic_tool_use_id(uint64_t seed, int k, char out[32]);
void anthropic_blocks_free(struct anthropic_block *b, int n);

/* Which stop string ended a generation: the engine held back the first one to appear in the generated text,
 * whose raw form (every generated token detokenized) is raw[0..n).  The index into stops of the one that
 * occurs first (the earlier-listed on a tie), or -1 when none occurs (the model ended its turn). */
int anthropic_matched_stop(const char *raw, size_t n, char *const *stops, int n_stop);

/* The stop_reason of a finished generation: the engine's finish_reason "length" → "max_tokens"; "stop" →
 * "stop_sequence" when a stop string matched, "tool_use" when the answer holds a tool_use block, else
 * "end_turn". */
const char *anthropic_stop_reason(const char *finish, bool stop_sequence, bool tool_use);

struct anthropic_info {
    const char *id;    // "msg_…"
    const char *model; // the served name
    const char *stop_reason;
    const char *stop_sequence; // NULL: null
    long long input_tokens, output_tokens;
};

/* The message object {"id","type":"message","role":"assistant","model","content":[...],"stop_reason",
 * "stop_sequence","usage":{"input_tokens","output_tokens"}}; NULL when out of memory. */
cJSON *anthropic_message(const struct anthropic_info *info, const struct anthropic_block *b, int n);

/* Streaming: each call queues whole events ("event: <type>\ndata: <json>\n\n") or, out of memory (false),
 * none.  start: message_start (the message with empty content, stop_reason null, usage), then (open_text)
 * content_block_start of text block 0, and a ping; text: a content_block_delta text_delta of block index
 * (n > 0); block: content_block_stop of block stop (when >= 0), then content_block_start of blk at index
 * stop + 1 (a text block starts empty, a thinking block with empty thinking and signature; a tool_use block starts with input {} and its input follows as one
 * input_json_delta); end: content_block_stop of block last (last < 0: no block was opened, so an empty text
 * block 0 is opened and closed, as the answer's content is never empty), message_delta {stop_reason,
 * stop_sequence, usage.output_tokens}, message_stop; error: an error event. */
bool anthropic_stream_start(struct sse_buf *b, const struct anthropic_info *info, bool open_text);
bool anthropic_stream_text(struct sse_buf *b, int index, const char *text, size_t n);
/* A content_block_delta thinking_delta of the thinking block index. */
bool anthropic_stream_thinking(struct sse_buf *b, int index, const char *text, size_t n);
/* A content_block_delta signature_delta of the thinking block index: Anthropic sends it last, just before the
 * block's content_block_stop. */
bool anthropic_stream_signature(struct sse_buf *b, int index, const char *signature);
bool anthropic_stream_block(struct sse_buf *b, int stop, const struct anthropic_block *blk);
bool anthropic_stream_end(struct sse_buf *b, const struct anthropic_info *info, int last);
bool anthropic_stream_error(struct sse_buf *b, const struct openai_error *e);

#endif
