/* Tiny test harness.  A test binary defines TEST(name) functions and lists them in main() via RUN(name),
 * after test_main(argc, argv); each check prints "FAIL name: file:line: ..." on failure, each test prints
 * "PASS name" or its failures.  tests/run.sh counts those lines across every test program and prints the
 * final "N passed, N failed".  Below the harness: helpers every test may share (model paths, files, a scratch
 * directory); tests/test_util.h adds those that reach cinfer's internals. */
#ifndef CINFER_TESTS_TEST_H
#define CINFER_TESTS_TEST_H

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int test_failed_checks;             // in the current test
static int test_total_failed;              // tests failed in this binary
static const char *test_current = "setup"; // name of the running test ("setup" in main, between tests)

#define TEST(name) static void test_##name(void)

/* Which tests run: the program's arguments, else $CINFER_TEST_ONLY (a comma-separated list), are name
 * substrings (commas split an argument too); when there are any, only the tests whose name holds one of them
 * run, and each other one prints "SKIP name".  A substring that no test name holds fails the program (a typo
 * must not pass as "0 failed").  `--list` prints the program's test names and runs none.  So
 *   build/release/tests/test_engine engine_thread
 *   CINFER_TEST_ONLY=engine_thread build/release/tests/test_engine
 * run the same test (make tsan runs a binary's threaded tests the second way). */
#define TEST_MAX_FILTERS 32
static char test_filter[TEST_MAX_FILTERS][128]; // the substrings
static int test_filter_hits[TEST_MAX_FILTERS];  // tests each one selected
static int test_n_filters = -1;                 // -1: not read yet
static int test_list_only;                      // --list
static const char *test_filter_source;          // where the substrings came from, for SKIP lines
static const char *test_program = "this program";

static inline void test_add_filters(const char *list) {
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        if (n > 0) {
            if (test_n_filters >= TEST_MAX_FILTERS || n >= sizeof test_filter[0]) {
                printf("FAIL %s: test name filter '%.*s' too long or too many filters\n", test_program,
                       (int)n, p);
                exit(2);
            }
            memcpy(test_filter[test_n_filters], p, n);
            test_filter[test_n_filters++][n] = '\0';
        }
        p += n + (p[n] == ',');
    }
}

/* Reads the arguments (call first thing in main; a program that does not takes $CINFER_TEST_ONLY alone). */
static inline void test_main(int argc, char **argv) {
    if (argc > 0 && argv[0]) {
        const char *slash = strrchr(argv[0], '/');
        test_program = slash ? slash + 1 : argv[0];
    }
    test_n_filters = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list") == 0) {
            test_list_only = 1;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: %s [--list] [NAME...]\n"
                   "Runs the tests whose name holds one of the NAMEs (all without any; $CINFER_TEST_ONLY, a\n"
                   "comma-separated list, when no NAME is given); --list prints the test names.\n",
                   test_program);
            exit(0);
        } else {
            test_add_filters(argv[i]);
            test_filter_source = "not named in the arguments";
        }
    }
    if (test_n_filters == 0)
        test_n_filters = -1; // no NAME: $CINFER_TEST_ONLY, read at the first test
}

static inline int test_selected(const char *name) {
    if (test_n_filters < 0) {
        test_n_filters = 0;
        const char *only = getenv("CINFER_TEST_ONLY");
        if (only && *only) {
            test_add_filters(only);
            test_filter_source = "not in CINFER_TEST_ONLY";
        }
    }
    if (test_list_only) {
        printf("%s\n", name);
        return 0;
    }
    if (test_n_filters == 0)
        return 1;
    int selected = 0;
    for (int i = 0; i < test_n_filters; i++)
        if (strstr(name, test_filter[i])) {
            test_filter_hits[i]++;
            selected = 1;
        }
    if (!selected)
        printf("SKIP %s (%s)\n", name, test_filter_source);
    return selected;
}

#define RUN(name)                                                                                            \
    do {                                                                                                     \
        if (!test_selected(#name))                                                                           \
            break;                                                                                           \
        test_current = #name;                                                                                \
        test_failed_checks = 0;                                                                              \
        test_##name();                                                                                       \
        if (test_failed_checks == 0)                                                                         \
            printf("PASS %s\n", #name);                                                                      \
        else                                                                                                 \
            test_total_failed++;                                                                             \
        fflush(stdout);                                                                                      \
    } while (0)

#define TEST_FAILF(...)                                                                                      \
    do {                                                                                                     \
        printf("FAIL %s: %s:%d: ", test_current, __FILE__, __LINE__);                                        \
        printf(__VA_ARGS__);                                                                                 \
        printf("\n");                                                                                        \
        test_failed_checks++;                                                                                \
    } while (0)

/* TEST_FAILF for the first failure of the test only (later ones are counted, not printed): a loop over
 * thousands of elements that all go wrong together prints one FAIL line. */
#define FAIL_FIRST(...)                                                                                      \
    do {                                                                                                     \
        if (test_failed_checks == 0)                                                                         \
            TEST_FAILF(__VA_ARGS__);                                                                         \
        else                                                                                                 \
            test_failed_checks++;                                                                            \
    } while (0)

#define ASSERT(cond)                                                                                         \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            TEST_FAILF("%s", #cond);                                                                         \
            return;                                                                                          \
        }                                                                                                    \
    } while (0)

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond))                                                                                         \
            TEST_FAILF("%s", #cond);                                                                         \
    } while (0)

#define ASSERT_EQ_I64(a, b)                                                                                  \
    do {                                                                                                     \
        long long a_ = (long long)(a), b_ = (long long)(b);                                                  \
        if (a_ != b_) {                                                                                      \
            TEST_FAILF("%s == %s (%lld != %lld)", #a, #b, a_, b_);                                           \
            return;                                                                                          \
        }                                                                                                    \
    } while (0)

#define ASSERT_NEAR(a, b, tol)                                                                               \
    do {                                                                                                     \
        double a_ = (double)(a), b_ = (double)(b);                                                           \
        if (!(fabs(a_ - b_) <= (tol))) {                                                                     \
            TEST_FAILF("%s ~= %s (%g vs %g, tol %g)", #a, #b, a_, b_, (double)(tol));                        \
            return;                                                                                          \
        }                                                                                                    \
    } while (0)

#define ASSERT_STATUS(expr, want)                                                                            \
    do {                                                                                                     \
        int got_ = (int)(expr);                                                                              \
        if (got_ != (int)(want)) {                                                                           \
            TEST_FAILF("%s returned %d, want %s", #expr, got_, #want);                                       \
            return;                                                                                          \
        }                                                                                                    \
    } while (0)

/* Directory of the shared tiny models ($CINFER_MODELS, else ../shared/models beside the checkout). */
static inline const char *test_models_dir(void) {
    const char *d = getenv("CINFER_MODELS");
    return d ? d : "../shared/models";
}

/* Writes "<models dir>/<name>" into buf (a path that does not fit ends the program with a FAIL line). */
static inline const char *test_model_path(char *buf, size_t n, const char *name) {
    int k = snprintf(buf, n, "%s/%s", test_models_dir(), name);
    if (k < 0 || (size_t)k >= n) {
        printf("FAIL %s: the model path of %s does not fit in %zu bytes\n", test_program, name, n);
        exit(1);
    }
    return buf;
}

/* ---- shared helpers ----------------------------------------------------------------------------------- */

/* The whole file at path, malloc'ed and NUL-terminated (the NUL not counted in *n); NULL and *n = 0 when it
 * cannot be read.  A parser test that wants ASan to see a read one byte past the end copies the bytes into a
 * buffer of exactly *n. */
static inline void *test_read_file(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)size + 1)) != NULL) {
        if (fread(buf, 1, (size_t)size, f) == (size_t)size) {
            buf[size] = '\0';
            *n = (size_t)size;
        } else {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

/* Writes data[0..n) to path (created or truncated); 1 on success, 0 on error. */
static inline int test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* The program's scratch directory, $TMPDIR (else /tmp)/cinfer-<program>-XXXXXX: made at the first call and
 * removed with the files in it when the program exits (by the process that made it, not by a forked child).
 * Exits with a FAIL line when it cannot be made. */
static char test_tmp_dir_path[512];
static pid_t test_tmp_dir_owner;

static inline void test_tmp_dir_remove(void) {
    if (getpid() != test_tmp_dir_owner)
        return;
    DIR *d = opendir(test_tmp_dir_path);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        char path[1024];
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof path, "%s/%s", test_tmp_dir_path, e->d_name);
            unlink(path);
        }
    }
    if (d)
        closedir(d);
    rmdir(test_tmp_dir_path);
}

static inline const char *test_tmp_dir(void) {
    if (!test_tmp_dir_path[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(test_tmp_dir_path, sizeof test_tmp_dir_path, "%s/cinfer-%s-XXXXXX",
                 base && *base ? base : "/tmp", test_program);
        if (!mkdtemp(test_tmp_dir_path)) {
            printf("FAIL %s: cannot make a scratch directory %s\n", test_program, test_tmp_dir_path);
            exit(1);
        }
        test_tmp_dir_owner = getpid();
        atexit(test_tmp_dir_remove);
    }
    return test_tmp_dir_path;
}

/* Writes "<scratch directory>/<name>" into buf. */
static inline const char *test_tmp_path(char *buf, size_t n, const char *name) {
    int k = snprintf(buf, n, "%s/%s", test_tmp_dir(), name);
    if (k < 0 || (size_t)k >= n) {
        printf("FAIL %s: the scratch path of %s does not fit in %zu bytes\n", test_program, name, n);
        exit(1);
    }
    return buf;
}

/* qsort comparison of C strings (an array of char *). */
static inline int test_cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The program's exit status: 1 when a test failed or a name filter selected no test. */
static inline int test_exit_code(void) {
    for (int i = 0; i < test_n_filters && !test_list_only; i++)
        if (test_filter_hits[i] == 0) {
            printf("FAIL %s: no test name holds '%s' (--list shows them)\n", test_program, test_filter[i]);
            test_total_failed++;
        }
    return test_total_failed ? 1 : 0;
}

#endif
