/* GGUF -> GGUF re-typed per a llama.cpp preset, streamed tensor by tensor (see quantize_model.h). */
#include "model/quantize_model.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/mem.h"
#include "core/threadpool.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "model/quant_rules.h"

#define ROWS_PER_TASK 16 // at least; more when a tensor has over 2^31 tasks' worth of rows

/* An integer hyper-parameter "<arch>.<suffix>", def when absent or not an integer. */
static int arch_int(const struct gguf *g, const char *arch, const char *suffix, int def) {
    char key[160];
    int64_t v = def;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_get_int_opt(g, key, &v, NULL) != CI_OK || v < 0 || v > 1000000)
        return def;
    return (int)v;
}

/* The rows of one tensor, split into tasks of ROWS_PER_TASK rows for the pool. */
struct job {
    const struct ci_tensor *src;
    uint32_t type;
    uint64_t out_row_bytes;
    int64_t n_rows, rows_per_task;
    uint8_t *out;
    float *rows; // [n_threads][ne0]: one row of floats per thread
};

static void run_rows(void *ctx, int task, int thread) {
    const struct job *j = ctx;
    const int64_t ne0 = j->src->ne[0];
    float *row = j->rows + (size_t)thread * (size_t)ne0;
    int64_t r1 = (int64_t)(task + 1) * j->rows_per_task;
    for (int64_t r = (int64_t)task * j->rows_per_task; r < r1 && r < j->n_rows; r++) {
        const uint8_t *in = (const uint8_t *)j->src->data + (uint64_t)r * j->src->row_bytes;
        ci_dequantize_row(j->src->type, in, row, ne0);
        ci_quantize_row(j->type, row, j->out + (uint64_t)r * j->out_row_bytes, ne0);
    }
}

static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

enum ci_status quantize_model(const char *in, const char *out, const char *preset,
                              const struct quantize_options *opt, struct quantize_report *rep,
                              struct ci_err *err) {
    enum ci_status s = CI_OK;
    struct gguf *g = NULL;
    struct gguf_writer *w = NULL;
    struct ci_threadpool *tp = NULL;
    struct quant_tensor *qt = NULL; // [n_tensors]: each tensor's chosen type
    uint8_t *buf = NULL;
    float *rows = NULL;
    FILE *f = NULL;
    memset(rep, 0, sizeof *rep);
    const struct quant_preset *p = quant_preset_find(preset);
    if (!p)
        return ci_err_set(err, CI_ERR_INVALID, "unknown type '%s' (accepted: %s)", preset,
                          quant_preset_names());
    if (same_file(in, out))
        return ci_err_set(err, CI_ERR_INVALID, "%s: the output would overwrite the input", out);
    if ((s = gguf_open(in, &g, err)) != CI_OK)
        goto fail;

    // The hyper-parameters the rules look at.
    struct gguf_str arch_s = {"", 0};
    char arch[64] = "";
    if (gguf_get_str_opt(g, "general.architecture", &arch_s, NULL) == CI_OK && arch_s.len < sizeof arch) {
        memcpy(arch, arch_s.data, (size_t)arch_s.len);
        arch[arch_s.len] = '\0';
    }
    int n_head = arch_int(g, arch, "attention.head_count", 0);
    struct quant_rules rules;
    quant_rules_init(&rules, p, arch_int(g, arch, "block_count", 0), n_head,
                     arch_int(g, arch, "attention.head_count_kv", n_head),
                     arch_int(g, arch, "expert_count", 0));
    rules.pure = opt->pure;

    const int64_t n_tensors = gguf_n_tensors(g);
    if (!(w = gguf_writer_create()) || !(qt = ci_calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *qt))) {
        s = ci_err_set(err, CI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    // Every key/value as it was (file_type and quantization_version are replaced where they stand).
    for (int64_t i = 0; i < gguf_n_kv(g); i++)
        gguf_writer_copy_kv(w, g, i);
    gguf_writer_set_u32(w, "general.file_type", (uint32_t)p->ftype);
    rep->ftype = p->ftype;

    // Every tensor's type, chosen as llama-quantize does.
    for (int64_t i = 0; i < n_tensors; i++) {
        const struct ci_tensor *t = gguf_tensor(g, i);
        int n_dims = GGUF_MAX_DIMS; // as ggml_n_dims: trailing dimensions of 1 do not count
        while (n_dims > 1 && t->ne[n_dims - 1] == 1)
            n_dims--;
        qt[i] = (struct quant_tensor){t->name, n_dims, t->ne[0], t->type, t->type};
    }
    if ((s = quant_rules_choose(&rules, qt, n_tensors, err)) != CI_OK)
        goto fail;
    uint64_t max_bytes = 0;
    int64_t max_row = 0;
    bool any_quant = false;
    for (int64_t i = 0; i < n_tensors; i++) {
        const struct ci_tensor *t = gguf_tensor(g, i);
        if (qt[i].type != t->type && !ci_type_supported(t->type)) { // what dequantizes
            s = ci_err_set(err, CI_ERR_UNSUPPORTED, "%s: tensor '%s' is %s, which cannot be converted to %s",
                           in, t->name, ci_type_name(t->type), ci_type_name(qt[i].type));
            goto fail;
        }
        gguf_writer_add_tensor(w, t->name, qt[i].type, t->n_dims, t->ne, NULL);
        if ((s = gguf_writer_status(w, err)) != CI_OK)
            goto fail;
        uint64_t nb = gguf_writer_tensor_nbytes(w, i);
        if (qt[i].type != t->type) {
            max_bytes = nb > max_bytes ? nb : max_bytes;
            max_row = t->ne[0] > max_row ? t->ne[0] : max_row;
        }
        any_quant |= ci_type_traits(qt[i].type)->block_size > 1;
        rep->types[qt[i].type].count++;
        rep->types[qt[i].type].n_elements += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        rep->types[qt[i].type].n_bytes += nb;
    }
    if (any_quant)
        gguf_writer_set_u32(w, "general.quantization_version", 2);
    else
        gguf_writer_remove_key(w, "general.quantization_version");
    if ((s = gguf_writer_status(w, err)) != CI_OK)
        goto fail;
    rep->n_tensors = (int)n_tensors;
    rep->n_fallback = rules.n_fallback;

    const int n_threads = opt->n_threads < 1 ? 1 : opt->n_threads;
    if ((s = ci_threadpool_create(n_threads, &tp, err)) != CI_OK)
        goto fail;
    if (max_bytes > SIZE_MAX || (max_bytes && !(buf = ci_malloc((size_t)max_bytes))) ||
        (max_row && !(rows = ci_malloc((size_t)max_row * (size_t)n_threads * sizeof *rows)))) {
        s = ci_err_set(err, CI_ERR_NOMEM, "out of memory for a %llu-byte tensor",
                       (unsigned long long)max_bytes);
        goto fail;
    }
    if (!(f = fopen(out, "wb"))) {
        s = ci_err_set(err, CI_ERR_IO, "%s: cannot create: %s", out, strerror(errno));
        goto fail;
    }
    if ((s = gguf_writer_write_header(w, f, err)) != CI_OK)
        goto fail;
    for (int64_t i = 0; i < n_tensors; i++) {
        const struct ci_tensor *t = gguf_tensor(g, i);
        const void *data = t->data;
        if (qt[i].type != t->type) {
            struct job j = {t, qt[i].type, 0, t->ne[1] * t->ne[2] * t->ne[3], ROWS_PER_TASK, buf, rows};
            bool ok = ci_row_bytes(qt[i].type, (uint64_t)t->ne[0], &j.out_row_bytes);
            CI_ASSERT(ok); // the rules only choose types whose block divides the row
            if (j.n_rows / j.rows_per_task >= INT32_MAX)
                j.rows_per_task = j.n_rows / (INT32_MAX / 2);
            int64_t n_tasks = (j.n_rows + j.rows_per_task - 1) / j.rows_per_task;
            ci_threadpool_run(tp, run_rows, &j, (int)n_tasks);
            data = buf;
        }
        if ((s = gguf_writer_write_tensor_data(w, f, i, data, err)) != CI_OK)
            goto fail;
        if (gguf_file_damaged(g)) {
            s = ci_err_set(err, CI_ERR_IO, "%s: the file changed (truncated) while being read", in);
            goto fail;
        }
    }
    if (fflush(f) != 0 || ferror(f)) {
        s = ci_err_set(err, CI_ERR_IO, "%s: write failed: %s", out, strerror(errno));
        goto fail;
    }
    rep->in_bytes = gguf_file_size(g);
    rep->out_bytes = gguf_writer_file_size(w);
fail:
    if (f && fclose(f) != 0 && s == CI_OK)
        s = ci_err_set(err, CI_ERR_IO, "%s: close failed: %s", out, strerror(errno));
    if (f && s != CI_OK)
        remove(out);
    ci_free(rows);
    ci_free(buf);
    ci_threadpool_free(tp);
    ci_free(qt);
    gguf_writer_free(w);
    gguf_free(g);
    return s;
}
