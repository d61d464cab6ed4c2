/* Replays files through one fuzz harness without libFuzzer (any compiler, any sanitizer or none), so
 * `make test` and `make asan` re-check every seed and every past crasher.  Linked with
 * tests/fuzz/fuzz_<target>.c into <build>/tests/test_fuzz_<target> (FUZZ_TARGET is "<target>").
 *
 *   test_fuzz_<target>                 replays tests/fuzz/corpus/<target>/ and tests/fuzz/crashes/<target>/
 *                                      (under $CINFER_ROOT, else the current directory)
 *   test_fuzz_<target> FILE|DIR ...    replays those files (a directory: every file in it)
 *
 * Each input runs in a forked child, so one crash or failed property is reported against its file and
 * the others still run.  Prints tests/run.sh's lines: "PASS fuzz_<target>/<file>" or "FAIL ...: why". */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz.h"

#ifndef FUZZ_TARGET
#define FUZZ_TARGET "unknown"
#endif

// Harnesses that load nothing up front do not define it.
#pragma weak LLVMFuzzerInitialize

static int n_failed, n_run;

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    uint8_t *b = NULL;
    size_t cap = 0, len = 0;
    if (!f)
        return NULL;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *g = realloc(b, cap);
            if (!g) {
                free(b);
                fclose(f);
                return NULL;
            }
            b = g;
        }
        size_t r = fread(b + len, 1, cap - len, f);
        len += r;
        if (r == 0)
            break;
    }
    fclose(f);
    *n = len;
    return b;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static void replay_file(const char *path) {
    size_t n = 0;
    uint8_t *data = read_all(path, &n);
    n_run++;
    if (!data) {
        printf("FAIL fuzz_%s/%s: cannot read %s: %s\n", FUZZ_TARGET, base_name(path), path, strerror(errno));
        n_failed++;
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        // The exact-size copy lets ASan see a read one byte past the input, as libFuzzer's copy does.
        uint8_t *copy = malloc(n ? n : 1);
        if (n)
            memcpy(copy, data, n);
        LLVMFuzzerTestOneInput(copy, n);
        free(copy);
        free(data);
        exit(0);
    }
    free(data);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) {
        printf("FAIL fuzz_%s/%s: fork/wait failed\n", FUZZ_TARGET, base_name(path));
        n_failed++;
    } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        printf("PASS fuzz_%s/%s\n", FUZZ_TARGET, base_name(path));
    } else {
        if (WIFSIGNALED(st))
            printf("FAIL fuzz_%s/%s: killed by signal %d (see the report above)\n", FUZZ_TARGET,
                   base_name(path), WTERMSIG(st));
        else
            printf("FAIL fuzz_%s/%s: exit status %d (see the report above)\n", FUZZ_TARGET, base_name(path),
                   WEXITSTATUS(st));
        n_failed++;
    }
    fflush(stdout);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of dir, in name order; a missing directory is fine (no crashers kept yet). */
static void replay_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **g = realloc(names, cap * sizeof *names);
            if (!g)
                break;
            names = g;
        }
        size_t l = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(l);
        if (!names[n])
            break;
        snprintf(names[n], l, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
            replay_file(names[i]);
        free(names[i]);
    }
    free(names);
}

static void replay_path(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        replay_dir(path);
    else
        replay_file(path);
}

int main(int argc, char **argv) {
    // Unbuffered-enough output for tests/run.sh, which reads the combined log after the run.
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            replay_path(argv[i]);
    } else {
        const char *root = getenv("CINFER_ROOT");
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", root && *root ? root : ".", FUZZ_TARGET);
        replay_dir(dir);
        if (n_run == 0) {
            printf("FAIL fuzz_%s: no seed corpus in %s\n", FUZZ_TARGET, dir);
            n_failed++;
        }
        snprintf(dir, sizeof dir, "%s/tests/fuzz/crashes/%s", root && *root ? root : ".", FUZZ_TARGET);
        replay_dir(dir);
    }
    return n_failed ? 1 : 0;
}
