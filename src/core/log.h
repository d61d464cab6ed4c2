/* Leveled, thread-safe logging to stderr.  The level comes from CINFER_LOG (err|warn|info|debug). */
#ifndef CINFER_CORE_LOG_H
#define CINFER_CORE_LOG_H

enum ci_log_level { CI_LOG_LEVEL_ERR, CI_LOG_LEVEL_WARN, CI_LOG_LEVEL_INFO, CI_LOG_LEVEL_DEBUG };

void ci_log(enum ci_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ci_log_set_level(enum ci_log_level level);
int ci_log_enabled(enum ci_log_level level);

#define CI_LOG_ERR(...)   ci_log(CI_LOG_LEVEL_ERR, __VA_ARGS__)
#define CI_LOG_WARN(...)  ci_log(CI_LOG_LEVEL_WARN, __VA_ARGS__)
#define CI_LOG_INFO(...)  ci_log(CI_LOG_LEVEL_INFO, __VA_ARGS__)
#define CI_LOG_DEBUG(...) ci_log(CI_LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
