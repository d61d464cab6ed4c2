/* Reading a whole text file (see textfile.h). */
#include "cli/textfile.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"

char *cli_read_text_file(const char *cmd, const char *path, size_t max, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cinfer %s: cannot open '%s': %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = ci_malloc(cap);
    for (;;) {
        if (!buf) {
            fprintf(stderr, "cinfer %s: out of memory reading '%s'\n", cmd, path);
            break;
        }
        if (n + 1 >= cap) {
            if (cap > max) {
                fprintf(stderr, "cinfer %s: '%s' is larger than %zu bytes\n", cmd, path, max);
                ci_free(buf);
                buf = NULL;
                break;
            }
            char *nb = ci_realloc(buf, cap * 2);
            if (!nb)
                ci_free(buf);
            buf = nb;
            cap *= 2;
            continue;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        if (!got) {
            if (ferror(f)) {
                fprintf(stderr, "cinfer %s: cannot read '%s'\n", cmd, path);
                ci_free(buf);
                buf = NULL;
            }
            break;
        }
        n += got;
    }
    fclose(f);
    if (!buf)
        return NULL;
    if (n > max) {
        fprintf(stderr, "cinfer %s: '%s' is larger than %zu bytes\n", cmd, path, max);
        ci_free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}
