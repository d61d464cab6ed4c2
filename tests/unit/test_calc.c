/* engine/calc: the seeds' worked numbers (docs/seeds.md), typed here from the text, reproduced from the
 * formulas' inputs; public parameter counts of real models; roofline bounds; rejection of bad input (the CLI
 * maps CI_ERR_INVALID from these functions to exit status 2). */
#include "bench/calc.h"

#include <string.h>

#include "model/synth.h"
#include "test.h"

#define KIB 1024.0
#define GIB (1024.0 * 1024.0 * 1024.0)

/* |got - want| <= 1% of want */
#define ASSERT_1PCT(got, want) ASSERT_NEAR(got, want, 0.01 * fabs((double)(want)))

static bool run(const char *preset, int64_t context, int64_t batch, bool full_mha, struct calc_result *r) {
    struct calc_model m;
    struct calc_opts o;
    if (!calc_preset(preset, &m))
        return false;
    calc_opts_default(&o);
    o.context = context;
    o.batch = batch;
    o.full_mha = full_mha;
    return calc_run(&m, &o, r, NULL) == CI_OK;
}

/* Defaults are the seeds' assumptions: a 1 PFLOP/s GPU, an H100's 3.3 TB/s, FP16 KV and weights, batch 1. */
TEST(defaults_are_the_seeds) {
    struct calc_opts o;
    calc_opts_default(&o);
    ASSERT_NEAR(o.peak_flops, 1e15, 0);
    ASSERT_NEAR(o.bandwidth, 3.3e12, 0);
    ASSERT_EQ_I64(o.kv_bytes, 2);
    ASSERT_NEAR(o.weight_bytes, 2, 0);
    ASSERT_EQ_I64(o.batch, 1);
    ASSERT(!o.full_mha);
}

/* "Llama 3 405B with full multi-head KV in FP16: 16384 × 2 × 2 B = 64 KB per layer per token, × 126 = 8064 KB
 * per token, ≈ 8.26 TB for a 1M-token context." (KB = 1024 B here; TB decimal, 1M = 10^6 tokens.) */
TEST(llama3_405b_full_mha_kv) {
    struct calc_result r;
    ASSERT(run("llama3-405b", 1000000, 1, true, &r));
    ASSERT_EQ_I64(r.n_kv_head, 128);
    ASSERT_NEAR(r.kv_token_layer, 64 * KIB, 0);
    ASSERT_NEAR(r.kv_token, 8064 * KIB, 0);
    ASSERT_1PCT(r.kv_seq, 8.26e12);
    ASSERT_1PCT(r.kv_total, 8.26e12);
    char buf[96];
    calc_fmt_bytes(r.kv_total, buf, sizeof buf);
    CHECK(strstr(buf, "8.26 TB") != NULL);
}

/* GQA: the real model has 8 KV heads for 128 query heads, so 16x less KV (504 KiB per token). */
TEST(llama3_405b_gqa_ratio) {
    struct calc_result r;
    ASSERT(run("llama3-405b", 0, 1, false, &r));
    ASSERT_EQ_I64(r.n_kv_head, 8);
    ASSERT_EQ_I64(r.context, 131072); // the model's own context by default
    ASSERT_NEAR(r.kv_token, 8064 * KIB / 16, 0);
    ASSERT_NEAR(r.kv_token_mha / r.kv_token_model, 16, 1e-12);
    struct calc_result full;
    ASSERT(run("llama3-405b", 0, 1, true, &full));
    ASSERT_NEAR(full.kv_total / r.kv_total, 16, 1e-12);
    ASSERT_NEAR(full.kv_token_model, r.kv_token, 0); // the model's own heads are reported either way
}

/* "N = 1000: linear FLOPs ≈ 2 × L × 11 × N × d² ≈ 744 TFLOPs for one token, i.e. ≈ 0.74 s on a 1 PFLOP/s GPU"
 */
TEST(llama3_405b_naive_step) {
    struct calc_result r;
    ASSERT(run("llama3-405b", 1000, 1, true, &r));
    ASSERT_1PCT(r.rule_naive_flops, 744e12);
    ASSERT_1PCT(r.rule_naive_s, 0.74);
    // The step as computed from P: 2·N·P + 4·L·N²·d = 2·1000·405e9 + 4·126·1000²·16384.
    ASSERT_1PCT(r.naive.flops, 2 * 1000 * 405e9 + 4.0 * 126 * 1e6 * 16384);
    ASSERT(r.naive.compute_bound);
    // A KV-cache step does 2·P + 4·L·N·d: exactly N times less when P is given.
    ASSERT_1PCT(r.naive_over_kv_flops, 1000);
    ASSERT(r.naive_over_kv_time > 1);
}

/* "at N = 1M the attention term dominates and one token takes hours" */
TEST(llama3_405b_naive_1m_takes_hours) {
    struct calc_result r;
    ASSERT(run("llama3-405b", 1000000, 1, false, &r));
    ASSERT(r.naive.attn_flops > r.naive.linear_flops);
    ASSERT(r.naive.t_s > 3600);
    char buf[64];
    calc_fmt_time(r.naive.t_s, buf, sizeof buf);
    CHECK(strstr(buf, " h)") != NULL);
}

/* "Llama 3 405B at N = 100k: linear 2·N·P = 8.1e16 FLOPs, attention 4·L·N²·d ≈ 8.26e16, total ≈ 1.64e17 FLOPs
 * over ≈ 810 GB weights + 51.6 GB KV written → ≈ 190,000 FLOPs/byte, far above an H100's ridge point (≈ 1000
 * TFLOP/s ÷ 3.3 TB/s ≈ 300 FLOPs/byte)." */
TEST(llama3_405b_prefill_100k) {
    struct calc_result r;
    ASSERT(run("llama3-405b", 100000, 1, false, &r));
    ASSERT_1PCT(r.prefill.linear_flops, 8.1e16);
    ASSERT_1PCT(r.prefill.attn_flops, 8.26e16);
    ASSERT_1PCT(r.prefill.flops, 1.64e17);
    ASSERT_1PCT(r.prefill.weight_bytes, 810e9);
    ASSERT_1PCT(r.prefill.kv_bytes, 51.6e9);
    ASSERT_1PCT(r.prefill.intensity, 190000);
    ASSERT_1PCT(r.ridge, 303);
    ASSERT(r.prefill.compute_bound);
    ASSERT_NEAR(r.prefill.t_s, r.prefill.t_compute_s, 0);
}

/* "Decode: same model at N = 100k: 2·P = 8.1e11 + 4·L·N·d ≈ 8.25e11 ≈ 1.635e12 FLOPs over 810 GB weights +
 * 51.6 GB KV read → ≈ 1.9 FLOPs/byte: bandwidth-bound" */
TEST(llama3_405b_decode_100k) {
    struct calc_result r;
    ASSERT(run("llama3-405b", 100000, 1, false, &r));
    ASSERT_1PCT(r.decode.linear_flops, 8.1e11);
    ASSERT_1PCT(r.decode.attn_flops, 8.25e11);
    ASSERT_1PCT(r.decode.flops, 1.635e12);
    ASSERT_1PCT(r.decode.bytes, 810e9 + 51.6e9);
    ASSERT_1PCT(r.decode.intensity, 1.9);
    ASSERT(!r.decode.compute_bound);
    ASSERT_NEAR(r.decode.t_s, r.decode.t_memory_s, 0);
    ASSERT_1PCT(r.decode.t_s, (810e9 + 51.6e9) / 3.3e12);
    // Faster cores barely help: doubling the peak leaves the decode step's time unchanged.
    struct calc_model m;
    struct calc_opts o;
    ASSERT(calc_preset("llama3-405b", &m));
    calc_opts_default(&o);
    o.context = 100000;
    o.peak_flops *= 2;
    struct calc_result r2;
    ASSERT_STATUS(calc_run(&m, &o, &r2, NULL), CI_OK);
    ASSERT_NEAR(r2.decode.t_s, r.decode.t_s, 0);
    ASSERT_1PCT(r2.prefill.t_s, r.prefill.t_s / 2);
}

/* "Llama-7B (32 layers, 32 heads, head_dim 128, FP16): 512 KB per token; batch 64 × 1024 tokens → 32 GB —
 * more than the weights." (binary KB and GB) */
TEST(llama2_7b_kv) {
    struct calc_result r;
    ASSERT(run("llama2-7b", 1024, 64, false, &r));
    ASSERT_NEAR(r.kv_token, 512 * KIB, 0);
    ASSERT_NEAR(r.kv_total, 32 * GIB, 0);
    ASSERT(r.kv_total > r.weight_bytes);
    ASSERT_NEAR(r.params, 6738415616.0, 0); // Llama-2-7B's published parameter count
    ASSERT(!r.params_given);
    char buf[96];
    calc_fmt_bytes(r.kv_total, buf, sizeof buf);
    CHECK(strstr(buf, "32.00 GiB") != NULL);
}

/* Batching: weights move once per step for all B sequences, KV traffic grows with B. */
TEST(batch_shares_weights_not_kv) {
    struct calc_result r1, r64;
    ASSERT(run("llama2-7b", 1024, 1, false, &r1));
    ASSERT(run("llama2-7b", 1024, 64, false, &r64));
    ASSERT_NEAR(r64.decode.weight_bytes, r1.decode.weight_bytes, 0);
    ASSERT_NEAR(r64.decode.kv_bytes, 64 * r1.decode.kv_bytes, 1e-12 * r64.decode.kv_bytes);
    ASSERT_NEAR(r64.decode.flops, 64 * r1.decode.flops, 1e-12 * r64.decode.flops);
    ASSERT(r64.decode_tokens_s > 10 * r1.decode_tokens_s); // throughput rises...
    ASSERT(r64.decode.t_s > r1.decode.t_s);                // ...and each stream's TBT lengthens
    ASSERT(r64.decode.intensity > r1.decode.intensity);
}

/* The synth presets' shapes, reused from model/synth.h: KV bytes per token 2·22·4·64·2 = 22528 for TinyLlama.
 */
TEST(synth_presets) {
    struct calc_result r;
    ASSERT(run("tinyllama-1.1b", 0, 1, false, &r));
    ASSERT_NEAR(r.kv_token, 22528, 0);
    ASSERT_NEAR(r.params, 1100048384.0, 0); // TinyLlama-1.1B's published parameter count
    ASSERT(run("tinyllama-1.1b", 0, 1, true, &r));
    ASSERT_NEAR(r.kv_token, 2.0 * 22 * 32 * 64 * 2, 0);
    ASSERT(run("qwen2-0.5b", 0, 1, false, &r)); // tied head, q/k/v biases
    ASSERT_NEAR(r.params, 494032768.0, 0);      // Qwen2-0.5B's published parameter count
    ASSERT_NEAR(r.kv_token, 2.0 * 24 * 2 * 64 * 2, 0);
    ASSERT(run("smollm2-135m", 0, 1, false, &r));
    ASSERT_NEAR(r.params, 134515008.0, 0); // SmolLM2-135M's published parameter count
    ASSERT_EQ_I64(r.context, 8192);
    ASSERT(run("llama3.2-1b", 0, 1, false, &r));
    ASSERT_NEAR(r.params, 1235814400.0,
                0); // Llama 3.2 1B's count: 262668288 embedding + 16 x 60821504 + 2048
    // Qwen3-0.6B by hand: 155582464 embedding + 28 x (Q 2097152 + K, V 2097152 + O 2097152 + FFN 9437184 +
    // norms 2048 + Q/K norms 256) + 1024; head_dim 128 makes Q 2048 wide in a 1024-wide model.
    ASSERT(run("qwen3-0.6b", 0, 1, false, &r));
    ASSERT_NEAR(r.params, 596049920.0, 0);
    ASSERT_NEAR(r.kv_token, 2.0 * 28 * 8 * 128 * 2, 0);

    ASSERT_EQ_I64(calc_n_presets(), 5 + synth_n_presets());
    for (int i = 0; i < synth_n_presets(); i++) {
        struct calc_model m;
        ASSERT(calc_preset(synth_preset(i)->name, &m));
        ASSERT_EQ_I64(m.cfg.n_layer, synth_preset(i)->n_layer);
    }
    for (int i = 0; i < calc_n_presets(); i++) {
        struct calc_model m;
        ASSERT(calc_preset(calc_preset_name(i), &m));
        for (int j = 0; j < i; j++)
            ASSERT(strcmp(calc_preset_name(i), calc_preset_name(j)) != 0);
    }
}

/* Qwen-72B (80 layers of 4 * 8192^2 attention and 3 * 8192 * 24576 FFN weights, full MHA, an untied head of
 * 152064 rows): 69,793,218,560 linear weights plus two 152064 x 8192 matrices, 72.29e9 with the norms; over 4
 * sockets in bf16 at 287 GB/s each, decode is bandwidth-bound: 144.6 GB / 4 / 287 GB/s = 126 ms plus the
 * all-reduces (bench/RESULTS.md checks it against the published 140 ms). */
TEST(qwen_72b_preset) {
    struct calc_model m;
    struct calc_opts o;
    struct calc_result r;
    ASSERT(calc_preset("qwen-72b", &m));
    calc_opts_default(&o);
    o.context = 1024;
    o.bandwidth = 287e9;
    o.peak_flops = 5e13;
    o.tp = 4;
    o.link_bw = 100e9 / 8;
    o.link_latency = 10e-6;
    ASSERT(calc_run(&m, &o, &r, NULL) == CI_OK);
    ASSERT_NEAR(r.params_shapes, 69793218560.0 + 2 * 152064.0 * 8192 + 80 * 2 * 8192 + 8192, 0);
    ASSERT_NEAR(r.dist.weight_bytes_rank, r.weight_bytes / 4, 0);
    ASSERT(r.dist.step_s > 0.125 && r.dist.step_s < 0.140);
}

TEST(kv_bytes_option) {
    struct calc_model m;
    struct calc_opts o;
    struct calc_result r;
    ASSERT(calc_preset("llama2-7b", &m));
    calc_opts_default(&o);
    o.kv_bytes = 1;
    ASSERT_STATUS(calc_run(&m, &o, &r, NULL), CI_OK);
    ASSERT_NEAR(r.kv_token, 256 * KIB, 0);
    o.kv_bytes = 4;
    ASSERT_STATUS(calc_run(&m, &o, &r, NULL), CI_OK);
    ASSERT_NEAR(r.kv_token, 1024 * KIB, 0);
    ASSERT_NEAR(calc_kv_bytes_per_token(32, 32, 128, 2), 524288, 0);
}

/* --kv-type: f32 4, f16 2, q8_0 34/32 bytes per element; the capacity after the weights; q8_0 needs
 * head_dim % 32 == 0; a type that disagrees with the byte count is rejected. */
TEST(kv_type_option) {
    struct calc_model m;
    struct calc_opts o;
    struct calc_result r;
    ASSERT(calc_preset("llama2-7b", &m)); // 32 layers, 32 KV heads, head_dim 128: 262144 elements per token
    calc_opts_default(&o);
    static const char *names[] = {"f32", "f16", "q8_0"};
    static const double want[] = {1024 * KIB, 512 * KIB, 262144 * 34.0 / 32};
    for (int i = 0; i < 3; i++) {
        ASSERT(calc_kv_type_bytes(names[i], &o.kv_bytes));
        o.kv_type = names[i];
        ASSERT_STATUS(calc_run(&m, &o, &r, NULL), CI_OK);
        ASSERT_NEAR(r.kv_token, want[i], 0);
        ASSERT_NEAR(r.kv_seq, want[i] * r.context, 0);
        // capacity: (80 GB - weights) / per token, whole tokens and whole sequences
        double cap = floor((80e9 - r.weight_bytes) / want[i]);
        ASSERT_NEAR(r.kv_capacity_tokens, cap, 0);
        ASSERT_NEAR(r.kv_capacity_seqs, floor(cap / r.context), 0);
    }
    ASSERT_NEAR(r.kv_token, 278528, 0); // q8_0: 262144 · 34 / 32
    o.mem_bytes = 1e9;                  // smaller than the weights: no room
    ASSERT_STATUS(calc_run(&m, &o, &r, NULL), CI_OK);
    ASSERT_NEAR(r.kv_capacity_tokens, 0, 0);
    double b = 0;
    CHECK(!calc_kv_type_bytes("q4_0", &b) && !calc_kv_type_bytes("F16", &b));
    calc_opts_default(&o);
    o.kv_type = "f16"; // kv_bytes still 2: agrees
    ASSERT_STATUS(calc_run(&m, &o, &r, NULL), CI_OK);
    o.kv_type = "f32"; // disagrees with kv_bytes 2
    ASSERT_STATUS(calc_run(&m, &o, &r, NULL), CI_ERR_INVALID);
    struct ci_err err = {0};
    m.cfg.head_dim = 48; // q8_0 needs a multiple of 32
    m.cfg.n_embd = 48 * m.cfg.n_head;
    o.kv_type = "q8_0";
    o.kv_bytes = 34.0 / 32;
    ASSERT_STATUS(calc_run(&m, &o, &r, &err), CI_ERR_INVALID);
    CHECK(strstr(err.msg, "multiple of 32") != NULL);
}

/* --params switches to the seeds' 2·N·P accounting; weights follow P × bytes per weight. */
TEST(params_override) {
    struct calc_model m;
    struct calc_opts o;
    struct calc_result r;
    ASSERT(calc_preset("llama2-7b", &m));
    m.n_params = 7e9;
    calc_opts_default(&o);
    o.context = 1000;
    o.weight_bytes = 0.5;
    ASSERT_STATUS(calc_run(&m, &o, &r, NULL), CI_OK);
    ASSERT(r.params_given);
    ASSERT_NEAR(r.weight_bytes, 3.5e9, 0);
    ASSERT_NEAR(r.decode.linear_flops, 1.4e10, 0);
    ASSERT_NEAR(r.prefill.linear_flops, 1.4e13, 0);
    // A loaded file's stored size is used when no size per weight is asked for.
    m.stored_weight_bytes = 1234567;
    o.weight_bytes = 0;
    ASSERT_STATUS(calc_run(&m, &o, &r, NULL), CI_OK);
    ASSERT_NEAR(r.weight_bytes, 1234567, 0);
}

/* Roofline on hand numbers: 1e12 FLOP and 1e10 bytes on 1e15 FLOP/s and 1e12 B/s: 1 ms compute, 10 ms memory.
 */
TEST(roofline_picks_the_bound) {
    struct calc_phase p = {0};
    p.linear_flops = 6e11;
    p.attn_flops = 4e11;
    p.weight_bytes = 8e9;
    p.kv_bytes = 2e9;
    calc_roofline(&p, 1e15, 1e12);
    ASSERT_NEAR(p.flops, 1e12, 0);
    ASSERT_NEAR(p.bytes, 1e10, 0);
    ASSERT_NEAR(p.intensity, 100, 1e-12);
    ASSERT_NEAR(p.t_compute_s, 1e-3, 1e-15);
    ASSERT_NEAR(p.t_memory_s, 1e-2, 1e-15);
    ASSERT(!p.compute_bound);
    ASSERT_NEAR(p.t_s, 1e-2, 1e-15);
    calc_roofline(&p, 1e13, 1e12); // ridge 10 < intensity 100
    ASSERT(p.compute_bound);
    ASSERT_NEAR(p.t_s, 0.1, 1e-15);
}

TEST(parse_count) {
    double v = 0;
    ASSERT_STATUS(calc_parse_count("100000", true, &v, NULL), CI_OK);
    ASSERT_NEAR(v, 1e5, 0);
    ASSERT_STATUS(calc_parse_count("100k", true, &v, NULL), CI_OK);
    ASSERT_NEAR(v, 1e5, 0);
    ASSERT_STATUS(calc_parse_count("1M", true, &v, NULL), CI_OK);
    ASSERT_NEAR(v, 1e6, 0);
    ASSERT_STATUS(calc_parse_count("405e9", true, &v, NULL), CI_OK);
    ASSERT_NEAR(v, 405e9, 0);
    ASSERT_STATUS(calc_parse_count("1.1B", true, &v, NULL), CI_OK);
    ASSERT_NEAR(v, 1.1e9, 0);
    ASSERT_STATUS(calc_parse_count("2T", true, &v, NULL), CI_OK);
    ASSERT_NEAR(v, 2e12, 0);
    ASSERT_STATUS(calc_parse_count("2.5", false, &v, NULL), CI_OK);
    ASSERT_NEAR(v, 2.5, 0);
    const char *bad[] = {"",    " 5",  "abc", "10x",  "1MB",    "-5", "0",
                         "1.5", "inf", "nan", "2e15", "1e-400", "k"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct ci_err err = {0};
        v = -1;
        if (calc_parse_count(bad[i], true, &v, &err) != CI_ERR_INVALID)
            TEST_FAILF("'%s' accepted as %g", bad[i], v);
        else if (!err.msg[0])
            TEST_FAILF("'%s' rejected without a message", bad[i]);
    }
}

/* What the CLI reports as a usage error (exit 2). */
TEST(bad_options_rejected) {
    struct calc_model m;
    struct calc_opts o;
    struct calc_result r;
    struct ci_err err = {0};
    ASSERT(!calc_preset("llama-9000", &m));
    ASSERT(calc_preset("llama2-7b", &m));
    calc_opts_default(&o);
    ASSERT_STATUS(calc_check(&m, &o, &err), CI_OK);

    o.kv_bytes = 3;
    ASSERT_STATUS(calc_run(&m, &o, &r, &err), CI_ERR_INVALID);
    CHECK(strstr(err.msg, "1, 2 or 4") != NULL);
    calc_opts_default(&o);
    o.batch = 0;
    ASSERT_STATUS(calc_check(&m, &o, &err), CI_ERR_INVALID);
    calc_opts_default(&o);
    o.context = -1;
    ASSERT_STATUS(calc_check(&m, &o, &err), CI_ERR_INVALID);
    calc_opts_default(&o);
    o.peak_flops = 0;
    ASSERT_STATUS(calc_check(&m, &o, &err), CI_ERR_INVALID);
    calc_opts_default(&o);
    o.bandwidth = -1;
    ASSERT_STATUS(calc_check(&m, &o, &err), CI_ERR_INVALID);
    calc_opts_default(&o);
    o.weight_bytes = 0; // "as stored" with no file behind it
    ASSERT_STATUS(calc_check(&m, &o, &err), CI_ERR_INVALID);
    o.weight_bytes = 9;
    ASSERT_STATUS(calc_check(&m, &o, &err), CI_ERR_INVALID);
    calc_opts_default(&o);
    m.cfg.n_kv_head = 5; // 32 heads do not group into 5 KV heads
    ASSERT_STATUS(calc_check(&m, &o, &err), CI_ERR_INVALID);
    m.cfg.n_kv_head = 0;
    ASSERT_STATUS(calc_check(&m, &o, &err), CI_ERR_INVALID);
    ASSERT(calc_preset("llama2-7b", &m));
    m.cfg.n_ctx_train = 0; // no default context to fall back on
    ASSERT_STATUS(calc_check(&m, &o, &err), CI_ERR_INVALID);
    o.context = 10;
    ASSERT_STATUS(calc_check(&m, &o, &err), CI_OK);
    m.n_params = -1;
    ASSERT_STATUS(calc_check(&m, &o, &err), CI_ERR_INVALID);
}

/* One process: no communication, the decode bound as it was. */
TEST(dist_one_process_is_the_decode_bound) {
    struct calc_result r;
    ASSERT(run("llama3-8b", 4096, 4, false, &r));
    ASSERT_EQ_I64(r.dist.ranks, 1);
    ASSERT_NEAR(r.dist.step_s, r.decode.t_s, 0);
    ASSERT_NEAR(r.dist.allreduce_step_s + r.dist.gather_s + r.dist.pipeline_s, 0, 0);
    ASSERT_NEAR(r.dist.speedup, 1, 0);
}

/* Llama 2 7B in Q4_0-sized weights (18 bytes per 32) on memory of 3 GB/s over 1 Gb/s links, 500 µs a message,
 * q8_0 activations on the wire, worked by hand from the formulas in calc.h:
 *   S = 1 · 4096 · 34/32 = 4352 B; all-reduce over 2 = 2·1·500 µs + 2·(1/2)·4352 / 1.25e8 = 1034.8 µs;
 *   × (2 · 32 + 1: the split embedding's) = 67.26 ms; logits: 1·500 µs + (1/2)·32000·4 / 1.25e8 = 1012 µs;
 *   over 4: 2·2·500 µs + 2·(3/4)·4352 / 1.25e8 = 2052.2 µs, × 65 = 133.4 ms; logits 2·500 µs + 768 µs. */
TEST(dist_tensor_parallel_by_hand) {
    struct calc_model m;
    struct calc_opts o;
    struct calc_result r;
    ASSERT(calc_preset("llama2-7b", &m));
    calc_opts_default(&o);
    o.context = 256;
    o.weight_bytes = 18.0 / 32;
    o.bandwidth = 3e9;
    o.peak_flops = 5e10;
    o.link_bw = 1e9 / 8;
    o.link_latency = 500e-6;
    o.comm_bytes = 34.0 / 32;
    o.tp = 2;
    ASSERT(calc_run(&m, &o, &r, NULL) == CI_OK);
    ASSERT_NEAR(r.dist.allreduce_bytes, 4352, 0);
    ASSERT_NEAR(r.dist.allreduce_s, 1034.816e-6, 1e-9);
    ASSERT_NEAR(r.dist.allreduce_step_s, 65 * 1034.816e-6, 1e-8);
    ASSERT_NEAR(r.dist.gather_s, 1012e-6, 1e-9);
    ASSERT_NEAR(r.dist.compute_s, r.decode.t_s / 2, 0);
    ASSERT_NEAR(r.dist.step_s, r.decode.t_s / 2 + 65 * 1034.816e-6 + 1012e-6, 1e-8);
    ASSERT_NEAR(r.dist.weight_bytes_rank, r.weight_bytes / 2, 0);
    double one = r.decode.t_s;
    o.tp = 4;
    ASSERT(calc_run(&m, &o, &r, NULL) == CI_OK);
    ASSERT_NEAR(r.dist.allreduce_s, 2052.224e-6, 1e-9);
    ASSERT_NEAR(r.dist.gather_s, 1768e-6, 1e-9);
    ASSERT_NEAR(r.dist.step_s, one / 4 + 65 * 2052.224e-6 + 1768e-6, 1e-8);
    ASSERT_NEAR(r.dist.speedup, one / r.dist.step_s, 1e-12);
}

/* Pipeline stages: a token crosses them in turn (no faster alone), hops of B·d·C bytes; with pp micro-batches
 * in flight the throughput is B over one stage's share. */
TEST(dist_pipeline_by_hand) {
    struct calc_model m;
    struct calc_opts o;
    struct calc_result r;
    ASSERT(calc_preset("llama3-70b", &m));
    calc_opts_default(&o);
    o.context = 1024;
    o.batch = 8;
    o.pp = 4;
    o.link_bw = 25e9 / 8;
    o.link_latency = 20e-6;
    ASSERT(calc_run(&m, &o, &r, NULL) == CI_OK);
    double hop = 20e-6 + 8 * 8192 * 4 / (25e9 / 8);
    ASSERT_NEAR(r.dist.hop_s, hop, 1e-12);
    ASSERT_NEAR(r.dist.pipeline_s, 3 * hop + 20e-6, 1e-12);
    ASSERT_NEAR(r.dist.step_s, r.decode.t_s + 3 * hop + 20e-6, 1e-12);
    ASSERT(r.dist.speedup < 1);
    ASSERT_NEAR(r.dist.tokens_s_pipelined, 8 / (r.decode.t_s / 4 + hop), 1e-6);
    ASSERT_NEAR(r.dist.kv_bytes_rank, r.kv_total / 4, 0);
}

TEST(dist_bad_options_rejected) {
    struct calc_model m;
    struct calc_opts o;
    struct calc_result r;
    struct ci_err err = {0};
    ASSERT(calc_preset("llama3-8b", &m)); // 8 KV heads, 32 layers
    calc_opts_default(&o);
    o.tp = 3;
    ASSERT(calc_run(&m, &o, &r, &err) == CI_ERR_INVALID);
    CHECK(strstr(err.msg, "8 KV heads") != NULL);
    o.tp = 8;
    ASSERT(calc_run(&m, &o, &r, NULL) == CI_OK);
    o.pp = 33;
    ASSERT(calc_run(&m, &o, &r, &err) == CI_ERR_INVALID);
    CHECK(strstr(err.msg, "32 layers") != NULL);
    o.pp = 1;
    o.link_bw = 0;
    ASSERT(calc_run(&m, &o, &r, NULL) == CI_ERR_INVALID);
    calc_opts_default(&o);
    o.link_latency = -1;
    ASSERT(calc_run(&m, &o, &r, NULL) == CI_ERR_INVALID);
    calc_opts_default(&o);
    o.comm_bytes = 0;
    ASSERT(calc_run(&m, &o, &r, NULL) == CI_ERR_INVALID);
}

TEST(formatting) {
    char buf[96];
    ASSERT(strcmp(calc_fmt_group(189849.4, buf, sizeof buf), "189,849") == 0);
    ASSERT(strcmp(calc_fmt_group(1000, buf, sizeof buf), "1,000") == 0);
    ASSERT(strcmp(calc_fmt_group(999, buf, sizeof buf), "999") == 0);
    ASSERT(strcmp(calc_fmt_group(405e9, buf, sizeof buf), "405,000,000,000") == 0);
    ASSERT(strcmp(calc_fmt_bytes(512, buf, sizeof buf), "512 B") == 0);
    ASSERT(strcmp(calc_fmt_bytes(8257536, buf, sizeof buf), "8.26 MB (7.88 MiB)") == 0);
    ASSERT(strcmp(calc_fmt_bytes_dec(810e9, buf, sizeof buf), "810.00 GB") == 0);
    ASSERT(strcmp(calc_fmt_flops(1.6357536e17, buf, sizeof buf), "1.64e17 FLOP (163.58 PFLOP)") == 0);
    ASSERT(strcmp(calc_fmt_flops(9.999e11, buf, sizeof buf), "1.00e12 FLOP (999.90 GFLOP)") == 0);
    ASSERT(strcmp(calc_fmt_time(0.744, buf, sizeof buf), "0.744 s") == 0);
    ASSERT(strcmp(calc_fmt_time(0.0145, buf, sizeof buf), "14.5 ms") == 0);
    ASSERT(strcmp(calc_fmt_time(9068, buf, sizeof buf), "9068 s (2.52 h)") == 0);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(defaults_are_the_seeds);
    RUN(llama3_405b_full_mha_kv);
    RUN(llama3_405b_gqa_ratio);
    RUN(llama3_405b_naive_step);
    RUN(llama3_405b_naive_1m_takes_hours);
    RUN(llama3_405b_prefill_100k);
    RUN(llama3_405b_decode_100k);
    RUN(llama2_7b_kv);
    RUN(batch_shares_weights_not_kv);
    RUN(synth_presets);
    RUN(qwen_72b_preset);
    RUN(kv_bytes_option);
    RUN(kv_type_option);
    RUN(params_override);
    RUN(roofline_picks_the_bound);
    RUN(parse_count);
    RUN(bad_options_rejected);
    RUN(dist_one_process_is_the_decode_bound);
    RUN(dist_tensor_parallel_by_hand);
    RUN(dist_pipeline_by_hand);
    RUN(dist_bad_options_rejected);
    RUN(formatting);
    return test_exit_code();
}
