/* grammar/: the GBNF parser (grammars written for these tests in the style of llama.cpp's examples, and its
 * errors), the matcher on strings it must accept or reject (ambiguity, recursion, repetition bounds, partial
 * UTF-8), and the token mask against a brute-force reference (every vocabulary token tried on the matcher)
 * on random states of several grammars with real vocabularies; token references (<[id]>, <text>, !<...>):
 * their parse errors, and over Phi-3's vocabulary their acceptance and masks against trying every token. */
#include "grammar/grammar.h" // first: the headers must compile on their own
#include "grammar/matcher.h"

#include <glob.h>

#include "core/clock.h"
#include "core/mem.h"
#include "core/rng.h"
#include "test_util.h"

#define CHECKF(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond))                                                                                         \
            TEST_FAILF(__VA_ARGS__);                                                                         \
    } while (0)

/* Grammars of the same kinds as llama.cpp's examples (written here, not copied). */
static const char *const G_JSON =
    "# JSON value\n"
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "     string \":\" ws value\n"
    "     (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* "
    "\"\\\"\" ws\n"
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15}) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,3})? ws\n"
    "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static const char *const G_ARITH = "root ::= (expr \"=\" ws term \"\\n\")+\n"
                                   "expr ::= term ([-+*/] term)*\n"
                                   "term ::= ident | num | \"(\" ws expr \")\" ws\n"
                                   "ident ::= [a-z] [a-z0-9_]* ws\n"
                                   "num ::= [0-9]+ ws\n"
                                   "ws ::= [ \\t\\n]*\n";

static const char *const G_LIST = "root ::= item+\n"
                                  "# no line breaks inside an item\n"
                                  "item ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n";

static const char *const G_CHESS =
    "root ::= \"1. \" move \" \" move \"\\n\" ([1-9] [0-9]? \". \" move \" \" move \"\\n\")+\n"
    "move ::= (pawn | nonpawn | castle) [+#]?\n"
    "nonpawn ::= [NBKQR] [a-h]? [1-8]? \"x\"? [a-h] [1-8]\n"
    "pawn ::= ([a-h] \"x\")? [a-h] [1-8] (\"=\" [NBKQR])?\n"
    "castle ::= \"O-O\" \"-O\"?\n";

static const char *const G_JAPANESE = "root ::= jp+ ([ \\t\\n] jp+)*\n"
                                      "jp ::= hiragana | katakana | punct | cjk\n"
                                      "hiragana ::= [ぁ-ゟ]\n"
                                      "katakana ::= [ァ-ヿ]\n"
                                      "punct ::= [、-〾]\n"
                                      "cjk ::= [\\u4e00-\\u9fff] | [\\U00020000-\\U0002A6DF]\n";

static const char *const G_CLIKE =
    "root ::= (decl)*\n"
    "decl ::= type ident \"(\" param? \")\" \"{\" stmt* \"}\" ws\n"
    "type ::= (\"int\" | \"float\" | \"char\") ws\n"
    "param ::= type ident\n"
    "stmt ::= ( type ident \"=\" ws expr \";\" | ident \"=\" ws expr \";\" | \"return\" ws expr \";\" |\n"
    "    \"while\" \"(\" cond \")\" \"{\" stmt* \"}\" ) ws\n"
    "cond ::= expr (\"==\" | \"!=\" | \"<\" | \">\") ws expr\n"
    "expr ::= term ((\"+\" | \"-\") ws term)*\n"
    "term ::= ident | [0-9]+ ws | \"(\" expr \")\" ws\n"
    "ident ::= [a-zA-Z_] [a-zA-Z_0-9]* ws\n"
    "ws ::= ([ \\t\\n]+)?\n";

static const char *const G_ENGLISH = "root ::= word+ ([ \\t\\n] word+)*\n"
                                     "word ::= [A-Za-z] | [0-9] | punct\n"
                                     "punct ::= [!\"#$%&'()*+,-./:;<=>?@[\\\\\\]^_`{|}~]\n";

static const char *const G_BALANCED = "root ::= p\np ::= \"(\" p \")\" p | \n"; // ambiguous-free recursion

static const char *const G_AMBIG = "root ::= a | b\na ::= \"x\"+ \"y\"\nb ::= \"x\"* \"xz\" | \"xx\" \"y\"\n";

static struct grammar *parse(const char *text) {
    struct ci_err err = {0};
    struct grammar *g = NULL;
    if (gram_parse_gbnf(text, strlen(text), &g, &err) != CI_OK)
        TEST_FAILF("parse failed: %s\n%s", err.msg, text);
    return g;
}

TEST(parse_examples) {
    const char *const gs[] = {G_JSON,  G_ARITH,   G_LIST,     G_CHESS, G_JAPANESE,
                              G_CLIKE, G_ENGLISH, G_BALANCED, G_AMBIG};
    for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++) {
        struct grammar *g = parse(gs[i]);
        CHECK(g && g->n_rules > 0);
        gram_free(g);
    }
}

/* llama.cpp's own example grammars, when its checkout happens to be on this machine (not required). */
TEST(parse_llamacpp_examples_if_present) {
    const char *home = getenv("HOME");
    char pat[1024];
    snprintf(pat, sizeof pat, "%s/.cache/cinfer/llama.cpp/grammars/*.gbnf", home ? home : "/nonexistent");
    glob_t gl;
    if (glob(pat, 0, NULL, &gl) != 0)
        return;
    for (size_t i = 0; i < gl.gl_pathc; i++) {
        FILE *f = fopen(gl.gl_pathv[i], "rb");
        CHECK(f != NULL);
        if (!f)
            continue;
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        struct ci_err err = {0};
        struct grammar *g = NULL;
        if (gram_parse_gbnf(buf, n, &g, &err) != CI_OK)
            TEST_FAILF("%s: %s", gl.gl_pathv[i], err.msg);
        gram_free(g);
    }
    globfree(&gl);
}

TEST(parse_errors) {
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"root ::= foo\n", "line 1, column 10: undefined rule 'foo'"},
        {"rot ::= \"a\"\n", "no rule named 'root'"},
        {"", "no rule named 'root'"},
        {"root ::= root \"a\" | \"b\"\n", "left-recursive: root -> root"},
        {"root ::= a\na ::= b \"x\"\nb ::= \"y\"? a\n", "left-recursive"},
        {"root ::= a \"z\"\na ::= (\"x\"?)* \"a\" | a \"b\"\n", "left-recursive: a -> a"},
        {"root ::= \"a\" root\n", "language is empty"},
        {"root ::= \"a\" | x\nx ::= \"b\" x\n", "rule 'x' can never be completed"},
        {"root ::= [^\\x00-\\U0010FFFF]\n", "language is empty"},
        {"root ::= \"abc\n", "line 1, column 10: unterminated string literal"},
        {"root ::= [abc\n", "unterminated character class"},
        {"root ::= (\"a\"\n", "unmatched '('"},
        {"root ::= \"a\")\n", "unmatched ')'"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "defined twice"},
        {"root := \"a\"\n", "line 1, column 6: expected '::='"},
        {"root ::= *\n", "nothing before it to repeat"},
        {"root ::= \"a\"{3,2}\n", "maximum is below the minimum"},
        {"root ::= \"a\"{99999}\n", "repetition count above"},
        {"root ::= \"a\"{2\n", "expected '}'"},
        {"root ::= \"\\q\"\n", "unknown escape"},
        {"root ::= \"\\xZZ\"\n", "hexadecimal"},
        {"root ::= \"\\uD800\"\n", "not a Unicode scalar value"},
        {"root ::= [z-a]\n", "ends (U+61) before it starts (U+7A)"},
        {"root ::= []\n", "matches nothing"},
        {"\n\n  root ::= \"a\" ~\n", "line 3, column 16: unexpected '~'"},
        {"root ::= \"\xff\"\n", "invalid UTF-8"},
        {"1 ::= 2\n", "undefined rule '2'"},
        {"root ::= \"a\" \"b\"{0,3000}\n", NULL}, // fine: large but within the limits
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct ci_err err = {0};
        struct grammar *g = NULL;
        enum ci_status s = gram_parse_gbnf(cases[i].text, strlen(cases[i].text), &g, &err);
        if (!cases[i].msg) {
            CHECKF(s == CI_OK, "%s: %s", cases[i].text, err.msg);
        } else {
            CHECKF(s != CI_OK && strstr(err.msg, cases[i].msg), "%s: want '%s', got '%s'", cases[i].text,
                   cases[i].msg, err.msg);
        }
        gram_free(g);
    }
    // Deep nesting and huge grammars are refused, not crashed on.
    static char deep[4096];
    size_t o = (size_t)snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 200; i++)
        deep[o++] = '(';
    deep[o++] = '"';
    deep[o++] = 'a';
    deep[o++] = '"';
    for (int i = 0; i < 200; i++)
        deep[o++] = ')';
    deep[o++] = '\n';
    struct ci_err err = {0};
    struct grammar *g = NULL;
    CHECK(gram_parse_gbnf(deep, o, &g, &err) != CI_OK && strstr(err.msg, "nested more than"));
    static char big[1024]; // a 400-character literal 10000 times: 4M elements
    o = (size_t)snprintf(big, sizeof big, "root ::= \"");
    for (int i = 0; i < 400; i++)
        big[o++] = (char)('a' + i % 26);
    o += (size_t)snprintf(big + o, sizeof big - o, "\"{10000}\n");
    CHECK(gram_parse_gbnf(big, o, &g, &err) != CI_OK && strstr(err.msg, "too large"));
    CHECK(gram_parse_gbnf("root ::= \"a\"", GRAM_MAX_TEXT + 1, &g, &err) == CI_ERR_LIMIT);
}

/* Compile time stays linear in the text: 30000 rules defined in the order that makes naive fixpoints and
 * position lookups quadratic (each rule refers to the next, defined after it, the last first). */
TEST(parse_is_linear) {
    enum { N = 30000 };
    size_t cap = (size_t)N * 40 + 64, o = 0;
    char *text = malloc(cap);
    ASSERT(text != NULL);
    o += (size_t)snprintf(text + o, cap - o, "r%d ::= \"z\"\n", N);
    for (int i = N - 1; i >= 0; i--)
        o += (size_t)snprintf(text + o, cap - o, "r%d ::= \"(\" r%d? \")\"\n", i, i + 1);
    o += (size_t)snprintf(text + o, cap - o, "root ::= r0\n");
    struct ci_err err = {0};
    struct grammar *g = NULL;
    int64_t t0 = ci_now_ns();
    CHECKF(gram_parse_gbnf(text, o, &g, &err) == CI_OK, "%s", err.msg);
    double ms = (double)(ci_now_ns() - t0) / 1e6;
    CHECKF(ms < 3000, "%.0f ms to compile %zu bytes", ms, o);
    printf("  %d rules, %zu bytes: compiled in %.1f ms\n", N + 2, o, ms);
    gram_free(g);
    free(text);
}

/* A tiny byte vocabulary, for matcher tests that need one: token i = the single byte i (1..255) */
/* 1: accepted and accepting; 0: rejected; 2: a valid prefix but not a whole sentence. */
static int judge(const struct grammar *g, const struct gram_vocab *v, const char *s, size_t n) {
    struct gram_matcher *m = NULL;
    struct ci_err err = {0};
    if (gram_matcher_create(g, v, &m, &err) != CI_OK) {
        TEST_FAILF("matcher: %s", err.msg);
        return -1;
    }
    int r = !gram_matcher_accept_bytes(m, s, n) ? 0 : gram_matcher_is_accepting(m) ? 1 : 2;
    gram_matcher_free(m);
    return r;
}

TEST(matcher_strings) {
    struct gram_vocab *v = test_byte_vocab();
    static const struct {
        const char *const *g;
        const char *s;
        int want;
    } cases[] = {
        {&G_JSON, "{}", 1},
        {&G_JSON, "{\"a\": [1, 2.5e3, -0, true, null, \"x\\u00e9\\n\"], \"b\": {}}", 1},
        {&G_JSON, "{\"a\": 01}", 0},
        {&G_JSON, "{\"a\": 1,}", 0},
        {&G_JSON, "{\"a\": \"\x01\"}", 0},
        {&G_JSON, "{\"a\": \"é😀\"}", 1},
        {&G_JSON, "{\"a\": [1, 2", 2},
        {&G_JSON, "{\"a\": \"\\u12G4\"}", 0},
        {&G_JSON, "{}\n\t\t", 1},
        {&G_ARITH, "x = 1\ny+2*(3-z)=4\n", 1},
        {&G_ARITH, "x = 1", 2},
        {&G_ARITH, "x == 1\n", 0},
        {&G_LIST, "- one\n- two\n", 1},
        {&G_LIST,
         "- on\xe2\x80\xa8"
         "e\n",
         0}, // U+2028 excluded
        {&G_LIST, "- \n", 0},
        {&G_CHESS, "1. e4 e5\n2. Nf3 Nc6\n", 1},
        {&G_CHESS, "1. e4 e5\n2. O-O-O Qxd8+\n", 1},
        {&G_CHESS, "1. e9 e5\n", 0},
        {&G_JAPANESE, "こんにちは 世界", 1},
        {&G_JAPANESE, "こんにちは world", 0},
        {&G_JAPANESE, "\xf0\xa0\x80\x80", 1}, // U+20000
        {&G_CLIKE, "int main(){return 0;}", 1},
        {&G_CLIKE, "int f(int x){while(x<3){x=x+1;}return x;}\n", 1},
        {&G_CLIKE, "int f(){return;}", 0},
        {&G_ENGLISH, "Hello, world! [x]\\y", 1},
        {&G_BALANCED, "(()())()", 1},
        {&G_BALANCED, "(()", 2},
        {&G_BALANCED, "())", 0},
        {&G_BALANCED, "", 1},
        {&G_AMBIG, "xxxxy", 1},
        {&G_AMBIG, "xxxz", 1},
        {&G_AMBIG, "xxz", 1},
        {&G_AMBIG, "xz", 1},
        {&G_AMBIG, "z", 0},
        {&G_AMBIG, "xxx", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct grammar *g = parse(*cases[i].g);
        if (!g)
            continue;
        int r = judge(g, v, cases[i].s, strlen(cases[i].s));
        CHECKF(r == cases[i].want, "case %zu '%s': got %d want %d", i, cases[i].s, r, cases[i].want);
        gram_free(g);
    }
    gram_vocab_free(v);
}

TEST(matcher_repetition_bounds) {
    struct gram_vocab *v = test_byte_vocab();
    struct grammar *g = parse("root ::= \"a\"{2,4} \"b\"{3} \"c\"{1,} \"d\"{0,2}\n");
    static const struct {
        const char *s;
        int want;
    } cases[] = {{"aabbbc", 1}, {"aaaabbbccccdd", 1}, {"abbbc", 0}, {"aaaaabbbc", 0}, {"aabbc", 0},
                 {"aabbbb", 0}, {"aabbbcddd", 0},     {"aabbb", 2}, {"aabbbcd", 1}};
    for (size_t i = 0; g && i < sizeof cases / sizeof cases[0]; i++)
        CHECKF(judge(g, v, cases[i].s, strlen(cases[i].s)) == cases[i].want, "'%s'", cases[i].s);
    gram_free(g);
    gram_vocab_free(v);
}

/* A repeated empty item, first in its rule (found by fuzz_gbnf: the copy read from a still-empty buffer), and
 * repetitions of nullable items (tail-call cycles through nullable rules: accepted, as llama.cpp does). */
TEST(repetition_of_an_empty_item) {
    struct gram_vocab *v = test_byte_vocab();
    static const char *const texts[] = {
        "root ::= \"\"{4} \"x\"\n",   "root ::= (){2,3} \"x\"\n",
        "root ::= \"\"* \"x\"\n",     "root ::= ( [y]* )* \"x\"\n",
        "root ::= (\"y\"?)* \"x\"\n", "root ::= (a | \"y\")* \"x\"\na ::= b\nb ::= a | \"\"\n"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        struct grammar *g = parse(texts[i]);
        CHECKF(g != NULL, "%s", texts[i]);
        if (g) {
            CHECKF(judge(g, v, "x", 1) == 1, "%s accepts x", texts[i]);
            CHECKF(judge(g, v, "xx", 2) == 0, "%s refuses xx", texts[i]);
            if (i >= 3) { // nullable items under a star: any number of y, then x
                CHECKF(judge(g, v, "yyyx", 4) == 1, "%s accepts yyyx", texts[i]);
                CHECKF(judge(g, v, "yy", 2) == 2, "%s: yy is a prefix", texts[i]);
                CHECKF(judge(g, v, "yxy", 3) == 0, "%s refuses yxy", texts[i]);
            }
        }
        gram_free(g);
    }
    gram_vocab_free(v);
}

/* A token may end in the middle of a character: the rest comes with the next token. */
TEST(matcher_partial_utf8) {
    struct gram_vocab *v = test_byte_vocab();
    struct grammar *g = parse("root ::= \"é\" [\\u4e00-\\u4e01] \"😀\" | \"x\"\n");
    struct gram_matcher *m = NULL;
    struct ci_err err = {0};
    CHECK(g && gram_matcher_create(g, v, &m, &err) == CI_OK);
    if (!m) {
        gram_free(g);
        gram_vocab_free(v);
        return;
    }
    CHECK(gram_matcher_accept_bytes(m, "\xc3", 1)); // first byte of é
    CHECK(!gram_matcher_is_accepting(m));
    CHECK(!gram_matcher_try_bytes(m, "\xa8", 1)); // è: wrong
    CHECK(!gram_matcher_try_bytes(m, "x", 1));
    CHECK(gram_matcher_accept_bytes(m, "\xa9\xe4", 2)); // rest of é, start of U+4E00
    CHECK(!gram_matcher_try_bytes(m, "\xb9", 1));       // U+4E40.. is outside
    CHECK(gram_matcher_accept_bytes(m, "\xb8", 1));
    CHECK(!gram_matcher_try_bytes(m, "\x82", 1)); // U+4E02: outside
    CHECK(gram_matcher_accept_bytes(m, "\x81\xf0\x9f", 3));
    CHECK(!gram_matcher_try_bytes(m, "\x98\x81", 2)); // 😁
    CHECK(gram_matcher_accept_bytes(m, "\x98\x80", 2));
    CHECK(gram_matcher_is_accepting(m) && gram_matcher_is_done(m));
    gram_matcher_free(m);
    // Malformed UTF-8 never matches, not even through a negated class.
    struct grammar *any = parse("root ::= [^a]*\n");
    CHECK(any && judge(any, v, "\xc0\xaf", 2) == 0);         // overlong
    CHECK(any && judge(any, v, "\xed\xa0\x80", 3) == 0);     // surrogate
    CHECK(any && judge(any, v, "\xf4\x90\x80\x80", 4) == 0); // past U+10FFFF
    CHECK(any && judge(any, v, "\x80", 1) == 0);
    CHECK(any && judge(any, v, "\xe2\x82", 2) == 2);
    CHECK(any && judge(any, v, "b\xe2\x82\xac", 4) == 1);
    gram_free(any);
    gram_free(g);
    gram_vocab_free(v);
}

TEST(matcher_eog_and_done) {
    struct gram_vocab *v = test_byte_vocab();
    struct grammar *g = parse("root ::= \"ab\" \"c\"?\n");
    struct gram_matcher *m = NULL;
    struct ci_err err = {0};
    CHECK(g && gram_matcher_create(g, v, &m, &err) == CI_OK);
    if (m) {
        uint32_t bits[9];
        CHECK(!gram_matcher_accept_token(m, 256)); // EOS before the sentence is whole
        CHECK(gram_matcher_mask(m, bits, &err) == CI_OK);
        CHECK(bits['a' / 32] == 1u << ('a' % 32) && !(bits[8] & 1));
        CHECK(gram_matcher_accept_token(m, 'a') && gram_matcher_accept_token(m, 'b'));
        CHECK(gram_matcher_is_accepting(m) && !gram_matcher_is_done(m));
        CHECK(gram_matcher_mask(m, bits, &err) == CI_OK);
        CHECK((bits[8] & 1) && (bits['c' / 32] & (1u << ('c' % 32))));
        CHECK(gram_matcher_accept_token(m, 'c') && gram_matcher_is_done(m));
        CHECK(gram_matcher_accept_token(m, 256) && !gram_matcher_accept_token(m, 'c'));
        gram_matcher_free(m);
    }
    gram_free(g);
    gram_vocab_free(v);
}

/* Matchers in one space share stack nodes and cached masks: a state one matcher met is a cache hit for
 * another, with the same mask; their states stay their own. */
TEST(space_shared_between_matchers) {
    struct gram_vocab *v = test_byte_vocab();
    struct grammar *g = parse(G_JSON);
    struct gram_space *sp = NULL;
    struct gram_matcher *a = NULL, *b = NULL;
    struct ci_err err = {0};
    if (!g || gram_space_create(g, v, &sp, &err) != CI_OK || gram_matcher_create_in(sp, &a, &err) != CI_OK ||
        gram_matcher_create_in(sp, &b, &err) != CI_OK) {
        TEST_FAILF("setup: %s", err.msg);
    } else {
        uint32_t ma[9], mb[9];
        struct gram_matcher_stats s0, s1;
        CHECK(gram_matcher_accept_bytes(a, "{\"k\": [1", 8));
        CHECK(gram_matcher_mask(a, ma, &err) == CI_OK);
        CHECK(gram_matcher_accept_bytes(b, "{", 1) && gram_matcher_accept_bytes(b, "\"k\": [1", 7));
        gram_matcher_stats(b, &s0);
        CHECK(gram_matcher_mask(b, mb, &err) == CI_OK);
        gram_matcher_stats(b, &s1);
        CHECK(s1.cache_hits == s0.cache_hits + 1 && memcmp(ma, mb, sizeof ma) == 0);
        CHECK(gram_matcher_accept_bytes(a, "]}", 2) && gram_matcher_is_accepting(a) &&
              !gram_matcher_is_accepting(b));
        CHECK(!gram_matcher_try_bytes(b, "}", 1) && gram_matcher_try_bytes(b, "]", 1));
    }
    gram_matcher_free(a);
    gram_matcher_free(b);
    gram_space_free(sp);
    gram_free(g);
    gram_vocab_free(v);
}

/* The vocabulary of a real tokenizer as the engine builds it: decoded bytes, control tokens excluded. */
static struct gram_vocab *tok_vocab(struct tokenizer *t) {
    int n = tokenizer_n_vocab(t);
    const char **ptrs = calloc((size_t)n, sizeof *ptrs);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    for (int i = 0; i < n; i++) {
        size_t l;
        ptrs[i] = tokenizer_token_bytes(t, i, false, &l);
        lens[i] = (uint32_t)l;
    }
    int n_eog;
    const int32_t *eog = tokenizer_eog_ids(t, &n_eog);
    struct gram_vocab *v = NULL;
    struct ci_err err = {0};
    if (gram_vocab_create(n, ptrs, lens, eog, n_eog, &v, &err) != CI_OK)
        TEST_FAILF("vocab: %s", err.msg);
    free(ptrs);
    free(lens);
    return v;
}

/* Random walks: at each state the mask equals trying every token; then a random allowed token is taken.
 * table: masks from the per-position token table (token_cache.h), else by the trie walk alone. */
static void mask_vs_brute(struct tokenizer *t, struct gram_vocab *v, const char *text, uint64_t seed,
                          int steps, int min_states, const char *what, bool table, uint64_t limit,
                          struct gram_matcher_stats *out) {
    struct grammar *g = parse(text);
    if (!g)
        return;
    int n = tokenizer_n_vocab(t);
    size_t words = ((size_t)n + 31) / 32;
    uint32_t *bits = calloc(words, sizeof *bits), *ref = calloc(words, sizeof *ref);
    int32_t *allowed = calloc((size_t)n, sizeof *allowed);
    struct ci_rng rng;
    ci_rng_seed(&rng, seed);
    struct gram_matcher *m = NULL;
    struct gram_space *sp = NULL;
    struct ci_err err = {0};
    CHECK(gram_space_create(g, v, &sp, &err) == CI_OK);
    if (sp) {
        gram_space_use_table(sp, table);
        if (limit)
            gram_space_table_limit(sp, limit);
        CHECK(gram_matcher_create_in(sp, &m, &err) == CI_OK);
    }
    int compared = 0, total_allowed = 0;
    double mask_ns = 0;
    for (int step = 0; m && step < steps; step++) {
        int64_t t0 = ci_now_ns();
        CHECK(gram_matcher_mask(m, bits, &err) == CI_OK);
        mask_ns += (double)(ci_now_ns() - t0);
        memset(ref, 0, words * sizeof *ref);
        int na = 0;
        for (int32_t id = 0; id < n; id++) {
            size_t l;
            const char *b = tokenizer_token_bytes(t, id, false, &l);
            bool ok = tokenizer_is_eog(t, id) ? gram_matcher_is_accepting(m)
                                              : (l > 0 && gram_matcher_try_bytes(m, b, l));
            if (ok) {
                ref[id >> 5] |= 1u << (id & 31);
                allowed[na++] = id;
            }
        }
        int diff = 0;
        for (size_t w = 0; w < words; w++)
            diff += __builtin_popcount(bits[w] ^ ref[w]);
        CHECKF(diff == 0, "%s step %d: %d tokens differ from the brute-force mask", what, step, diff);
        compared++;
        total_allowed += na;
        // Take a random allowed non-end token (end tokens only when nothing else is allowed).
        int32_t pick = -1;
        int non_eog = 0;
        for (int k = 0; k < na; k++)
            non_eog += !tokenizer_is_eog(t, allowed[k]);
        if (non_eog == 0)
            break;
        uint32_t r = (uint32_t)(ci_rng_u64(&rng) % (uint64_t)non_eog);
        for (int k = 0; k < na; k++)
            if (!tokenizer_is_eog(t, allowed[k]) && r-- == 0) {
                pick = allowed[k];
                break;
            }
        CHECK(gram_matcher_accept_token(m, pick));
        // Re-asking for the same state's mask comes from the cache and is the same.
        if (step == 3) {
            uint32_t *again = calloc(words, sizeof *again);
            struct gram_matcher_stats st0, st1;
            gram_matcher_stats(m, &st0);
            CHECK(gram_matcher_mask(m, bits, &err) == CI_OK && gram_matcher_mask(m, again, &err) == CI_OK);
            gram_matcher_stats(m, &st1);
            CHECK(memcmp(bits, again, words * sizeof *bits) == 0 && st1.cache_hits >= st0.cache_hits + 1);
            free(again);
        }
    }
    CHECKF(compared >= min_states, "%s: only %d states compared", what, compared);
    struct gram_matcher_stats gs = {0};
    if (m)
        gram_matcher_stats(m, &gs);
    // The table was used (or not) as asked: every mask without a partial character came from it.
    if (table && limit) // past the bound: some masks fell back to the walk
        CHECKF(gs.table_unavailable > 0 && gs.table_masks > 0,
               "%s: the table's %llu-byte bound never reached", what, (unsigned long long)limit);
    else if (table)
        CHECKF(gs.table_masks > 0 && gs.table_unavailable == 0,
               "%s: %llu masks from the table, %u positions "
               "unavailable",
               what, (unsigned long long)gs.table_masks, gs.table_unavailable);
    else
        CHECKF(gs.table_masks == 0, "%s: the table was used while off", what);
    printf(
        "  %s (%s): %d states, %.1f allowed tokens per state on average, %.0f us per mask, %u stack nodes, "
        "%u table entries (%u patched, %u shared; %.1f KiB, %.1f ms, %llu dependent tokens), %llu trie nodes "
        "visited\n",
        what, table ? "table" : "walk", compared, compared ? (double)total_allowed / compared : 0.0,
        compared ? mask_ns / compared / 1e3 : 0.0, gs.n_nodes, gs.table_positions, gs.table_patched,
        gs.table_shared, (double)gs.table_bytes / 1024, (double)gs.table_ns / 1e6,
        (unsigned long long)gs.table_dep_tokens, (unsigned long long)gs.nodes_visited);
    if (out)
        *out = gs;
    gram_matcher_free(m);
    gram_space_free(sp);
    free(bits);
    free(ref);
    free(allowed);
    gram_free(g);
}

TEST(mask_matches_brute_force) {
    static const char *const vocabs[] = {"ggml-vocab/ggml-vocab-gpt-2.gguf",
                                         "ggml-vocab/ggml-vocab-llama-spm.gguf",
                                         "ggml-vocab/ggml-vocab-starcoder.gguf"};
    for (size_t k = 0; k < sizeof vocabs / sizeof vocabs[0]; k++) {
        struct tokenizer *t = test_load_tokenizer(vocabs[k]);
        if (!t)
            continue;
        struct gram_vocab *v = tok_vocab(t);
        for (int table = 1; v && table >= 0; table--) { // the same walks (seeds) with the table and without
            mask_vs_brute(t, v, G_JSON, 1 + k, 25, 5, "json", table, 0, NULL);
            mask_vs_brute(t, v, G_ARITH, 2 + k, 20, 5, "arithmetic", table, 0, NULL);
            mask_vs_brute(t, v, G_JAPANESE, 3 + k, 15, 5, "japanese", table, 0, NULL);
            mask_vs_brute(t, v, G_CHESS, 4 + k, 20, 5, "chess", table, 0, NULL);
            mask_vs_brute(t, v, G_CLIKE, 5 + k, 20, 5, "c-like", table, 0, NULL);
            mask_vs_brute(t, v, "root ::= \"é\" | \"😀😀\" | [^a-z]{2}\n", 6 + k, 6, 2, "utf8", table, 0, NULL);
        }
        // A table bounded to a few entries: the masks past it come from the walk, still equal.
        if (v)
            mask_vs_brute(t, v, G_JSON, 1 + k, 25, 5, "json, table bounded to 2 KiB", true, 2048, NULL);
        gram_vocab_free(v);
        tokenizer_free(t);
    }
}

/* Token references' parse errors, against a 10-token vocabulary whose only text token is "<x>" (id 3). */
static int32_t ten_tokens(const void *ctx, const char *text, size_t len) {
    (void)ctx;
    return len == 3 && !memcmp(text, "<x>", 3) ? 3 : -1;
}

TEST(token_reference_errors) {
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"root ::= <[10]>\n", "line 1, column 12: token id out of range: the vocabulary has 10 tokens"},
        {"root ::= <[]>\n", "expected a token id"},
        {"root ::= <[1x]>\n", "expected ']>'"},
        {"root ::= <[1]\n", "expected ']>'"},
        {"root ::= <abc\n", "unterminated token reference"},
        {"root ::= <y>\n", "'<y>' is not a single token of the model's vocabulary"},
        {"root ::= !x\n", "expected '<' after '!'"},
        {"root ::= <[1]> <x> !<[9]> !<x>\n", NULL},
        {"root ::= (<[1]> | \"a\")+ !<x>{2,3}\n", NULL},
    };
    const struct gram_tokens tk = {10, ten_tokens, NULL};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct ci_err err = {0};
        struct grammar *g = NULL;
        enum ci_status s = gram_parse_gbnf_tokens(cases[i].text, strlen(cases[i].text), &tk, &g, &err);
        if (cases[i].msg)
            CHECKF(s == CI_ERR_INVALID && strstr(err.msg, cases[i].msg), "%s: got '%s'", cases[i].text,
                   err.msg);
        else
            CHECKF(s == CI_OK, "%s: %s", cases[i].text, err.msg);
        gram_free(g);
    }
    // Without a vocabulary (gram_parse_gbnf), and by text without a tokenizer, a clear refusal.
    struct ci_err err = {0};
    struct grammar *g = NULL;
    CHECK(gram_parse_gbnf("root ::= <[1]>\n", 15, &g, &err) == CI_ERR_INVALID &&
          strstr(err.msg, "needs the model's vocabulary"));
    CHECK(gram_parse_gbnf_tokens("root ::= <x>\n", 13, &(struct gram_tokens){10, NULL, NULL}, &g, &err) ==
              CI_ERR_INVALID &&
          strstr(err.msg, "needs the model's tokenizer"));
}

/* A token reference by text, as the engine resolves it. */
static int32_t by_tokenizer(const void *ctx, const char *text, size_t len) {
    return tokenizer_single_token(ctx, text, len);
}

/* Grammars with token references over a real vocabulary (Phi-3's, whose <|user|> and <|assistant|> are
 * control tokens with no text): random walks where, at every state, the mask equals trying every token on
 * a copy of the matcher (gram_matcher_accept_token), with the table and without. */
static void token_mask_walks(struct tokenizer *t, struct gram_vocab *v, const char *text, uint64_t seed,
                             bool table, int *states) {
    struct ci_err err = {0};
    struct grammar *g = NULL;
    const struct gram_tokens tk = {tokenizer_n_vocab(t), by_tokenizer, t};
    if (gram_parse_gbnf_tokens(text, strlen(text), &tk, &g, &err) != CI_OK) {
        TEST_FAILF("%s: %s", text, err.msg);
        return;
    }
    int n = tokenizer_n_vocab(t);
    size_t words = ((size_t)n + 31) / 32;
    uint32_t *bits = calloc(words, sizeof *bits);
    int32_t *allowed = calloc((size_t)n, sizeof *allowed);
    struct ci_rng rng;
    ci_rng_seed(&rng, seed);
    struct gram_space *sp = NULL;
    struct gram_matcher *m = NULL;
    CHECK(gram_space_create(g, v, &sp, &err) == CI_OK);
    if (sp) {
        gram_space_use_table(sp, table);
        CHECK(gram_matcher_create_in(sp, &m, &err) == CI_OK);
    }
    for (int step = 0; m && step < 12; step++) {
        CHECK(gram_matcher_mask(m, bits, &err) == CI_OK);
        int diff = 0, na = 0;
        for (int32_t id = 0; id < n; id++) {
            struct gram_matcher *c = NULL;
            CHECK(gram_matcher_clone(m, &c, &err) == CI_OK);
            bool ok = c && gram_matcher_accept_token(c, id);
            gram_matcher_free(c);
            diff += ok != (bool)((bits[id >> 5] >> (id & 31)) & 1u);
            if (ok && !tokenizer_is_eog(t, id))
                allowed[na++] = id;
        }
        CHECKF(diff == 0, "%s step %d: %d tokens differ from trying each", text, step, diff);
        (*states)++;
        if (na == 0)
            break;
        CHECK(gram_matcher_accept_token(m, allowed[ci_rng_u64(&rng) % (uint64_t)na]));
    }
    gram_matcher_free(m);
    gram_space_free(sp);
    free(bits);
    free(allowed);
    gram_free(g);
}

TEST(token_references) {
    struct tokenizer *t = test_load_tokenizer("ggml-vocab/ggml-vocab-phi-3.gguf");
    if (!t)
        return;
    struct gram_vocab *v = tok_vocab(t);
    int32_t user = by_tokenizer(t, "<|user|>", 8), assistant = by_tokenizer(t, "<|assistant|>", 13);
    CHECKF(user >= 0 && assistant >= 0 && tokenizer_is_control(t, user) && !tokenizer_is_eog(t, user),
           "<|user|> %d, <|assistant|> %d", user, assistant);
    // Accepting: a control token only by reference; text may not spell it; !<...> takes any other token.
    const char *g1 = "root ::= <|user|> [a-z ]+ <|assistant|> (!<|user|>)* <|user|> \"ok\"\n";
    struct ci_err err = {0};
    struct grammar *g = NULL;
    const struct gram_tokens tk = {tokenizer_n_vocab(t), by_tokenizer, t};
    CHECK(gram_parse_gbnf_tokens(g1, strlen(g1), &tk, &g, &err) == CI_OK);
    struct gram_matcher *m = NULL;
    if (g && gram_matcher_create(g, v, &m, &err) == CI_OK) {
        CHECK(!gram_matcher_accept_bytes(m, "<|user|>", 8)); // the text is not the token
        CHECK(!gram_matcher_accept_token(m, assistant));
        CHECK(gram_matcher_accept_token(m, user) && gram_matcher_accept_bytes(m, "hi there", 8));
        CHECK(gram_matcher_accept_token(m, assistant));
        CHECK(gram_matcher_accept_token(m, assistant)); // any token but <|user|>, control tokens too
        int32_t *ids = NULL;
        int nids = 0;
        CHECK(tokenizer_encode(t, "free text, {any} <|end|>", 24, false, true, &ids, &nids, &err) == CI_OK);
        for (int i = 0; i < nids; i++)
            if (!tokenizer_is_eog(t, ids[i]))
                CHECKF(gram_matcher_accept_token(m, ids[i]), "token %d of the free text", ids[i]);
        ci_free(ids);
        CHECK(!gram_matcher_is_accepting(m) && gram_matcher_accept_token(m, user));
        CHECK(gram_matcher_accept_bytes(m, "ok", 2) && gram_matcher_is_accepting(m));
    }
    gram_matcher_free(m);
    gram_free(g);
    // Masks against trying every token (32,064), text and token references mixed.
    int states = 0;
    for (int table = 1; v && table >= 0; table--) {
        token_mask_walks(t, v, g1, 11, table, &states);
        token_mask_walks(t, v, "root ::= (<|assistant|> | \"a\" | \"ab\") (!<[29871]> | \"é\")+ <|user|>?\n",
                         12, table, &states);
        token_mask_walks(t, v, "root ::= ([0-9] | <|user|>){1,4} !<|user|> \"x\"\n", 13, table, &states);
    }
    CHECKF(states >= 40, "only %d states compared", states);
    gram_vocab_free(v);
    tokenizer_free(t);
}

/* Bounded repetitions (token_cache.c): the entries of x{0,n}'s positions come from its deepest rule's, as is
 * (no token long enough to tell them apart: Phi-3's longest is 27 bytes) or patched for the long tokens
 * (StarCoder's run to 256 bytes: a 40-space token fits in 60 characters but not in the last 10).  Walks of
 * strings long enough to reach the end of their budget, against the brute force at every state, with the
 * table and without. */
TEST(bounded_repetition_entries) {
    static const struct {
        const char *vocab;
        bool patched; // else shared
    } vocabs[] = {{"ggml-vocab/ggml-vocab-starcoder.gguf", true},
                  {"ggml-vocab/ggml-vocab-phi-3.gguf", false}};
    const char *g = "root ::= \"\\\"\" [^\"]{0,60} \"\\\"\" ( [ a-z]{2,40} | \"x\" )\n";
    for (size_t k = 0; k < sizeof vocabs / sizeof vocabs[0]; k++) {
        struct tokenizer *t = test_load_tokenizer(vocabs[k].vocab);
        if (!t)
            continue;
        struct gram_vocab *v = tok_vocab(t);
        uint32_t reused = 0;
        for (uint64_t seed = 1; v && seed <= 3; seed++) {
            struct gram_matcher_stats st = {0};
            mask_vs_brute(t, v, g, 40 + seed, 40, 10, "bounded repetitions", true, 0, &st);
            reused += vocabs[k].patched ? st.table_patched : st.table_shared;
            mask_vs_brute(t, v, g, 40 + seed, 40, 10, "bounded repetitions", false, 0, NULL);
        }
        CHECKF(reused > 0, "%s: no position's entry %s", vocabs[k].vocab,
               vocabs[k].patched ? "patched" : "shared");
        gram_vocab_free(v);
        tokenizer_free(t);
    }
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(parse_examples);
    RUN(parse_llamacpp_examples_if_present);
    RUN(parse_errors);
    RUN(parse_is_linear);
    RUN(matcher_strings);
    RUN(matcher_repetition_bounds);
    RUN(repetition_of_an_empty_item);
    RUN(matcher_partial_utf8);
    RUN(matcher_eog_and_done);
    RUN(space_shared_between_matchers);
    RUN(mask_matches_brute_force);
    RUN(bounded_repetition_entries);
    RUN(token_reference_errors);
    RUN(token_references);
    return test_exit_code();
}
