/* The seeds' serving arithmetic (see calc.h for the formulas and docs/seeds.md for where they come from). */
#include "bench/calc.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/model.h"
#include "model/synth.h"

#define COUNT_MAX 1e15 // above any context, batch or parameter count worth asking about

/* Public shapes of the models the seeds reason about (and two Llama 3 siblings, and Qwen-72B for a published
 * multi-socket figure).  n_params > 0 only where
 * the seeds state P and compute with it. */
static const struct builtin {
    const char *name;
    int n_vocab, n_embd, n_layer, n_head, n_kv_head, head_dim, n_ff, n_ctx;
    float rope_base;
    double n_params;
} builtins[] = {
    // name        vocab   dim    layers heads kv hd   ff     ctx     rope     P
    {"llama3-405b", 128256, 16384, 126, 128, 8, 128, 53248, 131072, 500000.0f, 405e9},
    {"llama3-70b", 128256, 8192, 80, 64, 8, 128, 28672, 8192, 500000.0f, 0},
    {"llama3-8b", 128256, 4096, 32, 32, 8, 128, 14336, 8192, 500000.0f, 0},
    {"llama2-7b", 32000, 4096, 32, 32, 32, 128, 11008, 4096, 10000.0f, 0},
    {"qwen-72b", 152064, 8192, 80, 64, 64, 128, 24576, 32768, 1000000.0f, 0}, // Qwen (1.0) 72B: full MHA
};

#define N_BUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

void calc_opts_default(struct calc_opts *o) {
    memset(o, 0, sizeof *o);
    o->peak_flops = 1e15;
    o->bandwidth = 3.3e12;
    o->context = 0;
    o->batch = 1;
    o->kv_bytes = 2;
    o->kv_type = NULL;
    o->mem_bytes = 80e9;
    o->weight_bytes = 2;
    o->full_mha = false;
    o->tp = 1;
    o->pp = 1;
    o->link_bw = 12.5e9;
    o->link_latency = 10e-6;
    o->comm_bytes = 4;
    o->syncs_per_layer = 2;
}

int calc_n_presets(void) {
    return N_BUILTINS + synth_n_presets();
}

const char *calc_preset_name(int i) {
    CI_ASSERT(i >= 0 && i < calc_n_presets());
    return i < N_BUILTINS ? builtins[i].name : synth_preset(i - N_BUILTINS)->name;
}

bool calc_preset(const char *name, struct calc_model *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < N_BUILTINS; i++) {
        const struct builtin *b = &builtins[i];
        if (strcmp(b->name, name) != 0)
            continue;
        out->name = b->name;
        struct model_config *c = &out->cfg;
        c->arch = MODEL_ARCH_LLAMA;
        c->n_vocab = b->n_vocab;
        c->n_embd = b->n_embd;
        c->n_layer = b->n_layer;
        c->n_head = b->n_head;
        c->n_kv_head = b->n_kv_head;
        c->head_dim = b->head_dim;
        c->n_ff = b->n_ff;
        c->n_ctx_train = b->n_ctx;
        c->rope_dim = b->head_dim;
        c->rope_base = b->rope_base;
        c->rms_eps = 1e-5f;
        out->n_params = b->n_params;
        return true;
    }
    const struct synth_preset *p = synth_preset_find(name);
    if (!p)
        return false;
    out->name = p->name;
    synth_preset_config(p, &out->cfg);
    out->tied = p->tied;
    out->qkv_bias = p->qkv_bias;
    return true;
}

enum ci_status calc_parse_count(const char *s, bool whole, double *out, struct ci_err *err) {
    if (!s || !*s || isspace((unsigned char)*s))
        return ci_err_set(err, CI_ERR_INVALID, "'%s' is not a number", s ? s : "");
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno)
        return ci_err_set(err, CI_ERR_INVALID, "'%s' is not a number", s);
    double scale = 1;
    switch (*end) {
    case 'k':
    case 'K':
        scale = 1e3;
        end++;
        break;
    case 'M':
        scale = 1e6;
        end++;
        break;
    case 'B':
    case 'G':
        scale = 1e9;
        end++;
        break;
    case 'T':
        scale = 1e12;
        end++;
        break;
    default:
        break;
    }
    if (*end)
        return ci_err_set(err, CI_ERR_INVALID, "'%s': unexpected '%s' (suffixes: k, M, B/G, T)", s, end);
    v *= scale;
    if (!isfinite(v) || v <= 0 || v > COUNT_MAX)
        return ci_err_set(err, CI_ERR_INVALID, "'%s' is not in (0, %g]", s, COUNT_MAX);
    if (whole && v != floor(v))
        return ci_err_set(err, CI_ERR_INVALID, "'%s' is not a whole number", s);
    *out = v;
    return CI_OK;
}

static bool positive_finite(double v, double max) {
    return isfinite(v) && v > 0 && v <= max;
}

enum ci_status calc_check(const struct calc_model *m, const struct calc_opts *o, struct ci_err *err) {
    const struct model_config *c = &m->cfg;
    if (c->n_layer < 1 || c->n_embd < 1 || c->n_head < 1 || c->n_kv_head < 1 || c->head_dim < 1 ||
        c->n_ff < 1 || c->n_vocab < 1)
        return ci_err_set(
            err, CI_ERR_INVALID,
            "model shape: layers %d, dim %d, heads %d, kv heads %d, head dim %d, ff %d, vocab %d "
            "must all be positive",
            c->n_layer, c->n_embd, c->n_head, c->n_kv_head, c->head_dim, c->n_ff, c->n_vocab);
    if (c->n_head % c->n_kv_head)
        return ci_err_set(err, CI_ERR_INVALID, "model shape: %d heads are not a multiple of %d KV heads",
                          c->n_head, c->n_kv_head);
    if (!(m->n_params == 0 || positive_finite(m->n_params, COUNT_MAX)))
        return ci_err_set(err, CI_ERR_INVALID, "parameter count %g is not in (0, %g]", m->n_params,
                          COUNT_MAX);
    if (!positive_finite(o->peak_flops, 1e24))
        return ci_err_set(err, CI_ERR_INVALID, "peak compute %g FLOP/s must be positive", o->peak_flops);
    if (!positive_finite(o->bandwidth, 1e18))
        return ci_err_set(err, CI_ERR_INVALID, "bandwidth %g bytes/s must be positive", o->bandwidth);
    if (o->context < 0 || (double)o->context > COUNT_MAX)
        return ci_err_set(err, CI_ERR_INVALID, "context %lld is not in [1, %g]", (long long)o->context,
                          COUNT_MAX);
    if (o->context == 0 && c->n_ctx_train < 1)
        return ci_err_set(err, CI_ERR_INVALID, "the model states no context length: give one");
    if (o->batch < 1 || (double)o->batch > COUNT_MAX)
        return ci_err_set(err, CI_ERR_INVALID, "batch %lld is not in [1, %g]", (long long)o->batch,
                          COUNT_MAX);
    if (o->kv_bytes != 1 && o->kv_bytes != 2 && o->kv_bytes != 4 && o->kv_bytes != 34.0 / 32)
        return ci_err_set(err, CI_ERR_INVALID,
                          "KV element size %g: must be 1, 2 or 4 bytes (or q8_0's 34/32)", o->kv_bytes);
    double tb;
    if (o->kv_type && (!calc_kv_type_bytes(o->kv_type, &tb) || tb != o->kv_bytes))
        return ci_err_set(err, CI_ERR_INVALID,
                          "KV type '%s' is not f32, f16 or q8_0 (or disagrees with %g bytes)", o->kv_type,
                          o->kv_bytes);
    if (o->kv_type && !strcmp(o->kv_type, "q8_0") && m->cfg.head_dim % 32 != 0)
        return ci_err_set(err, CI_ERR_INVALID,
                          "KV type q8_0 needs head_dim a multiple of 32 (head_dim is %d)", m->cfg.head_dim);
    if (!positive_finite(o->mem_bytes, 1e18))
        return ci_err_set(err, CI_ERR_INVALID, "device memory %g bytes must be positive", o->mem_bytes);
    if (o->tp < 1 || o->tp > 4096 || c->n_kv_head % o->tp != 0)
        return ci_err_set(
            err, CI_ERR_INVALID,
            "tensor parallelism %d must divide the %d KV heads (each rank holds whole KV heads)", o->tp,
            c->n_kv_head);
    if (o->pp < 1 || o->pp > c->n_layer)
        return ci_err_set(err, CI_ERR_INVALID, "pipeline stages %d is not in [1, %d layers]", o->pp,
                          c->n_layer);
    if (!positive_finite(o->link_bw, 1e15) || !(o->link_latency >= 0 && o->link_latency <= 10))
        return ci_err_set(err, CI_ERR_INVALID, "link %g bytes/s, %g s latency: must be positive and finite",
                          o->link_bw, o->link_latency);
    if (!positive_finite(o->comm_bytes, 8) || o->syncs_per_layer < 1 || o->syncs_per_layer > 64)
        return ci_err_set(err, CI_ERR_INVALID,
                          "%g bytes per exchanged element, %d syncs per layer: out of range", o->comm_bytes,
                          o->syncs_per_layer);
    if (o->weight_bytes == 0) {
        if (!(m->stored_weight_bytes > 0))
            return ci_err_set(err, CI_ERR_INVALID, "no stored weight size to use: give bytes per weight");
    } else if (!positive_finite(o->weight_bytes, 8)) {
        return ci_err_set(err, CI_ERR_INVALID, "bytes per weight %g is not in (0, 8]", o->weight_bytes);
    }
    return CI_OK;
}

double calc_allreduce_s(double bytes, int n, double link_bw, double latency) {
    if (n <= 1)
        return 0;
    return 2 * ceil(log2((double)n)) * latency + 2.0 * (n - 1) / n * bytes / link_bw;
}

/* One decode step over tp × pp ranks (calc.h). */
static void calc_distribute(const struct calc_model *m, const struct calc_opts *o, struct calc_result *r) {
    const struct model_config *c = &m->cfg;
    struct calc_dist *t = &r->dist;
    double B = (double)r->batch, d = c->n_embd;
    t->tp = o->tp;
    t->pp = o->pp;
    t->ranks = o->tp * o->pp;
    t->weight_bytes_rank = r->weight_bytes / t->ranks;
    t->kv_bytes_rank = r->kv_total / t->ranks;
    t->allreduce_bytes = B * d * o->comm_bytes;
    t->allreduce_s = calc_allreduce_s(t->allreduce_bytes, o->tp, o->link_bw, o->link_latency);
    // syncs_per_layer per layer, and one more for the vocabulary-split token embedding's rows.
    t->allreduce_step_s = ((double)o->syncs_per_layer * c->n_layer + 1) * t->allreduce_s;
    t->gather_s = o->tp > 1 ? ceil(log2((double)o->tp)) * o->link_latency +
                                  (o->tp - 1.0) / o->tp * B * c->n_vocab * 4 / o->link_bw
                            : 0;
    t->hop_s = o->pp > 1 ? o->link_latency + t->allreduce_bytes / o->link_bw : 0;
    t->pipeline_s = o->pp > 1 ? (o->pp - 1) * t->hop_s + o->link_latency : 0;
    t->compute_s = r->decode.t_s / o->tp;
    double comm = t->allreduce_step_s + t->gather_s + t->pipeline_s;
    t->step_s = t->compute_s + comm;
    t->comm_share = comm / t->step_s;
    t->tokens_s = B / t->step_s;
    double stage_s = t->compute_s / o->pp + t->allreduce_step_s / o->pp + t->hop_s + t->gather_s / o->pp;
    t->tokens_s_pipelined = B / stage_s;
    t->speedup = r->decode.t_s / t->step_s;
    t->speedup_pipelined = t->tokens_s_pipelined / r->decode_tokens_s;
}

double calc_kv_bytes_per_token(int n_layer, int n_kv_head, int head_dim, double bytes_per_elem) {
    return 2.0 * n_layer * n_kv_head * head_dim * bytes_per_elem;
}

bool calc_kv_type_bytes(const char *name, double *bytes) {
    static const struct {
        const char *name;
        double bytes;
    } types[] = {{"f32", 4}, {"f16", 2}, {"q8_0", 34.0 / 32}};
    for (size_t i = 0; name && i < sizeof types / sizeof types[0]; i++) {
        if (!strcmp(name, types[i].name)) {
            *bytes = types[i].bytes;
            return true;
        }
    }
    return false;
}

void calc_roofline(struct calc_phase *p, double peak_flops, double bandwidth) {
    p->flops = p->linear_flops + p->attn_flops;
    p->bytes = p->weight_bytes + p->kv_bytes;
    p->intensity = p->bytes > 0 ? p->flops / p->bytes : INFINITY;
    p->t_compute_s = p->flops / peak_flops;
    p->t_memory_s = p->bytes / bandwidth;
    p->compute_bound = p->t_compute_s >= p->t_memory_s;
    p->t_s = p->compute_bound ? p->t_compute_s : p->t_memory_s;
}

enum ci_status calc_run(const struct calc_model *m, const struct calc_opts *o, struct calc_result *r,
                        struct ci_err *err) {
    enum ci_status st = calc_check(m, o, err);
    if (st != CI_OK)
        return st;
    const struct model_config *c = &m->cfg;
    memset(r, 0, sizeof *r);
    double L = c->n_layer, d = c->n_embd, hd = c->head_dim;
    double q_dim = (double)c->n_head * hd, kv_dim = (double)c->n_kv_head * hd;
    // Per layer: wq [q_dim][d], wk and wv [kv_dim][d], wo [d][q_dim], gate and up [ff][d], down [d][ff].
    double layer_matmul = d * q_dim + 2 * d * kv_dim + q_dim * d + 3 * d * c->n_ff;
    double head = d * c->n_vocab;
    r->params_shapes = head /* embedding */ + L * layer_matmul + L * 2 * d + d /* norms */ +
                       (m->qkv_bias ? L * (q_dim + 2 * kv_dim) : 0) + (c->qk_norm ? L * 2 * hd : 0) +
                       (c->post_norms ? L * 2 * d : 0) + (m->tied ? 0 : head);
    r->layer_d2 = layer_matmul / (d * d);
    r->params_given = m->n_params > 0;
    if (r->params_given) {
        r->params = m->n_params;
        r->params_linear = m->n_params;
        r->params_head = 0;
    } else {
        r->params = r->params_shapes;
        r->params_linear = L * layer_matmul;
        r->params_head = head;
    }
    if (o->weight_bytes > 0) {
        r->bytes_per_weight = o->weight_bytes;
        r->weight_bytes = r->params * o->weight_bytes;
    } else {
        r->weight_bytes = m->stored_weight_bytes;
        r->bytes_per_weight = m->stored_weight_bytes / r->params;
    }

    r->n_kv_head = o->full_mha ? c->n_head : c->n_kv_head;
    r->d_attn = q_dim;
    r->kv_token_layer = calc_kv_bytes_per_token(1, r->n_kv_head, c->head_dim, o->kv_bytes);
    r->kv_token = calc_kv_bytes_per_token(c->n_layer, r->n_kv_head, c->head_dim, o->kv_bytes);
    r->kv_token_model = calc_kv_bytes_per_token(c->n_layer, c->n_kv_head, c->head_dim, o->kv_bytes);
    r->kv_token_mha = calc_kv_bytes_per_token(c->n_layer, c->n_head, c->head_dim, o->kv_bytes);
    r->context = o->context ? o->context : c->n_ctx_train;
    r->batch = o->batch;
    double N = (double)r->context, B = (double)r->batch;
    r->kv_seq = r->kv_token * N;
    r->kv_total = r->kv_seq * B;
    r->mem_bytes = r->weight_bytes + r->kv_total;
    r->kv_capacity_tokens =
        o->mem_bytes > r->weight_bytes ? floor((o->mem_bytes - r->weight_bytes) / r->kv_token) : 0;
    r->kv_capacity_seqs = floor(r->kv_capacity_tokens / N);
    r->ridge = o->peak_flops / o->bandwidth;

    // Prefill: every prompt token goes through the layers; logits only for each sequence's last row.
    struct calc_phase *p = &r->prefill;
    p->linear_flops = 2 * B * N * r->params_linear + 2 * B * r->params_head;
    p->attn_flops = 4 * L * N * N * q_dim * B;
    p->weight_bytes = r->weight_bytes;
    p->kv_bytes = B * N * r->kv_token;
    calc_roofline(p, o->peak_flops, o->bandwidth);

    // Decode: one new token per sequence attends over its N cached ones; the weights are read once for all B.
    p = &r->decode;
    p->linear_flops = 2 * B * r->params_linear + 2 * B * r->params_head;
    p->attn_flops = 4 * L * N * q_dim * B;
    p->weight_bytes = r->weight_bytes;
    p->kv_bytes = B * (N + 1) * r->kv_token; // N read, 1 written
    calc_roofline(p, o->peak_flops, o->bandwidth);
    r->decode_tokens_s = B / p->t_s;

    // Naive: no cache, so producing the token at context N recomputes all N positions: a prefill's FLOPs,
    // with only the weights to move.
    p = &r->naive;
    p->linear_flops = r->prefill.linear_flops;
    p->attn_flops = r->prefill.attn_flops;
    p->weight_bytes = r->weight_bytes;
    p->kv_bytes = 0;
    calc_roofline(p, o->peak_flops, o->bandwidth);
    r->rule_naive_flops = 2 * L * 11 * N * d * d * B;
    r->rule_naive_s = r->rule_naive_flops / o->peak_flops;
    r->naive_over_kv_flops = r->naive.flops / r->decode.flops;
    r->naive_over_kv_time = r->naive.t_s / r->decode.t_s;
    calc_distribute(m, o, r);
    return CI_OK;
}

static const char *const dec_units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
static const char *const bin_units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};

/* Scales v down by `step` until it is below it (at most 6 steps); returns the number of steps. */
static int scale_down(double *v, double step) {
    int u = 0;
    while (*v >= step && u < 6) {
        *v /= step;
        u++;
    }
    return u;
}

char *calc_fmt_bytes_dec(double bytes, char *buf, size_t n) {
    double v = bytes;
    int u = scale_down(&v, 1000);
    if (u == 0)
        snprintf(buf, n, "%.0f B", bytes);
    else
        snprintf(buf, n, "%.2f %s", v, dec_units[u]);
    return buf;
}

char *calc_fmt_bytes(double bytes, char *buf, size_t n) {
    double dv = bytes, bv = bytes;
    int du = scale_down(&dv, 1000), bu = scale_down(&bv, 1024);
    if (du == 0)
        snprintf(buf, n, "%.0f B", bytes);
    else if (bu == 0)
        snprintf(buf, n, "%.2f %s (%.0f B)", dv, dec_units[du], bv);
    else
        snprintf(buf, n, "%.2f %s (%.2f %s)", dv, dec_units[du], bv, bin_units[bu]);
    return buf;
}

char *calc_fmt_flops(double flops, char *buf, size_t n) {
    static const char *pre[] = {"", "k", "M", "G", "T", "P", "E"};
    double v = flops;
    int u = scale_down(&v, 1000);
    if (u == 0) {
        snprintf(buf, n, "%.0f FLOP", flops);
        return buf;
    }
    int e = (int)floor(log10(flops));
    double mant = flops / pow(10, e);
    if (mant >= 9.995) { // rounds up to 10.00
        mant /= 10;
        e++;
    }
    snprintf(buf, n, "%.2fe%d FLOP (%.2f %sFLOP)", mant, e, v, pre[u]);
    return buf;
}

char *calc_fmt_time(double s, char *buf, size_t n) {
    if (s < 1e-3)
        snprintf(buf, n, "%.3g µs", s * 1e6);
    else if (s < 0.1)
        snprintf(buf, n, "%.3g ms", s * 1e3);
    else if (s < 120)
        snprintf(buf, n, "%.3g s", s);
    else if (s < 7200)
        snprintf(buf, n, "%.0f s (%.1f min)", s, s / 60);
    else
        snprintf(buf, n, "%.0f s (%.2f h)", s, s / 3600);
    return buf;
}

char *calc_fmt_group(double v, char *buf, size_t n) {
    if (!isfinite(v) || fabs(v) >= 1e18) {
        snprintf(buf, n, "%.3g", v);
        return buf;
    }
    char digits[32];
    snprintf(digits, sizeof digits, "%.0f", fabs(v));
    size_t nd = strlen(digits), o = 0;
    char tmp[48];
    if (v < 0 && strcmp(digits, "0") != 0)
        tmp[o++] = '-';
    for (size_t i = 0; i < nd; i++) {
        if (i > 0 && (nd - i) % 3 == 0)
            tmp[o++] = ',';
        tmp[o++] = digits[i];
    }
    tmp[o] = '\0';
    snprintf(buf, n, "%s", tmp);
    return buf;
}

enum ci_status calc_model_from_file(const char *path, struct calc_model *out, struct ci_err *err) {
    struct model *m = NULL;
    enum ci_status s = model_load(path, &m, err);
    if (s != CI_OK)
        return s;
    memset(out, 0, sizeof *out);
    out->name = path;
    out->cfg = m->config;
    out->tied = m->weights.output.data == m->weights.tok_embd.data;
    out->qkv_bias = m->config.n_layer > 0 && m->weights.layers && m->weights.layers[0].bq.data;
    out->stored_weight_bytes = (double)model_weight_bytes(m);
    model_free(m);
    return CI_OK;
}
