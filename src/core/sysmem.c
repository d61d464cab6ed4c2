/* Available memory from the environment override, /proc/meminfo or sysconf (sysmem.h). */
#include "core/sysmem.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int64_t ci_parse_bytes(const char *s) {
    if (!s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v <= 0)
        return -1;
    double mult = 1;
    if (*end == 'k' || *end == 'K')
        mult = 1024.0;
    else if (*end == 'm' || *end == 'M')
        mult = 1024.0 * 1024;
    else if (*end == 'g' || *end == 'G')
        mult = 1024.0 * 1024 * 1024;
    else if (*end == 't' || *end == 'T')
        mult = 1024.0 * 1024 * 1024 * 1024;
    if (mult > 1) {
        end++;
        if (*end == 'i')
            end++;
    }
    if (*end == 'B')
        end++;
    if (*end || v * mult > 0x1p62 || v * mult < 1)
        return -1;
    return (int64_t)(v * mult);
}

/* MemAvailable of /proc/meminfo in bytes, or -1. */
static int64_t meminfo_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    long long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1)
            break;
    fclose(f);
    return kib >= 0 && kib < (1ll << 52) ? (int64_t)kib * 1024 : -1;
}

int64_t ci_mem_available(void) {
    const char *env = getenv("CINFER_MEM_AVAILABLE");
    if (env && *env)
        return ci_parse_bytes(env);
    int64_t b = meminfo_available();
    if (b >= 0)
        return b;
#if defined(_SC_AVPHYS_PAGES) && defined(_SC_PAGESIZE)
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && (double)pages * (double)page < 0x1p62)
        return (int64_t)pages * page;
#endif
    return -1;
}
