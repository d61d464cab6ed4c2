/* Base64 (RFC 4648, standard alphabet, '=' padding). */
#ifndef CINFER_CORE_BASE64_H
#define CINFER_CORE_BASE64_H

#include <stddef.h>

/* Characters base64_encode writes for n bytes (without the NUL). */
size_t base64_encoded_len(size_t n);
/* Writes base64_encoded_len(n) characters and a NUL to out. */
void base64_encode(const void *data, size_t n, char *out);

#endif
