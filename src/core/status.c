#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum ci_status ci_err_set(struct ci_err *err, enum ci_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void ci_err_prefix(struct ci_err *err, const char *fmt, ...) {
    if (!err)
        return;
    char prefix[128], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    // Truncation is acceptable: the message stays a readable prefix of the full one.
    size_t n = strlen(prefix);
    if (n > sizeof err->msg - 3)
        n = sizeof err->msg - 3;
    memcpy(err->msg, prefix, n);
    memcpy(err->msg + n, ": ", 2);
    size_t room = sizeof err->msg - n - 3, m = strlen(old);
    if (m > room)
        m = room;
    memcpy(err->msg + n + 2, old, m);
    err->msg[n + 2 + m] = '\0';
}

const char *ci_status_str(enum ci_status s) {
    switch (s) {
    case CI_OK:
        return "ok";
    case CI_ERR_NOMEM:
        return "out of memory";
    case CI_ERR_IO:
        return "i/o error";
    case CI_ERR_FORMAT:
        return "malformed input";
    case CI_ERR_INVALID:
        return "invalid argument";
    case CI_ERR_UNSUPPORTED:
        return "unsupported";
    case CI_ERR_LIMIT:
        return "limit exceeded";
    case CI_ERR_BUSY:
        return "busy";
    case CI_ERR_CANCELLED:
        return "cancelled";
    case CI_ERR_INTERNAL:
        return "internal error";
    }
    return "unknown status";
}
