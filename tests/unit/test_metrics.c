/* The engine's metrics (src/engine/metrics.h) and the Prometheus text that /metrics serves: the seeds' per-request
 * yardstick from token timestamps (TTFT, TBT mean/p50/p99 through core/stats' numpy-linear quantile, TPS,
 * latency) for hand-computed timelines, empty and one-token requests; the histogram's exact exposition for a
 * known set of observations (cumulative buckets, a value on a bound counted in it, +Inf, _sum, _count), an
 * empty histogram, text that does not fit, observations from several threads; and the engine's whole
 * exposition (cinfer_engine_metrics, what the server's /metrics returns) checked against the text format
 * (https://prometheus.io/docs/instrumenting/exposition_formats/) idle and after one request of known size. */
#include "engine/metrics.h"

#include <pthread.h>
#include <stdatomic.h>

#include "cinfer.h"
#include "core/stats.h"
#include "test.h"

#define MS 1000000LL // nanoseconds

/* ---- per-request timing ------------------------------------------------------------------------------ */

TEST(token_timing_table) {
    static const struct {
        const char *what;
        int64_t start;
        int64_t tokens[8];
        int n;
        struct token_timing want;
    } cases[] = {
        // Gaps 2, 3, 10 ms: mean 5; sorted [2, 3, 10]: p50 = 3, p99 at rank 1.98 = 3 + 0.98 * 7 = 9.86.
        {"four tokens", 0, {10 * MS, 12 * MS, 15 * MS, 25 * MS}, 4, {10, 5, 3, 9.86, 200, 25}},
        // Gaps 1, 10, 1, 1 ms: sorted [1, 1, 1, 10]; p50 at rank 1.5 = 1, p99 at rank 2.97 = 1 + 0.97 * 9 = 9.73.
        {"unsorted gaps", 0, {0, 1 * MS, 11 * MS, 12 * MS, 13 * MS}, 5, {0, 3.25, 1, 9.73, 1000 / 3.25, 13}},
        {"two tokens", 0, {1 * MS, 5 * MS}, 2, {1, 4, 4, 4, 250, 5}},
        {"start not at zero",
         100 * MS,
         {103 * MS, 104 * MS, 106 * MS},
         3,
         {3, 1.5, 1.5, 1.99, 1000 / 1.5, 6}},
        // One token: the time to it, nothing between tokens to measure.
        {"one token", 2 * MS, {7 * MS}, 1, {5, 0, 0, 0, 0, 5}},
        // Two tokens at once: no time between them, and no division by it.
        {"zero gap", 0, {5 * MS, 5 * MS}, 2, {5, 0, 0, 0, 0, 5}},
        {"no tokens", 0, {0}, 0, {0, 0, 0, 0, 0, 0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double scratch[8];
        struct token_timing got;
        memset(&got, 0x7f, sizeof got);
        metrics_token_timing(cases[i].start, cases[i].tokens, cases[i].n, scratch, &got);
        const struct token_timing *w = &cases[i].want;
        const double g[6] = {got.ttft_ms,    got.tbt_mean_ms, got.tbt_p50_ms,
                             got.tbt_p99_ms, got.tps,         got.latency_ms};
        const double e[6] = {w->ttft_ms, w->tbt_mean_ms, w->tbt_p50_ms, w->tbt_p99_ms, w->tps, w->latency_ms};
        static const char *const names[6] = {"ttft", "tbt mean", "tbt p50", "tbt p99", "tps", "latency"};
        for (int k = 0; k < 6; k++)
            if (!(fabs(g[k] - e[k]) <= 1e-9 * (1 + fabs(e[k]))))
                TEST_FAILF("%s: %s %.12g, want %.12g", cases[i].what, names[k], g[k], e[k]);
        // The seeds' identity: latency = TTFT + (n - 1) * mean TBT.
        if (cases[i].n >= 1 &&
            !(fabs(got.latency_ms - (got.ttft_ms + (cases[i].n - 1) * got.tbt_mean_ms)) < 1e-9))
            TEST_FAILF("%s: latency %g != ttft + (n - 1) tbt", cases[i].what, got.latency_ms);
    }
}

/* numpy.quantile's default ("linear"): the value at rank (n - 1) q between the two nearest sorted values. */
TEST(quantiles_numpy_linear) {
    double x[] = {3, -1, 2, 2};
    ci_sort_doubles(x, 4);
    CHECK(x[0] == -1 && x[1] == 2 && x[2] == 2 && x[3] == 3);
    static const struct {
        double q, want;
    } cases[] = {{0, -1}, {0.1, -0.1}, {1.0 / 3, 2}, {0.5, 2}, {0.9, 2.7}, {1, 3}, {-0.5, -1}, {2, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double got = ci_quantile(x, 4, cases[i].q);
        if (!(fabs(got - cases[i].want) < 1e-12))
            TEST_FAILF("q %g: %.15g, want %g", cases[i].q, got, cases[i].want);
    }
    double two[] = {10, 20};
    CHECK(fabs(ci_quantile(two, 2, 0.25) - 12.5) < 1e-12);
    // An empty sample has no quantile (NaN), never a measured zero.
    CHECK(isnan(ci_quantile(NULL, 0, 0.5)) && isnan(ci_quantile(x, 0, 0)));
    ci_sort_doubles(NULL, 0); // nothing to sort
}

/* ---- histograms -------------------------------------------------------------------------------------- */

static const double bounds3[] = {0.1, 0.5, 1};

/* Prometheus buckets are cumulative and inclusive ("le": less than or equal); 100 ms lands in le="0.1". */
TEST(histogram_exposition_exact) {
    static struct histogram h;
    histogram_init(&h, bounds3, 3);
    const int64_t obs[] = {50 * MS, 100 * MS, 300 * MS, 2000 * MS};
    for (int i = 0; i < 4; i++)
        histogram_observe_ns(&h, obs[i]);
    char buf[1024];
    size_t len = 0;
    ASSERT(histogram_format(&h, "t_seconds", "Test.", buf, sizeof buf, &len));
    static const char want[] = "# HELP t_seconds Test.\n"
                               "# TYPE t_seconds histogram\n"
                               "t_seconds_bucket{le=\"0.1\"} 2\n"
                               "t_seconds_bucket{le=\"0.5\"} 3\n"
                               "t_seconds_bucket{le=\"1\"} 3\n"
                               "t_seconds_bucket{le=\"+Inf\"} 4\n"
                               "t_seconds_sum 2.45\n"
                               "t_seconds_count 4\n";
    if (len != sizeof want - 1 || strcmp(buf, want) != 0)
        TEST_FAILF("got (%zu):\n%s\nwant (%zu):\n%s", len, buf, sizeof want - 1, want);
}

TEST(histogram_bounds_table) {
    static const struct {
        int64_t ns;
        int bucket;      // the first bucket (0, 1, 2; 3 = +Inf only) that counts it
        const char *sum; // seconds, 9 significant digits
    } cases[] = {
        {0, 0, "0"},
        {1, 0, "1e-09"},
        {100 * MS, 0, "0.1"},
        {100 * MS + 1, 1, "0.100000001"},
        {500 * MS, 1, "0.5"},
        {500 * MS + 1, 2, "0.500000001"},
        {1000 * MS, 2, "1"},
        {1000 * MS + 1, 3, "1"}, // past the bound, though 9 digits do not show it
        {3600000 * MS, 3, "3600"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static struct histogram h;
        histogram_init(&h, bounds3, 3);
        histogram_observe_ns(&h, cases[i].ns);
        char buf[1024], want[1024];
        size_t len = 0;
        ASSERT(histogram_format(&h, "x", "X.", buf, sizeof buf, &len));
        snprintf(want, sizeof want,
                 "# HELP x X.\n# TYPE x histogram\nx_bucket{le=\"0.1\"} %d\nx_bucket{le=\"0.5\"} %d\n"
                 "x_bucket{le=\"1\"} %d\nx_bucket{le=\"+Inf\"} 1\nx_sum %s\nx_count 1\n",
                 cases[i].bucket <= 0, cases[i].bucket <= 1, cases[i].bucket <= 2, cases[i].sum);
        if (strcmp(buf, want) != 0)
            TEST_FAILF("%lld ns:\n%s\nwant\n%s", (long long)cases[i].ns, buf, want);
    }
}

TEST(histogram_empty_and_no_bounds) {
    static struct histogram h;
    histogram_init(&h, bounds3, 3);
    char buf[512];
    size_t len = 0;
    ASSERT(histogram_format(&h, "e", "Empty.", buf, sizeof buf, &len));
    CHECK(strcmp(buf, "# HELP e Empty.\n# TYPE e histogram\ne_bucket{le=\"0.1\"} 0\ne_bucket{le=\"0.5\"} 0\n"
                      "e_bucket{le=\"1\"} 0\ne_bucket{le=\"+Inf\"} 0\ne_sum 0\ne_count 0\n") == 0);
    // No bounds: the +Inf bucket alone.
    histogram_init(&h, NULL, 0);
    histogram_observe_ns(&h, 1500 * MS);
    len = 0;
    ASSERT(histogram_format(&h, "n", "None.", buf, sizeof buf, &len));
    CHECK(strcmp(buf,
                 "# HELP n None.\n# TYPE n histogram\nn_bucket{le=\"+Inf\"} 1\nn_sum 1.5\nn_count 1\n") == 0);
    // More bounds than a histogram holds: the first METRICS_MAX_BUCKETS, then +Inf.
    static double many[METRICS_MAX_BUCKETS + 5];
    for (int i = 0; i < METRICS_MAX_BUCKETS + 5; i++)
        many[i] = i + 1;
    histogram_init(&h, many, METRICS_MAX_BUCKETS + 5);
    histogram_observe_ns(&h, (int64_t)(METRICS_MAX_BUCKETS + 2) * 1000 * MS); // past the last bound kept
    static char big[8192];
    len = 0;
    ASSERT(histogram_format(&h, "m", "Many.", big, sizeof big, &len));
    char last[64];
    snprintf(last, sizeof last, "m_bucket{le=\"%d\"} 0\nm_bucket{le=\"+Inf\"} 1\n", METRICS_MAX_BUCKETS);
    CHECK(strstr(big, last) != NULL);
    snprintf(last, sizeof last, "le=\"%d\"", METRICS_MAX_BUCKETS + 1);
    CHECK(strstr(big, last) == NULL);
}

/* Text that does not fit (the NUL included) is refused, never cut: false for every smaller buffer. */
TEST(format_does_not_fit) {
    static struct histogram h;
    histogram_init(&h, bounds3, 3);
    histogram_observe_ns(&h, 200 * MS);
    char full[1024];
    size_t n_full = 0;
    ASSERT(histogram_format(&h, "f", "Fit.", full, sizeof full, &n_full));
    for (size_t cap = 0; cap <= n_full; cap++) {
        char buf[1024];
        size_t len = 0;
        if (histogram_format(&h, "f", "Fit.", buf, cap, &len)) {
            TEST_FAILF("fits in %zu bytes, needs %zu", cap, n_full + 1);
            break;
        }
    }
    char buf[1024];
    size_t len = 0;
    CHECK(histogram_format(&h, "f", "Fit.", buf, n_full + 1, &len) && len == n_full &&
          strcmp(buf, full) == 0);
    // metrics_appendf: all or nothing, *len advanced only on success.
    char s[6];
    len = 0;
    CHECK(metrics_appendf(s, sizeof s, &len, "%s", "hello") && len == 5 && strcmp(s, "hello") == 0);
    CHECK(!metrics_appendf(s, sizeof s, &len, "%s", "!") && len == 5);
    len = 0;
    CHECK(!metrics_appendf(s, sizeof s, &len, "%s", "hello!") && len == 0);
    len = 7; // already past the end
    CHECK(!metrics_appendf(s, sizeof s, &len, "%s", "") && len == 7);
    len = 0;
    CHECK(metrics_appendf(s, sizeof s, &len, "%d-%d", 1, 2) && len == 3 && strcmp(s, "1-2") == 0);
}

/* Observations from several threads at once (the engine thread writes, /metrics reads): none is lost. */
#define N_OBS_THREADS 4
#define N_OBS         10000

static struct histogram shared_h;

static void *observer(void *arg) {
    (void)arg;
    for (int i = 0; i < N_OBS; i++)
        histogram_observe_ns(&shared_h, (i % 10) * 100 * MS); // 0, 0.1, ..., 0.9 s
    return NULL;
}

TEST(histogram_concurrent_observations) {
    histogram_init(&shared_h, bounds3, 3);
    pthread_t t[N_OBS_THREADS];
    for (int i = 0; i < N_OBS_THREADS; i++)
        ASSERT(pthread_create(&t[i], NULL, observer, NULL) == 0);
    char buf[1024];
    for (int k = 0; k < 20; k++) { // read while they write: well-formed and cumulative every time
        size_t len = 0;
        CHECK(histogram_format(&shared_h, "c", "C.", buf, sizeof buf, &len));
    }
    for (int i = 0; i < N_OBS_THREADS; i++)
        pthread_join(t[i], NULL);
    size_t len = 0;
    ASSERT(histogram_format(&shared_h, "c", "C.", buf, sizeof buf, &len));
    // Per thread and per 10 observations: 0 and 0.1 in le=0.1; 0.2-0.5 in le=0.5; 0.6-0.9 in le=1.
    // Sum: 4 threads * 1000 rounds * 4.5 s = 18000 s.
    CHECK(strcmp(buf,
                 "# HELP c C.\n# TYPE c histogram\nc_bucket{le=\"0.1\"} 8000\nc_bucket{le=\"0.5\"} 24000\n"
                 "c_bucket{le=\"1\"} 40000\nc_bucket{le=\"+Inf\"} 40000\nc_sum 18000\nc_count 40000\n") == 0);
}

/* ---- the engine's exposition ------------------------------------------------------------------------- */

/* A metric or label name: [a-zA-Z_:][a-zA-Z0-9_:]*. */
static bool name_ok(const char *s, size_t n) {
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
            return false;
    }
    return true;
}

/* Checks text against the Prometheus text format: every line "# HELP name doc", "# TYPE name type" or a
 * sample "name[{label="value",...}] value"; each family's TYPE once, before its samples; histogram buckets with
 * increasing le, cumulative counts, +Inf equal to _count.  Returns the number of samples, or -1 after a FAIL
 * line. */
static int check_exposition(const char *text) {
    char typed[64][96];
    char types[64][16];
    int n_typed = 0, n_samples = 0;
    char hist[96] = "";
    double last_le = -INFINITY, last_count = 0;
    bool saw_inf = false;
    size_t n = strlen(text);
    if (n == 0 || text[n - 1] != '\n') {
        TEST_FAILF("the text does not end with a newline");
        return -1;
    }
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = (size_t)(end - line);
        char l[512];
        if (len >= sizeof l) {
            TEST_FAILF("line too long: %.80s", line);
            return -1;
        }
        memcpy(l, line, len);
        l[len] = '\0';
        line = end + 1;
        if (strncmp(l, "# HELP ", 7) == 0) {
            const char *sp = strchr(l + 7, ' ');
            if (!sp || !name_ok(l + 7, (size_t)(sp - l - 7)) || sp[1] == '\0') {
                TEST_FAILF("bad HELP line: %s", l);
                return -1;
            }
            continue;
        }
        if (strncmp(l, "# TYPE ", 7) == 0) {
            char name[96], type[16];
            if (sscanf(l + 7, "%95s %15s", name, type) != 2 || !name_ok(name, strlen(name)) ||
                (strcmp(type, "counter") && strcmp(type, "gauge") && strcmp(type, "histogram"))) {
                TEST_FAILF("bad TYPE line: %s", l);
                return -1;
            }
            for (int i = 0; i < n_typed; i++)
                if (strcmp(typed[i], name) == 0) {
                    TEST_FAILF("family %s typed twice", name);
                    return -1;
                }
            if (n_typed == 64)
                return -1;
            snprintf(typed[n_typed], sizeof typed[0], "%s", name);
            snprintf(types[n_typed++], sizeof types[0], "%s", type);
            if (hist[0] && !saw_inf) {
                TEST_FAILF("histogram %s has no +Inf bucket", hist);
                return -1;
            }
            snprintf(hist, sizeof hist, "%s", strcmp(type, "histogram") == 0 ? name : "");
            last_le = -INFINITY;
            last_count = 0;
            saw_inf = false;
            continue;
        }
        if (l[0] == '#') {
            TEST_FAILF("unknown comment line: %s", l);
            return -1;
        }
        // A sample: name, optional labels, one space, a value.
        size_t nl = strcspn(l, "{ ");
        if (!name_ok(l, nl)) {
            TEST_FAILF("bad metric name: %s", l);
            return -1;
        }
        const char *p = l + nl;
        char le[32] = "";
        if (*p == '{') {
            const char *close = strchr(p, '}');
            if (!close) {
                TEST_FAILF("unclosed labels: %s", l);
                return -1;
            }
            for (const char *q = p + 1; q < close;) { // label="value" pairs, comma-separated
                size_t ln = strcspn(q, "=");
                if (!name_ok(q, ln) || q[ln + 1] != '"') {
                    TEST_FAILF("bad label: %s", l);
                    return -1;
                }
                const char *v = q + ln + 2, *ve = strchr(v, '"');
                if (!ve || ve > close) {
                    TEST_FAILF("bad label value: %s", l);
                    return -1;
                }
                if (ln == 2 && strncmp(q, "le", 2) == 0)
                    snprintf(le, sizeof le, "%.*s", (int)(ve - v), v);
                q = ve + 1;
                if (*q == ',')
                    q++;
                else if (q != close) {
                    TEST_FAILF("bad label list: %s", l);
                    return -1;
                }
            }
            p = close + 1;
        }
        char *vend;
        if (*p != ' ' || p[1] == '\0') {
            TEST_FAILF("no value: %s", l);
            return -1;
        }
        double v = strtod(p + 1, &vend);
        if (*vend != '\0' || isnan(v)) {
            TEST_FAILF("bad value: %s", l);
            return -1;
        }
        // The sample belongs to the family typed last (its name, or name_bucket/_sum/_count for a histogram).
        if (n_typed == 0) {
            TEST_FAILF("sample before any TYPE: %s", l);
            return -1;
        }
        const char *fam = typed[n_typed - 1];
        size_t fl = strlen(fam);
        bool is_hist = hist[0] != '\0';
        const char *suffix = l + fl;
        if (strncmp(l, fam, fl) != 0 ||
            (is_hist ? !(strncmp(suffix, "_bucket{", 8) == 0 || strncmp(suffix, "_sum ", 5) == 0 ||
                         strncmp(suffix, "_count ", 7) == 0)
                     : !(*suffix == ' ' || *suffix == '{'))) {
            TEST_FAILF("sample not of family %s: %s", fam, l);
            return -1;
        }
        if (is_hist && strncmp(suffix, "_bucket", 7) == 0) {
            double b = strcmp(le, "+Inf") == 0 ? INFINITY : strtod(le, NULL);
            if (!le[0] || !(b > last_le) || v < last_count || saw_inf) {
                TEST_FAILF("bucket out of order or not cumulative: %s", l);
                return -1;
            }
            last_le = b;
            last_count = v;
            saw_inf = isinf(b);
        } else if (is_hist && strncmp(suffix, "_count", 6) == 0 && (!saw_inf || v != last_count)) {
            TEST_FAILF("%s: _count differs from the +Inf bucket", l);
            return -1;
        } else if (!is_hist && v < 0) {
            TEST_FAILF("negative value: %s", l);
            return -1;
        }
        n_samples++;
    }
    return n_samples;
}

/* The value of the sample whose name and labels are exactly key; NAN when there is no such line. */
static double sample(const char *text, const char *key) {
    size_t k = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        if (strncmp(l, key, k) == 0 && l[k] == ' ')
            return strtod(l + k + 1, NULL);
    return NAN;
}

static struct cinfer_model *model;

TEST(engine_exposition_idle_and_after_a_request) {
    struct cinfer_engine_options eo;
    cinfer_engine_options_default(&eo);
    eo.n_threads = 1;
    struct cinfer_engine *e = NULL;
    struct cinfer_error err = {0};
    ASSERT_STATUS(cinfer_engine_create(model, &eo, &e, &err), CINFER_OK);
    char *text = NULL;
    size_t len = 0;
    ASSERT_STATUS(cinfer_engine_metrics(e, &text, &len), CINFER_OK);
    CHECK(len == strlen(text));
    // 17 families (engine.h): 12 gauges and counters (4 of them speculative decoding's, present without it),
    // requests by 4 finish reasons, 4 histograms (each at least one bound, +Inf, _sum and _count).
    int n = check_exposition(text);
    CHECK(n >= 12 + 4 + 4 * 4);
    int n_types = 0;
    for (const char *t = text; (t = strstr(t, "# TYPE ")) != NULL; t++)
        n_types++;
    CHECK(n_types == 17);
    static const char *const zero[] = {
        "cinfer:num_requests_running",
        "cinfer:num_requests_waiting",
        "cinfer:kv_cache_usage_perc",
        "cinfer:prefix_cache_queries_total",
        "cinfer:prefix_cache_hits_total",
        "cinfer:prompt_tokens_total",
        "cinfer:generation_tokens_total",
        "cinfer:num_preemptions_total",
        "cinfer:request_success_total{finished_reason=\"stop\"}",
        "cinfer:request_success_total{finished_reason=\"length\"}",
        "cinfer:request_success_total{finished_reason=\"abort\"}",
        "cinfer:request_success_total{finished_reason=\"error\"}",
        "cinfer:time_to_first_token_seconds_count",
        "cinfer:inter_token_latency_seconds_count",
        "cinfer:e2e_request_latency_seconds_count",
        "cinfer:request_queue_time_seconds_count",
        "cinfer:time_to_first_token_seconds_sum",
        "cinfer:time_to_first_token_seconds_bucket{le=\"+Inf\"}",
    };
    for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++)
        if (sample(text, zero[i]) != 0)
            TEST_FAILF("idle: %s is %g, want 0", zero[i], sample(text, zero[i]));
    CHECK(strstr(text, "# TYPE cinfer:prompt_tokens_total counter\n") != NULL);
    CHECK(strstr(text, "# TYPE cinfer:num_requests_running gauge\n") != NULL);
    CHECK(strstr(text, "# TYPE cinfer:e2e_request_latency_seconds histogram\n") != NULL);
    cinfer_free(text);

    // One request: a 5-token prompt (BOS "Once upon a time"), 4 tokens generated to the length limit.
    const cinfer_token prompt[5] = {1, 403, 407, 261, 378};
    struct cinfer_request_options ro;
    cinfer_request_options_default(&ro);
    ro.max_tokens = 4;
    ro.ignore_eos = true;
    ro.sampling.temperature = 0;
    struct cinfer_stream *st = NULL;
    ASSERT_STATUS(cinfer_engine_submit(e, prompt, 5, &ro, &st, &err), CINFER_OK);
    bool done = false;
    int n_tok = 0;
    for (int steps = 0; !done && steps < 100; steps++) {
        cinfer_engine_step(e);
        struct cinfer_event ev;
        while (!done && cinfer_stream_next(st, 0, &ev, 0) == CINFER_OK) {
            n_tok += ev.kind == CINFER_EVENT_TOKEN;
            done = ev.kind == CINFER_EVENT_DONE || ev.kind == CINFER_EVENT_ERROR;
        }
    }
    cinfer_stream_release(st);
    ASSERT(done && n_tok == 4);
    ASSERT_STATUS(cinfer_engine_metrics(e, &text, &len), CINFER_OK);
    CHECK(check_exposition(text) == n);
    static const struct {
        const char *key;
        double want;
    } after[] = {
        {"cinfer:num_requests_running", 0},
        {"cinfer:num_requests_waiting", 0},
        {"cinfer:prompt_tokens_total", 5},
        {"cinfer:generation_tokens_total", 4},
        {"cinfer:num_preemptions_total", 0},
        {"cinfer:request_success_total{finished_reason=\"stop\"}", 0},
        {"cinfer:request_success_total{finished_reason=\"length\"}", 1},
        {"cinfer:request_success_total{finished_reason=\"abort\"}", 0},
        {"cinfer:request_success_total{finished_reason=\"error\"}", 0},
        {"cinfer:time_to_first_token_seconds_count", 1}, // one first token
        {"cinfer:inter_token_latency_seconds_count", 3}, // 4 tokens, 3 gaps
        {"cinfer:e2e_request_latency_seconds_count", 1}, // one request finished
        {"cinfer:request_queue_time_seconds_count", 1},  // admitted once
        {"cinfer:prefix_cache_hits_total", 0},           // nothing cached before it
    };
    for (size_t i = 0; i < sizeof after / sizeof after[0]; i++)
        if (sample(text, after[i].key) != after[i].want)
            TEST_FAILF("after one request: %s is %g, want %g", after[i].key, sample(text, after[i].key),
                       after[i].want);
    double ttft = sample(text, "cinfer:time_to_first_token_seconds_sum");
    double e2e = sample(text, "cinfer:e2e_request_latency_seconds_sum");
    double kv = sample(text, "cinfer:kv_cache_usage_perc");
    CHECK(ttft > 0 && e2e >= ttft && e2e < 60);
    CHECK(kv >= 0 && kv <= 1);
    cinfer_free(text);
    cinfer_engine_free(e);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(token_timing_table);
    RUN(quantiles_numpy_linear);
    RUN(histogram_exposition_exact);
    RUN(histogram_bounds_table);
    RUN(histogram_empty_and_no_bounds);
    RUN(format_does_not_fit);
    RUN(histogram_concurrent_observations);
    char p[512];
    struct cinfer_error err = {0};
    if (cinfer_model_load(test_model_path(p, sizeof p, "stories260K.gguf"), NULL, &model, &err) !=
        CINFER_OK) {
        printf("FAIL setup: load %s: %s\n", p, err.message);
        return 1;
    }
    RUN(engine_exposition_idle_and_after_a_request);
    cinfer_model_free(model);
    return test_exit_code();
}
