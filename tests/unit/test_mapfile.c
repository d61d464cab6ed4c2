/* The read-only file mapping and its guard against a file truncated while mapped: reads of the lost part
 * see zeros instead of raising SIGBUS, the mapping reports the damage, the part still in the file reads as
 * before, other mappings are untouched, and a SIGBUS outside any mapping keeps its default effect.  Also:
 * paths that are not regular files are refused without blocking, and ci_mapfile_read copies bytes without
 * mapping the file's pages into the process, with a truncated file's lost part read as zeros. */
#include "test.h"

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/mapfile.h"

#define FILE_BYTES (1 << 20)

// The sanitizer runtime's, when there is one (a weak reference: NULL in a plain build).
void __sanitizer_set_report_path(const char *path) __attribute__((weak));

static bool write_pattern(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    for (uint32_t i = 0; i < FILE_BYTES / 4; i++) {
        uint32_t v = i * 2654435761u | 1u; // never zero
        fwrite(&v, 4, 1, f);
    }
    return fclose(f) == 0;
}

static uint32_t pattern_at(size_t off) {
    return (uint32_t)(off / 4) * 2654435761u | 1u;
}

/* A new temporary file (path: a mkstemp template, filled in) holding the pattern. */
static bool pattern_file(char *path) {
    int fd = mkstemp(path);
    if (fd < 0)
        return false;
    close(fd);
    return write_pattern(path);
}

TEST(truncated_while_mapped) {
    char a[] = "/tmp/cinfer-map-a-XXXXXX", b[] = "/tmp/cinfer-map-b-XXXXXX";
    ASSERT(pattern_file(a) && pattern_file(b));
    struct ci_mapfile ma, mb;
    struct ci_err err = {0};
    ASSERT_STATUS(ci_mapfile_open(&ma, a, &err), CI_OK);
    ASSERT_STATUS(ci_mapfile_open(&mb, b, &err), CI_OK);
    ASSERT(ma.size == FILE_BYTES && !ci_mapfile_damaged(&ma));
    volatile uint32_t sum = 0;
    for (size_t off = 0; off < FILE_BYTES; off += 4096) // bring every page in first, as a forward pass would
        sum += *(const uint32_t *)(ma.data + off);
    ASSERT(truncate(a, 8192) == 0);
    uint32_t kept, lost, lost_far;
    memcpy(&kept, ma.data + 4096, 4);
    CHECK(kept == pattern_at(4096));
    CHECK(!ci_mapfile_damaged(&ma));
    memcpy(&lost, ma.data + 100000, 4); // past the new end: SIGBUS without the guard
    memcpy(&lost_far, ma.data + FILE_BYTES - 4, 4);
    CHECK(lost == 0 && lost_far == 0);
    CHECK(ci_mapfile_damaged(&ma));
    uint32_t other;
    memcpy(&other, mb.data + 100000, 4);
    CHECK(other == pattern_at(100000) && !ci_mapfile_damaged(&mb));
    ci_mapfile_close(&ma);
    ci_mapfile_close(&mb);
    // A new mapping starts undamaged (the slot is reused cleanly).
    ASSERT_STATUS(ci_mapfile_open(&mb, b, &err), CI_OK);
    CHECK(!ci_mapfile_damaged(&mb));
    ci_mapfile_close(&mb);
    unlink(a);
    unlink(b);
}

/* The resident kilobytes of the mapping that starts at p (/proc/self/smaps), -1 if not found (not every
 * kernel, or sandbox, writes it). */
static long mapping_rss_kb(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    bool in = false;
    long rss = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo = 0, hi = 0;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = lo == (unsigned long)(uintptr_t)p;
        else if (in && sscanf(line, "Rss: %ld kB", &rss) == 1)
            break;
    }
    fclose(f);
    return rss;
}

TEST(read_without_mapping) {
    char a[] = "/tmp/cinfer-map-r-XXXXXX";
    ASSERT(pattern_file(a));
    struct ci_mapfile m;
    struct ci_err err = {0};
    ASSERT_STATUS(ci_mapfile_open(&m, a, &err), CI_OK);
    uint32_t row[250];
    for (size_t off = 0; off + sizeof row <= FILE_BYTES; off += 99996) { // rows at scattered offsets
        memset(row, 0xee, sizeof row);
        ci_mapfile_read(&m, m.data + off, sizeof row, row);
        bool same = true;
        for (size_t i = 0; i < 250; i++)
            same = same && row[i] == pattern_at(off + 4 * i);
        CHECK(same);
    }
    // Not one page of the file came into the process through the mapping.
    long rss = mapping_rss_kb(m.data);
    if (rss >= 0)
        CHECK(rss == 0);
    else
        printf("  (no /proc/self/smaps record of the mapping: its resident pages not checked)\n");
    // Bytes that are not the mapping's are copied as they are.
    uint32_t src[3] = {7, 8, 9}, dst[3] = {0};
    ci_mapfile_read(&m, src, sizeof src, dst);
    CHECK(dst[0] == 7 && dst[2] == 9);
    struct ci_mapfile none = {0}; // a zeroed struct (no file): a copy too
    ci_mapfile_read(&none, src, sizeof src, dst);
    CHECK(dst[1] == 8);
    // The file truncated under it: the lost part reads as zeros and the mapping reports the damage.
    ASSERT(truncate(a, 8192) == 0);
    ci_mapfile_read(&m, m.data + 4096, 8, row);
    CHECK(row[0] == pattern_at(4096) && row[1] == pattern_at(4100) && !ci_mapfile_damaged(&m));
    memset(row, 0xee, sizeof row);
    ci_mapfile_read(&m, m.data + 8192 - 8, 16, row); // straddles the new end
    CHECK(row[0] == pattern_at(8184) && row[1] == pattern_at(8188) && row[2] == 0 && row[3] == 0);
    CHECK(ci_mapfile_damaged(&m));
    ci_mapfile_close(&m);
    unlink(a);
}

TEST(foreign_sigbus_is_not_swallowed) {
    char a[] = "/tmp/cinfer-map-c-XXXXXX";
    ASSERT(pattern_file(a));
    struct ci_mapfile m;
    struct ci_err err = {0};
    ASSERT_STATUS(ci_mapfile_open(&m, a, &err), CI_OK); // installs the guard
    pid_t pid = fork();
    ASSERT(pid >= 0);
    char reports[] = "/tmp/cinfer-map-r-XXXXXX";
    ASSERT(mkdtemp(reports));
    if (pid == 0) {
        // Not a read of a watched mapping: the process must still die of it (under a sanitizer, of the
        // sanitizer's own SIGBUS handler, whose expected report goes to a scratch directory).
        if (__sanitizer_set_report_path) {
            char path[64];
            snprintf(path, sizeof path, "%s/report", reports);
            __sanitizer_set_report_path(path);
        }
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 2);
        raise(SIGBUS);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(!WIFEXITED(status) || WEXITSTATUS(status) != 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", reports);
    CHECK(system(cmd) == 0);
    ci_mapfile_close(&m);
    unlink(a);
}

TEST(not_regular_files) {
    char dir[] = "/tmp/cinfer-map-d-XXXXXX";
    ASSERT(mkdtemp(dir));
    char fifo[256];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    ASSERT(mkfifo(fifo, 0600) == 0);
    struct ci_mapfile m;
    struct ci_err err = {0};
    alarm(20); // a blocking open would hang here: the alarm ends the test instead
    CHECK(ci_mapfile_open(&m, fifo, &err) == CI_ERR_IO && strstr(err.msg, "not a regular file"));
    CHECK(ci_mapfile_open(&m, dir, &err) == CI_ERR_IO && strstr(err.msg, "not a regular file"));
    CHECK(ci_mapfile_open(&m, "/dev/null", &err) == CI_ERR_IO && strstr(err.msg, "not a regular file"));
    alarm(0);
    unlink(fifo);
    rmdir(dir);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(truncated_while_mapped);
    RUN(read_without_mapping);
    RUN(foreign_sigbus_is_not_swallowed);
    RUN(not_regular_files);
    return test_exit_code();
}
