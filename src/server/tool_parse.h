/* Tool calls and reasoning in a model's generated text: pure functions over the text, shared by the OpenAI
 * (/v1/chat/completions) and Anthropic (/v1/messages) routes.
 *
 * Each model family writes tool calls its own way; the format is chosen from the chat template's text (as
 * llama.cpp does: markers the template writes), then tool_parse splits a generated text into
 *   - reasoning: a leading <think>...</think> block (or, for a template whose prompt already opened it, the
 *     text up to </think>), or harmony's analysis channel;
 *   - content: the rest of the text, outside the calls (leading and trailing whitespace trimmed);
 *   - calls: name + arguments (the JSON text of an object, compact).
 * Formats: Hermes/Qwen <tool_call>{"name","arguments"}</tool_call> (several); Llama 3.x JSON
 * {"name","parameters"} (the whole text, or after <|python_tag|>); Mistral [TOOL_CALLS][{...}] and the newer
 * [TOOL_CALLS]name[ARGS]{...}; gpt-oss harmony (<|channel|>commentary to=functions.NAME ...<|message|>{...}
 * <|call|>); DeepSeek R1/V3 (<｜tool▁calls▁begin｜>...); and a generic JSON fallback (the whole text one
 * object: {"tool_calls":[...]}, {"tool_call":{...}} or {"name","arguments"}).  A call that does not parse
 * (bad JSON, no name, arguments not an object) stays in the content as plain text: never an error.
 *
 * Streaming: with partial set, the text may be cut anywhere, and the result holds only what the rest of the
 * text cannot change: every call reported is complete, text that may begin a marker (or a call still
 * open, or trailing whitespace) is held back.  So the partial result of any prefix of a text is a prefix of
 * the final result of the whole text (content and reasoning as byte prefixes, calls as a prefix of the
 * list, each one equal): a stream that sends the growth of each partial result, then of the final one, sends
 * exactly the non-streamed answer (tests/fuzz/fuzz_tool_parse.c checks this).
 *
 * Cost: one pass over the text, O(n) (each JSON value is scanned, then parsed once).  Ownership: a result's
 * strings are ci_malloc'ed, released by tool_parse_result_free. */
#ifndef CINFER_SERVER_TOOL_PARSE_H
#define CINFER_SERVER_TOOL_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

enum tool_format {
    TOOL_FORMAT_GENERIC,  // the whole text is a JSON object naming the call(s)
    TOOL_FORMAT_HERMES,   // Hermes 2/3, Qwen 2.5/3: <tool_call>{...}</tool_call>
    TOOL_FORMAT_LLAMA3,   // Llama 3.1-3.3: {"name", "parameters"} or <|python_tag|>{...}
    TOOL_FORMAT_MISTRAL,  // [TOOL_CALLS][{...}] or [TOOL_CALLS]name[ARGS]{...}
    TOOL_FORMAT_HARMONY,  // gpt-oss: channels and recipients
    TOOL_FORMAT_DEEPSEEK, // DeepSeek R1 / V3: <｜tool▁calls▁begin｜>...
};

/* The format a chat template's source implies (GENERIC when it shows none; NULL src: GENERIC). */
enum tool_format tool_format_detect(const char *src, size_t len);
const char *tool_format_name(enum tool_format f); // "hermes", ... (static)
/* True when the template writes <think> blocks (reasoning models: Qwen3, DeepSeek R1, QwQ, ...). */
bool tool_template_thinks(const char *src, size_t len);
/* True when a rendered prompt leaves a <think> block open at its end (the generation starts inside the
 * reasoning: DeepSeek R1's and some Qwen3 templates with add_generation_prompt). */
bool tool_prompt_opens_think(const char *prompt, size_t len);
/* True when the format needs the model's special tokens rendered in the text (<|channel|>, [TOOL_CALLS],
 * <|python_tag|> are special tokens of their vocabularies). */
bool tool_format_needs_special(enum tool_format f);

struct tool_parse_opts {
    enum tool_format format;
    bool tools;        // look for tool calls (the request has tools and tool_choice is not "none")
    bool reasoning;    // separate the reasoning (else it stays in the content)
    bool in_reasoning; // the text starts inside a <think> block (tool_prompt_opens_think)
    bool partial;      // the text may go on (streaming): report only what is settled
};

struct tool_call {
    char *name;
    char *arguments; // the JSON text of an object, compact
};

struct tool_parse_result {
    char *content; // NUL-terminated, never NULL
    size_t content_len;
    char *reasoning; // NUL-terminated, never NULL
    size_t reasoning_len;
    struct tool_call *calls; // [n_calls]
    int n_calls;
};

/* Splits text[0..len) (any bytes).  CI_ERR_NOMEM is the only failure (out is then empty).  The text is at
 * most TOOL_PARSE_MAX_TEXT bytes; past it, it is all content. */
#define TOOL_PARSE_MAX_TEXT (64u << 20)
enum ci_status tool_parse(const struct tool_parse_opts *o, const char *text, size_t len,
                          struct tool_parse_result *out);
void tool_parse_result_free(struct tool_parse_result *r);

/* "call_" and 24 letters and digits derived from seed (a request's random bits) and i (the call's index in
 * the answer): the same for a streamed and a non-streamed rendering of one answer.  out: 30 bytes. */
void tool_call_id(uint64_t seed, int i, char out[30]);

#endif
