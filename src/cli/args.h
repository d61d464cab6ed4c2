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

#endif
