/* Incremental detokenizer and stop-string matcher (see detok.h).
 *
 * UTF-8 is checked strictly (no overlongs, surrogates or values past U+10FFFF); a malformed sequence is
 * replaced by one U+FFFD per maximal ill-formed subpart (the Unicode recommendation), and only a sequence
 * that is still valid but incomplete at the end of the available bytes is held back.
 *
 * The stop matcher reports the match that ends first (and among those the one that starts first), which
 * is what a character-by-character scan would find, so the result does not depend on how the text was
 * split into tokens. */
#include "tokenizer/detok.h"

#include <string.h>

#include "core/check.h"
#include "core/mem.h"
#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

#define REPLACEMENT     UTF8_REPLACEMENT
#define REPLACEMENT_LEN UTF8_REPLACEMENT_LEN

/* ---- detokenizer ---- */

static size_t in_cap(const struct detok *d) {
    size_t piece = tokenizer_max_token_bytes(d->tok);
    return (piece > REPLACEMENT_LEN ? piece : REPLACEMENT_LEN) + sizeof(d->pend);
}

size_t detok_max_out(const struct detok *d) {
    return 3 * in_cap(d); // a lone invalid byte becomes 3 bytes
}

enum ci_status detok_init(struct detok *d, const struct tokenizer *t, bool at_text_start, bool render_special,
                          struct ci_err *err) {
    memset(d, 0, sizeof(*d));
    d->tok = t;
    d->render_special = render_special;
    d->spm_prefix = tokenizer_type(t) == TOKENIZER_TYPE_SPM && tokenizer_add_space_prefix(t);
    size_t cap = detok_max_out(d);
    // One allocation: the output followed by the input assembly area.
    d->out = ci_malloc(cap + in_cap(d));
    if (!d->out)
        return ci_err_set(err, CI_ERR_NOMEM, "detok: out of memory");
    d->cap = cap;
    detok_reset(d, at_text_start);
    return CI_OK;
}

void detok_deinit(struct detok *d) {
    ci_free(d->out);
    memset(d, 0, sizeof(*d));
}

void detok_reset(struct detok *d, bool at_text_start) {
    d->n_pend = 0;
    d->strip_space = d->spm_prefix && at_text_start;
}

/* Validates in[0..n) into d->out; an incomplete valid tail goes to d->pend (unless final). */
static size_t assemble(struct detok *d, const unsigned char *in, size_t n, bool final) {
    size_t i = 0, o = 0;
    while (i < n) {
        size_t bad;
        bool partial;
        int len = utf8_next_strict(in + i, n - i, &bad, &partial);
        if (len > 0) {
            memcpy(d->out + o, in + i, (size_t)len);
            o += (size_t)len;
            i += (size_t)len;
            continue;
        }
        if (partial && !final) { // valid so far, just not finished yet
            CI_ASSERT(bad < sizeof(d->pend));
            memcpy(d->pend, in + i, bad);
            d->n_pend = (int)bad;
            break;
        }
        memcpy(d->out + o, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
        o += UTF8_REPLACEMENT_LEN;
        i += bad;
    }
    CI_ASSERT(o <= d->cap);
    return o;
}

void detok_push(struct detok *d, int32_t id, const char **text, size_t *n) {
    size_t len = 0;
    const char *p = tokenizer_token_bytes(d->tok, id, d->render_special, &len);
    if (!p) {
        p = REPLACEMENT;
        len = REPLACEMENT_LEN;
    }
    if (d->strip_space && len > 0) {
        if (p[0] == ' ') {
            p++;
            len--;
        }
        d->strip_space = false;
    }
    if (d->spm_prefix && id == tokenizer_bos(d->tok))
        d->strip_space = true;
    unsigned char *in = (unsigned char *)d->out + d->cap;
    size_t m = (size_t)d->n_pend;
    CI_ASSERT(m + len <= in_cap(d));
    memcpy(in, d->pend, m);
    memcpy(in + m, p, len);
    d->n_pend = 0;
    *n = assemble(d, in, m + len, false);
    *text = d->out;
}

void detok_flush(struct detok *d, const char **text, size_t *n) {
    unsigned char *in = (unsigned char *)d->out + d->cap;
    size_t m = (size_t)d->n_pend;
    memcpy(in, d->pend, m);
    d->n_pend = 0;
    *n = assemble(d, in, m, true);
    *text = d->out;
}

/* ---- stop strings ---- */

enum ci_status stop_matcher_init(struct stop_matcher *m, const char *const *stops, int n_stops,
                                 size_t max_chunk, struct ci_err *err) {
    size_t total = 0;
    memset(m, 0, sizeof(*m));
    m->matched = -1;
    if (n_stops < 0)
        return ci_err_set(err, CI_ERR_INVALID, "stop strings: negative count");
    for (int i = 0; i < n_stops; i++) {
        size_t l = strlen(stops[i]);
        if (!ci_add_size(total, l, &total))
            return ci_err_set(err, CI_ERR_LIMIT, "stop strings too long");
        if (l > m->max_len)
            m->max_len = l;
    }
    size_t hold = m->max_len ? m->max_len - 1 : 0, work;
    if (!ci_add_size(hold, max_chunk, &work) || !ci_add_size(work, 1, &work))
        return ci_err_set(err, CI_ERR_LIMIT, "stop strings too long");
    m->stops = ci_malloc(total + 1);
    m->off = ci_malloc(((size_t)n_stops + 1) * sizeof(size_t));
    m->len = ci_malloc(((size_t)n_stops + 1) * sizeof(size_t));
    m->index = ci_malloc(((size_t)n_stops + 1) * sizeof(int));
    m->buf = ci_malloc(work);
    m->out = ci_malloc(work);
    if (!m->stops || !m->off || !m->len || !m->index || !m->buf || !m->out) {
        stop_matcher_deinit(m);
        return ci_err_set(err, CI_ERR_NOMEM, "stop strings: out of memory");
    }
    size_t o = 0;
    for (int i = 0; i < n_stops; i++) {
        size_t l = strlen(stops[i]);
        if (l == 0)
            continue;
        memcpy(m->stops + o, stops[i], l);
        m->off[m->n_stops] = o;
        m->len[m->n_stops] = l;
        m->index[m->n_stops] = i;
        m->n_stops++;
        o += l;
    }
    m->max_chunk = max_chunk;
    return CI_OK;
}

void stop_matcher_deinit(struct stop_matcher *m) {
    ci_free(m->stops);
    ci_free(m->off);
    ci_free(m->len);
    ci_free(m->index);
    ci_free(m->buf);
    ci_free(m->out);
    memset(m, 0, sizeof(*m));
    m->matched = -1;
}

void stop_matcher_reset(struct stop_matcher *m) {
    m->n_held = 0;
    m->matched = -1;
}

enum ci_status stop_matcher_feed(struct stop_matcher *m, const char *text, size_t n, const char **out,
                                 size_t *n_out, int *stop) {
    *out = m->out;
    *n_out = 0;
    *stop = m->matched;
    if (m->matched >= 0)
        return CI_OK;
    if (n > m->max_chunk)
        return CI_ERR_INVALID;
    if (n)
        memcpy(m->buf + m->n_held, text, n);
    size_t L = m->n_held + n;
    // A complete match inside the held text would have been reported already, so only ends past it count.
    for (size_t e = m->n_held + 1; e <= L; e++) {
        int best = -1;
        size_t best_start = 0;
        for (int s = 0; s < m->n_stops; s++) {
            size_t l = m->len[s];
            if (l > e || memcmp(m->buf + e - l, m->stops + m->off[s], l) != 0)
                continue;
            if (best < 0 || e - l < best_start) {
                best = s;
                best_start = e - l;
            }
        }
        if (best >= 0) {
            memcpy(m->out, m->buf, best_start);
            *n_out = best_start;
            *stop = m->matched = m->index[best];
            m->n_held = 0;
            return CI_OK;
        }
    }
    // Hold back the longest tail that could still grow into a stop string.
    // (With no stop strings nothing can grow into one: release everything.)
    size_t p = m->max_len == 0 ? L : L > m->max_len ? L - m->max_len + 1 : 0;
    for (; p < L; p++) {
        size_t tail = L - p;
        bool prefix = false;
        for (int s = 0; s < m->n_stops && !prefix; s++)
            prefix = tail < m->len[s] && memcmp(m->buf + p, m->stops + m->off[s], tail) == 0;
        if (prefix)
            break;
    }
    memcpy(m->out, m->buf, p);
    memmove(m->buf, m->buf + p, L - p);
    m->n_held = L - p;
    *n_out = p;
    return CI_OK;
}

void stop_matcher_flush(struct stop_matcher *m, const char **out, size_t *n_out) {
    *out = m->out;
    *n_out = 0;
    if (m->matched >= 0)
        return;
    memcpy(m->out, m->buf, m->n_held);
    *n_out = m->n_held;
    m->n_held = 0;
}
