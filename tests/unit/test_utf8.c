/* core/utf8: the strict decoder against the Unicode standard's own examples (§3.9, Table 3-8: how many
 * U+FFFD a malformed sequence becomes under the maximal-subpart practice), and the lenient decoder against
 * llama.cpp's documented behaviour (one U+FFFD per malformed byte, overlong forms decoded). */
#include "core/utf8.h" // first: the header must compile on its own

#include <string.h>

#include "test.h"

/* Replaces malformed subparts of s with '?' (one per subpart) and keeps valid characters, so an expected
 * result can be written as a plain string. */
static void strict_render(const char *s, size_t n, char *out) {
    size_t i = 0, o = 0, bad;
    bool partial;
    while (i < n) {
        int len = utf8_next_strict((const unsigned char *)s + i, n - i, &bad, &partial);
        if (len > 0) {
            memcpy(out + o, s + i, (size_t)len);
            o += (size_t)len;
            i += (size_t)len;
        } else {
            out[o++] = '?';
            i += bad;
        }
    }
    out[o] = '\0';
}

TEST(strict_table_3_8) {
    static const struct {
        const char *in, *want;
    } cases[] = {
        // Unicode 15.0, Table 3-8 (U+FFFD for non-shortest forms, surrogates, too large, truncation):
        // "61 F1 80 80 E1 80 C2 62 80 63 80 BF 64" -> a ? ? ? b ? c ? ? d
        {"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", "a???b?c??d"},
        {"\xC0\xAF", "??"},               // overlong '/': C0 is never a lead
        {"\xE0\x80\xAF", "???"},          // overlong: E0 needs A0..BF next
        {"\xED\xA0\x80", "???"},          // a surrogate: ED needs 80..9F next
        {"\xF4\x90\x80\x80", "????"},     // past U+10FFFF: F4 needs 80..8F next
        {"\xF5\x80", "??"},               // F5 is never a lead
        {"\xE2\x82", "?"},                // truncated at the end: one subpart
        {"\xE2\x82\xAC", "\xE2\x82\xAC"}, // the euro sign
        {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},
        {"\xEF\xBF\xBD", "\xEF\xBF\xBD"},
        {"\x7F\xC2\x80", "\x7F\xC2\x80"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[64];
        strict_render(cases[i].in, strlen(cases[i].in), out);
        if (strcmp(out, cases[i].want) != 0)
            TEST_FAILF("case %zu: got '%s', want '%s'", i, out, cases[i].want);
        CHECK(utf8_valid_strict((const unsigned char *)cases[i].in, strlen(cases[i].in)) ==
              (strchr(cases[i].want, '?') == NULL));
    }
}

TEST(strict_partial_only_at_the_end) {
    size_t bad;
    bool partial;
    CHECK(utf8_next_strict((const unsigned char *)"\xF0\x9F\x98", 3, &bad, &partial) == 0 && partial &&
          bad == 3);
    CHECK(utf8_next_strict((const unsigned char *)"\xF0\x9F\x98x", 4, &bad, &partial) == 0 && !partial &&
          bad == 3);
    CHECK(utf8_next_strict((const unsigned char *)"\xE0\x80", 2, &bad, &partial) == 0 && !partial &&
          bad == 1);
}

TEST(lenient_as_llama_cpp) {
    static const struct {
        const char *in;
        uint32_t cp[8];
        int n;
    } cases[] = {
        {"a\xE2\x82\xAC", {0x61, 0x20AC}, 2},
        {"\xC0\xAF", {0x2F}, 1},                  // llama.cpp decodes the overlong form
        {"\x80x", {0xFFFD, 0x78}, 2},             // a stray continuation byte: one U+FFFD
        {"\xE2\x82x", {0xFFFD, 0xFFFD, 0x78}, 3}, // truncated: one U+FFFD per byte
        {"\xED\xA0\x80", {0xFFFD}, 1},            // a surrogate is consumed whole, as U+FFFD
        {"\xF8\x88\x80\x80\x80", {0xFFFD, 0xFFFD, 0xFFFD, 0xFFFD, 0xFFFD}, 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const unsigned char *s = (const unsigned char *)cases[i].in;
        size_t n = strlen(cases[i].in), off = 0;
        int k = 0;
        while (off < n && k < 8) {
            uint32_t cp = utf8_decode_lenient(s, n, &off);
            if (k >= cases[i].n || cp != cases[i].cp[k])
                TEST_FAILF("case %zu, code point %d: U+%04X", i, k, cp);
            k++;
        }
        CHECK(k == cases[i].n);
    }
    CHECK(utf8_lead_len(0x80) == 1 && utf8_lead_len(0xC3) == 2 && utf8_lead_len(0xE2) == 3 &&
          utf8_lead_len(0xF0) == 4);
}

TEST(encode_round_trip) {
    uint32_t cps[] = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF};
    for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++) {
        char b[4];
        int n = utf8_encode(cps[i], b);
        size_t off = 0, bad;
        bool partial;
        CHECK(utf8_decode_lenient((const unsigned char *)b, (size_t)n, &off) == cps[i] && off == (size_t)n);
        CHECK(utf8_next_strict((const unsigned char *)b, (size_t)n, &bad, &partial) == n);
    }
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(strict_table_3_8);
    RUN(strict_partial_only_at_the_end);
    RUN(lenient_as_llama_cpp);
    RUN(encode_round_trip);
    return test_exit_code();
}
