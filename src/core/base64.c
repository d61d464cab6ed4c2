#include "core/base64.h"

#include <stdint.h>

size_t base64_encoded_len(size_t n) {
    return (n + 2) / 3 * 4;
}

void base64_encode(const void *data, size_t n, char *out) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const uint8_t *p = data;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *out++ = abc[v >> 18];
        *out++ = abc[v >> 12 & 63];
        *out++ = abc[v >> 6 & 63];
        *out++ = abc[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *out++ = abc[v >> 18];
        *out++ = abc[v >> 12 & 63];
        *out++ = '=';
        *out++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *out++ = abc[v >> 18];
        *out++ = abc[v >> 12 & 63];
        *out++ = abc[v >> 6 & 63];
        *out++ = '=';
    }
    *out = '\0';
}
