/* See utf8.h. */
#include "core/utf8.h"

/* Strict: the length a lead byte starts (0: never a lead). */
static int strict_len(unsigned char b) {
    if (b < 0x80)
        return 1;
    if (b >= 0xc2 && b <= 0xdf)
        return 2;
    if (b >= 0xe0 && b <= 0xef)
        return 3;
    if (b >= 0xf0 && b <= 0xf4)
        return 4;
    return 0;
}

/* Whether c may be continuation byte k (1-based) after lead: the second byte's range is what excludes
 * overlong forms, surrogates and values past U+10FFFF (Unicode Table 3-7). */
static bool strict_cont(unsigned char lead, size_t k, unsigned char c) {
    if (k == 1) {
        if (lead == 0xe0)
            return c >= 0xa0 && c <= 0xbf;
        if (lead == 0xed)
            return c >= 0x80 && c <= 0x9f;
        if (lead == 0xf0)
            return c >= 0x90 && c <= 0xbf;
        if (lead == 0xf4)
            return c >= 0x80 && c <= 0x8f;
    }
    return c >= 0x80 && c <= 0xbf;
}

int utf8_next_strict(const unsigned char *s, size_t n, size_t *bad, bool *partial) {
    int need = strict_len(s[0]);
    *bad = 1;
    *partial = false;
    if (need == 1)
        return 1;
    if (need == 0)
        return 0;
    size_t k = 1;
    while (k < (size_t)need && k < n && strict_cont(s[0], k, s[k]))
        k++;
    if (k == (size_t)need)
        return need;
    *bad = k;
    *partial = k == n;
    return 0;
}

bool utf8_valid_strict(const unsigned char *s, size_t n) {
    size_t i = 0, bad;
    bool partial;
    while (i < n) {
        int len = utf8_next_strict(s + i, n - i, &bad, &partial);
        if (len == 0)
            return false;
        i += (size_t)len;
    }
    return true;
}

uint32_t utf8_decode_lenient(const unsigned char *s, size_t n, size_t *off) {
    size_t i = *off;
    unsigned char b0 = s[i];
    uint32_t cp;
    size_t len;
    if (b0 < 0x80) {
        *off = i + 1;
        return b0;
    }
    if ((b0 & 0x40) == 0 || (b0 & 0xf8) == 0xf8)
        goto bad;
    if ((b0 & 0x20) == 0) {
        len = 2;
        cp = b0 & 0x1fu;
    } else if ((b0 & 0x10) == 0) {
        len = 3;
        cp = b0 & 0x0fu;
    } else {
        len = 4;
        cp = b0 & 0x07u;
    }
    if (len > n - i)
        goto bad;
    for (size_t k = 1; k < len; k++) {
        if ((s[i + k] & 0xc0) != 0x80)
            goto bad;
        cp = (cp << 6) | (s[i + k] & 0x3fu);
    }
    *off = i + len;
    // llama.cpp accepts these shapes too but cannot re-encode them; PCRE2 needs valid UTF-8.
    if ((cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0xfffd;
    return cp;
bad:
    *off = i + 1;
    return 0xfffd;
}

int utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xc0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | ((cp >> 18) & 0x07));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}
