/* The router's decisions and its Prometheus handling, without a network (src/server/router_policy.h,
 * router_metrics.h): which replica each policy picks for hand-built sequences of requests (longest
 * prefix, the min-match, load and KV bounds, health, exclusion, round-robin order, least-loaded order,
 * the LRU forgetting of block keys), and the merged /metrics text against expositions written out by hand
 * from the Prometheus text format (one HELP/TYPE per family, every family's samples together, the
 * replica label first).  The block keys are the chain of core/hash.h: the test checks its defining
 * recurrence against ci_hash_bytes directly. */
#include "test.h"

#include <stdint.h>

#include "core/hash.h"
#include "core/mem.h"
#include "server/router_metrics.h"
#include "server/router_policy.h"

static struct router_policy *make(enum router_policy_kind kind, int n, int entries) {
    struct router_policy_options o = {kind, n, entries, 2, 0.9, 0.5};
    struct router_policy *p = NULL;
    struct ci_err err = {0};
    if (router_policy_create(&o, &p, &err) != CI_OK)
        return NULL;
    return p;
}

TEST(hash_chain_recurrence) {
    int32_t toks[40];
    for (int i = 0; i < 40; i++)
        toks[i] = i * 7 - 3;
    uint64_t keys[4] = {0};
    ASSERT_EQ_I64((long long)ci_hash_chain(toks, 40, 16, keys, 4), 2); // two full blocks of 16
    uint64_t k0 = ci_hash_bytes(CI_HASH_CHAIN_SEED, toks, 16 * sizeof(int32_t));
    uint64_t k1 = ci_hash_bytes(k0, toks + 16, 16 * sizeof(int32_t));
    CHECK(keys[0] == k0 && keys[1] == k1);
    ASSERT_EQ_I64((long long)ci_hash_chain(toks, 40, 16, keys, 1), 1);
    ASSERT_EQ_I64((long long)ci_hash_chain(toks, 15, 16, keys, 4), 0);
    ASSERT_EQ_I64((long long)ci_hash_chain(toks, 40, 0, keys, 4), 0);
    // a different first block changes every later key: the chain is over the whole prefix
    int32_t other[40];
    memcpy(other, toks, sizeof other);
    other[0] = 99;
    uint64_t k2[2];
    ci_hash_chain(other, 40, 16, k2, 2);
    CHECK(k2[0] != keys[0]);
    ci_hash_chain(toks, 40, 16, keys, 2);
    CHECK(k2[1] != keys[1]);
}

TEST(policy_names) {
    enum router_policy_kind k;
    CHECK(router_policy_parse("prefix", &k) && k == ROUTER_POLICY_PREFIX);
    CHECK(router_policy_parse("round-robin", &k) && k == ROUTER_POLICY_ROUND_ROBIN);
    CHECK(router_policy_parse("least-loaded", &k) && k == ROUTER_POLICY_LEAST_LOADED);
    CHECK(!router_policy_parse("random", &k) && !router_policy_parse("", &k));
    struct router_policy *p = NULL;
    struct ci_err err = {0};
    struct router_policy_options o = {ROUTER_POLICY_PREFIX, 0, 16, 2, 0.9, 0.5};
    ASSERT_STATUS(router_policy_create(&o, &p, &err), CI_ERR_INVALID);
    o.n_replicas = ROUTER_MAX_REPLICAS + 1;
    ASSERT_STATUS(router_policy_create(&o, &p, &err), CI_ERR_INVALID);
    o.n_replicas = 2;
    o.table_entries = 0;
    ASSERT_STATUS(router_policy_create(&o, &p, &err), CI_ERR_INVALID);
    CHECK(p == NULL);
}

TEST(prefix_longest_match) {
    struct router_policy *p = make(ROUTER_POLICY_PREFIX, 3, 1024);
    ASSERT(p);
    uint64_t a[4] = {11, 12, 13, 14}, b[4] = {21, 22, 23, 24};
    int m = -1;
    int ra = router_policy_pick(p, a, 4, 0, &m); // nothing known: by load (all idle: the rotation's first)
    CHECK(m == 0);
    router_policy_done(p, ra, false);
    int rb = router_policy_pick(p, b, 4, 0, &m); // the rotation moved on: another replica
    CHECK(m == 0 && rb != ra);
    router_policy_done(p, rb, false);
    for (int i = 0; i < 5; i++) { // a's group keeps going to a's replica, whatever the rotation says
        uint64_t a2[5] = {11, 12, 13, 14, (uint64_t)(100 + i)};
        CHECK(router_policy_pick(p, a2, 5, 0, &m) == ra && m == 4);
        router_policy_done(p, ra, false);
    }
    // b's prefix of 3 blocks (of 4): b's replica
    uint64_t b3[4] = {21, 22, 23, 99};
    CHECK(router_policy_pick(p, b3, 4, 0, &m) == rb && m == 3);
    router_policy_done(p, rb, false);
    // a match of 1 block of 4 is under min_match 0.5: by load instead (and recorded there)
    uint64_t a1[4] = {11, 31, 32, 33};
    router_policy_pick(p, a1, 4, 0, &m);
    CHECK(m == 0);
    struct router_replica_stats st;
    router_policy_stats(p, ra, &st);
    CHECK(st.n_prefix == 5);
    router_policy_free(p);
}

TEST(prefix_load_and_health_bounds) {
    struct router_policy *p = make(ROUTER_POLICY_PREFIX, 2, 1024);
    ASSERT(p);
    uint64_t k[2] = {1, 2};
    int m = -1, r = router_policy_pick(p, k, 2, 0, &m);
    ASSERT(r >= 0);
    // r holds 1 in flight; 2 more are within balance_abs 2 of the idle other one (3 <= 0 + 2 fails at 3)
    CHECK(router_policy_pick(p, k, 2, 0, &m) == r && m == 2);     // 1 <= 0 + 2: followed
    CHECK(router_policy_pick(p, k, 2, 0, &m) == r && m == 2);     // 2 <= 0 + 2: followed
    CHECK(router_policy_pick(p, k, 2, 0, &m) == 1 - r && m == 0); // 3 > 0 + 2: the other one
    // both were sent the blocks now: equal matches, the one with fewer in flight (1 - r: 1 against 3)
    CHECK(router_policy_pick(p, k, 2, 0, &m) == 1 - r && m == 2);
    CHECK(router_policy_pick(p, k, 2, 0, &m) == 1 - r && m == 2); // 2 against 3
    for (int i = 0; i < 3; i++)
        router_policy_done(p, r, false);
    for (int i = 0; i < 3; i++)
        router_policy_done(p, 1 - r, false);
    // both idle: a full KV cache on 1 - r: its match is not followed, r's is
    router_policy_set_load(p, 1 - r, 0.95, 3, 1);
    for (int i = 0; i < 3; i++) {
        CHECK(router_policy_pick(p, k, 2, 0, &m) == r && m == 2);
        router_policy_done(p, r, false);
    }
    // a longer match wins over a shorter one on a less loaded replica
    router_policy_set_load(p, 1 - r, 0.1, 0, 0);
    uint64_t k3[3] = {1, 2, 3};
    int r3 = router_policy_pick(p, k3, 3, 0, &m); // both match 2 blocks
    CHECK(r3 >= 0 && m == 2);
    CHECK(router_policy_pick(p, k3, 3, 0, &m) == r3 && m == 3); // 3 on r3 (1 in flight), 2 on the other (0)
    router_policy_done(p, r3, false);
    router_policy_done(p, r3, false);
    // r3 excluded: the other one's shorter match (2 blocks) still counts
    CHECK(router_policy_pick(p, k3, 3, 1ull << r3, &m) == 1 - r3 && m == 2);
    router_policy_done(p, 1 - r3, false);
    // r unhealthy: never picked
    router_policy_set_healthy(p, r, false);
    CHECK(router_policy_n_healthy(p) == 1);
    for (int i = 0; i < 4; i++) {
        CHECK(router_policy_pick(p, k, 2, 0, &m) == 1 - r);
        router_policy_done(p, 1 - r, false);
    }
    // excluded (it failed this request) and the other unhealthy: none
    CHECK(router_policy_pick(p, k, 2, 1ull << (1 - r), &m) == -1);
    router_policy_set_healthy(p, 1 - r, false);
    CHECK(router_policy_pick(p, NULL, 0, 0, &m) == -1);
    router_policy_set_healthy(p, r, true);
    CHECK(router_policy_pick(p, NULL, 0, 0, &m) == r);
    router_policy_done(p, r, true);
    struct router_replica_stats st;
    router_policy_stats(p, r, &st);
    CHECK(st.in_flight == 0 && st.n_failovers == 1);
    router_policy_free(p);
}

TEST(round_robin_order) {
    struct router_policy *p = make(ROUTER_POLICY_ROUND_ROBIN, 3, 16);
    ASSERT(p);
    uint64_t k[1] = {5};
    int want[] = {0, 1, 2, 0, 1, 2};
    for (int i = 0; i < 6; i++)
        CHECK(router_policy_pick(p, k, 1, 0, NULL) == want[i]); // the keys do not matter
    router_policy_set_healthy(p, 1, false);
    int want2[] = {0, 2, 0, 2};
    for (int i = 0; i < 4; i++)
        CHECK(router_policy_pick(p, k, 1, 0, NULL) == want2[i]);
    CHECK(router_policy_table_size(p) == 0); // round-robin keeps no keys
    router_policy_free(p);
}

TEST(least_loaded_order) {
    struct router_policy *p = make(ROUTER_POLICY_LEAST_LOADED, 3, 16);
    ASSERT(p);
    // fewest in flight first
    int a = router_policy_pick(p, NULL, 0, 0, NULL), b = router_policy_pick(p, NULL, 0, 0, NULL);
    int c = router_policy_pick(p, NULL, 0, 0, NULL);
    CHECK(a != b && b != c && a != c);
    router_policy_done(p, b, false); // b has 0 in flight, the others 1
    CHECK(router_policy_pick(p, NULL, 0, 0, NULL) == b);
    router_policy_done(p, a, false);
    router_policy_done(p, b, false);
    router_policy_done(p, c, false);
    // all idle: the lower KV usage, then the fewer waiting
    router_policy_set_load(p, 0, 0.5, 0, 0);
    router_policy_set_load(p, 1, 0.2, 0, 3);
    router_policy_set_load(p, 2, 0.2, 0, 1);
    for (int i = 0; i < 3; i++) {
        CHECK(router_policy_pick(p, NULL, 0, 0, NULL) == 2);
        router_policy_done(p, 2, false);
    }
    CHECK(router_policy_pick(p, NULL, 0, 1ull << 2, NULL) == 1);
    router_policy_free(p);
}

TEST(prefix_table_lru) {
    struct router_policy *p = make(ROUTER_POLICY_PREFIX, 2, 4);
    ASSERT(p);
    uint64_t a[2] = {1, 2}, b[2] = {3, 4}, c[2] = {5, 6};
    int m, ra = router_policy_pick(p, a, 2, 0, &m);
    router_policy_done(p, ra, false);
    int rb = router_policy_pick(p, b, 2, 0, &m);
    router_policy_done(p, rb, false);
    CHECK(router_policy_table_size(p) == 4);
    // a used again: b is now the least recently used
    CHECK(router_policy_pick(p, a, 2, 0, &m) == ra && m == 2);
    router_policy_done(p, ra, false);
    int rc = router_policy_pick(p, c, 2, 0, &m); // evicts b's two keys
    router_policy_done(p, rc, false);
    CHECK(router_policy_table_size(p) == 4);
    CHECK(router_policy_pick(p, a, 2, 0, &m) == ra && m == 2);
    router_policy_done(p, ra, false);
    router_policy_pick(p, b, 2, 0, &m);
    CHECK(m == 0); // forgotten
    router_policy_free(p);
}

static const char replica_a[] = "# HELP cinfer:num_requests_running Sequences running.\n"
                                "# TYPE cinfer:num_requests_running gauge\n"
                                "cinfer:num_requests_running 2\n"
                                "# HELP cinfer:ttft Time to first token.\n"
                                "# TYPE cinfer:ttft histogram\n"
                                "cinfer:ttft_bucket{le=\"0.1\"} 1\n"
                                "cinfer:ttft_bucket{le=\"+Inf\"} 3\n"
                                "cinfer:ttft_sum 0.5\n"
                                "cinfer:ttft_count 3\n"
                                "# TYPE cinfer:done_total counter\n"
                                "cinfer:done_total{reason=\"stop\"} 4\n";
static const char replica_b[] = "# HELP cinfer:num_requests_running Sequences running.\n"
                                "# TYPE cinfer:num_requests_running gauge\n"
                                "cinfer:num_requests_running 0\n"
                                "# HELP cinfer:ttft Time to first token.\n"
                                "# TYPE cinfer:ttft histogram\n"
                                "cinfer:ttft_bucket{le=\"0.1\"} 0\n"
                                "cinfer:ttft_bucket{le=\"+Inf\"} 0\n"
                                "cinfer:ttft_sum 0\n"
                                "cinfer:ttft_count 0\n";

TEST(metrics_value) {
    double v = -1;
    CHECK(router_metrics_value(replica_a, strlen(replica_a), "cinfer:num_requests_running", &v) && v == 2);
    CHECK(router_metrics_value(replica_a, strlen(replica_a), "cinfer:ttft_sum", &v) && v == 0.5);
    CHECK(!router_metrics_value(replica_a, strlen(replica_a), "cinfer:ttft", &v)); // a family, no sample
    CHECK(!router_metrics_value(replica_a, strlen(replica_a), "cinfer:done_total", &v));   // labelled only
    CHECK(!router_metrics_value(replica_a, strlen(replica_a), "cinfer:num_requests", &v)); // a prefix
    const char bad[] = "x abc\n";
    CHECK(!router_metrics_value(bad, strlen(bad), "x", &v));
    CHECK(!router_metrics_value("", 0, "x", &v));
}

TEST(metrics_merge) {
    size_t base = ci_mem_in_use();
    struct router_metrics_source src[2] = {{replica_a, strlen(replica_a), "http://a:1"},
                                           {replica_b, strlen(replica_b), "http://b:\"2"}};
    size_t len = 0;
    char *out = router_metrics_merge(src, 2, "# router\nr 1\n", &len);
    ASSERT(out);
    const char *want = "# router\nr 1\n"
                       "# HELP cinfer:num_requests_running Sequences running.\n"
                       "# TYPE cinfer:num_requests_running gauge\n"
                       "cinfer:num_requests_running{replica=\"http://a:1\"} 2\n"
                       "cinfer:num_requests_running{replica=\"http://b:\\\"2\"} 0\n"
                       "# HELP cinfer:ttft Time to first token.\n"
                       "# TYPE cinfer:ttft histogram\n"
                       "cinfer:ttft_bucket{replica=\"http://a:1\",le=\"0.1\"} 1\n"
                       "cinfer:ttft_bucket{replica=\"http://a:1\",le=\"+Inf\"} 3\n"
                       "cinfer:ttft_sum{replica=\"http://a:1\"} 0.5\n"
                       "cinfer:ttft_count{replica=\"http://a:1\"} 3\n"
                       "cinfer:ttft_bucket{replica=\"http://b:\\\"2\",le=\"0.1\"} 0\n"
                       "cinfer:ttft_bucket{replica=\"http://b:\\\"2\",le=\"+Inf\"} 0\n"
                       "cinfer:ttft_sum{replica=\"http://b:\\\"2\"} 0\n"
                       "cinfer:ttft_count{replica=\"http://b:\\\"2\"} 0\n"
                       "# TYPE cinfer:done_total counter\n"
                       "cinfer:done_total{replica=\"http://a:1\",reason=\"stop\"} 4\n";
    if (strcmp(out, want) != 0)
        TEST_FAILF("merged:\n%s\nwanted:\n%s", out, want);
    CHECK(len == strlen(want));
    ci_free(out);
    out = router_metrics_merge(NULL, 0, NULL, &len); // nothing at all is still an exposition
    CHECK(out && len == 0 && out[0] == '\0');
    ci_free(out);
    CHECK(ci_mem_in_use() == base);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(hash_chain_recurrence);
    RUN(policy_names);
    RUN(prefix_longest_match);
    RUN(prefix_load_and_health_bounds);
    RUN(round_robin_order);
    RUN(least_loaded_order);
    RUN(prefix_table_lru);
    RUN(metrics_value);
    RUN(metrics_merge);
    return test_exit_code();
}
