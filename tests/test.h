/* Tiny test harness.  A test binary defines TEST(name) functions and lists them in main() via RUN(name);
 * each check prints "FAIL name: file:line: ..." on failure, each test prints "PASS name" or its failures.
 * tests/run.sh counts those lines across every test program and prints the final "N passed, N failed". */
#ifndef CINFER_TESTS_TEST_H
#define CINFER_TESTS_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failed_checks;   // in the current test
static int test_total_failed;    // tests failed in this binary
static const char *test_current; // name of the running test

#define TEST(name) static void test_##name(void)

/* $CINFER_TEST_ONLY: a comma-separated list of substrings; when set, only the tests whose name holds one of
 * them run, and each other one prints "SKIP name" (make tsan runs a binary's threaded tests this way). */
static inline int test_selected(const char *name) {
    const char *only = getenv("CINFER_TEST_ONLY");
    if (!only || !*only)
        return 1;
    for (const char *p = only; *p;) {
        size_t n = strcspn(p, ",");
        char want[128];
        if (n > 0 && n < sizeof want) {
            memcpy(want, p, n);
            want[n] = '\0';
            if (strstr(name, want))
                return 1;
        }
        p += n + (p[n] == ',');
    }
    printf("SKIP %s (CINFER_TEST_ONLY=%s)\n", name, only);
    return 0;
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

/* Writes "<models dir>/<name>" into buf. */
static inline const char *test_model_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", test_models_dir(), name);
    return buf;
}

static inline int test_exit_code(void) {
    return test_total_failed ? 1 : 0;
}

#endif
