/* Command-line flag parsing shared by every subcommand.  Values are validated here (range, syntax) and
 * errors are reported as one line "cinfer <cmd>: <flag>: <why>" with exit status 2 (usage error). */
#ifndef CINFER_CLI_ARGS_H
#define CINFER_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

enum arg_kind { ARG_FLAG, ARG_INT, ARG_U64, ARG_FLOAT, ARG_STR };

struct arg_spec {
    const char *name;  // "--temp"
    const char *alias; // "-t" or NULL
    enum arg_kind kind;
    void *out;        // bool*, int*, uint64_t*, float*, const char**
    double min, max;  // inclusive range for numbers
    const char *help; // "T  sampling temperature (0 = greedy)"
};

/* Parses argv[first..argc).  Non-flag arguments are collected into positional[] (up to max_positional).
 * Returns false after printing an error (unknown flag, missing value, bad number, out of range). */
bool args_parse(const char *cmd, int argc, char **argv, int first, const struct arg_spec *specs, int n_specs,
                const char **positional, int max_positional, int *n_positional);
void args_usage(const char *cmd, const char *synopsis, const struct arg_spec *specs, int n_specs);
/* True if --help or -h appears. */
bool args_want_help(int argc, char **argv, int first);
/* A request rate: a positive number of requests per second, or "inf" / "infinity" (INFINITY: all at once). */
bool args_parse_rate(const char *s, double *out);
/* Comma-separated integers in [lo, hi] into out[0..*n), at most max.  False on a malformed or empty list. */
bool args_parse_int_list(const char *s, int lo, int hi, int *out, int max, int *n);

#endif
