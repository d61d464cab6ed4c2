/* Model loading: the hyper-parameters and weights of real files, and every way a model file can be wrong
 * in its content (unknown architecture, missing or misshapen tensors, unsupported types, inconsistent
 * hyper-parameters) gives a clear error naming the key or tensor, never a crash. */
#include "test.h"

#include <stdlib.h>
#include <unistd.h>

#include "core/mem.h"
#include "format/gguf_write.h"
#include "model/model.h"

// A small llama-shaped model: dim 32, 2 layers, 4 heads, 2 KV heads, ffn 48, vocab 64.
enum { DIM = 32, LAYERS = 2, HEADS = 4, KV_HEADS = 2, FF = 48, VOCAB = 64, HEAD_DIM = DIM / HEADS };

struct mutation {
    const char *arch;     // general.architecture
    const char *drop_key; // key not written
    const char *drop;     // tensor not written
    const char *reshape;  // tensor written with ne[0] + 1 ... (shape mismatch)
    const char
        *retype;   // tensor written as Q8_1 (a known type without kernels) / F16 for vectors (must be F32)
    int n_kv_head; // 0: KV_HEADS
    const char *extra;             // an extra F32 [DIM] tensor of this name
    const char *str_key, *str_val; // an extra string key (without the "<arch>." prefix)
    const char *u32_key;           // an extra u32 key (without the prefix) ...
    uint32_t u32_val;              // ... of this value
    const char *u32_key2;          // a second one
    uint32_t u32_val2;             //
    const char *f32_key;           // an extra f32 key (without the prefix)
    float f32_val;                 //
    int rope_freqs_len;            // > 0: rope_freqs.weight [rope_freqs_len] of rope_freqs_val
    float rope_freqs_val;          //
};

static float zeros[FF * DIM * 2 + VOCAB * DIM]; // big enough for any tensor here

static void add(struct gguf_writer *w, const struct mutation *mu, const char *name, int64_t ne0,
                int64_t ne1) {
    if (mu->drop && !strcmp(mu->drop, name))
        return;
    int64_t ne[2] = {ne0, ne1};
    uint32_t type = CI_TYPE_F32;
    if (mu->reshape && !strcmp(mu->reshape, name))
        ne[1] += 1;
    if (mu->retype && !strcmp(mu->retype, name))
        type = ne1 > 1 ? CI_TYPE_Q8_1 : CI_TYPE_F16;
    gguf_writer_add_tensor(w, name, type, ne1 > 1 ? 2 : 1, ne, zeros);
}

static const char *write_model(const struct mutation *mu, char *path, size_t n) {
    static int counter;
    char file[32];
    snprintf(file, sizeof file, "m%d.gguf", counter++);
    test_tmp_path(path, n, file);
    struct gguf_writer *w = gguf_writer_create();
    const char *arch = mu->arch ? mu->arch : "llama";
    char key[96];
    gguf_writer_set_str(w, "general.architecture", arch);
    struct {
        const char *suffix;
        uint32_t v;
    } dims[] = {{"embedding_length", DIM},
                {"block_count", LAYERS},
                {"feed_forward_length", FF},
                {"attention.head_count", HEADS},
                {"attention.head_count_kv", (uint32_t)(mu->n_kv_head ? mu->n_kv_head : KV_HEADS)},
                {"context_length", 128}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        snprintf(key, sizeof key, "%s.%s", arch, dims[i].suffix);
        if (!mu->drop_key || strcmp(mu->drop_key, key))
            gguf_writer_set_u32(w, key, dims[i].v);
    }
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    gguf_writer_set_f32(w, key, 1e-5f);
    if (mu->str_key) {
        snprintf(key, sizeof key, "%s.%s", arch, mu->str_key);
        gguf_writer_set_str(w, key, mu->str_val);
    }
    if (mu->u32_key) {
        snprintf(key, sizeof key, "%s.%s", arch, mu->u32_key);
        gguf_writer_set_u32(w, key, mu->u32_val);
    }
    if (mu->u32_key2) {
        snprintf(key, sizeof key, "%s.%s", arch, mu->u32_key2);
        gguf_writer_set_u32(w, key, mu->u32_val2);
    }
    if (mu->f32_key) {
        snprintf(key, sizeof key, "%s.%s", arch, mu->f32_key);
        gguf_writer_set_f32(w, key, mu->f32_val);
    }
    add(w, mu, "token_embd.weight", DIM, VOCAB);
    if (mu->extra)
        add(w, mu, mu->extra, DIM, 1);
    static float freqs[64];
    if (mu->rope_freqs_len > 0) {
        for (int i = 0; i < mu->rope_freqs_len && i < 64; i++)
            freqs[i] = mu->rope_freqs_val;
        int64_t ne[1] = {mu->rope_freqs_len};
        gguf_writer_add_tensor(w, "rope_freqs.weight", CI_TYPE_F32, 1, ne, freqs);
    }
    add(w, mu, "output_norm.weight", DIM, 1);
    for (int il = 0; il < LAYERS; il++) {
        struct {
            const char *s;
            int64_t ne0, ne1;
        } t[] = {{"attn_norm.weight", DIM, 1},
                 {"attn_q.weight", DIM, DIM},
                 {"attn_k.weight", DIM, KV_HEADS * HEAD_DIM},
                 {"attn_v.weight", DIM, KV_HEADS * HEAD_DIM},
                 {"attn_output.weight", DIM, DIM},
                 {"ffn_norm.weight", DIM, 1},
                 {"ffn_gate.weight", DIM, FF},
                 {"ffn_up.weight", DIM, FF},
                 {"ffn_down.weight", FF, DIM}};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s", il, t[i].s);
            add(w, mu, name, t[i].ne0, t[i].ne1);
        }
    }
    struct ci_err err = {0};
    enum ci_status s = gguf_writer_write_file(w, path, &err);
    gguf_writer_free(w);
    return s == CI_OK ? path : NULL;
}

/* Loads the mutated model and checks the status and that the message mentions `needle`. */
static void expect_error(const struct mutation *mu, enum ci_status want, const char *needle) {
    char path[128];
    if (!write_model(mu, path, sizeof path)) {
        TEST_FAILF("could not write the test model");
        return;
    }
    struct model *m = NULL;
    struct ci_err err = {0};
    enum ci_status s = model_load(path, &m, &err);
    if (s != want)
        TEST_FAILF("want status %d, got %d (%s)", want, s, err.msg);
    else if (needle && !strstr(err.msg, needle))
        TEST_FAILF("message '%s' does not mention '%s'", err.msg, needle);
    CHECK(m == NULL);
    unlink(path);
}

TEST(valid_model_loads) {
    struct mutation none = {0};
    char path[128];
    ASSERT(write_model(&none, path, sizeof path));
    struct model *m = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(model_load(path, &m, &err), CI_OK);
    const struct model_config *c = &m->config;
    CHECK(c->n_embd == DIM && c->n_layer == LAYERS && c->n_head == HEADS && c->n_kv_head == KV_HEADS);
    CHECK(c->n_vocab == VOCAB && c->head_dim == HEAD_DIM && c->rope_dim == HEAD_DIM && c->n_ff == FF);
    CHECK(c->rope_base == 10000.0f && !c->rope_neox);
    CHECK(m->weights.output.data == m->weights.tok_embd.data); // no output.weight: tied head
    model_free(m);
    unlink(path);
}

TEST(unknown_architecture) {
    struct mutation mu = {.arch = "gpt-neox"};
    expect_error(&mu, CI_ERR_UNSUPPORTED, "gpt-neox");
}

TEST(missing_key) {
    struct mutation mu = {.drop_key = "llama.block_count"};
    expect_error(&mu, CI_ERR_INVALID, "llama.block_count");
}

TEST(missing_tensor) {
    struct mutation mu = {.drop = "blk.1.ffn_up.weight"};
    expect_error(&mu, CI_ERR_FORMAT, "blk.1.ffn_up.weight");
    struct mutation no_emb = {.drop = "token_embd.weight"};
    expect_error(&no_emb, CI_ERR_FORMAT, "token_embd.weight");
}

TEST(wrong_shape) {
    struct mutation mu = {.reshape = "blk.0.attn_k.weight"};
    expect_error(&mu, CI_ERR_FORMAT, "blk.0.attn_k.weight");
}

TEST(unsupported_types) {
    // The message names the tensor and its type.
    struct mutation q8_1 = {.retype = "blk.1.attn_q.weight"};
    expect_error(&q8_1, CI_ERR_UNSUPPORTED, "tensor 'blk.1.attn_q.weight': type Q8_1 not supported");
    struct mutation f16_norm = {.retype = "blk.0.attn_norm.weight"};
    expect_error(&f16_norm, CI_ERR_UNSUPPORTED, "tensor 'blk.0.attn_norm.weight': type F16 not supported");
}

TEST(inconsistent_heads) {
    struct mutation mu = {.n_kv_head = 3};
    expect_error(&mu, CI_ERR_FORMAT, "KV head");
}

TEST(real_files) {
    char p[512];
    struct model *m = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(model_load(test_model_path(p, sizeof p, "stories260K.gguf"), &m, &err), CI_OK);
    CHECK(m->config.n_ctx_train == 2048 && m->config.rope_dim == 8 && m->config.n_kv_head == 4);
    CHECK(model_n_params(m) > 250000 && model_n_params(m) < 300000);
    model_free(m);
    ASSERT_STATUS(model_load(test_model_path(p, sizeof p, "stories260K.bin"), &m, &err), CI_OK);
    CHECK(m->config.n_ctx_train == 512 && m->format == MODEL_FORMAT_LLAMA2C);
    model_free(m);
    CHECK(model_load(test_model_path(p, sizeof p, "tok512.bin"), &m, &err) != CI_OK && m == NULL);
    CHECK(err.msg[0] != '\0');
}

/* No tensor is silently ignored: one the architecture does not consume fails the load, naming it. */
TEST(unknown_tensor_refused) {
    expect_error(&(struct mutation){.extra = "blk.1.attn_gate.weight"}, CI_ERR_UNSUPPORTED,
                 "'blk.1.attn_gate.weight' is not used by architecture llama");
    expect_error(&(struct mutation){.extra = "mystery.weight"}, CI_ERR_UNSUPPORTED, "mystery.weight");
    // Q/K norms belong to qwen3, not llama.
    expect_error(&(struct mutation){.extra = "blk.0.attn_q_norm.weight"}, CI_ERR_UNSUPPORTED,
                 "blk.0.attn_q_norm.weight");
}

/* Keys that change the math and are not implemented, and malformed RoPE scaling. */
TEST(unimplemented_keys_refused) {
    // llama reads a sliding window (Mistral), but not one beyond its context (128 here).
    expect_error(&(struct mutation){.u32_key = "attention.sliding_window", .u32_val = 4096}, CI_ERR_FORMAT,
                 "context length 128");
    expect_error(&(struct mutation){.f32_key = "attn_logit_softcapping", .f32_val = 50.0f},
                 CI_ERR_UNSUPPORTED, "attn_logit_softcapping");
    expect_error(&(struct mutation){.f32_key = "final_logit_softcapping", .f32_val = 30.0f},
                 CI_ERR_UNSUPPORTED, "final_logit_softcapping");
    // Experts: refused where the architecture has none; elsewhere the counts are validated and the expert
    // tensors required.
    expect_error(&(struct mutation){.arch = "qwen2", .u32_key = "expert_count", .u32_val = 8},
                 CI_ERR_UNSUPPORTED, "qwen2.expert_count");
    expect_error(&(struct mutation){.u32_key = "expert_count", .u32_val = 8}, CI_ERR_FORMAT,
                 "'llama.expert_used_count': 0 must be in [1, expert_count 8]");
    expect_error(
        &(struct mutation){
            .u32_key = "expert_count", .u32_val = 8, .u32_key2 = "expert_used_count", .u32_val2 = 9},
        CI_ERR_FORMAT, "'llama.expert_used_count': 9 must be in [1, expert_count 8]");
    expect_error(&(struct mutation){.u32_key = "expert_used_count", .u32_val = 2}, CI_ERR_FORMAT,
                 "expert_used_count' is 2 but the model has no experts");
    expect_error(
        &(struct mutation){
            .u32_key = "expert_count", .u32_val = 8, .u32_key2 = "expert_used_count", .u32_val2 = 2},
        CI_ERR_FORMAT, "tensor 'blk.0.ffn_gate_inp.weight' missing");
    expect_error(&(struct mutation){.arch = "qwen3moe"}, CI_ERR_FORMAT, "needs key 'qwen3moe.expert_count'");
    expect_error(
        &(struct mutation){
            .u32_key = "expert_count", .u32_val = 8, .u32_key2 = "expert_group_count", .u32_val2 = 2},
        CI_ERR_UNSUPPORTED, "expert_group_count");
    expect_error(&(struct mutation){.str_key = "rope.scaling.type", .str_val = "wobble"}, CI_ERR_UNSUPPORTED,
                 "'wobble'");
    expect_error(&(struct mutation){.str_key = "rope.scaling.type", .str_val = "yarn"}, CI_ERR_FORMAT,
                 "yarn needs key 'llama.rope.scaling.factor'");
    expect_error(&(struct mutation){.str_key = "rope.scaling.type", .str_val = "longrope"}, CI_ERR_FORMAT,
                 "rope_factors_long.weight");
    expect_error(&(struct mutation){.f32_key = "rope.scaling.attn_factor", .f32_val = -1.0f}, CI_ERR_FORMAT,
                 "attn_factor");
    expect_error(&(struct mutation){.f32_key = "rope.scaling.yarn_log_multiplier", .f32_val = 0.1f},
                 CI_ERR_UNSUPPORTED, "yarn_log_multiplier");
    expect_error(&(struct mutation){.u32_key = "rope.scaling.original_context_length", .u32_val = 0},
                 CI_ERR_FORMAT, "original_context_length");
    expect_error(&(struct mutation){.str_key = "rope.scaling.type", .str_val = "llama3"}, CI_ERR_FORMAT,
                 "rope_freqs.weight");
    expect_error(&(struct mutation){.rope_freqs_len = HEAD_DIM}, CI_ERR_FORMAT, "rope_freqs.weight");
    expect_error(&(struct mutation){.rope_freqs_len = HEAD_DIM / 2, .rope_freqs_val = -1.0f}, CI_ERR_FORMAT,
                 "rope_freqs.weight");
    expect_error(&(struct mutation){.u32_key = "attention.key_length",
                                    .u32_val = 16,
                                    .u32_key2 = "attention.value_length",
                                    .u32_val2 = 8},
                 CI_ERR_UNSUPPORTED, "value_length");
}

/* The supported RoPE scalings and head_dim from key_length reach the config. */
TEST(rope_scaling_and_head_dim) {
    struct mutation mus[] = {
        {.rope_freqs_len = HEAD_DIM / 2, .rope_freqs_val = 4.0f},
        {.str_key = "rope.scaling.type",
         .str_val = "linear",
         .f32_key = "rope.scaling.factor",
         .f32_val = 4.0f},
        {.f32_key = "rope.scaling.factor", .f32_val = 2.0f}, // no type: linear, as llama.cpp reads it
        {.str_key = "rope.scaling.type", .str_val = "none"},
        {.str_key = "rope.scaling.type",
         .str_val = "yarn",
         .f32_key = "rope.scaling.factor",
         .f32_val = 4.0f},
    };
    enum rope_scaling want[] = {ROPE_SCALING_LLAMA3, ROPE_SCALING_LINEAR, ROPE_SCALING_LINEAR,
                                ROPE_SCALING_NONE, ROPE_SCALING_YARN};
    float want_scale[] = {1.0f, 0.25f, 0.5f, 1.0f, 0.25f};
    for (size_t i = 0; i < sizeof mus / sizeof *mus; i++) {
        char path[128];
        ASSERT(write_model(&mus[i], path, sizeof path));
        struct model *m = NULL;
        struct ci_err err = {0};
        ASSERT_STATUS(model_load(path, &m, &err), CI_OK);
        CHECK(m->config.rope_scaling == want[i] && m->config.rope_pos_scale == want_scale[i]);
        CHECK((m->weights.rope_freqs.data != NULL) == (i == 0));
        model_free(m);
        unlink(path);
    }
    // key_length equal to the implied head size loads; n_embd / n_head need not divide when it is given.
    struct mutation mu = {.u32_key = "attention.key_length",
                          .u32_val = HEAD_DIM,
                          .u32_key2 = "attention.value_length",
                          .u32_val2 = HEAD_DIM};
    char path[128];
    ASSERT(write_model(&mu, path, sizeof path));
    struct model *m = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(model_load(path, &m, &err), CI_OK);
    CHECK(m->config.head_dim == HEAD_DIM);
    model_free(m);
    unlink(path);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(valid_model_loads);
    RUN(unknown_architecture);
    RUN(missing_key);
    RUN(missing_tensor);
    RUN(wrong_shape);
    RUN(unsupported_types);
    RUN(inconsistent_heads);
    RUN(unknown_tensor_refused);
    RUN(unimplemented_keys_refused);
    RUN(rope_scaling_and_head_dim);
    RUN(real_files);
    return test_exit_code();
}
