/* UTF-8, in the two dialects cinfer needs, each named for what it is.
 *
 * Strict (Unicode §3.9, RFC 3629): no overlong forms, no surrogates, nothing past U+10FFFF.  Used wherever
 * text is checked or leaves cinfer: names in model files, the detokenizer's output, JSON and SSE.  A
 * malformed sequence is one "maximal ill-formed subpart" (the longest prefix of a valid sequence, or one
 * byte), which Unicode recommends replacing by one U+FFFD.
 *
 * Lenient (llama.cpp-compatible): how llama.cpp's tokenizer reads bytes (unicode_len_utf8 and its decoder),
 * so that cinfer's token ids equal llama.cpp's for any input: a lead byte's length counts a stray
 * continuation byte as 1, and each malformed byte decodes to its own U+FFFD. */
#ifndef CINFER_CORE_UTF8_H
#define CINFER_CORE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UTF8_REPLACEMENT     "\xef\xbf\xbd" // U+FFFD
#define UTF8_REPLACEMENT_LEN 3

/* ---- strict ---- */

/* The character at s[0..n) (n >= 1): its length (1-4) when it is whole and valid.  Otherwise 0, with *bad
 * the length of the maximal ill-formed subpart to replace (>= 1), and *partial true when those bytes are the
 * valid start of a character that the end of the input cut short (more bytes could still complete it). */
int utf8_next_strict(const unsigned char *s, size_t n, size_t *bad, bool *partial);
/* Every byte of s[0..n) belongs to a valid character. */
bool utf8_valid_strict(const unsigned char *s, size_t n);

/* ---- lenient (llama.cpp) ---- */

/* The length a lead byte announces (llama.cpp's unicode_len_utf8: a continuation byte counts as 1). */
static inline size_t utf8_lead_len(unsigned char lead) {
    static const unsigned char lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[lead >> 4];
}
/* Decodes one code point at s[*off] (n bytes in all), advancing *off.  Malformed input (a bad lead or
 * continuation byte, truncation, a surrogate, a value past U+10FFFF) consumes one byte and gives U+FFFD. */
uint32_t utf8_decode_lenient(const unsigned char *s, size_t n, size_t *off);

/* ---- both ---- */

/* Encodes cp (<= U+10FFFF) into out[0..4); returns the length. */
int utf8_encode(uint32_t cp, char *out);

#endif
