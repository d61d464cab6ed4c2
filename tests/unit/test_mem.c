/* core/mem.c's huge-page advice for the packed weights: the kernel is asked for exactly the whole 2 MiB pages
 * inside the buffer (its VMA then carries the "hg" flag in /proc/self/smaps), the data is untouched, and
 * CINFER_NO_HUGEPAGES or a buffer holding no whole huge page asks for nothing. */
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "core/mem.h"

#define MIB ((size_t)1 << 20)

// Whether this kernel takes MADV_HUGEPAGE at all (without transparent huge pages madvise fails), probed on a
// mapping of its own.
static bool thp_available(void) {
#ifdef MADV_HUGEPAGE
    const size_t n = 4 * MIB;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return false;
    uintptr_t lo = ((uintptr_t)p + 2 * MIB - 1) / (2 * MIB) * (2 * MIB);
    bool ok = madvise((void *)lo, 2 * MIB, MADV_HUGEPAGE) == 0;
    munmap(p, n);
    return ok;
#else
    return false;
#endif
}

/* The VmFlags line of the mapping holding address a, in /proc/self/smaps (false when there is none: not every
 * kernel, or sandbox, writes it). */
static bool vm_flags_at(uintptr_t a, char *out, size_t cap) {
    out[0] = '\0';
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return false;
    char line[512];
    bool in = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = a >= lo && a < hi;
            continue;
        }
        if (in && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(out, cap, "%s", line + 8);
            fclose(f);
            return true;
        }
    }
    fclose(f);
    return false;
}

static bool has_flag(const char *flags, const char *flag) {
    char padded[520];
    snprintf(padded, sizeof padded, " %s ", flags);
    char *nl = strchr(padded, '\n');
    if (nl)
        *nl = ' ';
    char want[8];
    snprintf(want, sizeof want, " %s ", flag);
    return strstr(padded, want) != NULL;
}

TEST(advises_the_whole_huge_pages_inside) {
    if (!thp_available()) {
        printf("  (skipped: no transparent huge pages in this kernel)\n");
        return;
    }
    unsetenv("CINFER_NO_HUGEPAGES");
    const size_t n = 9 * MIB;
    uint8_t *p = ci_malloc_aligned(n);
    ASSERT(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 31u);
    size_t got = ci_mem_advise_huge(p + 1, n - 1);
    uintptr_t lo = ((uintptr_t)p + 1 + 2 * MIB - 1) / (2 * MIB) * (2 * MIB),
              hi = ((uintptr_t)p + n) / (2 * MIB) * (2 * MIB);
    CHECK(got == hi - lo);
    CHECK(got >= 6 * MIB && got % (2 * MIB) == 0);
    char flags[512];
    if (vm_flags_at(lo, flags, sizeof flags))
        CHECK(has_flag(flags, "hg"));
    else
        printf("  (no VmFlags in /proc/self/smaps: the kernel's record of the advice not checked)\n");
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)(i * 31u)) {
            TEST_FAILF("byte %zu changed", i);
            break;
        }
    ci_free_aligned(p);
}

TEST(nothing_asked_when_off_or_too_small) {
    const size_t n = 9 * MIB;
    uint8_t *p = ci_malloc_aligned(n);
    ASSERT(p);
    setenv("CINFER_NO_HUGEPAGES", "1", 1);
    CHECK(ci_mem_advise_huge(p, n) == 0);
    unsetenv("CINFER_NO_HUGEPAGES");
    CHECK(ci_mem_advise_huge(NULL, n) == 0);
    uintptr_t inside = ((uintptr_t)p + 2 * MIB - 1) / (2 * MIB) * (2 * MIB);
    // under one whole huge page: from 1 byte past a 2 MiB boundary to 1 byte before the next
    CHECK(ci_mem_advise_huge((void *)(inside + 1), 2 * MIB - 2) == 0);
    CHECK(ci_mem_advise_huge(p, 0) == 0);
    ci_free_aligned(p);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(advises_the_whole_huge_pages_inside);
    RUN(nothing_asked_when_off_or_too_small);
    return test_exit_code();
}
