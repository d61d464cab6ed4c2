/* cinfer calc: the seeds' serving arithmetic (KV bytes, FLOPs, bytes moved, roofline-bound TTFT and TBT,
 * naive recompute against a KV-cache step) for a built-in model shape or a model file, on given hardware.
 * The arithmetic lives in engine/calc.c; this file parses flags and prints the report or JSON.
 *
 * Entry point (declared in cli/commands.h by the lead):
 *   int cmd_calc(int argc, char **argv);   // 0 ok, 1 model file failed to load, 2 usage error */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "bench/calc.h"

#define LABEL_COLS 34

/* The lead declares this in cli/commands.h; repeated here so the file stands alone until then. */
int cmd_calc(int argc, char **argv);

/* Label padded to LABEL_COLS columns counting UTF-8 code points (labels carry "·", "²"), then the value. */
static void row(const char *label, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void row(const char *label, const char *fmt, ...) {
    int cols = 0;
    for (const char *s = label; *s; s++)
        cols += ((unsigned char)*s & 0xC0) != 0x80;
    printf("  %s", label);
    for (int i = cols; i < LABEL_COLS; i++)
        putchar(' ');
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

/* 189,849 above a thousand (as the seeds write it), three digits below. */
static char *ratio_str(double v, char *buf, size_t n) {
    if (v >= 1000)
        return calc_fmt_group(v, buf, n);
    snprintf(buf, n, "%.3g", v);
    return buf;
}

static const char *kv_type_name(const struct calc_opts *o) {
    if (o->kv_type)
        return !strcmp(o->kv_type, "q8_0")  ? "q8_0: 34 bytes per 32 elements, --kv-type q8_0"
               : !strcmp(o->kv_type, "f16") ? "f16, --kv-type f16"
                                            : "f32, --kv-type f32";
    return o->kv_bytes == 1 ? "8-bit" : o->kv_bytes == 2 ? "FP16" : "FP32";
}

static void print_phase(const struct calc_phase *p, const char *kv_verb, const char *time_label,
                        double ridge) {
    char a[96], b[96], cbuf[96];
    row("total", "%s", calc_fmt_flops(p->flops, a, sizeof a));
    if (p->kv_bytes > 0)
        row("bytes moved", "%s: weights %s + KV %s %s", calc_fmt_bytes(p->bytes, a, sizeof a),
            calc_fmt_bytes_dec(p->weight_bytes, b, sizeof b),
            calc_fmt_bytes_dec(p->kv_bytes, cbuf, sizeof cbuf), kv_verb);
    else
        row("bytes moved", "%s: weights only", calc_fmt_bytes(p->bytes, a, sizeof a));
    row("arithmetic intensity", "%s FLOP/byte: %s (ridge %.0f)", ratio_str(p->intensity, a, sizeof a),
        p->compute_bound ? "compute-bound" : "bandwidth-bound", ridge);
    row(time_label, "%s = max(compute %s, memory %s)", calc_fmt_time(p->t_s, a, sizeof a),
        calc_fmt_time(p->t_compute_s, b, sizeof b), calc_fmt_time(p->t_memory_s, cbuf, sizeof cbuf));
}

/* The decode step over tp × pp ranks (calc.h has the model). */
static void print_dist(const struct model_config *c, const struct calc_opts *o, const struct calc_result *r) {
    const struct calc_dist *t = &r->dist;
    char a[96], b[96], lab[96];
    printf("\ndecode over %d ranks: tensor parallel %d × pipeline %d; links %g Gb/s, %g µs per message\n",
           t->ranks, t->tp, t->pp, o->link_bw * 8 / 1e9, o->link_latency * 1e6);
    row("per rank", "%s of weights, %s of KV", calc_fmt_bytes(t->weight_bytes_rank, a, sizeof a),
        calc_fmt_bytes(t->kv_bytes_rank, b, sizeof b));
    row("compute (decode bound ÷ tp)", "%s", calc_fmt_time(t->compute_s, a, sizeof a));
    if (t->tp > 1) {
        snprintf(lab, sizeof lab, "all-reduce of B·d·%g bytes", o->comm_bytes);
        row(lab, "%s: %s each (2·%g latencies + 2·(N-1)/N of it on the link)",
            calc_fmt_bytes(t->allreduce_bytes, a, sizeof a), calc_fmt_time(t->allreduce_s, b, sizeof b),
            ceil(log2((double)t->tp)));
        snprintf(lab, sizeof lab, "%d per layer × %d layers + 1 (embedding)", o->syncs_per_layer, c->n_layer);
        row(lab, "%s", calc_fmt_time(t->allreduce_step_s, a, sizeof a));
        row("logits gathered (vocab split)", "%s", calc_fmt_time(t->gather_s, a, sizeof a));
    }
    if (t->pp > 1)
        row("pipeline hops", "%d × %s, and the token back: %s", t->pp - 1,
            calc_fmt_time(t->hop_s, a, sizeof a), calc_fmt_time(t->pipeline_s, b, sizeof b));
    row("decode step", "%s (communication %.0f%%), %s tokens/s", calc_fmt_time(t->step_s, a, sizeof a),
        100 * t->comm_share, ratio_str(t->tokens_s, b, sizeof b));
    row("speed-up over one process", "%.3g×", t->speedup);
    if (t->pp > 1)
        row("with pp micro-batches of B", "%s tokens/s, %.3g× one process (needs %d × B sequences)",
            ratio_str(t->tokens_s_pipelined, a, sizeof a), t->speedup_pipelined, t->pp);
}

static void print_report(const struct calc_model *m, bool is_file, const struct calc_opts *o,
                         const struct calc_result *r) {
    const struct model_config *c = &m->cfg;
    char a[96], b[96], lab[96];
    printf("cinfer calc: %s (%s)\n\nmodel\n", m->name, is_file ? "model file" : "built-in shape");
    if (c->n_kv_head == c->n_head)
        row("shape", "%d layers, d %d, %d heads × %d dims, %d KV heads (MHA)", c->n_layer, c->n_embd,
            c->n_head, c->head_dim, c->n_kv_head);
    else
        row("shape", "%d layers, d %d, %d heads × %d dims, %d KV heads (%s, %d query heads per KV head)",
            c->n_layer, c->n_embd, c->n_head, c->head_dim, c->n_kv_head, c->n_kv_head == 1 ? "MQA" : "GQA",
            c->n_head / c->n_kv_head);
    row("feed-forward, vocabulary", "%d, %d; output head %s", c->n_ff, c->n_vocab,
        m->tied ? "tied to the embedding" : "separate");
    row("training context", "%d tokens", c->n_ctx_train);
    if (r->params_given)
        row("parameters P", "%s as given (counted from the shapes: %s)",
            calc_fmt_group(r->params, a, sizeof a), calc_fmt_group(r->params_shapes, b, sizeof b));
    else
        row("parameters P", "%s counted from the shapes (%.3g %s)", calc_fmt_group(r->params, a, sizeof a),
            r->params >= 1e9 ? r->params / 1e9 : r->params / 1e6, r->params >= 1e9 ? "B" : "M");
    if (r->params_given)
        row("P_linear (matmuls per token)", "P: the seeds' accounting, every parameter once per token");
    else
        row("P_linear (matmuls per token)", "%s (Q, K, V, O, 3 SwiGLU × %d layers) + head %s per logit row",
            calc_fmt_group(r->params_linear, a, sizeof a), c->n_layer,
            calc_fmt_group(r->params_head, b, sizeof b));
    if (o->weight_bytes > 0)
        row("weights", "%s at %g bytes per weight", calc_fmt_bytes(r->weight_bytes, a, sizeof a),
            r->bytes_per_weight);
    else
        row("weights", "%s as stored (%.3g bytes per weight)", calc_fmt_bytes(r->weight_bytes, a, sizeof a),
            r->bytes_per_weight);

    printf("\nhardware\n");
    row("peak compute", "%g TFLOP/s", o->peak_flops / 1e12);
    row("memory bandwidth", "%g GB/s", o->bandwidth / 1e9);
    row("ridge point", "%.0f FLOP/byte (peak ÷ bandwidth)", r->ridge);

    printf("\nKV cache: 2 (K, V) · %d layers · %d KV heads · %d head dim · %g bytes (%s)%s\n", c->n_layer,
           r->n_kv_head, c->head_dim, o->kv_bytes, kv_type_name(o),
           o->full_mha && c->n_kv_head != c->n_head ? ", full MHA as the seeds assume" : "");
    row("per token per layer", "%g KiB = %s B", r->kv_token_layer / 1024,
        calc_fmt_group(r->kv_token_layer, a, sizeof a));
    if (r->kv_token >= 1000)
        row("per token", "%g KiB = %s B = %s", r->kv_token / 1024, calc_fmt_group(r->kv_token, a, sizeof a),
            calc_fmt_bytes_dec(r->kv_token, b, sizeof b));
    else
        row("per token", "%g KiB = %s B", r->kv_token / 1024, calc_fmt_group(r->kv_token, a, sizeof a));
    if (c->n_kv_head != c->n_head) {
        double ratio = r->kv_token_mha / r->kv_token_model;
        if (o->full_mha) {
            snprintf(lab, sizeof lab, "with the model's %d KV heads", c->n_kv_head);
            row(lab, "%g KiB = %s B: GQA stores %g× less", r->kv_token_model / 1024,
                calc_fmt_group(r->kv_token_model, a, sizeof a), ratio);
        } else {
            snprintf(lab, sizeof lab, "full MHA (%d KV heads)", c->n_head);
            row(lab, "%g KiB = %s B: GQA stores %g× less (see --full-mha)", r->kv_token_mha / 1024,
                calc_fmt_group(r->kv_token_mha, a, sizeof a), ratio);
        }
    }
    snprintf(lab, sizeof lab, "context %lld × batch %lld", (long long)r->context, (long long)r->batch);
    row(lab, "%s", calc_fmt_bytes(r->kv_total, a, sizeof a));
    double kv_w = r->kv_total / r->weight_bytes;
    if (kv_w >= 1)
        row("weights + KV", "%s; the KV is %.3g× the weights", calc_fmt_bytes(r->mem_bytes, a, sizeof a),
            kv_w);
    else
        row("weights + KV", "%s; the KV is %.3g%% of the weights", calc_fmt_bytes(r->mem_bytes, a, sizeof a),
            100 * kv_w);
    snprintf(lab, sizeof lab, "capacity in %g GB", o->mem_bytes / 1e9);
    if (r->kv_capacity_tokens > 0)
        row(lab, "%s tokens of KV after the weights = %s sequences of %lld (--mem-gb)",
            calc_fmt_group(r->kv_capacity_tokens, a, sizeof a),
            calc_fmt_group(r->kv_capacity_seqs, b, sizeof b), (long long)r->context);
    else
        row(lab, "the weights alone do not fit (--mem-gb)");

    const char *bn = r->batch > 1 ? "B·" : "";
    printf("\nprefill of %lld tokens × batch %lld (the TTFT bound)\n", (long long)r->context,
           (long long)r->batch);
    if (r->params_given)
        snprintf(lab, sizeof lab, "linear 2·%sN·P", bn);
    else
        snprintf(lab, sizeof lab, "linear 2·%sN·P_linear + head", bn);
    row(lab, "%s", calc_fmt_flops(r->prefill.linear_flops, a, sizeof a));
    snprintf(lab, sizeof lab, "attention 4·%sL·N²·d", bn);
    row(lab, "%s (causal halving ignored, as the seeds do)",
        calc_fmt_flops(r->prefill.attn_flops, a, sizeof a));
    print_phase(&r->prefill, "written", "TTFT bound", r->ridge);

    printf("\ndecode step at context %lld × batch %lld (the TBT bound)\n", (long long)r->context,
           (long long)r->batch);
    snprintf(lab, sizeof lab, r->params_given ? "linear 2·%sP" : "linear 2·%s(P_linear + head)", bn);
    row(lab, "%s", calc_fmt_flops(r->decode.linear_flops, a, sizeof a));
    snprintf(lab, sizeof lab, "attention 4·%sL·N·d", bn);
    row(lab, "%s", calc_fmt_flops(r->decode.attn_flops, a, sizeof a));
    print_phase(&r->decode, "read (+1 token written)", "TBT bound", r->ridge);
    row("throughput bound", "%s tokens/s (batch ÷ TBT)", ratio_str(r->decode_tokens_s, a, sizeof a));

    printf("\nnaive recompute vs KV cache: producing the token at context %lld\n", (long long)r->context);
    row("naive step (recompute N tokens)", "%s, weights only: %s (%s)",
        calc_fmt_flops(r->naive.flops, a, sizeof a), calc_fmt_time(r->naive.t_s, b, sizeof b),
        r->naive.compute_bound ? "compute-bound" : "bandwidth-bound");
    snprintf(lab, sizeof lab, "the seeds' rule 2·%sL·11·N·d²", bn);
    row(lab, "%s: %s at peak", calc_fmt_flops(r->rule_naive_flops, a, sizeof a),
        calc_fmt_time(r->rule_naive_s, b, sizeof b));
    row("", "(11 d² per layer: Q, K, V, O + three SwiGLU matrices; these shapes give %.3g)", r->layer_d2);
    row("KV-cache step", "%s: %s (%s)", calc_fmt_flops(r->decode.flops, a, sizeof a),
        calc_fmt_time(r->decode.t_s, b, sizeof b),
        r->decode.compute_bound ? "compute-bound" : "bandwidth-bound");
    row("naive ÷ KV cache", "%s× the FLOPs, %.4g× the time", ratio_str(r->naive_over_kv_flops, a, sizeof a),
        r->naive_over_kv_time);

    if (r->dist.ranks > 1)
        print_dist(c, o, r);

    printf("\nunits: KB, MB, GB, TB are decimal (10³ steps); KiB, MiB, GiB, TiB binary (2¹⁰ steps). The "
           "seeds' \"8064 "
           "KB\"\nand \"32 GB\" are binary (KiB, GiB), their \"8.26 TB\" and \"810 GB\" decimal; counts take "
           "k, M, "
           "B, T = 10³ⁿ.\n");
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static void json_num(const char *key, double v, bool last) {
    if (isfinite(v))
        printf("\"%s\": %.17g%s", key, v, last ? "" : ", ");
    else
        printf("\"%s\": null%s", key, last ? "" : ", ");
}

static void json_phase(const char *key, const struct calc_phase *p) {
    printf("\"%s\": {", key);
    json_num("linear_flops", p->linear_flops, false);
    json_num("attn_flops", p->attn_flops, false);
    json_num("flops", p->flops, false);
    json_num("weight_bytes", p->weight_bytes, false);
    json_num("kv_bytes", p->kv_bytes, false);
    json_num("bytes", p->bytes, false);
    json_num("intensity_flop_per_byte", p->intensity, false);
    json_num("t_compute_s", p->t_compute_s, false);
    json_num("t_memory_s", p->t_memory_s, false);
    json_num("t_s", p->t_s, false);
    printf("\"bound\": \"%s\"}, ", p->compute_bound ? "compute" : "bandwidth");
}

static void print_json(const struct calc_model *m, bool is_file, const struct calc_opts *o,
                       const struct calc_result *r) {
    const struct model_config *c = &m->cfg;
    printf("{\"model\": {\"name\": ");
    json_str(m->name);
    printf(", \"source\": \"%s\", ", is_file ? "file" : "preset");
    json_num("n_layer", c->n_layer, false);
    json_num("n_embd", c->n_embd, false);
    json_num("n_head", c->n_head, false);
    json_num("n_kv_head", c->n_kv_head, false);
    json_num("head_dim", c->head_dim, false);
    json_num("n_ff", c->n_ff, false);
    json_num("n_vocab", c->n_vocab, false);
    json_num("n_ctx_train", c->n_ctx_train, false);
    printf("\"tied\": %s, \"params_given\": %s, ", m->tied ? "true" : "false",
           r->params_given ? "true" : "false");
    json_num("params", r->params, false);
    json_num("params_shapes", r->params_shapes, false);
    json_num("params_linear", r->params_linear, false);
    json_num("params_head", r->params_head, false);
    json_num("layer_matmul_d2", r->layer_d2, false);
    json_num("bytes_per_weight", r->bytes_per_weight, false);
    json_num("weight_bytes", r->weight_bytes, true);
    printf("}, \"hardware\": {");
    json_num("peak_flops", o->peak_flops, false);
    json_num("bandwidth_bytes_s", o->bandwidth, false);
    json_num("ridge_flop_per_byte", r->ridge, true);
    printf("}, ");
    json_num("context", (double)r->context, false);
    json_num("batch", (double)r->batch, false);
    printf("\"kv\": {");
    json_num("bytes_per_elem", o->kv_bytes, false);
    printf("\"type\": \"%s\", ", o->kv_type ? o->kv_type : "");
    json_num("capacity_mem_bytes", o->mem_bytes, false);
    json_num("capacity_tokens", r->kv_capacity_tokens, false);
    json_num("capacity_seqs", r->kv_capacity_seqs, false);
    printf("\"full_mha\": %s, ", o->full_mha ? "true" : "false");
    json_num("n_kv_head", r->n_kv_head, false);
    json_num("bytes_per_token_layer", r->kv_token_layer, false);
    json_num("bytes_per_token", r->kv_token, false);
    json_num("bytes_per_token_model_heads", r->kv_token_model, false);
    json_num("bytes_per_token_mha", r->kv_token_mha, false);
    json_num("bytes_per_seq", r->kv_seq, false);
    json_num("bytes_total", r->kv_total, false);
    json_num("weights_plus_kv_bytes", r->mem_bytes, true);
    printf("}, ");
    json_phase("prefill", &r->prefill);
    json_phase("decode", &r->decode);
    json_phase("naive", &r->naive);
    json_num("decode_tokens_per_s", r->decode_tokens_s, false);
    printf("\"seeds_rule\": {");
    json_num("flops", r->rule_naive_flops, false);
    json_num("t_s", r->rule_naive_s, true);
    printf("}, \"naive_over_kv\": {");
    json_num("flops", r->naive_over_kv_flops, false);
    json_num("time", r->naive_over_kv_time, true);
    const struct calc_dist *t = &r->dist;
    printf("}, \"dist\": {");
    json_num("tp", t->tp, false);
    json_num("pp", t->pp, false);
    json_num("link_bytes_s", o->link_bw, false);
    json_num("link_latency_s", o->link_latency, false);
    json_num("comm_bytes", o->comm_bytes, false);
    json_num("syncs_per_layer", o->syncs_per_layer, false);
    json_num("weight_bytes_rank", t->weight_bytes_rank, false);
    json_num("kv_bytes_rank", t->kv_bytes_rank, false);
    json_num("allreduce_bytes", t->allreduce_bytes, false);
    json_num("allreduce_s", t->allreduce_s, false);
    json_num("allreduce_step_s", t->allreduce_step_s, false);
    json_num("gather_s", t->gather_s, false);
    json_num("hop_s", t->hop_s, false);
    json_num("pipeline_s", t->pipeline_s, false);
    json_num("compute_s", t->compute_s, false);
    json_num("step_s", t->step_s, false);
    json_num("tokens_per_s", t->tokens_s, false);
    json_num("tokens_per_s_pipelined", t->tokens_s_pipelined, false);
    json_num("speedup", t->speedup, false);
    json_num("speedup_pipelined", t->speedup_pipelined, true);
    printf("}}\n");
}

static void print_presets(FILE *f) {
    fprintf(f, "presets:");
    for (int i = 0; i < calc_n_presets(); i++)
        fprintf(f, " %s", calc_preset_name(i));
    fprintf(f, "\n");
}

/* Parses a count flag's value; prints "cinfer calc: FLAG: why" on failure. */
static bool count_flag(const char *flag, const char *v, double *out) {
    struct ci_err err = {0};
    if (calc_parse_count(v, true, out, &err) != CI_OK) {
        fprintf(stderr, "cinfer calc: %s: %s\n", flag, err.msg);
        return false;
    }
    return true;
}

int cmd_calc(int argc, char **argv) {
    const char *preset = NULL, *model_path = NULL, *context_s = NULL, *batch_s = NULL, *params_s = NULL;
    float peak_tflops = 1000, bandwidth_gbs = 3300, weight_bytes = -1, mem_gb = 80;
    int kv_bytes = 0, tp = 1, pp = 1, syncs = 2;
    float link_gbits = 100, link_latency_us = 10, comm_bytes = 4;
    const char *kv_type = NULL;
    bool full_mha = false, json = false;
    struct arg_spec specs[] = {
        {"--preset", NULL, ARG_STR, &preset, 0, 0, "NAME  a built-in model shape (see the list below)"},
        {"--model", "-m", ARG_STR, &model_path, 0, 0, "FILE  a model file (GGUF or llama2.c checkpoint)"},
        {"--peak-tflops", NULL, ARG_FLOAT, &peak_tflops, 1e-6, 1e9, "T  peak TFLOP/s (default 1000)"},
        {"--bandwidth-gbs", NULL, ARG_FLOAT, &bandwidth_gbs, 1e-6, 1e9,
         "B  memory bandwidth in GB/s (default 3300, an H100)"},
        {"--context", NULL, ARG_STR, &context_s, 0, 0,
         "N  tokens per sequence, e.g. 100k, 1M (default: model's)"},
        {"--batch", NULL, ARG_STR, &batch_s, 0, 0, "B  sequences stepped together (default 1)"},
        {"--kv-bytes", NULL, ARG_INT, &kv_bytes, 1, 4, "1|2|4  bytes per KV element (default 2, FP16)"},
        {"--kv-type", NULL, ARG_STR, &kv_type, 0, 0,
         "T  the engine's KV element type f32|f16|q8_0 (4, 2, 34/32 bytes; instead of --kv-bytes)"},
        {"--mem-gb", NULL, ARG_FLOAT, &mem_gb, 1e-6, 1e9,
         "G  device memory for the KV capacity line, GB (default 80, an H100)"},
        {"--weight-bytes", NULL, ARG_FLOAT, &weight_bytes, 0.01, 8,
         "W  bytes per weight (default 2; a file: as stored)"},
        {"--params", NULL, ARG_STR, &params_s, 0, 0,
         "P  parameter count, e.g. 405e9 or 7B: 2·N·P accounting"},
        {"--full-mha", NULL, ARG_FLAG, &full_mha, 0, 0, "   size the KV cache with n_kv_head = n_head"},
        {"--tp", NULL, ARG_INT, &tp, 1, 4096, "N  tensor-parallel ranks (divides the KV heads; default 1)"},
        {"--pp", NULL, ARG_INT, &pp, 1, 4096, "M  pipeline stages (default 1)"},
        {"--link-gbs", NULL, ARG_FLOAT, &link_gbits, 1e-6, 1e6,
         "G  each rank's link in Gbit/s, as links are sold: 1, 25, 100 (default 100)"},
        {"--link-latency-us", NULL, ARG_FLOAT, &link_latency_us, 0, 1e7,
         "L  latency per message in µs (default 10)"},
        {"--comm-bytes", NULL, ARG_FLOAT, &comm_bytes, 0.01, 8,
         "C  bytes per activation element on the wire (default 4: f32; 2 f16, 1.0625 q8_0)"},
        {"--syncs-per-layer", NULL, ARG_INT, &syncs, 1, 64, "K  all-reduces per layer (default 2)"},
        {"--json", NULL, ARG_FLAG, &json, 0, 0, "   machine-readable output"},
    };
    int n_specs = sizeof specs / sizeof specs[0];
    const char *synopsis = "(--preset NAME | -m MODEL) [--context N] [--batch B] [--peak-tflops T] "
                           "[--bandwidth-gbs B] [--kv-bytes 1|2|4 | --kv-type f32|f16|q8_0] [--mem-gb G] "
                           "[--weight-bytes W] [--params P] [--full-mha] [--tp N] [--pp M] [--link-gbs G] "
                           "[--link-latency-us L] [--comm-bytes C] [--syncs-per-layer K] [--json]";
    if (args_want_help(argc, argv, 2)) {
        args_usage("calc", synopsis, specs, n_specs);
        printf("\n");
        print_presets(stdout);
        return 0;
    }
    const char *pos[1];
    int n_pos;
    if (!args_parse("calc", argc, argv, 2, specs, n_specs, pos, 0, &n_pos))
        return 2;
    if (!preset == !model_path) {
        fprintf(stderr, "cinfer calc: give exactly one of --preset NAME or -m MODEL\n");
        return 2;
    }
    struct calc_opts o;
    calc_opts_default(&o);
    o.peak_flops = (double)peak_tflops * 1e12;
    o.bandwidth = (double)bandwidth_gbs * 1e9;
    if (kv_bytes && kv_type) {
        fprintf(stderr, "cinfer calc: --kv-bytes and --kv-type exclude each other\n");
        return 2;
    }
    if (kv_type && !calc_kv_type_bytes(kv_type, &o.kv_bytes)) {
        fprintf(stderr, "cinfer calc: --kv-type: '%s' is not one of f32, f16, q8_0\n", kv_type);
        return 2;
    }
    if (kv_bytes)
        o.kv_bytes = kv_bytes;
    o.kv_type = kv_type;
    o.mem_bytes = (double)mem_gb * 1e9;
    o.full_mha = full_mha;
    o.tp = tp;
    o.pp = pp;
    o.link_bw = (double)link_gbits * 1e9 / 8;
    o.link_latency = (double)link_latency_us * 1e-6;
    o.comm_bytes = comm_bytes;
    o.syncs_per_layer = syncs;
    double v;
    if (context_s) {
        if (!count_flag("--context", context_s, &v))
            return 2;
        o.context = (int64_t)v;
    }
    if (batch_s) {
        if (!count_flag("--batch", batch_s, &v))
            return 2;
        o.batch = (int64_t)v;
    }
    double params = 0;
    if (params_s && !count_flag("--params", params_s, &params))
        return 2;

    struct calc_model cm;
    bool is_file = false;
    struct ci_err err = {0};
    int rc = 0;
    if (preset) {
        if (!calc_preset(preset, &cm)) {
            fprintf(stderr, "cinfer calc: --preset: unknown model '%s'\n", preset);
            print_presets(stderr);
            return 2;
        }
    } else {
        if (calc_model_from_file(model_path, &cm, &err) != CI_OK) {
            fprintf(stderr, "cinfer calc: %s\n", err.msg);
            return 1;
        }
        is_file = true;
    }
    if (params > 0)
        cm.n_params = params;
    // A file's weights are what it stores unless a size per weight is asked for; a shape has no file.
    o.weight_bytes = weight_bytes > 0 ? (double)weight_bytes : is_file ? 0 : 2;

    struct calc_result r;
    if (calc_run(&cm, &o, &r, &err) != CI_OK) {
        fprintf(stderr, "cinfer calc: %s\n", err.msg);
        return 2;
    }
    if (json)
        print_json(&cm, is_file, &o, &r);
    else
        print_report(&cm, is_file, &o, &r);
    return rc;
}
