/* Tool-call and reasoning parsing (src/server/tool_parse.h) over raw model outputs of each family, written
 * out by hand from the families' published formats (the Hermes function-calling prompt format, Meta's
 * Llama 3.1 prompt-format page, Mistral's tokenizer docs for v3 and v11 tool calls, OpenAI's harmony format
 * guide, DeepSeek R1/V3.1's chat templates): complete outputs, several calls, text around them, truncated
 * outputs and malformed calls (which stay plain text), reasoning before calls, and a prompt that opened
 * <think> itself.  Every case also checks the streaming contract on every prefix of its text: the partial
 * result is a prefix of the final one (so streamed deltas add up to the non-streamed answer).  Then format
 * detection from real templates' marker text, the ids, and allocation failures at every step. */
#include "test.h"

#include <cjson/cJSON.h>

#include "core/mem.h"
#include "server/openai.h"
#include "server/tool_parse.h"

#define DS_CB                                                                                                \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                          \
    "calls\xe2\x96\x81"                                                                                      \
    "begin\xef\xbd\x9c>"
#define DS_CE                                                                                                \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                          \
    "calls\xe2\x96\x81"                                                                                      \
    "end\xef\xbd\x9c>"
#define DS_B                                                                                                 \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                          \
    "call\xe2\x96\x81"                                                                                       \
    "begin\xef\xbd\x9c>"
#define DS_E                                                                                                 \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                          \
    "call\xe2\x96\x81"                                                                                       \
    "end\xef\xbd\x9c>"
#define DS_S                                                                                                 \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                          \
    "sep\xef\xbd\x9c>"

struct want_call {
    const char *name, *args;
};

struct tcase {
    const char *what;
    enum tool_format f;
    bool tools, reasoning, in_reasoning;
    const char *text;
    const char *content, *reasoning_text;
    int n_calls;
    struct want_call calls[3];
};

#define H TOOL_FORMAT_HERMES
#define L TOOL_FORMAT_LLAMA3
#define M TOOL_FORMAT_MISTRAL
#define O TOOL_FORMAT_HARMONY
#define D TOOL_FORMAT_DEEPSEEK
#define G TOOL_FORMAT_GENERIC

static const struct tcase cases[] = {
    // Hermes / Qwen
    {"hermes one call",
     H,
     true,
     false,
     false,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "",
     "",
     1,
     {{"get_weather", "{\"city\":\"Paris\"}"}}},
    {"hermes text then two calls",
     H,
     true,
     false,
     false,
     "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n"
     "{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
     "Let me check.",
     "",
     2,
     {{"a", "{\"x\":1}"}, {"b", "{}"}}},
    {"hermes arguments as a string",
     H,
     true,
     false,
     false,
     "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": [1, 2]}\"}</tool_call>",
     "",
     "",
     1,
     {{"f", "{\"q\":[1,2]}"}}},
    {"hermes never closed (EOS before </tool_call>)",
     H,
     true,
     false,
     false,
     "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"b\"}}\n",
     "",
     "",
     1,
     {{"f", "{\"a\":\"b\"}"}}},
    {"hermes truncated inside the JSON",
     H,
     true,
     false,
     false,
     "Sure <tool_call>\n{\"name\": \"f\", \"argu",
     "Sure <tool_call>\n{\"name\": \"f\", \"argu",
     "",
     0,
     {{0}}},
    {"hermes malformed JSON stays text",
     H,
     true,
     false,
     false,
     "<tool_call>{name: f}</tool_call> after",
     "<tool_call>{name: f}</tool_call> after",
     "",
     0,
     {{0}}},
    {"hermes no name stays text",
     H,
     true,
     false,
     false,
     "<tool_call>{\"arguments\": {}}</tool_call>",
     "<tool_call>{\"arguments\": {}}</tool_call>",
     "",
     0,
     {{0}}},
    {"hermes arguments not an object",
     H,
     true,
     false,
     false,
     "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
     "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
     "",
     0,
     {{0}}},
    {"hermes a good call after a bad one",
     H,
     true,
     false,
     false,
     "<tool_call>oops</tool_call><tool_call>{\"name\": \"g\", \"arguments\": {\"k\": null}}</tool_call>",
     "<tool_call>oops</tool_call>",
     "",
     1,
     {{"g", "{\"k\":null}"}}},
    {"hermes with tools off is text",
     H,
     false,
     false,
     false,
     "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
     "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
     "",
     0,
     {{0}}},
    {"qwen3 thinking then a call",
     H,
     true,
     true,
     false,
     "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
     "{\"city\": \"Paris\"}}\n</tool_call>",
     "",
     "The user wants weather.",
     1,
     {{"get_weather", "{\"city\":\"Paris\"}"}}},
    {"reasoning opened by the prompt",
     H,
     true,
     true,
     true,
     "I should answer.\n</think>\n\nHello!",
     "Hello!",
     "I should answer.",
     0,
     {{0}}},
    {"reasoning never closed", H, true, true, true, "still thinking", "", "still thinking", 0, {{0}}},
    {"reasoning off keeps <think> in content",
     H,
     false,
     false,
     false,
     "<think>hm</think>Hi",
     "<think>hm</think>Hi",
     "",
     0,
     {{0}}},
    {"no <think> at the start: all content",
     H,
     false,
     true,
     false,
     "Hi <think>x</think>",
     "Hi <think>x</think>",
     "",
     0,
     {{0}}},
    {"unicode content kept",
     H,
     true,
     false,
     false,
     "caf\xc3\xa9 \xe2\x98\x95",
     "caf\xc3\xa9 \xe2\x98\x95",
     "",
     0,
     {{0}}},
    // Llama 3.x
    {"llama3 bare JSON",
     L,
     true,
     false,
     false,
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
     "",
     "",
     1,
     {{"get_weather", "{\"city\":\"Paris\"}"}}},
    {"llama3 two calls with ;",
     L,
     true,
     false,
     false,
     "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": 2}}",
     "",
     "",
     2,
     {{"a", "{}"}, {"b", "{\"n\":2}"}}},
    {"llama3 python_tag",
     L,
     true,
     false,
     false,
     "<|python_tag|>{\"type\": \"function\", \"name\": \"f\", \"parameters\": {\"a\": true}}",
     "",
     "",
     1,
     {{"f", "{\"a\":true}"}}},
    {"llama3 text with braces is text",
     L,
     true,
     false,
     false,
     "The set {1, 2} is small.",
     "The set {1, 2} is small.",
     "",
     0,
     {{0}}},
    {"llama3 JSON that is not a call",
     L,
     true,
     false,
     false,
     "{\"answer\": 42}",
     "{\"answer\": 42}",
     "",
     0,
     {{0}}},
    {"llama3 truncated JSON",
     L,
     true,
     false,
     false,
     "{\"name\": \"f\", \"parameters\": {\"a\":",
     "{\"name\": \"f\", \"parameters\": {\"a\":",
     "",
     0,
     {{0}}},
    // Mistral
    {"mistral v3 array",
     M,
     true,
     false,
     false,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123def\"}]",
     "",
     "",
     1,
     {{"get_weather", "{\"city\":\"Paris\"}"}}},
    {"mistral v3 two calls",
     M,
     true,
     false,
     false,
     "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"z\": \"w\"}}]",
     "",
     "",
     2,
     {{"a", "{}"}, {"b", "{\"z\":\"w\"}"}}},
    {"mistral v11 name[ARGS]",
     M,
     true,
     false,
     false,
     "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}",
     "",
     "",
     2,
     {{"get_weather", "{\"city\":\"Paris\"}"}, {"get_time", "{}"}}},
    {"mistral name[CALL_ID]id[ARGS]",
     M,
     true,
     false,
     false,
     "[TOOL_CALLS]f[CALL_ID]a1B2c3D4e[ARGS]{\"x\": 1}",
     "",
     "",
     1,
     {{"f", "{\"x\":1}"}}},
    {"mistral text before",
     M,
     true,
     false,
     false,
     "Checking.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]",
     "Checking.",
     "",
     1,
     {{"f", "{}"}}},
    {"mistral truncated",
     M,
     true,
     false,
     false,
     "[TOOL_CALLS][{\"name\": \"f\", \"argum",
     "[TOOL_CALLS][{\"name\": \"f\", \"argum",
     "",
     0,
     {{0}}},
    {"mistral malformed marker is text",
     M,
     true,
     false,
     false,
     "[TOOL_CALLS] hello",
     "[TOOL_CALLS] hello",
     "",
     0,
     {{0}}},
    // gpt-oss harmony
    {"harmony analysis then a call",
     O,
     true,
     true,
     false,
     "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
     "",
     "Need weather.",
     1,
     {{"get_weather", "{\"city\":\"Paris\"}"}}},
    {"harmony recipient before the channel",
     O,
     true,
     true,
     false,
     "<|channel|>analysis<|message|>hm<|end|><|start|>assistant to=functions.f<|channel|>commentary "
     "json<|message|>{\"a\": [1]}<|call|>",
     "",
     "hm",
     1,
     {{"f", "{\"a\":[1]}"}}},
    {"harmony final answer",
     O,
     true,
     true,
     false,
     "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>The answer is "
     "4.<|return|>",
     "The answer is 4.",
     "think",
     0,
     {{0}}},
    {"harmony final without terminator",
     O,
     false,
     true,
     false,
     "<|channel|>final<|message|>Hi there",
     "Hi there",
     "",
     0,
     {{0}}},
    {"harmony bad call arguments stay text",
     O,
     true,
     true,
     false,
     "<|channel|>commentary to=functions.f<|message|>not json<|call|>",
     "not json",
     "",
     0,
     {{0}}},
    {"harmony plain text", O, true, true, false, "Just text", "Just text", "", 0, {{0}}},
    // DeepSeek
    {"deepseek r1",
     D,
     true,
     true,
     false,
     "<think>\nweather\n</think>\n\n" DS_CB DS_B "function" DS_S "get_weather\n```json\n{\"city\": "
     "\"Paris\"}\n```" DS_E DS_CE,
     "",
     "weather",
     1,
     {{"get_weather", "{\"city\":\"Paris\"}"}}},
    {"deepseek v3.1 two calls",
     D,
     true,
     false,
     false,
     "Sure." DS_CB DS_B "a" DS_S "{\"x\": 1}" DS_E DS_B "b" DS_S "{}" DS_E DS_CE,
     "Sure.",
     "",
     2,
     {{"a", "{\"x\":1}"}, {"b", "{}"}}},
    {"deepseek truncated",
     D,
     true,
     false,
     false,
     DS_CB DS_B "a" DS_S "{\"x\"",
     DS_CB DS_B "a" DS_S "{\"x\"",
     "",
     0,
     {{0}}},
    {"deepseek bad call is text",
     D,
     true,
     false,
     false,
     DS_CB DS_B "a b" DS_S "{}" DS_E DS_CE " ok",
     DS_CB DS_B "a b" DS_S "{}" DS_E DS_CE " ok",
     "",
     0,
     {{0}}},
    // generic JSON fallback
    {"generic tool_calls",
     G,
     true,
     false,
     false,
     "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", \"arguments\": {}}]}",
     "",
     "",
     2,
     {{"f", "{\"a\":1}"}, {"g", "{}"}}},
    {"generic tool_call",
     G,
     true,
     false,
     false,
     " {\"tool_call\": {\"name\": \"f\", \"arguments\": {}}} ",
     "",
     "",
     1,
     {{"f", "{}"}}},
    {"generic response", G, true, false, false, "{\"response\": \"Hello\"}", "Hello", "", 0, {{0}}},
    {"generic plain", G, true, false, false, "Hello world", "Hello world", "", 0, {{0}}},
    {"generic broken JSON", G, true, false, false, "{\"tool_call\": ", "{\"tool_call\":", "", 0, {{0}}},
};

static bool same_calls(const struct tool_parse_result *a, const struct tool_parse_result *b, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(a->calls[i].name, b->calls[i].name) != 0 ||
            strcmp(a->calls[i].arguments, b->calls[i].arguments) != 0)
            return false;
    return true;
}

TEST(families) {
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const struct tcase *c = &cases[k];
        struct tool_parse_opts o = {c->f, c->tools, c->reasoning, c->in_reasoning, false};
        struct tool_parse_result r;
        size_t len = strlen(c->text);
        if (tool_parse(&o, c->text, len, &r) != CI_OK) {
            TEST_FAILF("%s: tool_parse failed", c->what);
            continue;
        }
        if (strcmp(r.content, c->content) != 0 || r.content_len != strlen(c->content))
            TEST_FAILF("%s: content '%s', want '%s'", c->what, r.content, c->content);
        if (strcmp(r.reasoning, c->reasoning_text) != 0)
            TEST_FAILF("%s: reasoning '%s', want '%s'", c->what, r.reasoning, c->reasoning_text);
        if (r.n_calls != c->n_calls) {
            TEST_FAILF("%s: %d calls, want %d", c->what, r.n_calls, c->n_calls);
        } else {
            for (int i = 0; i < r.n_calls; i++)
                if (strcmp(r.calls[i].name, c->calls[i].name) != 0 ||
                    strcmp(r.calls[i].arguments, c->calls[i].args) != 0)
                    TEST_FAILF("%s: call %d is %s(%s), want %s(%s)", c->what, i, r.calls[i].name,
                               r.calls[i].arguments, c->calls[i].name, c->calls[i].args);
        }
        // streaming: every prefix's partial result is a prefix of the final one
        o.partial = true;
        for (size_t n = 0; n <= len; n++) {
            struct tool_parse_result p;
            if (tool_parse(&o, c->text, n, &p) != CI_OK) {
                TEST_FAILF("%s: partial parse of %zu bytes failed", c->what, n);
                break;
            }
            bool ok = p.content_len <= r.content_len && memcmp(p.content, r.content, p.content_len) == 0 &&
                      p.reasoning_len <= r.reasoning_len &&
                      memcmp(p.reasoning, r.reasoning, p.reasoning_len) == 0 && p.n_calls <= r.n_calls &&
                      same_calls(&p, &r, p.n_calls);
            if (!ok)
                TEST_FAILF("%s: the partial result of %zu bytes (content '%s', reasoning '%s', %d calls) is "
                           "not a prefix of the final one",
                           c->what, n, p.content, p.reasoning, p.n_calls);
            tool_parse_result_free(&p);
            if (!ok)
                break;
        }
        tool_parse_result_free(&r);
    }
}

/* What a stream shows before the text is over: held back at a possible marker, released after. */
TEST(streaming_holds_back) {
    struct tool_parse_opts o = {H, true, true, false, true};
    struct tool_parse_result p;
    const char *t = "Hello <tool_c";
    CHECK(tool_parse(&o, t, strlen(t), &p) == CI_OK);
    CHECK(strcmp(p.content, "Hello") == 0 && p.n_calls == 0);
    tool_parse_result_free(&p);
    t = "Hello <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> and";
    CHECK(tool_parse(&o, t, strlen(t), &p) == CI_OK);
    CHECK(strcmp(p.content, "Hello  and") == 0 && p.n_calls == 1);
    tool_parse_result_free(&p);
    t = "<think>abc</thi";
    CHECK(tool_parse(&o, t, strlen(t), &p) == CI_OK);
    CHECK(strcmp(p.reasoning, "abc") == 0 && strcmp(p.content, "") == 0);
    tool_parse_result_free(&p);
    t = "<thi";
    CHECK(tool_parse(&o, t, strlen(t), &p) == CI_OK);
    CHECK(p.content_len == 0 && p.reasoning_len == 0);
    tool_parse_result_free(&p);
    o.partial = false;
    CHECK(tool_parse(&o, t, strlen(t), &p) == CI_OK);
    CHECK(strcmp(p.content, "<thi") == 0);
    tool_parse_result_free(&p);
}

TEST(detection) {
    static const struct {
        const char *src;
        enum tool_format f;
    } d[] = {
        {"{{- '<tool_call>\\n' }}{{ tool_call | tojson }}", H},
        {"<|start_header_id|>ipython<|end_header_id|> {\"name\": ..., \"parameters\": ...}", L},
        {"{{ '<|python_tag|>' }}<|start_header_id|>", L},
        {"[AVAILABLE_TOOLS] [TOOL_CALLS] [TOOL_RESULTS]", M},
        {"<|start|>assistant<|channel|>analysis<|message|>", O},
        {"{{'<\xef\xbd\x9ctool\xe2\x96\x81"
         "calls\xe2\x96\x81"
         "begin\xef\xbd\x9c>'}}",
         D},
        {"{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}", G},
    };
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (tool_format_detect(d[i].src, strlen(d[i].src)) != d[i].f)
            TEST_FAILF("template %zu: detected %s, want %s", i,
                       tool_format_name(tool_format_detect(d[i].src, strlen(d[i].src))),
                       tool_format_name(d[i].f));
    CHECK(tool_format_detect(NULL, 0) == G);
    CHECK(tool_template_thinks("{{ '<think>\\n' }}", 16));
    CHECK(!tool_template_thinks("no", 2));
    CHECK(tool_prompt_opens_think("<|im_start|>assistant\n<think>\n", 30));
    CHECK(!tool_prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n", 41));
    CHECK(!tool_prompt_opens_think("", 0));
}

TEST(ids) {
    char a[30], b[30], c[30];
    tool_call_id(42, 0, a);
    tool_call_id(42, 0, b);
    tool_call_id(42, 1, c);
    CHECK(strcmp(a, b) == 0 && strcmp(a, c) != 0);
    CHECK(strlen(a) == 29 && strncmp(a, "call_", 5) == 0);
    for (int i = 5; i < 29; i++)
        CHECK((a[i] >= 'a' && a[i] <= 'z') || (a[i] >= 'A' && a[i] <= 'Z') || (a[i] >= '0' && a[i] <= '9'));
    tool_call_id(43, 0, c);
    CHECK(strcmp(a, c) != 0);
    // every third of the id depends on the seed (ids of different requests share no long run)
    for (int part = 0; part < 3; part++)
        CHECK(memcmp(a + 5 + part * 8, c + 5 + part * 8, 8) != 0);
}

/* Hostile shapes: deep nesting, huge unclosed text, NUL bytes: an answer, in linear time. */
TEST(hostile) {
    size_t n = 1 << 20;
    char *t = malloc(n + 32);
    memcpy(t, "<tool_call>", 11);
    memset(t + 11, '[', n);
    struct tool_parse_opts o = {H, true, true, false, false};
    struct tool_parse_result r;
    CHECK(tool_parse(&o, t, n + 11, &r) == CI_OK);
    CHECK(r.n_calls == 0 && r.content_len == n + 11);
    tool_parse_result_free(&r);
    memset(t, '{', n);
    for (int f = 0; f <= D; f++) {
        o.format = (enum tool_format)f;
        CHECK(tool_parse(&o, t, n, &r) == CI_OK);
        CHECK(r.n_calls == 0);
        tool_parse_result_free(&r);
    }
    memcpy(t, "<tool_call>{\"name\":\"a\0b\",\"arguments\":{}}</tool_call>", 53);
    o.format = H;
    CHECK(tool_parse(&o, t, 53, &r) == CI_OK);
    CHECK(r.n_calls == 0); // the NUL cuts the JSON: text
    tool_parse_result_free(&r);
    free(t);
}

TEST(allocation_failures) {
    const struct tcase *c = &cases[1];
    struct tool_parse_opts o = {c->f, c->tools, c->reasoning, c->in_reasoning, false};
    size_t base = ci_mem_in_use();
    int n_failed = 0;
    for (uint64_t n = 1; n < 200; n++) {
        ci_mem_fail_after(n);
        struct tool_parse_result r;
        enum ci_status s = tool_parse(&o, c->text, strlen(c->text), &r);
        bool fired = ci_mem_fail_fired();
        ci_mem_fail_after(0);
        if (!fired) {
            CHECK(s == CI_OK);
            tool_parse_result_free(&r);
            break;
        }
        n_failed++;
        if (s == CI_OK)
            tool_parse_result_free(&r);
        if (ci_mem_in_use() != base) {
            TEST_FAILF("allocation %llu failing: %zu bytes leaked", (unsigned long long)n,
                       ci_mem_in_use() - base);
            return;
        }
    }
    CHECK(n_failed >= 5);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    openai_init(); // cJSON allocates through the counted allocator, as in the server
    RUN(families);
    RUN(streaming_holds_back);
    RUN(detection);
    RUN(ids);
    RUN(hostile);
    RUN(allocation_failures);
    return test_exit_code();
}
