/* Prometheus text handling for the router (router_metrics.h).  Lines are taken as they come: a sample line
 * is "name[{labels}] value [timestamp]"; comment lines other than HELP and TYPE are dropped. */
#include "server/router_metrics.h"

#include <stdlib.h>
#include <string.h>

#include "core/mem.h"

struct buf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void put(struct buf *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *g = ci_realloc(b->p, cap);
        if (!g) {
            b->oom = true;
            return;
        }
        b->p = g;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(struct buf *b, const char *s) {
    put(b, s, strlen(s));
}

static size_t name_len(const char *s, size_t n) {
    size_t i = 0;
    while (i < n && s[i] != '{' && s[i] != ' ' && s[i] != '\t')
        i++;
    return i;
}

bool router_metrics_value(const char *text, size_t len, const char *name, double *out) {
    size_t nl = strlen(name);
    for (size_t i = 0; i < len;) {
        const char *line = text + i;
        const char *end = memchr(line, '\n', len - i);
        size_t n = end ? (size_t)(end - line) : len - i;
        i += n + 1;
        if (n > nl && line[0] != '#' && name_len(line, n) == nl && memcmp(line, name, nl) == 0 &&
            line[nl] == ' ') {
            char v[64];
            size_t k = n - nl - 1 < sizeof v - 1 ? n - nl - 1 : sizeof v - 1;
            memcpy(v, line + nl + 1, k);
            v[k] = '\0';
            char *stop;
            double d = strtod(v, &stop);
            if (stop == v)
                return false;
            *out = d;
            return true;
        }
    }
    return false;
}

struct line {
    const char *p;
    size_t n;
    int family, source;
    bool meta; // HELP or TYPE
};

struct family {
    const char *name;
    size_t n;
};

static int family_of(struct family **fam, int *n_fam, int *cap, const char *name, size_t n) {
    for (int i = 0; i < *n_fam; i++)
        if ((*fam)[i].n == n && memcmp((*fam)[i].name, name, n) == 0)
            return i;
    if (*n_fam == *cap) {
        int c = *cap ? *cap * 2 : 64;
        struct family *g = ci_realloc(*fam, (size_t)c * sizeof *g);
        if (!g)
            return -1;
        *fam = g;
        *cap = c;
    }
    (*fam)[*n_fam] = (struct family){name, n};
    return (*n_fam)++;
}

static bool is(const char *s, size_t n, const char *word) {
    return strlen(word) == n && memcmp(s, word, n) == 0;
}

/* A sample's family: the current one when the sample's name is it or extends it as a histogram or summary
 * does (_bucket, _sum, _count), else its own name. */
static bool belongs(const struct family *f, const char *name, size_t n) {
    if (n < f->n || memcmp(name, f->name, f->n) != 0)
        return false;
    const char *rest = name + f->n;
    size_t k = n - f->n;
    return k == 0 || is(rest, k, "_bucket") || is(rest, k, "_sum") || is(rest, k, "_count");
}

static void put_labelled(struct buf *b, const char *line, size_t n, const char *replica) {
    size_t nl = name_len(line, n);
    put(b, line, nl);
    puts_(b, "{replica=\"");
    for (const char *c = replica; *c; c++) {
        if (*c == '"' || *c == '\\')
            put(b, "\\", 1);
        put(b, c, 1);
    }
    put(b, "\"", 1);
    if (nl < n && line[nl] == '{') {
        if (nl + 1 < n && line[nl + 1] != '}')
            put(b, ",", 1);
        put(b, line + nl + 1, n - nl - 1);
    } else {
        put(b, "}", 1);
        put(b, line + nl, n - nl);
    }
    put(b, "\n", 1);
}

char *router_metrics_merge(const struct router_metrics_source *src, int n, const char *prefix,
                           size_t *out_len) {
    struct buf b = {0};
    struct line *lines = NULL;
    struct family *fam = NULL;
    int n_lines = 0, cap_lines = 0, n_fam = 0, cap_fam = 0;
    bool oom = false;
    put(&b, "", 0); // an empty exposition is still a string
    if (prefix)
        puts_(&b, prefix);
    for (int s = 0; s < n && !oom; s++) {
        int cur = -1;
        for (size_t i = 0; i < src[s].len && !oom;) {
            const char *line = src[s].text + i;
            const char *end = memchr(line, '\n', src[s].len - i);
            size_t len = end ? (size_t)(end - line) : src[s].len - i;
            i += len + 1;
            if (len == 0)
                continue;
            bool meta = false;
            int f;
            if (line[0] == '#') {
                if (len < 7 || (strncmp(line, "# HELP ", 7) != 0 && strncmp(line, "# TYPE ", 7) != 0))
                    continue;
                meta = true;
                f = cur = family_of(&fam, &n_fam, &cap_fam, line + 7, name_len(line + 7, len - 7));
            } else {
                size_t nl = name_len(line, len);
                f = cur >= 0 && belongs(&fam[cur], line, nl) ? cur
                                                             : family_of(&fam, &n_fam, &cap_fam, line, nl);
            }
            if (f < 0) {
                oom = true;
                break;
            }
            if (n_lines == cap_lines) {
                int c = cap_lines ? cap_lines * 2 : 256;
                struct line *g = ci_realloc(lines, (size_t)c * sizeof *g);
                if (!g) {
                    oom = true;
                    break;
                }
                lines = g;
                cap_lines = c;
            }
            lines[n_lines++] = (struct line){line, len, f, s, meta};
        }
    }
    for (int f = 0; f < n_fam && !oom; f++) {
        int meta_from = -1; // HELP and TYPE from the first source that has them
        for (int i = 0; i < n_lines; i++) {
            const struct line *l = &lines[i];
            if (l->family != f)
                continue;
            if (l->meta) {
                if (meta_from < 0)
                    meta_from = l->source;
                if (l->source == meta_from) {
                    put(&b, l->p, l->n);
                    put(&b, "\n", 1);
                }
            }
        }
        for (int i = 0; i < n_lines; i++)
            if (lines[i].family == f && !lines[i].meta)
                put_labelled(&b, lines[i].p, lines[i].n, src[lines[i].source].replica);
    }
    ci_free(lines);
    ci_free(fam);
    if (oom || b.oom || !b.p) {
        ci_free(b.p);
        return NULL;
    }
    *out_len = b.len;
    return b.p;
}
