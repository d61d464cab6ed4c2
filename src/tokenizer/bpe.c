/* Byte-level BPE encoder (see bpe.h).  The regex lists are llama.cpp's (src/llama-vocab.cpp, per pre-type
 * regex_exprs); llama.cpp runs them with std::regex over a "collapsed" text (one byte per Unicode category)
 * or with hand-written splitters for the GPT-2 and Llama 3 patterns, and PCRE2 with UTF+UCP gives the same
 * splits on real Unicode text, so one code path serves every pre-tokenizer.  Two PCRE2 options keep
 * ECMAScript semantics: DOLLAR_ENDONLY ("\s+$" must not match before a final newline) and matching inside
 * each piece only (a lookahead never sees past the piece, as with llama.cpp's regex_iterator per piece). */
#include "tokenizer/bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/utf8.h"
#include "tokenizer/vocab.h"

// The GPT-2 regex, used alone or as one stage by many pre-tokenizers.
#define RE_GPT2         "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
// Llama 3 (tokenizer.json's "(?i:'s|...)" written with explicit case classes, as llama.cpp does).
#define RE_LLAMA3                                                                                            \
    RE_CONTRACTIONS                                                                                          \
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"                \
    "|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                             \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"     \
                    "|\\s+(?!\\S)|\\s+"
// Qwen3.5: Qwen2's with combining marks (\p{M}) kept with the letters before them.
#define RE_QWEN35                                                                                            \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*"     \
                    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
// Jais 2: Llama 3's with runs of whitespace cut into 512, 256, ..., 4, 1-2 and 1 (tokenizer.json's cascade).
#define RE_JAIS2                                                                                             \
    RE_CONTRACTIONS                                                                                          \
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"                \
    "|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)"          \
    "|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"
#define RE_PORO " ?[^(\\s|.,!?…。，、।۔،)]+"
#define RE_CJK  "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+" // [一-龥ࠀ-一가-퟿]+
/* DeepSeek LLM letters: the cased letters of its tokenizer.json, as code points (the literal characters
 * include Unicode singletons such as U+1F7D and U+212A that text tools silently normalise). */
#define RE_DEEPSEEK_LLM_LETTERS                                                                              \
    "\\s?[\\x{41}-\\x{5A}\\x{61}-\\x{7A}\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}"               \
    "\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}-\\x{377}\\x{37B}-"         \
    "\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-"           \
    "\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-"             \
    "\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-"        \
    "\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-"        \
    "\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}"          \
    "\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-"        \
    "\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"          \
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}"          \
    "\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}-\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-"        \
    "\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}-\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-"        \
    "\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-"        \
    "\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"              \
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-"        \
    "\\x{1E943}]+"
#define RE_TEKKEN                                                                                            \
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"                                   \
    "|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"                                  \
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O                                                                                             \
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" RE_CONTRACTIONS "?"               \
    "|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" RE_CONTRACTIONS "?"              \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_BAILINGMOE                                                                                        \
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"                        \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"
#define RE_SEED_CODER                                                                                        \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+"     \
                    "|\\s+(?!\\S)|\\s+"

// clang-format off
/* name, regexes, clean_spaces, ignore_merges, add_bos, raw (llama.cpp's llama_vocab::impl::load table). */
static const struct bpe_pre pre_table[] = {
    {"default",        {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, true, false, false, false},
    {"llama3",         {RE_LLAMA3}, true, true, true, false},
    {"llama-v3",       {RE_LLAMA3}, true, true, true, false},
    {"llama-bpe",      {RE_LLAMA3}, true, true, true, false},
    {"falcon3",        {RE_LLAMA3}, true, true, true, false},
    {"pixtral",        {RE_LLAMA3}, true, true, true, false},
    {"falcon-h1",      {RE_LLAMA3}, true, true, true, false},
    {"midm-2.0",       {RE_LLAMA3}, true, true, true, false},
    {"lfm2",           {RE_LLAMA3}, true, true, true, false},
    {"jina-v5-nano",   {RE_LLAMA3}, true, true, true, false},
    {"deepseek-llm",   {"[\r\n]", RE_DEEPSEEK_LLM_LETTERS, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", RE_CJK,
                        "\\p{N}+"}, false, false, false, false},
    {"deepseek-coder", {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK, "\\p{N}"}, false, false, false, false},
    {"falcon",         {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, true, false, false, false},
    {"mpt",            {RE_GPT2}, true, false, false, false},
    {"starcoder",      {"\\p{N}", RE_GPT2}, true, false, false, false},
    {"gpt-2",          {RE_GPT2}, true, false, false, false},
    {"phi-2",          {RE_GPT2}, true, false, false, false},
    {"jina-es",        {RE_GPT2}, true, false, false, false},
    {"jina-de",        {RE_GPT2}, true, false, false, false},
    {"jina-v2-es",     {RE_GPT2}, true, false, false, false},
    {"jina-v2-de",     {RE_GPT2}, true, false, false, false},
    {"gigachat",       {RE_GPT2}, true, false, false, false},
    {"a.x-4.0",        {RE_GPT2}, true, false, false, false},
    {"mellum",         {RE_GPT2}, true, false, false, false},
    {"modern-bert",    {RE_GPT2}, true, false, false, false},
    {"exaone4",        {RE_GPT2}, true, false, false, false},
    {"refact",         {"\\p{N}", RE_GPT2}, true, false, false, false},
    {"command-r",      {"\\p{N}", RE_GPT2}, false, false, false, false},
    {"qwen2",          {RE_QWEN2}, false, false, false, false},
    {"deepseek-r1-qwen", {RE_QWEN2}, false, false, false, false},
    {"kormo",          {RE_QWEN2}, false, false, false, false},
    {"f2llmv2",        {RE_QWEN2}, false, false, false, false},
    {"hunyuan",        {RE_QWEN2}, false, false, false, false},
    {"solar-open",     {RE_QWEN2}, false, false, false, false},
    {"qwen35",         {RE_QWEN35}, false, false, false, false},
    {"megrez",         {RE_QWEN2}, true, false, false, false},
    {"stablelm2",      {RE_QWEN2}, true, false, false, false},
    {"olmo",           {RE_GPT2}, true, false, false, false},
    {"dbrx",           {RE_LLAMA3}, true, false, false, false},
    {"smaug-bpe",      {RE_LLAMA3}, true, false, false, false},
    {"poro-chat",      {RE_PORO}, false, false, false, false},
    {"bloom",          {RE_PORO}, true, false, false, false},
    {"gpt3-finnish",   {RE_PORO}, true, false, false, false},
    {"chatglm-bpe",    {RE_LLAMA3}, true, false, false, false},
    {"glm4",           {RE_LLAMA3}, true, false, false, false},
    {"viking",         {RE_PORO, "\\p{N}"}, false, false, false, false},
    {"jais",           {RE_GPT2}, true, false, false, false},
    {"tekken",         {RE_TEKKEN}, false, true, true, false},
    {"smollm",         {"\\p{N}", RE_GPT2}, false, false, false, false},
    {"codeshell",      {"\\p{N}", RE_GPT2}, true, false, false, false},
    {"exaone",         {"\\p{N}", RE_GPT2}, true, false, false, false},
    {"minerva-7b",     {"\\p{N}", RE_GPT2}, true, false, false, false},
    {"gpt-4o",         {RE_GPT4O}, false, false, false, false},
    {"llama4",         {RE_GPT4O}, false, false, false, false},
    {"kanana2",        {RE_GPT4O}, false, false, false, false},
    {"talkie",         {RE_GPT4O}, false, false, false, false},
    {"minimax-m2",     {RE_GPT4O}, false, false, false, false},
    {"trillion",       {RE_GPT2}, false, false, false, false},
    {"granite-docling", {RE_GPT2}, false, false, false, false},
    {"jais-2",         {RE_JAIS2}, true, false, false, false},
    {"bailingmoe",     {RE_BAILINGMOE}, false, false, false, false},
    {"bailingmoe2",    {RE_BAILINGMOE}, false, false, false, false},
    {"llada-moe",      {RE_BAILINGMOE}, false, false, false, false},
    {"seed-coder",     {RE_SEED_CODER}, false, false, false, false},
    // Gemma 4: the whole text is one word for the merges; only newlines split it (a merge never spans one).
    {"gemma4",         {"[^\\n]+|[\\n]+"}, true, false, true, true},
    {"granite-embed-multi-311m", {"[^\\n]+|[\\n]+"}, true, false, false, true},
};
// clang-format on

const struct bpe_pre *bpe_pre_find(const char *name) {
    for (size_t i = 0; i < sizeof(pre_table) / sizeof(pre_table[0]); i++)
        if (strcmp(pre_table[i].name, name) == 0)
            return &pre_table[i];
    return NULL;
}

const struct bpe_pre *bpe_pre_at(size_t i) {
    return i < sizeof(pre_table) / sizeof(pre_table[0]) ? &pre_table[i] : NULL;
}

struct bpe {
    const struct bpe_pre *pre;
    pcre2_general_context *gctx; // routes PCRE2's allocations through ci_malloc
    pcre2_code *code[BPE_MAX_REGEX];
    int n_code;
};

static void *pcre_alloc(PCRE2_SIZE n, void *data) {
    (void)data;
    return ci_malloc(n);
}

static void pcre_release(void *p, void *data) {
    (void)data;
    ci_free(p);
}

void bpe_free(struct bpe *b) {
    if (!b)
        return;
    for (int i = 0; i < b->n_code; i++)
        pcre2_code_free(b->code[i]);
    pcre2_general_context_free(b->gctx);
    ci_free(b);
}

enum ci_status bpe_create(const struct bpe_pre *pre, struct bpe **out, struct ci_err *err) {
    enum ci_status st = CI_OK;
    pcre2_compile_context *cctx = NULL;
    struct bpe *b = ci_calloc(1, sizeof(*b));
    if (!b)
        return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
    b->pre = pre;
    b->gctx = pcre2_general_context_create(pcre_alloc, pcre_release, NULL);
    cctx = b->gctx ? pcre2_compile_context_create(b->gctx) : NULL;
    if (!cctx) {
        st = ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    for (int i = 0; i < BPE_MAX_REGEX && pre->regex[i]; i++) {
        int code = 0;
        PCRE2_SIZE off = 0;
        b->code[i] = pcre2_compile((PCRE2_SPTR)pre->regex[i], PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &code, &off, cctx);
        if (!b->code[i]) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(code, msg, sizeof(msg));
            // Out of memory is the one failure a fixed, known-good pattern can meet.
            st = ci_err_set(err, code == PCRE2_ERROR_HEAP_FAILED ? CI_ERR_NOMEM : CI_ERR_INTERNAL,
                            "tokenizer: pre-tokenizer '%s' regex %d: %s at offset %zu", pre->name, i,
                            (const char *)msg, (size_t)off);
            goto fail;
        }
        b->n_code = i + 1;
        // JIT is an optimisation only: without it (or on a JIT error at match time) the interpreter runs.
        (void)pcre2_jit_compile(b->code[i], PCRE2_JIT_COMPLETE);
    }
    pcre2_compile_context_free(cctx);
    *out = b;
    return CI_OK;
fail:
    pcre2_compile_context_free(cctx);
    bpe_free(b);
    return st;
}

/* llama.cpp decodes the text to code points (one U+FFFD per malformed byte) before splitting and encodes
 * the pieces back, so the bytes BPE sees are the sanitised UTF-8.  Output needs at most 3 * len bytes. */
static size_t sanitize_utf8(const char *text, size_t len, char *out) {
    size_t off = 0, n = 0;
    while (off < len) {
        uint32_t cp = utf8_decode_lenient((const unsigned char *)text, len, &off);
        n += (size_t)utf8_encode(cp, out + n);
    }
    return n;
}

static size_t utf8_step(const char *s, size_t pos, size_t len) {
    size_t n = utf8_lead_len((unsigned char)s[pos]);
    return pos + n <= len ? pos + n : len;
}

/* Splits every piece in[0..n_in) of s with one regex, writing the matches and the text between them. */
static enum ci_status split_one(const pcre2_code *code, pcre2_match_data *md, const char *s,
                                const size_t (*in)[2], size_t n_in, size_t (*out)[2], size_t *n_out,
                                struct ci_err *err) {
    size_t n = 0;
    for (size_t p = 0; p < n_in; p++) {
        const char *sub = s + in[p][0];
        size_t len = in[p][1], pos = 0, last = 0;
        while (pos < len) {
            int rc = pcre2_match(code, (PCRE2_SPTR)sub, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc ==
                PCRE2_ERROR_JIT_STACKLIMIT) // deep backtracking: the interpreter keeps its stack on the heap
                rc =
                    pcre2_match(code, (PCRE2_SPTR)sub, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0) {
                PCRE2_UCHAR msg[120];
                pcre2_get_error_message(rc, msg, sizeof(msg));
                // The interpreter's backtracking frames live on the heap (the match data's, ci_malloc).
                return ci_err_set(err, rc == PCRE2_ERROR_NOMEMORY ? CI_ERR_NOMEM : CI_ERR_LIMIT,
                                  "tokenizer: pre-tokenizer regex failed: %s", (const char *)msg);
            }
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me <= ms) { // an empty match splits nothing; step one character
                pos = utf8_step(sub, pos, len);
                continue;
            }
            if (ms > last) {
                out[n][0] = in[p][0] + last;
                out[n][1] = ms - last;
                n++;
            }
            out[n][0] = in[p][0] + ms;
            out[n][1] = me - ms;
            n++;
            last = pos = me;
        }
        if (last < len) {
            out[n][0] = in[p][0] + last;
            out[n][1] = len - last;
            n++;
        }
    }
    *n_out = n;
    return CI_OK;
}

enum ci_status bpe_split(const struct bpe *b, const char *text, size_t len, char **out_text,
                         size_t (**out_pieces)[2], size_t *n_pieces, struct ci_err *err) {
    enum ci_status st = CI_OK;
    char *s = NULL;
    size_t(*pa)[2] = NULL, (*pb)[2] = NULL;
    pcre2_match_data *md = NULL;
    size_t cap, bytes, n = 0;
    *out_text = NULL;
    *out_pieces = NULL;
    *n_pieces = 0;
    if (!ci_mul_size(len, 3, &cap) || !ci_add_size(cap, 1, &cap)) {
        st = ci_err_set(err, CI_ERR_LIMIT, "tokenizer: text too long");
        goto fail;
    }
    s = ci_malloc(cap);
    // Every piece holds at least one code point, so len + 1 entries always suffice.
    if (!ci_mul_size(len + 1, sizeof(*pa), &bytes)) {
        st = ci_err_set(err, CI_ERR_LIMIT, "tokenizer: text too long");
        goto fail;
    }
    pa = ci_malloc(bytes);
    pb = ci_malloc(bytes);
    md = pcre2_match_data_create(8, b->gctx);
    if (!s || !pa || !pb || !md) {
        st = ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    size_t slen = sanitize_utf8(text, len, s);
    s[slen] = 0;
    if (slen > 0) {
        pa[0][0] = 0;
        pa[0][1] = slen;
        n = 1;
    }
    for (int i = 0; i < b->n_code; i++) {
        size_t n2 = 0;
        st = split_one(b->code[i], md, s, (const size_t(*)[2])pa, n, pb, &n2, err);
        if (st)
            goto fail;
        size_t(*t)[2] = pa;
        pa = pb;
        pb = t;
        n = n2;
    }
    pcre2_match_data_free(md);
    ci_free(pb);
    *out_text = s;
    *out_pieces = pa;
    *n_pieces = n;
    return CI_OK;
fail:
    pcre2_match_data_free(md);
    ci_free(s);
    ci_free(pa);
    ci_free(pb);
    return st;
}

/* Per-call scratch for the merge loop, sized for the longest byte-encoded piece. */
struct sym {
    int prev, next;
    uint32_t off, n; // bytes of the encoded word
};

struct bigram {
    int32_t rank;
    int left, right;
    uint32_t n_left, n_right; // symbol sizes when queued: a later change makes the entry stale
};

struct scratch {
    char *word; // [2 * max_piece] GPT-2 code points of one piece, UTF-8
    char *key;  // [2 * max_piece + 2] "left right" merge lookup key
    struct sym *sym;
    struct bigram *heap;
    size_t n_heap;
};

static bool bigram_before(const struct bigram *a, const struct bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(struct scratch *sc, struct bigram g) {
    size_t i = sc->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&g, &sc->heap[parent]))
            break;
        sc->heap[i] = sc->heap[parent];
        i = parent;
    }
    sc->heap[i] = g;
}

static struct bigram heap_pop(struct scratch *sc) {
    struct bigram top = sc->heap[0], last = sc->heap[--sc->n_heap];
    size_t i = 0, n = sc->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && bigram_before(&sc->heap[c + 1], &sc->heap[c]))
            c++;
        if (!bigram_before(&sc->heap[c], &last))
            break;
        sc->heap[i] = sc->heap[c];
        i = c;
    }
    if (n > 0)
        sc->heap[i] = last;
    return top;
}

static void add_bigram(const struct vocab *v, struct scratch *sc, int left, int right) {
    if (left < 0 || right < 0)
        return;
    const struct sym *l = &sc->sym[left], *r = &sc->sym[right];
    memcpy(sc->key, sc->word + l->off, l->n);
    sc->key[l->n] = ' ';
    memcpy(sc->key + l->n + 1, sc->word + r->off, r->n);
    int32_t rank = vocab_map_find(&v->merges, sc->key, (size_t)l->n + 1 + r->n);
    if (rank < 0)
        return;
    struct bigram g = {rank, left, right, l->n, r->n};
    heap_push(sc, g);
}

static enum ci_status encode_word(const struct vocab *v, struct scratch *sc, const char *piece, size_t len,
                                  struct tok_ids *out) {
    // Byte-level encoding: every byte becomes one printable code point (raw BPE: the bytes themselves).
    size_t wn = 0;
    if (v->bpe_raw) {
        memcpy(sc->word, piece, len);
        wn = len;
    } else {
        for (size_t i = 0; i < len; i++)
            wn += (size_t)utf8_encode(vocab_gpt2_byte_to_cpt((uint8_t)piece[i]), sc->word + wn);
    }
    const char *w = sc->word;
    // A run of newlines that is a token is that token in raw BPE (llama.cpp's Gemma 4 rule).
    if (v->ignore_merges || (v->bpe_raw && strspn(w, "\n") >= wn)) {
        int32_t id = vocab_find(v, w, wn);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    int n_sym = 0;
    for (size_t off = 0; off < wn;) {
        size_t cl = utf8_lead_len((unsigned char)w[off]);
        if (cl > wn - off)
            cl = wn - off;
        sc->sym[n_sym] =
            (struct sym){n_sym - 1, off + cl == wn ? -1 : n_sym + 1, (uint32_t)off, (uint32_t)cl};
        n_sym++;
        off += cl;
    }
    sc->n_heap = 0;
    for (int i = 1; i < n_sym; i++)
        add_bigram(v, sc, i - 1, i);
    while (sc->n_heap > 0) {
        struct bigram g = heap_pop(sc);
        struct sym *l = &sc->sym[g.left], *r = &sc->sym[g.right];
        if (l->n == 0 || r->n == 0 || l->n != g.n_left || r->n != g.n_right)
            continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sc->sym[r->next].prev = g.left;
        add_bigram(v, sc, l->prev, g.left);
        add_bigram(v, sc, g.left, l->next);
    }
    for (int i = 0; i != -1 && n_sym > 0; i = sc->sym[i].next) {
        const struct sym *s = &sc->sym[i];
        int32_t id = vocab_find(v, w + s->off, s->n);
        if (id >= 0) {
            if (tok_ids_push(out, id))
                return CI_ERR_NOMEM;
            continue;
        }
        // Like llama.cpp: fall back to 1-byte tokens of the encoded text (raw BPE: "<0xXX>"), dropping bytes
        // that have none.
        for (uint32_t j = 0; j < s->n; j++) {
            int32_t bid = v->bpe_raw ? v->byte_id[(uint8_t)w[s->off + j]] : vocab_find(v, w + s->off + j, 1);
            if (bid >= 0 && tok_ids_push(out, bid))
                return CI_ERR_NOMEM;
        }
    }
    return CI_OK;
}

enum ci_status bpe_encode(const struct bpe *b, const struct vocab *v, const char *text, size_t len,
                          struct tok_ids *out, struct ci_err *err) {
    enum ci_status st = CI_OK;
    char *s = NULL;
    size_t(*pieces)[2] = NULL;
    size_t n_pieces = 0, max_piece = 0, bytes;
    struct scratch sc = {0};
    char *escaped = NULL;
    if (v->bpe_raw) { // spaces become "▁" before the split, as SentencePiece's normalizer does
        size_t spaces = 0, cap;
        for (size_t i = 0; i < len; i++)
            spaces += text[i] == ' ';
        if (!ci_mul_size(spaces, 2, &cap) || !ci_add_size(cap, len + 1, &cap)) {
            st = ci_err_set(err, CI_ERR_LIMIT, "tokenizer: text too long");
            goto fail;
        }
        if (!(escaped = ci_malloc(cap))) {
            st = ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
            goto fail;
        }
        len = vocab_escape_spaces(text, len, escaped);
        text = escaped;
    }
    st = bpe_split(b, text, len, &s, &pieces, &n_pieces, err);
    if (st)
        goto fail;
    for (size_t i = 0; i < n_pieces; i++)
        if (pieces[i][1] > max_piece)
            max_piece = pieces[i][1];
    // An encoded piece has at most 2 bytes per input byte and at most one symbol per input byte; each merge
    // queues at most two bigrams on top of the initial n - 1.
    if (max_piece > (size_t)INT32_MAX / 4 || !ci_mul_size(max_piece, 3 * sizeof(struct bigram), &bytes)) {
        st = ci_err_set(err, CI_ERR_LIMIT, "tokenizer: text too long");
        goto fail;
    }
    sc.word = ci_malloc(2 * max_piece + 1);
    sc.key = ci_malloc(4 * max_piece + 2);
    sc.sym = ci_malloc((max_piece + 1) * sizeof(struct sym));
    sc.heap = ci_malloc(bytes + sizeof(struct bigram));
    if (!sc.word || !sc.key || !sc.sym || !sc.heap) {
        st = ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n_pieces; i++) {
        st = encode_word(v, &sc, s + pieces[i][0], pieces[i][1], out);
        if (st) {
            ci_err_set(err, st, "tokenizer: out of memory");
            goto fail;
        }
    }
fail:
    ci_free(sc.word);
    ci_free(sc.key);
    ci_free(sc.sym);
    ci_free(sc.heap);
    ci_free(s);
    ci_free(pieces);
    ci_free(escaped);
    return st;
}
