/* The public API (include/cinfer.h) as an embedding program uses it: load, tokenize, generate, errors. */
#include "test.h"

#include <math.h>

#include "cinfer.h"

struct collect {
    char text[4096];
    size_t len;
    cinfer_token ids[256];
    int n_ids;
    int stop_after; // 0: never
};

static bool collect_token(void *user, cinfer_token token, const char *text, size_t len) {
    struct collect *c = user;
    if (token >= 0 && c->n_ids < 256)
        c->ids[c->n_ids++] = token;
    if (c->len + len < sizeof c->text) {
        memcpy(c->text + c->len, text, len);
        c->len += len;
        c->text[c->len] = '\0';
    }
    return !(c->stop_after && c->n_ids >= c->stop_after);
}

// llama2.c's published temperature-0 output of stories260K from BOS (../shared/models/MANIFEST.md).
static const char *const stories_text =
    "Once upon a time, there was a little girl named Lily. She loved to play "
    "outside in the park. One day, she saw a big, red ball. She wanted to "
    "play with it, but it was too high";

static void check_greedy(const char *model, const char *tokenizer) {
    char p[512], t[512];
    struct cinfer_model *m = NULL;
    struct cinfer_error err = {0};
    if (cinfer_model_load(test_model_path(p, sizeof p, model),
                          tokenizer ? test_model_path(t, sizeof t, tokenizer) : NULL, &m,
                          &err) != CINFER_OK) {
        TEST_FAILF("load %s: %s", model, err.message);
        return;
    }
    struct cinfer_model_info info;
    cinfer_model_info(m, &info);
    CHECK(info.n_vocab == 512 && info.n_layer == 5 && info.n_head == 8 && info.n_kv_head == 4);
    CHECK(info.kv_bytes_per_token == 2 * 5 * 4 * 8 * 4);
    struct cinfer_generate_params gp;
    cinfer_generate_params_default(&gp);
    gp.sampling.temperature = 0;
    gp.max_tokens = 60;
    struct collect c = {0};
    struct cinfer_generate_stats st;
    ASSERT_STATUS(cinfer_generate(m, "", &gp, collect_token, &c, &st, &err), CINFER_OK);
    CHECK(st.n_prompt == 1 && st.n_generated == 60);
    CHECK(!strcmp(st.finish_reason, "length"));
    CHECK(st.ttft_ms > 0 && st.tbt_ms > 0 && st.latency_ms >= st.ttft_ms);
    if (strncmp(c.text, stories_text, strlen(stories_text)) != 0)
        TEST_FAILF("greedy text differs:\n got: %s\nwant: %s", c.text, stories_text);

    // A seeded sampler reproduces itself.
    gp.sampling.temperature = 1.0f;
    gp.sampling.seed = 1234;
    gp.max_tokens = 40;
    struct collect a = {0}, b = {0};
    ASSERT_STATUS(cinfer_generate(m, "Once upon a time", &gp, collect_token, &a, NULL, &err), CINFER_OK);
    ASSERT_STATUS(cinfer_generate(m, "Once upon a time", &gp, collect_token, &b, NULL, &err), CINFER_OK);
    CHECK(a.n_ids == b.n_ids && !memcmp(a.ids, b.ids, sizeof(cinfer_token) * (size_t)a.n_ids));

    // The callback ends generation early.
    struct collect early = {.stop_after = 3};
    ASSERT_STATUS(cinfer_generate(m, "Once", &gp, collect_token, &early, &st, &err), CINFER_OK);
    CHECK(st.n_generated == 3 && !strcmp(st.finish_reason, "caller"));

    // Prompt + max_tokens beyond the context is refused up front.
    gp.n_ctx = 16;
    gp.max_tokens = 16;
    CHECK(cinfer_generate(m, "Once upon a time", &gp, collect_token, &a, NULL, &err) == CINFER_ERR_LIMIT);
    CHECK(strstr(err.message, "context") != NULL);

    cinfer_token *ids = NULL;
    int n = 0;
    ASSERT_STATUS(cinfer_tokenize(m, "Once upon a time", 16, true, &ids, &n, &err), CINFER_OK);
    CHECK(n == 5 && ids[0] == 1 && ids[1] == 403 && ids[2] == 407 && ids[3] == 261 && ids[4] == 378);
    cinfer_free(ids);
    cinfer_model_free(m);
}

TEST(greedy_stories260k_gguf) {
    check_greedy("stories260K.gguf", NULL);
}

TEST(greedy_stories260k_bin) {
    check_greedy("stories260K.bin", "tok512.bin");
}

TEST(greedy_stories260k_v1) {
    check_greedy("stories260K_v1.bin", "tok512.bin");
}

TEST(load_errors) {
    char p[512];
    struct cinfer_model *m = NULL;
    struct cinfer_error err = {0};
    CHECK(cinfer_model_load("/nonexistent/model.gguf", NULL, &m, &err) == CINFER_ERR_IO && m == NULL);
    CHECK(strstr(err.message, "/nonexistent/model.gguf") != NULL);
    // A checkpoint without its tokenizer, and a vocabulary that does not fit the model.
    CHECK(cinfer_model_load(test_model_path(p, sizeof p, "stories260K.bin"), NULL, &m, &err) ==
          CINFER_ERR_INVALID);
    char t[512];
    CHECK(cinfer_model_load(p, test_model_path(t, sizeof t, "tokenizer.bin"), &m, &err) != CINFER_OK);
    // A vocab-only GGUF file is not a model.
    CHECK(cinfer_model_load(test_model_path(p, sizeof p, "ggml-vocab/ggml-vocab-gpt-2.gguf"), NULL, &m,
                            &err) == CINFER_ERR_FORMAT);
    CHECK(m == NULL);
    // A pack mode that is none of the enum's.
    struct cinfer_load_options lo = {.pack = (enum cinfer_pack)7};
    CHECK(cinfer_model_load_with(test_model_path(p, sizeof p, "stories260K.gguf"), &lo, &m, &err) ==
              CINFER_ERR_INVALID &&
          m == NULL && strstr(err.message, "pack mode 7") != NULL);
}

/* The KV element type option: default f32; f16 halves the bytes per token; unknown names and q8_0 on
 * stories260K's head_dim 8 are errors with a message. */
TEST(engine_kv_type_option) {
    char p[512];
    struct cinfer_model *m = NULL;
    struct cinfer_error err = {0};
    ASSERT_STATUS(cinfer_model_load(test_model_path(p, sizeof p, "stories260K.gguf"), NULL, &m, &err),
                  CINFER_OK);
    struct cinfer_engine_options eo;
    cinfer_engine_options_default(&eo);
    eo.kv_mem_bytes = 1 << 20;
    struct cinfer_engine *e = NULL;
    struct cinfer_engine_info info;
    ASSERT_STATUS(cinfer_engine_create(m, &eo, &e, &err), CINFER_OK);
    cinfer_engine_info(e, &info);
    CHECK(!strcmp(info.kv_type, "f32") && info.kv_bytes_per_token == 2 * 5 * 4 * 8 * 4);
    int blocks_f32 = info.kv_blocks;
    cinfer_engine_free(e);
    eo.kv_type = "f16";
    ASSERT_STATUS(cinfer_engine_create(m, &eo, &e, &err), CINFER_OK);
    cinfer_engine_info(e, &info);
    CHECK(!strcmp(info.kv_type, "f16") && info.kv_bytes_per_token == 2 * 5 * 4 * 8 * 2);
    CHECK(info.kv_blocks == 2 * blocks_f32); // the same memory holds twice the blocks
    cinfer_engine_free(e);
    eo.kv_type = "q8_0";
    CHECK(cinfer_engine_create(m, &eo, &e, &err) != CINFER_OK && e == NULL);
    CHECK(strstr(err.message, "multiple of 32") != NULL);
    eo.kv_type = "q4_0";
    CHECK(cinfer_engine_create(m, &eo, &e, &err) != CINFER_OK && e == NULL);
    CHECK(strstr(err.message, "q4_0") != NULL);
    cinfer_model_free(m);
}

/* stories260K with a default engine; false (a failed check) when either cannot be made. */
static bool stories_engine(struct cinfer_model **m, struct cinfer_engine **e) {
    char p[512];
    struct cinfer_error err = {0};
    *m = NULL;
    *e = NULL;
    if (cinfer_model_load(test_model_path(p, sizeof p, "stories260K.gguf"), NULL, m, &err) != CINFER_OK) {
        TEST_FAILF("cinfer_model_load: %s", err.message);
        return false;
    }
    struct cinfer_engine_options eo;
    cinfer_engine_options_default(&eo);
    if (cinfer_engine_create(*m, &eo, e, &err) != CINFER_OK) {
        TEST_FAILF("cinfer_engine_create: %s", err.message);
        cinfer_model_free(*m);
        return false;
    }
    return true;
}

/* Greedy tokens of one request on stories260K: the sum of their logprobs and whether any event had one. */
static void greedy_logprobs(struct cinfer_engine *e, const struct cinfer_request_options *ro, double *sum,
                            bool *any) {
    const cinfer_token prompt[5] = {1, 403, 407, 261, 378}; // BOS "Once upon a time"
    struct cinfer_stream *st = NULL;
    struct cinfer_error err = {0};
    *sum = 0;
    *any = false;
    ASSERT_STATUS(cinfer_engine_submit(e, prompt, 5, ro, &st, &err), CINFER_OK);
    for (bool done = false; !done;) {
        cinfer_engine_step(e);
        struct cinfer_event ev;
        while (!done && cinfer_stream_next(st, 0, &ev, 0) == CINFER_OK) {
            if (ev.kind == CINFER_EVENT_TOKEN) {
                *sum += ev.logprob;
                *any |= ev.logprob != 0 || ev.n_top != 0;
            }
            done = ev.kind == CINFER_EVENT_DONE || ev.kind == CINFER_EVENT_ERROR;
        }
    }
    cinfer_stream_release(st);
}

/* The default request computes no log-probabilities (a pass over the vocabulary per token, which `cinfer
 * run` and the benchmarks do not want); logprobs = 0 gives the sampled token's. */
TEST(logprobs_only_when_asked) {
    struct cinfer_model *m = NULL;
    struct cinfer_engine *e = NULL;
    ASSERT(stories_engine(&m, &e));
    struct cinfer_request_options ro;
    cinfer_request_options_default(&ro);
    CHECK(ro.logprobs == -1);
    ro.max_tokens = 8;
    ro.ignore_eos = true;
    ro.sampling.temperature = 0;
    double sum = 0;
    bool any = true;
    greedy_logprobs(e, &ro, &sum, &any);
    CHECK(!any && sum == 0);
    ro.logprobs = 0;
    greedy_logprobs(e, &ro, &sum, &any);
    CHECK(any && sum < 0);
    cinfer_engine_free(e);
    cinfer_model_free(m);
}

TEST(engine_api) {
    struct cinfer_model *m = NULL;
    struct cinfer_engine *e = NULL;
    struct cinfer_error err = {0};
    ASSERT(stories_engine(&m, &e));
    cinfer_token *ids = NULL;
    int n = 0;
    ASSERT_STATUS(cinfer_tokenize(m, "Once upon a time", 16, true, &ids, &n, &err), CINFER_OK);
    struct cinfer_request_options ro;
    cinfer_request_options_default(&ro);
    ro.max_tokens = 12;
    ro.sampling.temperature = 0;
    ro.logprobs = 3;
    // Ban the token greedy decoding picks first (" there" after "Once upon a time,"? whichever): the stream
    // must never contain it.
    struct cinfer_logit_bias ban = {261, -INFINITY}; // " a"
    ro.logit_bias = &ban;
    ro.n_logit_bias = 1;
    struct cinfer_stream *st = NULL;
    ASSERT_STATUS(cinfer_engine_submit(e, ids, n, &ro, &st, &err), CINFER_OK);
    cinfer_free(ids);
    int n_tok = 0;
    bool done = false, banned_seen = false, logprobs_ok = true;
    char text[1024] = {0};
    size_t len = 0;
    while (!done) {
        cinfer_engine_step(e);
        struct cinfer_event ev;
        while (!done && cinfer_stream_next(st, 0, &ev, 0) == CINFER_OK) {
            if (ev.kind == CINFER_EVENT_TOKEN) {
                n_tok++;
                banned_seen |= ev.token == 261;
                // Greedy: the sampled token is the most likely one, and log-probabilities are <= 0 and
                // sorted.
                logprobs_ok &= ev.n_top == 3 && ev.logprob <= 0 && ev.top_logprobs[0] >= ev.top_logprobs[1] &&
                               ev.top_logprobs[1] >= ev.top_logprobs[2];
            }
            if (ev.len && len + ev.len < sizeof text) {
                memcpy(text + len, ev.text, ev.len);
                len += ev.len;
            }
            done = ev.kind == CINFER_EVENT_DONE || ev.kind == CINFER_EVENT_ERROR;
        }
    }
    CHECK(n_tok == 12 && !banned_seen && logprobs_ok);
    struct cinfer_generate_stats gs;
    cinfer_stream_stats(st, 0, &gs);
    CHECK(gs.n_generated == 12 && !strcmp(gs.finish_reason, "length") && gs.ttft_ms > 0);
    cinfer_stream_release(st);
    char *metrics = NULL;
    size_t mlen = 0;
    ASSERT_STATUS(cinfer_engine_metrics(e, &metrics, &mlen), CINFER_OK);
    CHECK(strstr(metrics, "cinfer:generation_tokens_total 12\n") != NULL);
    CHECK(strstr(metrics, "cinfer:request_success_total{finished_reason=\"length\"} 1\n") != NULL);
    CHECK(strstr(metrics, "cinfer:time_to_first_token_seconds_count 1\n") != NULL);
    CHECK(strstr(metrics, "cinfer:inter_token_latency_seconds_count 11\n") != NULL);
    cinfer_free(metrics);
    // Detokenizing what was streamed gives the same text back.
    CHECK(strcmp(cinfer_model_name(m), "") != 0);
    cinfer_token once[2] = {1, 403};
    char *dt = NULL;
    size_t dlen = 0;
    ASSERT_STATUS(cinfer_detokenize(m, once, 2, false, &dt, &dlen, &err), CINFER_OK);
    CHECK(!strcmp(dt, "Once"));
    cinfer_free(dt);
    cinfer_engine_free(e);
    cinfer_model_free(m);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(greedy_stories260k_gguf);
    RUN(greedy_stories260k_bin);
    RUN(greedy_stories260k_v1);
    RUN(load_errors);
    RUN(engine_api);
    RUN(logprobs_only_when_asked);
    RUN(engine_kv_type_option);
    return test_exit_code();
}
