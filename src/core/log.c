#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_level = -1; // -1: not yet read from the environment

static int current_level(void) {
    if (log_level < 0) {
        const char *env = getenv("CINFER_LOG");
        int level = CI_LOG_LEVEL_WARN;
        if (env) {
            if (!strcmp(env, "err"))
                level = CI_LOG_LEVEL_ERR;
            else if (!strcmp(env, "info"))
                level = CI_LOG_LEVEL_INFO;
            else if (!strcmp(env, "debug"))
                level = CI_LOG_LEVEL_DEBUG;
        }
        log_level = level;
    }
    return log_level;
}

void ci_log_set_level(enum ci_log_level level) {
    log_level = (int)level;
}

int ci_log_enabled(enum ci_log_level level) {
    return (int)level <= current_level();
}

void ci_log(enum ci_log_level level, const char *fmt, ...) {
    static const char *const names[] = {"error", "warning", "info", "debug"};
    if (!ci_log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "cinfer: %s: ", names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&log_lock);
    va_end(ap);
}
