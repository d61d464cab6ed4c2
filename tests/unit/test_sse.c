/* Server-sent events and the OpenAI response JSON (src/server/sse.h), byte for byte, without a server: the
 * framing of each event ("data: " + payload + blank line, the "data: [DONE]" terminator), a stream taken in
 * chunks of every size, the UTF-8 cleaning that keeps every response valid (one U+FFFD per byte that is not
 * part of a valid character; a character cut at a token's end is not held back here, the detokenizer does
 * that), JSON escaping, each choice shape, both logprobs shapes, the usage object and a whole streamed
 * completion.  The expected bytes are written out by hand from the OpenAI API reference and the SSE
 * specification (WHATWG HTML, "Server-sent events"), never produced by the code under test.  Allocation
 * failures at every step must leak nothing (sse_choice owns its logprobs even when it fails). */
#include "test.h"

#include <cjson/cJSON.h>

#include "core/mem.h"
#include "server/openai.h"
#include "server/sse.h"

#define FFFD "\xef\xbf\xbd"

/* Everything pending in b, taken step bytes at a time; a NUL-terminated malloc'ed copy. */
static char *take_all(struct sse_buf *b, size_t step, size_t *n) {
    size_t cap = 1024, len = 0;
    char *out = malloc(cap);
    char chunk[8192];
    while (sse_buf_pending(b)) {
        size_t got = sse_buf_take(b, chunk, step < sizeof chunk ? step : sizeof chunk);
        if (got == 0 || got > step)
            break; // pending but nothing taken, or more than asked: the caller's checks catch it
        while (len + got + 1 > cap)
            out = realloc(out, cap *= 2);
        memcpy(out + len, chunk, got);
        len += got;
    }
    out[len] = '\0';
    *n = len;
    return out;
}

/* Compares obj printed as compact JSON with want. */
#define CHECK_JSON(obj, want)                                                                                \
    do {                                                                                                     \
        char *got_ = (obj) ? cJSON_PrintUnformatted(obj) : NULL;                                             \
        if (!got_ || strcmp(got_, (want)) != 0)                                                              \
            TEST_FAILF("%s:\n   got %s\n  want %s", #obj, got_ ? got_ : "(null)", (want));                   \
        cJSON_free(got_);                                                                                    \
    } while (0)

/* Compares the pending bytes of b (taken all at once) with want, a string literal or char array. */
#define CHECK_TAKEN(b, want)                                                                                 \
    do {                                                                                                     \
        size_t got_n_;                                                                                       \
        char *got_ = take_all((b), SIZE_MAX, &got_n_);                                                       \
        size_t n_ = sizeof(want) - 1;                                                                        \
        if (got_n_ != n_ || memcmp(got_, (want), n_) != 0)                                                   \
            TEST_FAILF("stream bytes:\n   got (%zu) %s\n  want (%zu) %s", got_n_, got_, n_, (want));         \
        free(got_);                                                                                          \
    } while (0)

TEST(event_framing) {
    struct sse_buf b;
    sse_buf_init(&b);
    CHECK(!sse_buf_pending(&b));
    char out[16];
    CHECK(sse_buf_take(&b, out, sizeof out) == 0);
    // One "data:" line per event, a blank line after it (SSE: an event ends at an empty line).
    ASSERT(sse_buf_data(&b, "x", 1));
    CHECK(sse_buf_pending(&b));
    CHECK_TAKEN(&b, "data: x\n\n");
    CHECK(!sse_buf_pending(&b));
    ASSERT(sse_buf_data(&b, "", 0));
    CHECK_TAKEN(&b, "data: \n\n");
    // The payload is copied as given: only its first n bytes, whatever they hold.
    ASSERT(sse_buf_data(&b, "{\"a\":1}tail", 7));
    CHECK_TAKEN(&b, "data: {\"a\":1}\n\n");
    ASSERT(sse_buf_done(&b));
    CHECK_TAKEN(&b, "data: [DONE]\n\n");
    // A JSON event is the object compact, in key order of insertion.
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "a", 1);
    cJSON_AddStringToObject(o, "b", "two words");
    cJSON_AddNullToObject(o, "c");
    ASSERT(sse_buf_event(&b, o));
    cJSON_Delete(o);
    CHECK_TAKEN(&b, "data: {\"a\":1,\"b\":\"two words\",\"c\":null}\n\n");
    // Raw appends go out untouched (the server writes nothing else, but the buffer does not care).
    ASSERT(sse_buf_append(&b, ": comment\n\n", 11));
    CHECK_TAKEN(&b, ": comment\n\n");
    sse_buf_deinit(&b);
}

/* A stream of several events comes out identical however the writer takes it (1 byte at a time up to all at
 * once), and events added while earlier ones are half taken follow them in order. */
TEST(chunk_boundaries) {
    static const char want[] = "data: {\"k\":\"v\"}\n\n"
                               "data: second\n\n"
                               "data: [DONE]\n\n";
    const size_t steps[] = {1, 2, 3, 5, 7, 8, 13, 64, 4096, SIZE_MAX};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        struct sse_buf b;
        sse_buf_init(&b);
        ASSERT(sse_buf_data(&b, "{\"k\":\"v\"}", 9) && sse_buf_data(&b, "second", 6) && sse_buf_done(&b));
        size_t n;
        char *got = take_all(&b, steps[i], &n);
        if (n != sizeof want - 1 || memcmp(got, want, n) != 0)
            TEST_FAILF("taken %zu bytes at a time: got (%zu) %s", steps[i], n, got);
        free(got);
        CHECK(!sse_buf_pending(&b));
        sse_buf_deinit(&b);
    }
    // Interleaved: take part of an event, add another, take the rest.
    struct sse_buf b;
    sse_buf_init(&b);
    ASSERT(sse_buf_data(&b, "first", 5));
    char part[4];
    ASSERT_EQ_I64(sse_buf_take(&b, part, 4), 4);
    CHECK(memcmp(part, "data", 4) == 0);
    ASSERT(sse_buf_data(&b, "second", 6));
    CHECK_TAKEN(&b, ": first\n\ndata: second\n\n");
    sse_buf_deinit(&b);
}

/* An event larger than the initial buffer goes in whole, and a long stream that the writer keeps up with never
 * grows the buffer (what is taken is reused): memory does not grow with the length of a completion. */
TEST(large_events_and_long_streams) {
    struct sse_buf b;
    sse_buf_init(&b);
    static char big[100000];
    memset(big, 'z', sizeof big);
    ASSERT(sse_buf_data(&b, big, sizeof big));
    size_t n;
    char *got = take_all(&b, 1000, &n);
    CHECK(n == sizeof big + 8 && memcmp(got, "data: z", 7) == 0 && memcmp(got + n - 3, "z\n\n", 3) == 0);
    for (size_t i = 6; i < n - 2; i++)
        if (got[i] != 'z') {
            TEST_FAILF("byte %zu is %d", i, got[i]);
            break;
        }
    free(got);
    sse_buf_deinit(&b);

    sse_buf_init(&b);
    char chunk[3000];
    memset(chunk, 'a', sizeof chunk);
    ASSERT(sse_buf_data(&b, chunk, sizeof chunk));
    size_t cap0 = b.cap;
    char out[4096];
    for (int i = 0; i < 1000; i++) {
        while (sse_buf_pending(&b))
            sse_buf_take(&b, out, sizeof out);
        ASSERT(sse_buf_data(&b, chunk, sizeof chunk));
    }
    CHECK(b.cap == cap0);
    sse_buf_deinit(&b);
}

/* One U+FFFD per byte that is not part of a valid character (Unicode §3.9 strict: no overlongs, surrogates or
 * values past U+10FFFF), and for NUL, which would cut the C string cJSON reads. */
TEST(utf8_clean_table) {
    static const struct {
        const char *in;
        size_t n;
        const char *want;
    } cases[] = {
        {"", 0, ""},
        {"plain ascii", 11, "plain ascii"},
        {"caf\xc3\xa9", 5, "caf\xc3\xa9"},             // é
        {"\xe2\x82\xac", 3, "\xe2\x82\xac"},           // € whole
        {"\xf0\x9f\xa6\x99!", 5, "\xf0\x9f\xa6\x99!"}, // 🦙 (4 bytes)
        {"\xf4\x8f\xbf\xbf", 4, "\xf4\x8f\xbf\xbf"},   // U+10FFFF, the last code point
        {"\xff", 1, FFFD},                             // never in UTF-8
        {"a\0b", 3, "a" FFFD "b"},                     // NUL
        {"\xe2\x82", 2, FFFD FFFD},                    // € cut after 2 bytes
        {"ok\xe2\x82", 4, "ok" FFFD FFFD},             // ... at a token's end: not held
        {"\xf0\x9f\xa6x", 4, FFFD FFFD FFFD "x"},      // 🦙 cut, then ASCII
        {"\x80"
         "abc",
         4, FFFD "abc"},                              // a lone continuation byte
        {"\xc0\xaf", 2, FFFD FFFD},                   // overlong '/'
        {"\xe0\x80\xaf", 3, FFFD FFFD FFFD},          // overlong '/' in 3 bytes
        {"\xed\xa0\x80", 3, FFFD FFFD FFFD},          // U+D800, a surrogate
        {"\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD}, // U+110000
        {"\xc3\xa9\xc3", 3, "\xc3\xa9" FFFD},         // é then a cut é
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = 12345;
        char *got = sse_utf8_clean(cases[i].in, cases[i].n, &len);
        ASSERT(got != NULL);
        if (len != strlen(cases[i].want) || strcmp(got, cases[i].want) != 0)
            TEST_FAILF("case %zu: got %zu bytes '%s', want %zu '%s'", i, len, got, strlen(cases[i].want),
                       cases[i].want);
        CHECK(got[len] == '\0');
        ci_free(got);
    }
    char *got = sse_utf8_clean("x", 1, NULL); // out_len may be NULL
    CHECK(got && strcmp(got, "x") == 0);
    ci_free(got);
}

/* JSON strings: quotes, backslashes and control characters escaped (RFC 8259 §7), everything else (UTF-8
 * included) as it is; the bytes go through the UTF-8 cleaning first. */
TEST(json_strings) {
    cJSON *o = cJSON_CreateObject();
    ASSERT(sse_add_string(o, "q", "say \"hi\"\n\t\\", 11));
    ASSERT(sse_add_string(o, "c", "\x01\x1f", 2));
    ASSERT(sse_add_string(o, "u", "\xc3\xa9/\xff", 4));
    ASSERT(sse_add_string(o, "n", NULL, 5)); // no text: an empty string
    ASSERT(sse_add_string(o, "cut", "abcdef", 3));
    CHECK_JSON(o, "{\"q\":\"say \\\"hi\\\"\\n\\t\\\\\",\"c\":\"\\u0001\\u001f\",\"u\":\"\xc3\xa9/" FFFD "\","
                  "\"n\":\"\",\"cut\":\"abc\"}");
    cJSON_Delete(o);
}

TEST(head_and_usage) {
    struct sse_head h = {"cmpl-7", "text_completion", 1700000000, "tiny"};
    cJSON *o = sse_object(&h);
    CHECK_JSON(
        o, "{\"id\":\"cmpl-7\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"tiny\"}");
    ASSERT(sse_add_usage(o, 5, 3));
    CHECK_JSON(o,
               "{\"id\":\"cmpl-7\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"tiny\","
               "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8}}");
    cJSON_Delete(o);
    // A model name with invalid bytes still gives valid JSON.
    struct sse_head bad = {"chatcmpl-1", "chat.completion.chunk", 0, "m\xff"};
    o = sse_object(&bad);
    CHECK_JSON(o,
               "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m" FFFD
               "\"}");
    cJSON_Delete(o);
}

/* The three choice shapes of the OpenAI API: completions' {index, text, logprobs, finish_reason}, chat's
 * message {role, content}, and streamed chat's delta (role on the first chunk, content when there is text,
 * empty on the final chunk that carries only finish_reason). */
TEST(choice_shapes) {
    static const struct {
        enum sse_shape shape;
        int index;
        const char *text;
        bool role;
        const char *finish;
        const char *want;
    } cases[] = {
        {SSE_COMPLETION, 0, "Once", false, NULL,
         "{\"index\":0,\"text\":\"Once\",\"logprobs\":null,\"finish_reason\":null}"},
        {SSE_COMPLETION, 3, " upon", false, "length",
         "{\"index\":3,\"text\":\" upon\",\"logprobs\":null,\"finish_reason\":\"length\"}"},
        {SSE_COMPLETION, 0, NULL, false, "stop",
         "{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"stop\"}"},
        {SSE_CHAT_MESSAGE, 0, "Hi there", false, "stop",
         "{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hi there\"},\"logprobs\":null,"
         "\"finish_reason\":\"stop\"}"},
        {SSE_CHAT_MESSAGE, 1, NULL, false, "length",
         "{\"index\":1,\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
         "\"finish_reason\":\"length\"}"},
        {SSE_CHAT_DELTA, 0, NULL, true, NULL,
         "{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"logprobs\":null,\"finish_reason\":null}"},
        {SSE_CHAT_DELTA, 0, "lo", false, NULL,
         "{\"index\":0,\"delta\":{\"content\":\"lo\"},\"logprobs\":null,\"finish_reason\":null}"},
        {SSE_CHAT_DELTA, 0, "Hi", true, NULL,
         "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"logprobs\":null,"
         "\"finish_reason\":null}"},
        {SSE_CHAT_DELTA, 2, NULL, false, "stop",
         "{\"index\":2,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *t = cases[i].text;
        cJSON *c = sse_choice(cases[i].shape, cases[i].index, t, t ? strlen(t) : 0, cases[i].role, NULL,
                              cases[i].finish);
        CHECK_JSON(c, cases[i].want);
        cJSON_Delete(c);
    }
    // Only len bytes of the text count.
    cJSON *c = sse_choice(SSE_COMPLETION, 0, "abcdef", 2, false, NULL, NULL);
    CHECK_JSON(c, "{\"index\":0,\"text\":\"ab\",\"logprobs\":null,\"finish_reason\":null}");
    cJSON_Delete(c);
}

/* Completions' logprobs: parallel arrays, one entry per token; top_logprobs maps each alternative's text to
 * its log-probability, the sampled token included (listed once: a text seen twice keeps its first value). */
TEST(completion_logprobs) {
    cJSON *lp = sse_completion_logprobs_new();
    CHECK_JSON(lp, "{\"tokens\":[],\"token_logprobs\":[],\"top_logprobs\":[],\"text_offset\":[]}");
    struct sse_top tok1 = {" a", 2, -0.5f};
    struct sse_top top1[2] = {{" a", 2, -0.5f}, {" the", 4, -1.25f}};
    ASSERT(sse_completion_logprobs_add(lp, &tok1, top1, 2, 4));
    CHECK_JSON(
        lp, "{\"tokens\":[\" a\"],\"token_logprobs\":[-0.5],\"top_logprobs\":[{\" a\":-0.5,\" the\":-1.25}],"
            "\"text_offset\":[4]}");
    // The sampled token outside the alternatives is added after them; a repeated alternative keeps its first.
    struct sse_top tok2 = {"b", 1, -2.0f};
    struct sse_top top2[2] = {{"c", 1, -1.0f}, {"c", 1, -3.0f}};
    ASSERT(sse_completion_logprobs_add(lp, &tok2, top2, 2, 6));
    CHECK_JSON(lp,
               "{\"tokens\":[\" a\",\"b\"],\"token_logprobs\":[-0.5,-2],"
               "\"top_logprobs\":[{\" a\":-0.5,\" the\":-1.25},{\"c\":-1,\"b\":-2}],\"text_offset\":[4,6]}");
    // No alternatives asked (logprobs=0): the sampled token alone; a partial character becomes U+FFFDs.
    struct sse_top tok3 = {"\xe2\x82", 2, -0.125f};
    ASSERT(sse_completion_logprobs_add(lp, &tok3, NULL, 0, 7));
    cJSON *c = sse_choice(SSE_COMPLETION, 0, "x", 1, false, lp, "length");
    CHECK_JSON(c, "{\"index\":0,\"text\":\"x\",\"logprobs\":{\"tokens\":[\" a\",\"b\",\"" FFFD FFFD "\"],"
                  "\"token_logprobs\":[-0.5,-2,-0.125],\"top_logprobs\":[{\" a\":-0.5,\" the\":-1.25},"
                  "{\"c\":-1,\"b\":-2},{\"" FFFD FFFD "\":-0.125}],\"text_offset\":[4,6,7]},"
                  "\"finish_reason\":\"length\"}");
    cJSON_Delete(c);
}

/* Chat's logprobs: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}, bytes the
 * token's raw bytes (so a client can join the pieces of a character split across tokens). */
TEST(chat_logprobs) {
    cJSON *lp = sse_chat_logprobs_new();
    CHECK_JSON(lp, "{\"content\":[]}");
    struct sse_top tok = {"Hi", 2, -0.25f};
    struct sse_top top[2] = {{"Hi", 2, -0.25f}, {"Ho", 2, -1.5f}};
    ASSERT(sse_chat_logprobs_add(lp, &tok, top, 2));
    CHECK_JSON(lp, "{\"content\":[{\"token\":\"Hi\",\"logprob\":-0.25,\"bytes\":[72,105],\"top_logprobs\":["
                   "{\"token\":\"Hi\",\"logprob\":-0.25,\"bytes\":[72,105]},"
                   "{\"token\":\"Ho\",\"logprob\":-1.5,\"bytes\":[72,111]}]}]}");
    // The first two bytes of "€" (E2 82 AC): the token text is cleaned, the bytes are not.
    struct sse_top cut = {"\xe2\x82", 2, -3.0f};
    ASSERT(sse_chat_logprobs_add(lp, &cut, NULL, 0));
    cJSON *c = sse_choice(SSE_CHAT_DELTA, 0, "\xe2\x82", 2, false, lp, NULL);
    CHECK_JSON(c, "{\"index\":0,\"delta\":{\"content\":\"" FFFD FFFD "\"},\"logprobs\":{\"content\":["
                  "{\"token\":\"Hi\",\"logprob\":-0.25,\"bytes\":[72,105],\"top_logprobs\":["
                  "{\"token\":\"Hi\",\"logprob\":-0.25,\"bytes\":[72,105]},"
                  "{\"token\":\"Ho\",\"logprob\":-1.5,\"bytes\":[72,111]}]},"
                  "{\"token\":\"" FFFD FFFD "\",\"logprob\":-3,\"bytes\":[226,130],\"top_logprobs\":[]}]},"
                  "\"finish_reason\":null}");
    cJSON_Delete(c);
}

/* One chunk of a streamed chat completion, as the server builds it: head, choices [choice]. */
static cJSON *chunk(const char *text, bool role, const char *finish) {
    struct sse_head h = {"chatcmpl-42", "chat.completion.chunk", 1700000000, "tiny"};
    cJSON *o = sse_object(&h);
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    cJSON *c = sse_choice(SSE_CHAT_DELTA, 0, text, text ? strlen(text) : 0, role, NULL, finish);
    if (!arr || !c || !cJSON_AddItemToArray(arr, c)) {
        cJSON_Delete(c);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* A whole streamed chat completion (OpenAI's stream shape with stream_options.include_usage): a role chunk,
 * a content chunk per piece of text, a finish chunk, a usage chunk with empty choices, then [DONE]. */
TEST(whole_stream) {
    struct sse_buf b;
    sse_buf_init(&b);
    cJSON *events[5] = {chunk(NULL, true, NULL), chunk("Once", false, NULL), chunk(" upon", false, NULL),
                        chunk(NULL, false, "length"), NULL};
    struct sse_head h = {"chatcmpl-42", "chat.completion.chunk", 1700000000, "tiny"};
    events[4] = sse_object(&h);
    ASSERT(events[4] && cJSON_AddArrayToObject(events[4], "choices") && sse_add_usage(events[4], 1, 2));
    for (int i = 0; i < 5; i++) {
        ASSERT(events[i] != NULL);
        ASSERT(sse_buf_event(&b, events[i]));
        cJSON_Delete(events[i]);
    }
    ASSERT(sse_buf_done(&b));
#define HEAD                                                                                                 \
    "data: "                                                                                                 \
    "{\"id\":\"chatcmpl-42\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":"         \
    "\"tiny\","
    static const char want[] = HEAD
        "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"logprobs\":null,\"finish_reason\":"
        "null}]}\n\n" HEAD "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Once\"},\"logprobs\":null,"
        "\"finish_reason\":null}]}\n\n" HEAD "\"choices\":[{\"index\":0,\"delta\":{\"content\":\" "
        "upon\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n" HEAD
        "\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\n" HEAD
        "\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\n\n"
        "data: [DONE]\n\n";
#undef HEAD
    CHECK_TAKEN(&b, want);
    sse_buf_deinit(&b);
}

/* Every allocation of building and framing a chunk with logprobs fails in turn: each failure is reported (NULL
 * or false) and leaks nothing, sse_choice frees the logprobs it was given even when it fails, and an event
 * that cannot be framed leaves the buffer as it was (whole or not at all). */
TEST(allocation_failures) {
    size_t base = ci_mem_in_use();
    int n_failed = 0;
    for (uint64_t n = 1; n < 1000; n++) {
        struct sse_buf b;
        sse_buf_init(&b);
        bool ok0 = sse_buf_data(&b, "before", 6); // unarmed
        ASSERT(ok0);
        size_t len0 = b.len;
        ci_mem_fail_after(n);
        cJSON *lp = sse_chat_logprobs_new();
        struct sse_top tok = {"Hi", 2, -0.25f}, top[1] = {{"Ho", 2, -1.5f}};
        bool added = lp && sse_chat_logprobs_add(lp, &tok, top, 1);
        cJSON *c = added ? sse_choice(SSE_CHAT_DELTA, 0, "Hi", 2, true, lp, NULL) : NULL;
        if (!added)
            cJSON_Delete(lp); // not handed to sse_choice
        struct sse_head h = {"chatcmpl-1", "chat.completion.chunk", 1, "m"};
        cJSON *o = c ? sse_object(&h) : NULL;
        cJSON *arr = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
        bool in = arr && cJSON_AddItemToArray(arr, c);
        if (!in)
            cJSON_Delete(c);
        static char big[8000]; // past the buffer's first 4096 bytes: framing must allocate
        bool framed = in && sse_buf_event(&b, o) && sse_buf_data(&b, big, sizeof big);
        ci_mem_fail_after(0);
        bool fired = ci_mem_fail_fired();
        cJSON_Delete(o);
        if (!fired) {
            CHECK(framed && b.len > len0);
            sse_buf_deinit(&b);
            break;
        }
        n_failed++;
        if (framed)
            TEST_FAILF("allocation %llu failed but every step succeeded", (unsigned long long)n);
        // Whatever got in is whole events: "before", then possibly the JSON event, never a part of one.
        size_t len;
        char *got = take_all(&b, SIZE_MAX, &len);
        if (len < len0 || memcmp(got, "data: before\n\n", len0) != 0 ||
            (len > len0 && (strncmp(got + len0, "data: {", 7) != 0 || memcmp(got + len - 2, "\n\n", 2) != 0 ||
                            memchr(got + len0, '\n', len - len0 - 2) != NULL)))
            TEST_FAILF("allocation %llu failing: the buffer holds %zu bytes: %.80s", (unsigned long long)n,
                       len, got);
        free(got);
        sse_buf_deinit(&b);
        if (ci_mem_in_use() != base) {
            TEST_FAILF("allocation %llu failing: %zu bytes leaked", (unsigned long long)n,
                       ci_mem_in_use() - base);
            return;
        }
    }
    CHECK(n_failed >= 10); // each cJSON node, string and the buffer's growth allocate
    CHECK(ci_mem_in_use() == base);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    openai_init(); // cJSON allocates through the counted allocator, as in the server
    RUN(event_framing);
    RUN(chunk_boundaries);
    RUN(large_events_and_long_streams);
    RUN(utf8_clean_table);
    RUN(json_strings);
    RUN(head_and_usage);
    RUN(choice_shapes);
    RUN(completion_logprobs);
    RUN(chat_logprobs);
    RUN(whole_stream);
    RUN(allocation_failures);
    return test_exit_code();
}
