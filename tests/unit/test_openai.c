/* OpenAI request parsing and validation (server/openai.c), table-driven: every parameter's bad values give a
 * 400 invalid_request_error naming that parameter with a message that says what is allowed; good values
 * come out as the request fields the server uses (OpenAI's defaults where absent).  The error body a
 * rejected request gets must be valid JSON and valid UTF-8 whatever bytes the request held, including in
 * the parameter it names.  Limits used: a vocabulary of 32000 tokens and a context of 2048. */
#include "server/openai.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "core/check.h"
#include "core/mem.h"
#include "test.h"

/* Strict UTF-8 (no overlongs, surrogates or values past U+10FFFF). */
static bool utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        size_t len = c < 0x80                 ? 1
                     : c >= 0xc2 && c <= 0xdf ? 2
                     : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4
                                              : 0;
        if (len == 0 || n - i < len)
            return false;
        unsigned char lo = c == 0xe0   ? 0xa0
                           : c == 0xf0 ? 0x90
                                       : 0x80,
                      hi = c == 0xed   ? 0x9f
                           : c == 0xf4 ? 0x8f
                                       : 0xbf;
        if (len > 1 && (u[i + 1] < lo || u[i + 1] > hi))
            return false;
        for (size_t k = 2; k < len; k++)
            if ((u[i + k] & 0xc0) != 0x80)
                return false;
        i += len;
    }
    return true;
}

/* Parses body as a chat request that must fail; returns the error body (ci_free) and its param. */
static char *error_body(const char *body, char *param, size_t cap) {
    struct openai_limits lim = {32000, 2048};
    struct openai_request r;
    struct openai_error e;
    memset(&e, 0, sizeof e);
    if (openai_parse(OPENAI_CHAT, body, strlen(body), &lim, &r, &e) != CI_ERR_INVALID) {
        TEST_FAILF("request accepted: %s", body);
        return NULL;
    }
    snprintf(param, cap, "%s", e.param);
    size_t len = 0;
    char *json = openai_error_json(&e, &len);
    if (!json || strlen(json) != len)
        TEST_FAILF("no error body");
    return json;
}

/* The error body's JSON parses, is valid UTF-8, and error.param is a string starting with prefix. */
static void check_body(const char *json, const char *prefix) {
    if (!utf8_valid(json, strlen(json)))
        TEST_FAILF("error body is not valid UTF-8: %s", json);
    cJSON *j = cJSON_Parse(json);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "param");
    if (!cJSON_IsString(p) || strncmp(p->valuestring, prefix, strlen(prefix)) != 0)
        TEST_FAILF("error.param is not '%s...': %s", prefix, json);
    cJSON_Delete(j);
}

/* A key of raw bytes that are not UTF-8 holding an escaped NUL: the error names that key as its param (found
 * by fuzz_openai: the body was not UTF-8). */
TEST(error_param_with_raw_key_bytes) {
    char param[64];
    char *json = error_body("{\"messages\": [{\"role\": \"user\", \"con\x01\x10\xff\xff\": \"a\\u0000b\"}]}",
                            param, sizeof param);
    ASSERT(json);
    ASSERT(strncmp(param, "messages[0].con", 15) == 0);
    check_body(json, "messages[0].con");
    ci_free(json);
}

/* A long UTF-8 key cut to fit the param field may end inside a character. */
TEST(error_param_cut_inside_a_character) {
    char body[512], key[256] = "";
    for (int i = 0; i < 40; i++)
        strcat(key, "\xc3\xa9"); // é
    snprintf(body, sizeof body,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"%s\": \"\\u0000\"}]}", key);
    char param[64];
    char *json = error_body(body, param, sizeof param);
    ASSERT(json);
    check_body(json, "messages[0].\xc3\xa9");
    ci_free(json);
}

/* The parameter names of ordinary errors stay as they are. */
TEST(error_param_plain) {
    char param[64];
    char *json =
        error_body("{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", param, sizeof param);
    ASSERT(json);
    ASSERT(strcmp(param, "messages[0].role") == 0);
    check_body(json, "messages[0].role");
    ci_free(json);
}

static const struct openai_limits LIM = {32000, 2048};

struct bad_case {
    enum openai_endpoint ep;
    const char *body;
    const char *param;    // the parameter the error names ("" for none)
    const char *fragment; // a part of the message that tells the client what is allowed
};

#define C   OPENAI_COMPLETIONS
#define H   OPENAI_CHAT
#define MSG "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]"

static const struct bad_case bad_cases[] = {
    // the body itself
    {C, "", "", "not valid JSON"},
    {C, "{\"prompt\": \"a\"", "", "not valid JSON"},
    {C, "{\"prompt\": \"a\"} x", "", "not valid JSON"},
    {C, "[1, 2]", "", "must be a JSON object"},
    {C, "\"prompt\"", "", "must be a JSON object"},
    {C, "{\"prompt\": \"a\\u0000b\"}", "prompt", "NUL"},
    {H, "{\"messages\": [{\"role\": \"user\", \"content\": \"\\u0000\"}]}", "messages[0].content", "NUL"},
    // model
    {C, "{\"prompt\": \"a\", \"model\": 7}", "model", "must be a string"},
    // prompt
    {C, "{}", "prompt", "is required"},
    {C, "{\"prompt\": null}", "prompt", "is required"},
    {C, "{\"prompt\": 5}", "prompt", "string or an array of token ids"},
    {C, "{\"prompt\": {}}", "prompt", "string or an array of token ids"},
    {C, "{\"prompt\": []}", "prompt", "is an empty list of token ids"},
    {C, "{\"prompt\": [1, 32000]}", "prompt", "element 1 is not a token id in [0, 32000)"},
    {C, "{\"prompt\": [1, -1]}", "prompt", "element 1 is not a token id"},
    {C, "{\"prompt\": [1, 2.5]}", "prompt", "element 1 is not a token id"},
    {C, "{\"prompt\": [1, \"a\"]}", "prompt", "element 1 is not a token id"},
    {C, "{\"prompt\": [\"a\", 5]}", "prompt[1]", "string or an array of token ids"},
    {C, "{\"prompt\": [\"a\", []]}", "prompt[1]", "empty list of token ids"},
    {C, "{\"prompt\": [[1], [99999]]}", "prompt[1]", "element 0 is not a token id"},
    {C,
     "{\"prompt\": "
     "[\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\","
     "\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\"]"
     "}",
     "prompt", "1 to 32 prompts"},
    // messages
    {H, "{}", "messages", "is required"},
    {H, "{\"messages\": []}", "messages", "array of 1 to 1024 messages"},
    {H, "{\"messages\": \"hi\"}", "messages", "array of 1 to 1024 messages"},
    {H, "{\"messages\": [5]}", "messages", "element 0 is not an object"},
    {H, "{\"messages\": [{\"content\": \"hi\"}]}", "messages[0].role", "must be a string"},
    {H,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"robot\", \"content\": \"b\"}]}",
     "messages[1].role", "role 'robot' is not supported"},
    // tools and tool messages (OpenAI's chat API reference: tools, tool_choice, tool_calls, tool_call_id)
    {H,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"tool\", \"content\": \"b\"}]}",
     "messages[1].tool_call_id", "is required for a tool message"},
    {H,
     "{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", "
     "\"type\": "
     "\"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}, {\"role\": \"tool\", "
     "\"tool_call_id\": \"c2\", \"content\": \"b\"}]}",
     "messages[1].tool_call_id", "'c2' is the id of no tool call"},
    {H,
     "{\"messages\": [{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"b\"}, {\"role\": "
     "\"assistant\", \"tool_calls\": [{\"id\": \"c1\", \"function\": {\"name\": \"f\"}}]}]}",
     "messages[0].tool_call_id", "no tool call of an earlier"},
    {H, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": {}}]}", "messages[0].tool_calls",
     "must be an array"},
    {H, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\"}}]}]}",
     "messages[0].tool_calls[0]", "\"id\" string"},
    {H, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"x\", \"function\": {}}]}]}",
     "messages[0].tool_calls[0]", "\"name\" string"},
    {H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"tool_calls\": []}]}",
     "messages[0].tool_calls", "only assistant messages"},
    {H, "{" MSG ", \"tools\": {}}", "tools", "must be an array"},
    {H, "{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"description\": \"d\"}}]}",
     "tools[0].function.name", "is required"},
    {H, "{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}",
     "tools[0].function.name", "letters, digits"},
    {H, "{" MSG ", \"tools\": [{\"type\": \"retrieval\"}]}", "tools[0]", "\"type\": \"function\""},
    {H, "{" MSG ", \"tools\": [{\"type\": \"function\"}]}", "tools[0].function", "must be an object"},
    {H,
     "{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": 3}}]}",
     "tools[0].function.parameters", "JSON Schema object"},
    {H,
     "{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": 1}}]}",
     "tools[0].function.description", "must be a string"},
    {H,
     "{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}, {\"type\": "
     "\"function\", \"function\": {\"name\": \"f\"}}]}",
     "tools[1].function.name", "another tool is named 'f'"},
    {H,
     "{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": "
     "{\"type\": \"function\", \"function\": {\"name\": \"g\"}}}",
     "tool_choice", "names the function 'g', which is not in 'tools'"},
    {H, "{" MSG ", \"tool_choice\": \"always\"}", "tool_choice", "must be \"none\", \"auto\""},
    {H, "{" MSG ", \"tool_choice\": \"required\"}", "tool_choice", "has no 'tools'"},
    {H, "{" MSG ", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}}",
     "tool_choice", "not in 'tools'"},
    {H, "{" MSG ", \"parallel_tool_calls\": 1}", "parallel_tool_calls", "must be a boolean"},
    {H, "{" MSG ", \"reasoning_effort\": \"max\"}", "reasoning_effort", "\"low\", \"medium\" or \"high\""},
    {H, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages[0].content",
     "string or an array of text parts"},
    {H, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}",
     "messages[0].content", "part 0 is of type 'image_url', which is not supported"},
    {H,
     "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": "
     "\"input_audio\"}]}]}",
     "messages[0].content", "part 1 is of type 'input_audio'"},
    {H, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}", "messages[0].content",
     "only text is supported"},
    // max_tokens / max_completion_tokens
    {C, "{\"prompt\": \"a\", \"max_tokens\": 0}", "max_tokens", "integer in [1, 2048]"},
    {C, "{\"prompt\": \"a\", \"max_tokens\": 2049}", "max_tokens", "integer in [1, 2048]"},
    {C, "{\"prompt\": \"a\", \"max_tokens\": 1.5}", "max_tokens", "integer in [1, 2048]"},
    {C, "{\"prompt\": \"a\", \"max_tokens\": \"8\"}", "max_tokens", "integer in [1, 2048]"},
    {H, "{" MSG ", \"max_completion_tokens\": -1}", "max_completion_tokens", "integer in [1, 2048]"},
    {H, "{" MSG ", \"max_tokens\": 0}", "max_tokens", "integer in [1, 2048]"},
    // n
    {C, "{\"prompt\": \"a\", \"n\": 0}", "n", "integer in [1, 16]"},
    {C, "{\"prompt\": \"a\", \"n\": 17}", "n", "integer in [1, 16]"},
    {C, "{\"prompt\": [\"a\",\"b\",\"c\",\"d\",\"e\"], \"n\": 16}", "n", "more than 64 choices"},
    // sampling numbers
    {C, "{\"prompt\": \"a\", \"temperature\": -0.1}", "temperature", "number in [0, 2]"},
    {C, "{\"prompt\": \"a\", \"temperature\": 2.01}", "temperature", "number in [0, 2]"},
    {C, "{\"prompt\": \"a\", \"temperature\": \"hot\"}", "temperature", "number in [0, 2]"},
    {C, "{\"prompt\": \"a\", \"top_p\": 0}", "top_p", "number in (0, 1]"},
    {C, "{\"prompt\": \"a\", \"top_p\": 1.5}", "top_p", "number in (0, 1]"},
    {C, "{\"prompt\": \"a\", \"top_k\": -2}", "top_k", "integer in [-1,"},
    {C, "{\"prompt\": \"a\", \"top_k\": 2.5}", "top_k", "integer in [-1,"},
    {C, "{\"prompt\": \"a\", \"min_p\": -0.5}", "min_p", "number in [0, 1]"},
    {C, "{\"prompt\": \"a\", \"min_p\": 1.1}", "min_p", "number in [0, 1]"},
    {C, "{\"prompt\": \"a\", \"presence_penalty\": 2.5}", "presence_penalty", "number in [-2, 2]"},
    {C, "{\"prompt\": \"a\", \"frequency_penalty\": -3}", "frequency_penalty", "number in [-2, 2]"},
    {C, "{\"prompt\": \"a\", \"repetition_penalty\": 0}", "repetition_penalty", "number in (0, 100]"},
    {C, "{\"prompt\": \"a\", \"seed\": 1.5}", "seed", "must be an integer"},
    {C, "{\"prompt\": \"a\", \"seed\": \"1\"}", "seed", "must be an integer"},
    // stop
    {C, "{\"prompt\": \"a\", \"stop\": 5}", "stop", "string or an array of strings"},
    {C, "{\"prompt\": \"a\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", "stop",
     "holds 5 strings, at most 4"},
    {C, "{\"prompt\": \"a\", \"stop\": \"\"}", "stop", "1 to 256 bytes"},
    {C, "{\"prompt\": \"a\", \"stop\": [\"a\", 5]}", "stop", "1 to 256 bytes"},
    // booleans
    {C, "{\"prompt\": \"a\", \"stream\": 1}", "stream", "must be a boolean"},
    {C, "{\"prompt\": \"a\", \"ignore_eos\": \"yes\"}", "ignore_eos", "must be a boolean"},
    {C, "{\"prompt\": \"a\", \"echo\": 0}", "echo", "must be a boolean"},
    {C, "{\"prompt\": \"a\", \"stream_options\": true}", "stream_options", "must be an object"},
    {C, "{\"prompt\": \"a\", \"stream_options\": {\"include_usage\": 1}}", "stream_options.include_usage",
     "must be a boolean"},
    // logprobs: an integer on completions, a boolean (with top_logprobs) on chat
    {C, "{\"prompt\": \"a\", \"logprobs\": 21}", "logprobs", "integer in [0, 20]"},
    {C, "{\"prompt\": \"a\", \"logprobs\": -1}", "logprobs", "integer in [0, 20]"},
    {H, "{" MSG ", \"logprobs\": 3}", "logprobs", "must be a boolean"},
    {H, "{" MSG ", \"logprobs\": true, \"top_logprobs\": 21}", "top_logprobs", "integer in [0, 20]"},
    {H, "{" MSG ", \"top_logprobs\": 2}", "top_logprobs", "needs 'logprobs' set to true"},
    // logit_bias
    {C, "{\"prompt\": \"a\", \"logit_bias\": [1]}", "logit_bias", "must be an object"},
    {C, "{\"prompt\": \"a\", \"logit_bias\": {\"x\": 1}}", "logit_bias",
     "key 'x' is not a token id in [0, 32000)"},
    {C, "{\"prompt\": \"a\", \"logit_bias\": {\"-1\": 1}}", "logit_bias", "key '-1' is not a token id"},
    {C, "{\"prompt\": \"a\", \"logit_bias\": {\"32000\": 1}}", "logit_bias", "key '32000' is not a token id"},
    {C, "{\"prompt\": \"a\", \"logit_bias\": {\"12abc\": 1}}", "logit_bias", "is not a token id"},
    {C, "{\"prompt\": \"a\", \"logit_bias\": {\"5\": 101}}", "logit_bias",
     "token 5 must be a number in [-100, 100]"},
    {C, "{\"prompt\": \"a\", \"logit_bias\": {\"5\": \"1\"}}", "logit_bias", "token 5 must be a number"},
    // grammar (its content is checked by the engine: tests/server/test_grammar.py)
    {C, "{\"prompt\": \"a\", \"grammar\": 5}", "grammar", "must be a string"},
    {H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"grammar\": [\"root\"]}", "grammar",
     "must be a string"},
};

TEST(every_bad_parameter_is_named) {
    for (size_t i = 0; i < CI_ARRAY_LEN(bad_cases); i++) {
        const struct bad_case *c = &bad_cases[i];
        struct openai_request r;
        struct openai_error e;
        memset(&e, 0, sizeof e);
        enum ci_status s = openai_parse(c->ep, c->body, strlen(c->body), &LIM, &r, &e);
        if (s != CI_ERR_INVALID) {
            TEST_FAILF("case %zu accepted (status %d): %s", i, (int)s, c->body);
            if (s == CI_OK)
                openai_request_deinit(&r);
            continue;
        }
        if (e.status != 400 || strcmp(e.type, "invalid_request_error") != 0)
            TEST_FAILF("case %zu: status %d type %s: %s", i, e.status, e.type, c->body);
        if (strcmp(e.param, c->param) != 0)
            TEST_FAILF("case %zu: param '%s', want '%s': %s", i, e.param, c->param, c->body);
        if (!strstr(e.message, c->fragment))
            TEST_FAILF("case %zu: message '%s' lacks '%s'", i, e.message, c->fragment);
    }
}

static bool parse_ok(enum openai_endpoint ep, const char *body, struct openai_request *r) {
    struct openai_error e;
    memset(&e, 0, sizeof e);
    if (openai_parse(ep, body, strlen(body), &LIM, r, &e) != CI_OK) {
        TEST_FAILF("rejected (%s: %s): %s", e.param, e.message, body);
        return false;
    }
    return true;
}

/* Absent parameters take OpenAI's defaults (not the CLI's): temperature 1, nothing truncated. */
TEST(defaults_are_openai_defaults) {
    struct openai_request r;
    ASSERT(parse_ok(C, "{\"prompt\": \"Once\"}", &r));
    CHECK(r.endpoint == C && r.n_prompts == 1 && r.prompts[0].text && !strcmp(r.prompts[0].text, "Once"));
    CHECK(r.prompts[0].ids == NULL && r.model == NULL && r.max_tokens == 0 && r.n == 1);
    CHECK(r.sampling.temperature == 1.0f && r.sampling.top_p == 1.0f && r.sampling.top_k == 0);
    CHECK(r.sampling.min_p == 0.0f && r.sampling.repetition_penalty == 1.0f);
    CHECK(r.sampling.presence_penalty == 0.0f && r.sampling.frequency_penalty == 0.0f);
    CHECK(!r.has_seed && r.n_stop == 0 && !r.ignore_eos && !r.stream && !r.include_usage && !r.echo);
    CHECK(r.logprobs == -1 && r.n_logit_bias == 0);
    openai_request_deinit(&r);
}

TEST(completion_fields_come_through) {
    struct openai_request r;
    ASSERT(parse_ok(
        C,
        "{\"model\": \"m\", \"prompt\": [[1, 2], \"b\"], \"max_tokens\": 2048, \"n\": 3, "
        "\"temperature\": 0, \"top_p\": 0.5, \"top_k\": -1, \"min_p\": 0.1, \"presence_penalty\": -2, "
        "\"frequency_penalty\": 2, \"repetition_penalty\": 1.1, \"seed\": -1, \"stop\": \"\\n\", "
        "\"ignore_eos\": true, \"stream\": true, \"stream_options\": {\"include_usage\": true}, "
        "\"echo\": true, \"logprobs\": 5, \"logit_bias\": {\"7\": -100, \"31999\": 2.5}}",
        &r));
    CHECK(r.model && !strcmp(r.model, "m") && r.n_prompts == 2 && r.max_tokens == 2048 && r.n == 3);
    CHECK(r.prompts[0].n_ids == 2 && r.prompts[0].ids[0] == 1 && r.prompts[0].ids[1] == 2 &&
          !r.prompts[0].text);
    CHECK(r.prompts[1].text && !strcmp(r.prompts[1].text, "b"));
    CHECK(r.sampling.temperature == 0.0f && r.sampling.top_p == 0.5f && r.sampling.top_k == 0); // -1: off
    CHECK(fabsf(r.sampling.min_p - 0.1f) < 1e-7f && r.sampling.presence_penalty == -2.0f);
    CHECK(r.sampling.frequency_penalty == 2.0f && fabsf(r.sampling.repetition_penalty - 1.1f) < 1e-6f);
    CHECK(r.has_seed && r.sampling.seed == UINT64_MAX); // -1 as a 64-bit two's complement
    CHECK(r.n_stop == 1 && !strcmp(r.stop[0], "\n"));
    CHECK(r.ignore_eos && r.stream && r.include_usage && r.echo && r.logprobs == 5);
    CHECK(r.n_logit_bias == 2 && r.logit_bias[0].token == 7 && isinf(r.logit_bias[0].bias) &&
          r.logit_bias[0].bias < 0); // -100 bans the token
    CHECK(r.logit_bias[1].token == 31999 && r.logit_bias[1].bias == 2.5f);
    openai_request_deinit(&r);
    // logprobs as a boolean is accepted on completions: true is the sampled token only.
    ASSERT(parse_ok(C, "{\"prompt\": \"a\", \"logprobs\": true, \"stop\": [\"x\", \"yy\"]}", &r));
    CHECK(r.logprobs == 0 && r.n_stop == 2 && !strcmp(r.stop[1], "yy"));
    openai_request_deinit(&r);
    ASSERT(parse_ok(C, "{\"prompt\": \"a\", \"seed\": 18446744073709551615, \"top_k\": 40}", &r));
    CHECK(r.has_seed && r.sampling.seed == UINT64_MAX && r.sampling.top_k == 40);
    openai_request_deinit(&r);
}

TEST(chat_fields_come_through) {
    struct openai_request r;
    ASSERT(parse_ok(
        H,
        "{\"messages\": [{\"role\": \"developer\", \"content\": \"Be brief.\"}, "
        "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
        "{\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\"}], "
        "\"max_completion_tokens\": 9, \"max_tokens\": 100, \"logprobs\": true, \"top_logprobs\": 4}",
        &r));
    CHECK(r.endpoint == H && r.n_messages == 3 && r.prompts == NULL);
    CHECK(!strcmp(r.messages[0].role, "system") && !strcmp(r.messages[0].content, "Be brief."));
    CHECK(!strcmp(r.messages[1].role, "user") && !strcmp(r.messages[1].content, "a\nb")); // parts joined
    CHECK(!strcmp(r.messages[2].role, "assistant") && !strcmp(r.messages[2].content, ""));
    CHECK(r.max_tokens == 9); // max_completion_tokens wins over the deprecated max_tokens
    CHECK(r.logprobs == 4);
    openai_request_deinit(&r);
    ASSERT(parse_ok(H, "{" MSG ", \"max_tokens\": 7, \"logprobs\": false, \"top_logprobs\": 0}", &r));
    CHECK(r.max_tokens == 7 && r.logprobs == -1);
    openai_request_deinit(&r);
    // tools: the defaults (auto with tools, none without), a named function with its schema, a round trip
    // assistant tool_calls → tool message, parallel_tool_calls and reasoning_effort
    ASSERT(parse_ok(H, "{" MSG "}", &r));
    CHECK(r.n_tools == 0 && r.tool_choice == OPENAI_TOOL_NONE && r.parallel_tool_calls);
    openai_request_deinit(&r);
    ASSERT(parse_ok(
        H,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}, {\"role\": \"assistant\", "
        "\"content\": null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", "
        "\"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]}, "
        "{\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": [{\"type\": \"text\", "
        "\"text\": \"sunny\"}]}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
        "\"get_weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
        "{\"type\": \"string\"}}}}}, {\"type\": \"function\", \"function\": {\"name\": \"t-2\"}}], "
        "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}, "
        "\"parallel_tool_calls\": false, \"reasoning_effort\": \"low\"}",
        &r));
    CHECK(r.n_messages == 3 && !strcmp(r.messages[2].role, "tool") &&
          !strcmp(r.messages[2].content, "sunny"));
    CHECK(!strcmp(r.messages[1].content, "")); // null content with tool calls
    CHECK(r.n_tools == 2 && r.tool_choice == OPENAI_TOOL_NAMED && !strcmp(r.tool_name, "get_weather"));
    CHECK(!strcmp(r.tool_names[0], "get_weather") && !strcmp(r.tool_names[1], "t-2") && !r.tool_params[1] &&
          r.tool_params[0] &&
          !strcmp(r.tool_params[0], "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}"));
    CHECK(!r.parallel_tool_calls && !strcmp(r.reasoning_effort, "low"));
    openai_request_deinit(&r);
    ASSERT(parse_ok(H,
                    "{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
                    "\"tool_choice\": \"none\"}",
                    &r));
    CHECK(r.n_tools == 1 && r.tool_choice == OPENAI_TOOL_NONE);
    openai_request_deinit(&r);
    ASSERT(parse_ok(H,
                    "{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
                    "\"tool_choice\": \"required\"}",
                    &r));
    CHECK(r.tool_choice == OPENAI_TOOL_REQUIRED && r.tool_name == NULL);
    openai_request_deinit(&r);
    // echo is a completions parameter: chat ignores it, as OpenAI does with unknown fields.
    ASSERT(parse_ok(H, "{" MSG ", \"echo\": 5, \"unknown\": {\"x\": 1}}", &r));
    CHECK(!r.echo);
    openai_request_deinit(&r);
}

TEST(tokenize_and_detokenize_bodies) {
    struct openai_tokenize t;
    struct openai_error e;
    const char *b = "{\"prompt\": \"hi\", \"add_special_tokens\": false}";
    ASSERT(openai_parse_tokenize(b, strlen(b), &t, &e) == CI_OK);
    CHECK(t.prompt && !strcmp(t.prompt, "hi") && !t.add_special && t.add_generation_prompt && !t.messages);
    openai_tokenize_deinit(&t);
    b = "{" MSG ", \"add_generation_prompt\": false}";
    ASSERT(openai_parse_tokenize(b, strlen(b), &t, &e) == CI_OK);
    CHECK(!t.prompt && t.n_messages == 1 && t.add_special && !t.add_generation_prompt);
    openai_tokenize_deinit(&t);
    const struct {
        const char *body, *param, *fragment;
    } bad_tok[] = {
        {"{}", "prompt", "give 'prompt'"},
        {"{\"prompt\": 5}", "prompt", "must be a string"},
        {"{\"messages\": []}", "messages", "1 to 1024"},
        {"{\"prompt\": \"a\", \"add_special_tokens\": 1}", "add_special_tokens", "boolean"},
        {"{\"prompt\": \"a\", \"add_generation_prompt\": null, \"x\": 1} x", "", "not valid JSON"},
    };
    for (size_t i = 0; i < CI_ARRAY_LEN(bad_tok); i++) {
        memset(&e, 0, sizeof e);
        if (openai_parse_tokenize(bad_tok[i].body, strlen(bad_tok[i].body), &t, &e) != CI_ERR_INVALID ||
            e.status != 400 || strcmp(e.param, bad_tok[i].param) != 0 ||
            !strstr(e.message, bad_tok[i].fragment))
            TEST_FAILF("tokenize case %zu: %d '%s' '%s'", i, e.status, e.param, e.message);
    }
    struct openai_detokenize d;
    b = "{\"tokens\": [0, 31999]}";
    ASSERT(openai_parse_detokenize(b, strlen(b), &LIM, &d, &e) == CI_OK);
    CHECK(d.n_ids == 2 && d.ids[0] == 0 && d.ids[1] == 31999);
    openai_detokenize_deinit(&d);
    b = "{\"tokens\": []}";
    ASSERT(openai_parse_detokenize(b, strlen(b), &LIM, &d, &e) == CI_OK);
    CHECK(d.n_ids == 0);
    openai_detokenize_deinit(&d);
    const char *bad_detok[][2] = {{"{}", "must be an array"},
                                  {"{\"tokens\": 5}", "must be an array"},
                                  {"{\"tokens\": [32000]}", "element 0 is not a token id in [0, 32000)"},
                                  {"{\"tokens\": [1, 0.5]}", "element 1"}};
    for (size_t i = 0; i < CI_ARRAY_LEN(bad_detok); i++) {
        memset(&e, 0, sizeof e);
        if (openai_parse_detokenize(bad_detok[i][0], strlen(bad_detok[i][0]), &LIM, &d, &e) !=
                CI_ERR_INVALID ||
            strcmp(e.param, "tokens") != 0 || !strstr(e.message, bad_detok[i][1]))
            TEST_FAILF("detokenize case %zu: '%s' '%s'", i, e.param, e.message);
    }
}

/* The status table and the error body's shape, as OpenAI's clients read them. */
TEST(status_table_and_error_body) {
    const struct {
        enum cinfer_status s;
        int http;
    } table[] = {{CINFER_ERR_INVALID, 400}, {CINFER_ERR_LIMIT, 400},     {CINFER_ERR_BUSY, 429},
                 {CINFER_ERR_NOMEM, 500},   {CINFER_ERR_CANCELLED, 503}, {CINFER_ERR_INTERNAL, 500}};
    for (size_t i = 0; i < CI_ARRAY_LEN(table); i++)
        if (openai_http_status(table[i].s) != table[i].http)
            TEST_FAILF("status %d -> %d, want %d", (int)table[i].s, openai_http_status(table[i].s),
                       table[i].http);
    struct openai_error e;
    openai_error_from_status(&e, CINFER_ERR_LIMIT, "too long");
    CHECK(e.status == 400 && e.code && !strcmp(e.code, "context_length_exceeded"));
    openai_error_set(&e, 429, NULL, NULL, "busy");
    CHECK(!strcmp(e.type, "rate_limit_error"));
    openai_error_set(&e, 401, NULL, "invalid_api_key", "no");
    CHECK(!strcmp(e.type, "authentication_error"));
    openai_error_set(&e, 413, "x", NULL, "big %d", 5);
    size_t len = 0;
    char *json = openai_error_json(&e, &len);
    ASSERT(json);
    cJSON *j = cJSON_Parse(json);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(err, "message")) &&
          !strcmp(cJSON_GetObjectItemCaseSensitive(err, "message")->valuestring, "big 5"));
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(err, "type")->valuestring, "invalid_request_error"));
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(err, "param")->valuestring, "x"));
    CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(err, "code")));
    cJSON_Delete(j);
    ci_free(json);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    openai_init();
    RUN(error_param_with_raw_key_bytes);
    RUN(error_param_cut_inside_a_character);
    RUN(error_param_plain);
    RUN(every_bad_parameter_is_named);
    RUN(defaults_are_openai_defaults);
    RUN(completion_fields_come_through);
    RUN(chat_fields_come_through);
    RUN(tokenize_and_detokenize_bodies);
    RUN(status_table_and_error_body);
    return test_exit_code();
}
