/* llama.cpp's presets and per-tensor type choices (model/quant_rules.c) on the tensor lists of real shapes:
 * TinyLlama 1.1B's Q4_K_M is 135 Q4_K + 21 Q6_K (as the published file), Qwen2 0.5B's 896-wide rows fall back
 * to 32-element blocks, 1-D tensors and norms keep their type, unknown matrices take the base type.  The
 * numpy test (tests/ref/test_quantize_np.py) checks every tensor against the rules written out in Python. */
#include "model/quant_rules.h"

#include <stdio.h>
#include <string.h>

#include "kernels/quant.h"
#include "test.h"

struct shape {
    int n_layer, n_embd, n_head, n_kv, n_ff;
    bool tied, bias;
};

struct counts {
    int by_type[CI_TYPE_COUNT];
};

/* Runs the two passes over the llama tensor list of shape s (in GGUF order) and counts the chosen types. */
static struct counts choose(const char *preset, const struct shape *s, bool pure) {
    static char names[2048][64];
    int ne0[2048], n_dims[2048], n = 0;
#define ADD(nd, ne, ...) (snprintf(names[n], 64, __VA_ARGS__), n_dims[n] = nd, ne0[n] = ne, n++)
    ADD(2, s->n_embd, "token_embd.weight");
    for (int il = 0; il < s->n_layer; il++) {
        ADD(1, s->n_embd, "blk.%d.attn_norm.weight", il);
        ADD(2, s->n_embd, "blk.%d.attn_q.weight", il);
        ADD(2, s->n_embd, "blk.%d.attn_k.weight", il);
        ADD(2, s->n_embd, "blk.%d.attn_v.weight", il);
        if (s->bias) {
            ADD(1, s->n_embd, "blk.%d.attn_q.bias", il);
            ADD(1, 128, "blk.%d.attn_k.bias", il);
            ADD(1, 128, "blk.%d.attn_v.bias", il);
        }
        ADD(2, s->n_embd, "blk.%d.attn_output.weight", il);
        ADD(1, s->n_embd, "blk.%d.ffn_norm.weight", il);
        ADD(2, s->n_embd, "blk.%d.ffn_gate.weight", il);
        ADD(2, s->n_embd, "blk.%d.ffn_up.weight", il);
        ADD(2, s->n_ff, "blk.%d.ffn_down.weight", il);
    }
    ADD(1, s->n_embd, "output_norm.weight");
    if (!s->tied)
        ADD(2, s->n_embd, "output.weight");
#undef ADD
    struct quant_rules r;
    const struct quant_preset *p = quant_preset_find(preset);
    struct counts c;
    memset(&c, 0, sizeof c);
    if (!p) {
        TEST_FAILF("unknown preset %s", preset);
        return c;
    }
    quant_rules_init(&r, p, s->n_layer, s->n_head, s->n_kv, 0);
    r.pure = pure;
    for (int i = 0; i < n; i++)
        quant_rules_count(&r, names[i]);
    for (int i = 0; i < n; i++)
        c.by_type[quant_rules_type(&r, names[i], n_dims[i], ne0[i], CI_TYPE_F32)]++;
    return c;
}

static const struct shape tinyllama = {22, 2048, 32, 4, 5632, false, false};
static const struct shape qwen2_05b = {24, 896, 14, 2, 4864, true, true};

TEST(presets_known) {
    CHECK(quant_n_presets() == 19);
    CHECK(quant_preset_find("q4_k_m") && quant_preset_find("q4_k_m")->ftype == 15);
    CHECK(quant_preset_find("Q4_K") == quant_preset_find("Q4_K_M")); // llama-quantize's alias
    CHECK(quant_preset_find("IQ4_XS")->ftype == 30 && quant_preset_find("IQ4_XS")->base == CI_TYPE_IQ4_XS);
    CHECK(quant_preset_find("BF16")->ftype == 32 && quant_preset_find("Q8_0")->ftype == 7);
    CHECK(!quant_preset_find("Q7_K") && !quant_preset_find(""));
    CHECK(strstr(quant_preset_names(), "Q3_K_S, Q3_K_M, Q3_K_L") != NULL);
}

TEST(tinyllama_q4_k_m_as_published) {
    struct counts c = choose("Q4_K_M", &tinyllama, false);
    CHECK(c.by_type[CI_TYPE_Q4_K] == 135 && c.by_type[CI_TYPE_Q6_K] == 21 && c.by_type[CI_TYPE_F32] == 45);
    c = choose("Q5_K_M", &tinyllama, false);
    CHECK(c.by_type[CI_TYPE_Q5_K] == 135 && c.by_type[CI_TYPE_Q6_K] == 21);
    c = choose("Q4_K_M", &tinyllama, true); // --pure: only the base type
    CHECK(c.by_type[CI_TYPE_Q4_K] == 156 && c.by_type[CI_TYPE_F32] == 45);
}

TEST(qwen2_rows_fall_back) {
    // 896 = 3.5 x 256: the K-quants fall back to 32-element types; ffn_down (4864 = 19 x 256) keeps them; the
    // tied token_embd is the head: Q8_0 because 896 is not a multiple of 256.
    struct counts c = choose("Q4_K_M", &qwen2_05b, false);
    CHECK(c.by_type[CI_TYPE_Q8_0] == 13 && c.by_type[CI_TYPE_Q6_K] == 12 && c.by_type[CI_TYPE_Q4_K] == 12);
    CHECK(c.by_type[CI_TYPE_Q5_0] == 132 && c.by_type[CI_TYPE_F32] == 121);
    c = choose("IQ4_XS", &qwen2_05b, false);
    CHECK(c.by_type[CI_TYPE_IQ4_NL] == 120 && c.by_type[CI_TYPE_IQ4_XS] == 21);
    c = choose("Q2_K", &qwen2_05b, false);
    CHECK(c.by_type[CI_TYPE_Q4_0] == 120);
}

TEST(single_tensor_rules) {
    struct quant_rules r;
    quant_rules_init(&r, quant_preset_find("Q4_K_M"), 4, 8, 8, 0);
    quant_rules_count(&r, "output.weight");
    CHECK(quant_rules_type(&r, "blk.0.attn_norm.weight", 1, 256, CI_TYPE_F32) == CI_TYPE_F32);
    CHECK(quant_rules_type(&r, "blk.0.attn_norm.weight", 1, 256, CI_TYPE_F16) == CI_TYPE_F16); // kept as is
    CHECK(quant_rules_type(&r, "blk.0.attn_q.bias", 1, 256, CI_TYPE_F32) == CI_TYPE_F32);
    CHECK(quant_rules_type(&r, "some.unknown.weight", 2, 512, CI_TYPE_F32) == CI_TYPE_Q4_K);
    CHECK(quant_rules_type(&r, "blk.0.ffn_gate_inp.weight", 2, 512, CI_TYPE_F32) == CI_TYPE_F32);
    CHECK(quant_rules_type(&r, "output.weight", 2, 512, CI_TYPE_F32) == CI_TYPE_Q6_K);
    CHECK(quant_rules_type(&r, "token_embd.weight", 2, 512, CI_TYPE_F32) == CI_TYPE_Q4_K); // untied
    CHECK(quant_rules_type(&r, "odd.weight", 2, 48, CI_TYPE_F32) == CI_TYPE_F16);          // 48 % 32 != 0
    CHECK(r.n_fallback == 1);
    quant_rules_init(&r, quant_preset_find("Q8_0"), 4, 8, 8, 0);
    CHECK(quant_rules_type(&r, "output.weight", 2, 512, CI_TYPE_F32) == CI_TYPE_Q8_0);
    quant_rules_init(&r, quant_preset_find("F16"), 4, 8, 8, 0);
    CHECK(quant_rules_type(&r, "token_embd.weight", 2, 100, CI_TYPE_F32) == CI_TYPE_F16);
    CHECK(quant_rules_type(&r, "output_norm.weight", 1, 100, CI_TYPE_F32) == CI_TYPE_F32);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(presets_known);
    RUN(tinyllama_q4_k_m_as_published);
    RUN(qwen2_rows_fall_back);
    RUN(single_tensor_rules);
    return test_exit_code();
}
