/* Status values and boundary error messages.  Every function that can fail returns an enum ci_status;
 * functions at a boundary also fill a caller-owned struct ci_err (which may be NULL) with a user-facing
 * message. */
#ifndef CINFER_CORE_STATUS_H
#define CINFER_CORE_STATUS_H

enum ci_status {
    CI_OK = 0,
    CI_ERR_NOMEM,
    CI_ERR_IO,
    CI_ERR_FORMAT,
    CI_ERR_INVALID,
    CI_ERR_UNSUPPORTED,
    CI_ERR_LIMIT,
    CI_ERR_BUSY,
    CI_ERR_CANCELLED,
    CI_ERR_INTERNAL,
};

struct ci_err {
    enum ci_status code;
    char msg[256];
};

/* Records code and a printf-style message in err (if non-NULL) and returns code, so callers can write
 * `return ci_err_set(err, CI_ERR_FORMAT, "...", ...);`. */
enum ci_status ci_err_set(struct ci_err *err, enum ci_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes the message already in err with "prefix: " (context added on the way up). */
void ci_err_prefix(struct ci_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const char *ci_status_str(enum ci_status s);

#endif
