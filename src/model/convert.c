/* llama2.c checkpoint + tokenizer.bin -> GGUF (see convert.h).  Tensors stream out one at a time: F32 data
 * goes straight from the checkpoint's mapping, other types through one conversion buffer. */
#include "model/convert.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/mapfile.h"
#include "core/mem.h"
#include "kernels/quant.h"
#include "format/gguf_write.h"
#include "format/llama2c.h"
#include "model/quant_rules.h"
#include "model/synth.h"

struct vocab {
    int n;
    char *text;        // all pieces back to back (not NUL-terminated)
    const char **strs; // [n] into text
    size_t *lens;      // [n]
    float *scores;     // [n]
    int32_t *types;    // [n]
};

static void vocab_free(struct vocab *v) {
    ci_free(v->text);
    ci_free(v->strs);
    ci_free(v->lens);
    ci_free(v->scores);
    ci_free(v->types);
    memset(v, 0, sizeof *v);
}

static bool is_byte_piece(const uint8_t *p, uint64_t n) {
    static const char hex[] = "0123456789ABCDEF";
    return n == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>' && p[3] && p[4] && strchr(hex, p[3]) &&
           strchr(hex, p[4]);
}

/* Reads n_vocab tokens from tokenizer.bin bytes into v (pieces converted to SentencePiece form). */
static enum ci_status parse_tokenizer(const uint8_t *data, uint64_t size, int n_vocab, struct vocab *v,
                                      struct ci_err *err) {
    static const char sp[] = "\xe2\x96\x81"; // U+2581
    struct ci_reader r;
    ci_reader_init(&r, data, size);
    int32_t max_len;
    if (ci_rd_i32(&r, &max_len) != CI_OK)
        return ci_err_set(err, CI_ERR_FORMAT, "tokenizer.bin: truncated header");
    if (max_len <= 0 || max_len > (1 << 20))
        return ci_err_set(err, CI_ERR_FORMAT, "tokenizer.bin: max_token_length %d out of range",
                          (int)max_len);
    // Pieces grow at most 3x (' ' -> 3 bytes), and they all lie in the file: size bounds the text.
    size_t text_cap;
    if (size > SIZE_MAX || !ci_mul_size((size_t)size, 3, &text_cap))
        return ci_err_set(err, CI_ERR_LIMIT, "tokenizer.bin: too large");
    v->n = n_vocab;
    v->text = ci_malloc(text_cap + 1);
    v->strs = ci_calloc((size_t)n_vocab, sizeof *v->strs);
    v->lens = ci_calloc((size_t)n_vocab, sizeof *v->lens);
    v->scores = ci_calloc((size_t)n_vocab, sizeof *v->scores);
    v->types = ci_calloc((size_t)n_vocab, sizeof *v->types);
    if (!v->text || !v->strs || !v->lens || !v->scores || !v->types)
        return ci_err_set(err, CI_ERR_NOMEM, "tokenizer.bin: out of memory for %d tokens", n_vocab);
    size_t used = 0;
    for (int i = 0; i < n_vocab; i++) {
        float score;
        int32_t len;
        const uint8_t *p;
        if (ci_rd_f32(&r, &score) != CI_OK || ci_rd_i32(&r, &len) != CI_OK)
            return ci_err_set(err, CI_ERR_FORMAT, "tokenizer.bin: truncated at token %d of %d (offset %llu)",
                              i, n_vocab, (unsigned long long)r.pos);
        if (len < 0)
            return ci_err_set(err, CI_ERR_FORMAT, "tokenizer.bin: token %d has negative length %d", i,
                              (int)len);
        if (ci_rd_view(&r, (uint64_t)len, &p) != CI_OK)
            return ci_err_set(err, CI_ERR_FORMAT, "tokenizer.bin: token %d (%d bytes) runs past the end", i,
                              (int)len);
        char *dst = v->text + used;
        size_t n = 0;
        if (len == 5 && memcmp(p, "\n<s>\n", 5) == 0) {
            memcpy(dst, "<s>", 3);
            n = 3;
        } else if (len == 6 && memcmp(p, "\n</s>\n", 6) == 0) {
            memcpy(dst, "</s>", 4);
            n = 4;
        } else {
            for (int32_t j = 0; j < len; j++) {
                if (p[j] == ' ') {
                    memcpy(dst + n, sp, 3);
                    n += 3;
                } else {
                    dst[n++] = (char)p[j];
                }
            }
        }
        CI_ASSERT(used + n <= text_cap);
        v->strs[i] = dst;
        v->lens[i] = n;
        used += n;
        v->scores[i] = score;
        v->types[i] = i == 0 ? 2 : i <= 2 ? 3 : is_byte_piece(p, (uint64_t)len) ? 6 : 1;
    }
    if (ci_reader_left(&r) != 0)
        return ci_err_set(err, CI_ERR_FORMAT,
                          "tokenizer.bin: %llu bytes left after %d tokens (the checkpoint's vocab_size): "
                          "tokenizer and model do not match",
                          (unsigned long long)ci_reader_left(&r), n_vocab);
    return CI_OK;
}

static enum ci_status load_tokenizer(const char *path, int n_vocab, struct vocab *v, struct ci_err *err) {
    struct ci_mapfile m;
    enum ci_status s = ci_mapfile_open(&m, path, err);
    if (s != CI_OK)
        return s;
    s = parse_tokenizer(m.data, m.size, n_vocab, v, err);
    if (s != CI_OK)
        ci_err_prefix(err, "%s", path);
    ci_mapfile_close(&m);
    return s;
}

static void set_keys(struct gguf_writer *w, const struct model_config *c, int file_type, bool quantized,
                     const char *name, const struct vocab *v) {
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_str(w, "general.name", name);
    gguf_writer_set_u32(w, "general.file_type", (uint32_t)file_type);
    if (quantized)
        gguf_writer_set_u32(w, "general.quantization_version", 2);
    gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)c->n_vocab);
    gguf_writer_set_u32(w, "llama.context_length", (uint32_t)c->n_ctx_train);
    gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)c->n_embd);
    gguf_writer_set_u32(w, "llama.block_count", (uint32_t)c->n_layer);
    gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)c->n_ff);
    gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)c->n_head);
    gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_head);
    gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", c->rms_eps);
    gguf_writer_set_f32(w, "llama.rope.freq_base", c->rope_base);
    gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)c->rope_dim);
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v->strs, v->lens, (uint64_t)v->n);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->scores, (uint64_t)v->n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types, (uint64_t)v->n);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
}

/* The stored type of a source tensor: matrices in `type` when its block divides the row, else F32. */
static uint32_t out_type(const struct ci_tensor *t, uint32_t type) {
    const struct ci_type_traits *tt = ci_type_traits(type);
    return t->n_dims == 2 && tt && t->ne[0] % tt->block_size == 0 ? type : CI_TYPE_F32;
}

/* The checkpoint's file name without directories or extension, for general.name. */
static void base_name(const char *path, char *out, size_t n) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, n, "%s", b);
    char *dot = strrchr(out, '.');
    if (dot && dot != out)
        *dot = '\0';
}

/* qp: a llama.cpp preset's per-tensor mixture; NULL: every matrix in type. */
static enum ci_status convert(const char *in, const char *tokenizer_path, const struct quant_preset *qp,
                              uint32_t type, const char *out, struct ci_err *err) {
    enum ci_status s;
    struct llama2c *l = NULL;
    struct vocab v = {0};
    struct gguf_writer *w = NULL;
    struct quant_tensor *qt = NULL;
    uint8_t *buf = NULL;
    FILE *f = NULL;
    if (!qp && synth_file_type(type) < 0)
        return ci_err_set(err, CI_ERR_INVALID, "convert: type %s not supported (f32, f16, bf16, q8_0, q4_0)",
                          ci_type_name(type));
    if ((s = llama2c_open(in, &l, err)) != CI_OK)
        goto fail;
    struct model_config c;
    model_config_from_llama2c(&c, l);
    if ((s = load_tokenizer(tokenizer_path, c.n_vocab, &v, err)) != CI_OK)
        goto fail;
    if (!(w = gguf_writer_create())) {
        s = ci_err_set(err, CI_ERR_NOMEM, "convert: out of memory");
        goto fail;
    }
    // Each tensor's type: the preset's rules, or type for the matrices it fits.
    int n_t = llama2c_n_tensors(l);
    if (!(qt = ci_calloc((size_t)n_t, sizeof *qt))) {
        s = ci_err_set(err, CI_ERR_NOMEM, "convert: out of memory");
        goto fail;
    }
    for (int i = 0; i < n_t; i++) {
        const struct ci_tensor *t = llama2c_tensor(l, i);
        qt[i] = (struct quant_tensor){t->name, t->n_dims, t->ne[0], CI_TYPE_F32, out_type(t, type)};
    }
    struct quant_rules rules;
    if (qp) {
        quant_rules_init(&rules, qp, c.n_layer, c.n_head, c.n_kv_head, 0);
        if ((s = quant_rules_choose(&rules, qt, n_t, err)) != CI_OK)
            goto fail;
    }
    bool quantized = false;
    for (int i = 0; i < n_t; i++)
        quantized |= ci_type_traits(qt[i].type)->block_size > 1;
    char name[128];
    base_name(in, name, sizeof name);
    set_keys(w, &c, qp ? qp->ftype : synth_file_type(type), quantized, name, &v);
    uint64_t max_bytes = 0;
    for (int i = 0; i < n_t; i++) {
        const struct ci_tensor *t = llama2c_tensor(l, i);
        gguf_writer_add_tensor(w, t->name, qt[i].type, t->n_dims, t->ne, NULL);
        if ((s = gguf_writer_status(w, err)) != CI_OK)
            goto fail;
        uint64_t nb = gguf_writer_tensor_nbytes(w, i);
        max_bytes = qt[i].type != CI_TYPE_F32 && nb > max_bytes ? nb : max_bytes;
    }
    if (max_bytes && (max_bytes > SIZE_MAX || !(buf = ci_malloc((size_t)max_bytes)))) {
        s = ci_err_set(err, CI_ERR_NOMEM, "convert: out of memory for a %llu-byte tensor",
                       (unsigned long long)max_bytes);
        goto fail;
    }
    if (!(f = fopen(out, "wb"))) {
        s = ci_err_set(err, CI_ERR_IO, "%s: cannot create: %s", out, strerror(errno));
        goto fail;
    }
    if ((s = gguf_writer_write_header(w, f, err)) != CI_OK)
        goto fail;
    for (int i = 0; i < n_t; i++) {
        const struct ci_tensor *t = llama2c_tensor(l, i);
        uint32_t ty = qt[i].type;
        const void *data = t->data;
        if (ty != CI_TYPE_F32) {
            uint64_t rb = 0;
            bool row_ok = ci_row_bytes(ty, (uint64_t)t->ne[0], &rb);
            CI_ASSERT(row_ok);
            for (int64_t r = 0; r < t->ne[1]; r++)
                ci_quantize_row(ty, (const float *)t->data + r * t->ne[0], buf + (uint64_t)r * rb, t->ne[0]);
            data = buf;
        }
        if ((s = gguf_writer_write_tensor_data(w, f, i, data, err)) != CI_OK)
            goto fail;
    }
    if (fflush(f) != 0 || ferror(f)) {
        s = ci_err_set(err, CI_ERR_IO, "%s: write failed: %s", out, strerror(errno));
        goto fail;
    }
fail:
    if (f && fclose(f) != 0 && s == CI_OK)
        s = ci_err_set(err, CI_ERR_IO, "%s: close failed: %s", out, strerror(errno));
    if (f && s != CI_OK)
        remove(out);
    ci_free(buf);
    ci_free(qt);
    gguf_writer_free(w);
    vocab_free(&v);
    llama2c_free(l);
    return s;
}

enum ci_status convert_llama2c(const char *in, const char *tokenizer_path, uint32_t type, const char *out,
                               struct ci_err *err) {
    return convert(in, tokenizer_path, NULL, type, out, err);
}

enum ci_status convert_llama2c_preset(const char *in, const char *tokenizer_path, const char *quant,
                                      const char *out, struct ci_err *err) {
    const struct quant_preset *qp = quant_preset_find(quant);
    if (!qp)
        return ci_err_set(err, CI_ERR_INVALID, "convert: unknown type '%s' (accepted: %s)", quant,
                          quant_preset_names());
    return convert(in, tokenizer_path, qp, CI_TYPE_F32, out, err);
}
