#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct arg_spec *find(const struct arg_spec *specs, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(specs[i].name, name) || (specs[i].alias && !strcmp(specs[i].alias, name)))
            return &specs[i];
    return NULL;
}

static bool parse_value(const char *cmd, const struct arg_spec *s, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (s->kind) {
    case ARG_FLAG:
        *(bool *)s->out = true;
        return true;
    case ARG_STR:
        *(const char **)s->out = v;
        return true;
    case ARG_INT:
    case ARG_U64: {
        if (*v == '-' && s->kind == ARG_U64)
            break;
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end || (double)x < s->min || (double)x > s->max) {
            fprintf(stderr, "cinfer %s: %s: '%s' is not an integer in [%.0f, %.0f]\n", cmd, s->name, v,
                    s->min, s->max);
            return false;
        }
        if (s->kind == ARG_INT)
            *(int *)s->out = (int)x;
        else
            *(uint64_t *)s->out = (uint64_t)x;
        return true;
    }
    case ARG_FLOAT: {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x) || x < s->min || x > s->max) {
            fprintf(stderr, "cinfer %s: %s: '%s' is not a number in [%g, %g]\n", cmd, s->name, v, s->min,
                    s->max);
            return false;
        }
        *(float *)s->out = (float)x;
        return true;
    }
    }
    fprintf(stderr, "cinfer %s: %s: invalid value '%s'\n", cmd, s->name, v);
    return false;
}

bool args_parse(const char *cmd, int argc, char **argv, int first, const struct arg_spec *specs, int n_specs,
                const char **positional, int max_positional, int *n_positional) {
    *n_positional = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == '\0' || (a[1] >= '0' && a[1] <= '9')) {
            if (*n_positional >= max_positional) {
                fprintf(stderr, "cinfer %s: unexpected argument '%s'\n", cmd, a);
                return false;
            }
            positional[(*n_positional)++] = a;
            continue;
        }
        const char *eq = strchr(a, '=');
        char name[64];
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof name)
            len = sizeof name - 1;
        memcpy(name, a, len);
        name[len] = '\0';
        const struct arg_spec *s = find(specs, n_specs, name);
        if (!s) {
            fprintf(stderr, "cinfer %s: unknown option '%s' (see cinfer %s --help)\n", cmd, name, cmd);
            return false;
        }
        const char *v = NULL;
        if (s->kind != ARG_FLAG) {
            if (eq)
                v = eq + 1;
            else if (i + 1 < argc)
                v = argv[++i];
            else {
                fprintf(stderr, "cinfer %s: %s needs a value\n", cmd, s->name);
                return false;
            }
        } else if (eq) {
            fprintf(stderr, "cinfer %s: %s takes no value\n", cmd, s->name);
            return false;
        }
        if (!parse_value(cmd, s, v))
            return false;
    }
    return true;
}

bool args_want_help(int argc, char **argv, int first) {
    for (int i = first; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return true;
    return false;
}

void args_usage(const char *cmd, const char *synopsis, const struct arg_spec *specs, int n_specs) {
    printf("usage: cinfer %s %s\n\noptions:\n", cmd, synopsis);
    for (int i = 0; i < n_specs; i++) {
        char flags[48];
        if (specs[i].alias)
            snprintf(flags, sizeof flags, "%s, %s", specs[i].alias, specs[i].name);
        else
            snprintf(flags, sizeof flags, "    %s", specs[i].name);
        printf("  %-22s %s\n", flags, specs[i].help);
    }
}

bool args_parse_rate(const char *s, double *out) {
    if (!strcmp(s, "inf") || !strcmp(s, "infinity")) {
        *out = INFINITY;
        return true;
    }
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || !isfinite(v))
        return false;
    *out = v;
    return true;
}

bool args_parse_int_list(const char *s, int lo, int hi, int *out, int max, int *n) {
    *n = 0;
    while (*s) {
        char *end = NULL;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < lo || v > hi || *n >= max || (*end != ',' && *end != '\0'))
            return false;
        out[(*n)++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
    return *n > 0;
}
