/* The seeds' serving arithmetic for any model shape and any hardware (`cinfer calc`): KV-cache bytes, weight
 * bytes, FLOPs of a prefill and of a decode step, bytes moved per step, arithmetic intensity against the
 * hardware's ridge point, the roofline-bound TTFT and TBT, and naive recompute against a KV-cache step.
 * Pure functions on caller storage: no I/O, no allocation.  All quantities are doubles (a calculator: exact
 * for the integer sizes that matter, up to 2^53).
 *
 * The formulas (docs/seeds.md), with L layers, d = n_head · head_dim, N the context, B the batch:
 *   KV bytes per token   = 2 (K and V) · L · kv_heads · head_dim · bytes per element (f32 4, f16 2, q8_0
 *                          34/32: ggml's blocks of 32 int8 plus an fp16 scale, the engine's --kv-type)
 *   KV capacity          = (device memory - weights) / KV bytes per token, in tokens and in sequences
 *   linear FLOPs         = 2 · tokens · P_linear  (a multiply-add is 2 FLOPs)
 *   attention FLOPs      = 4 · L · N² · d for a prefill of N tokens (QKᵀ and AV), 4 · L · N · d for one
 *                          decode step at context N; causal masking would halve the prefill term, and like
 *                          the seeds we ignore that
 *   prefill bytes        = weights (read once) + the KV of B · N tokens written
 *   decode bytes         = weights (read once for the whole batch) + B · N tokens of KV read + B written
 *   time bound           = max(FLOPs / peak, bytes / bandwidth); ridge point = peak / bandwidth
 * P_linear, the parameters applied to every token, is counted from the shapes (Q, K, V, O with their GQA
 * shapes and the three SwiGLU matrices per layer; the embedding is a lookup, not a matmul) and the output
 * head is applied only to the one row per sequence that needs logits.  When the parameter count is given
 * instead (a preset that states P, or --params), the seeds' accounting is used: 2 · N · P with P the whole
 * model.
 *
 * Past one machine (--tp N tensor-parallel ranks, --pp M pipeline stages; docs in README "cinfer calc"):
 *   each rank holds 1/(N·M) of the weights and of the KV, so the per-rank decode roofline is decode.t_s / (N·M)
 *   per stage, and a token crosses the M stages one after another: compute = decode.t_s / N;
 *   all-reduce of S bytes over N ranks = 2·ceil(log2 N)·latency + 2·(N-1)/N·S / link (recursive halving then
 *                          doubling, what MPI libraries use for small messages: latency-bound in decode);
 *   per decode step        = syncs · L all-reduces of S = B·d·comm_bytes (Megatron's layout: 2 per layer, after
 *                          attention's output projection and after the FFN's down projection) + the logits
 *                          gathered from the vocabulary-split head ((N-1)/N · B · vocab · 4 bytes, ceil(log2 N)
 *                          latencies) + M-1 hops of B·d·comm_bytes between stages and one back to rank 0;
 *   step time              = compute + communication (no overlap assumed: decode's all-reduces sit between
 *                          dependent matmuls); throughput B / step, or with M micro-batches of B in flight
 *                          B / (stage compute + its share of the all-reduces + one hop).
 * Assumed: a uniform split (the embedding and the head counted into the layers' shares), links of one speed. */
#ifndef CINFER_BENCH_CALC_H
#define CINFER_BENCH_CALC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "model/config.h"

/* What a model contributes: its shape, plus what a shape alone cannot tell. */
struct calc_model {
    const char *name; // preset name or file path (borrowed; only for reports)
    struct model_config cfg;
    bool tied;                  // the output head is the token embedding (no separate matrix)
    bool qkv_bias;              // q/k/v projections carry biases (qwen2)
    double n_params;            // > 0: the whole model's parameter count, as given; 0: counted from shapes
    double stored_weight_bytes; // > 0: a loaded file's weights as stored (quantized types included)
};

/* What the caller asks about.  calc_opts_default() gives the seeds' assumptions. */
struct calc_opts {
    double peak_flops;   // FLOP/s of the accelerator (default 1e15: the seeds' 1 PFLOP/s GPU)
    double bandwidth;    // memory bytes/s (default 3.3e12: an H100's 3.3 TB/s)
    int64_t context;     // N, tokens per sequence; 0 = the model's training context
    int64_t batch;       // B sequences stepped together (default 1)
    double kv_bytes;     // bytes per KV element: 2 (FP16, default), 4 (FP32), 34/32 (q8_0) or 1 (8-bit)
    const char *kv_type; // "f32", "f16" or "q8_0" when the size comes from an element type (NULL: kv_bytes)
    double mem_bytes;    // device memory for weights + KV (default 80e9: an H100's 80 GB)
    double weight_bytes; // bytes per weight (default 2); 0 = the file's stored bytes (needs a loaded file)
    bool full_mha;       // KV cache as if n_kv_head = n_head (the seeds' "full multi-head KV")
    // Past one machine (all defaults: one process).
    int tp, pp;          // tensor-parallel ranks (divides the KV heads), pipeline stages (<= layers)
    double link_bw;      // bytes/s of each rank's link (default 12.5e9: 100 Gb/s)
    double link_latency; // seconds per message (default 10e-6)
    double comm_bytes;   // bytes per activation element on the wire (default 4: f32)
    int syncs_per_layer; // all-reduces per layer under tensor parallelism (default 2)
};

/* One decode step of B sequences over tp × pp ranks. */
struct calc_dist {
    int tp, pp, ranks;
    double weight_bytes_rank, kv_bytes_rank; // held by each rank
    double allreduce_bytes;                  // S = B · d · comm_bytes, one all-reduce
    double allreduce_s;                      // one all-reduce of S over tp ranks
    double allreduce_step_s;                 // syncs · L of them per decode step
    double gather_s;                         // the vocabulary-split logits gathered
    double hop_s;                            // one activation hop between stages
    double pipeline_s;                       // pp - 1 hops, and one back to rank 0 (pp > 1)
    double compute_s;                        // decode.t_s / tp
    double step_s;                           // compute + allreduce_step + gather + pipeline
    double comm_share;                       // communication / step_s
    double tokens_s;                         // B / step_s
    double tokens_s_pipelined;               // pp micro-batches of B in flight
    double speedup;                          // decode.t_s / step_s
    double speedup_pipelined;                // tokens_s_pipelined / decode_tokens_s
};

/* One step under the roofline. */
struct calc_phase {
    double linear_flops; // 2 · tokens · P_linear (+ 2 · P_head per logit row)
    double attn_flops;   // 4 · L · N² · d (prefill) or 4 · L · N · d (decode), times B
    double flops;
    double weight_bytes; // weights read once per step
    double kv_bytes;     // KV written (prefill), read + written (decode); 0 without a cache
    double bytes;
    double intensity; // FLOP per byte
    double t_compute_s, t_memory_s, t_s;
    bool compute_bound; // t_compute_s >= t_memory_s
};

struct calc_result {
    int64_t context, batch;
    int n_kv_head; // KV heads the cache is sized with (n_head under full_mha)
    double d_attn; // n_head · head_dim (the seeds' d)
    bool params_given;
    double params_shapes; // counted from the shapes: embedding, layers, norms, head unless tied
    double params;        // the count used: the given one, else params_shapes
    double params_linear; // applied to every token (P when given)
    double params_head;   // output head, applied per logit row (0 when P is given)
    double layer_d2;      // one layer's matmul parameters in units of d² (the seeds' rule says 11)
    double weight_bytes;  // all weights in memory
    double bytes_per_weight;

    double kv_token_layer;     // KV bytes per token per layer
    double kv_token;           // per token, all layers, with n_kv_head
    double kv_token_model;     // per token with the model's own KV heads
    double kv_token_mha;       // per token with n_kv_head = n_head
    double kv_seq;             // one sequence of `context` tokens
    double kv_total;           // context × batch
    double mem_bytes;          // weights + kv_total
    double kv_capacity_tokens; // (opts.mem_bytes - weight_bytes) / kv_token, 0 when the weights do not fit
    double kv_capacity_seqs;   // kv_capacity_tokens / context

    double ridge; // peak / bandwidth, FLOP per byte

    struct calc_phase prefill; // all B prompts of N tokens at once: the TTFT bound
    struct calc_phase decode;  // one token for each of B sequences at context N: the TBT bound
    struct calc_phase naive;   // one step without a KV cache: recompute all N tokens (weights moved, no KV)
    double decode_tokens_s;    // B / decode.t_s
    double rule_naive_flops;   // the seeds' rule of thumb 2 · L · 11 · N · d² (times B)
    double rule_naive_s;       // rule_naive_flops / peak
    double naive_over_kv_flops, naive_over_kv_time;
    struct calc_dist dist; // tp × pp ranks (tp = pp = 1: one process, no communication)
};

void calc_opts_default(struct calc_opts *o);

/* Built-in models: the seeds' llama3-405b (P = 405e9 as given) and llama2-7b, a few public Llama 3 shapes,
 * then every `cinfer synth` preset (their shapes come from model/synth.h).  False for an unknown name. */
bool calc_preset(const char *name, struct calc_model *out);
/* The shape of a model file (GGUF or llama2.c), with its weights' stored size; out->name is path. */
enum ci_status calc_model_from_file(const char *path, struct calc_model *out, struct ci_err *err);
int calc_n_presets(void);
const char *calc_preset_name(int i); // 0 <= i < calc_n_presets()

/* Parses a count such as "100000", "405e9", "100k", "1M", "1.1B", "2T" (decimal suffixes k/K 1e3, M 1e6,
 * B/G 1e9, T 1e12).  With whole, the value must be a positive integer.  CI_ERR_INVALID with a message for
 * anything else (empty, junk after the number, negative, zero, not finite, above 1e15). */
enum ci_status calc_parse_count(const char *s, bool whole, double *out, struct ci_err *err);

/* Validates a model and options (outside input): CI_ERR_INVALID with a message naming the culprit. */
enum ci_status calc_check(const struct calc_model *m, const struct calc_opts *o, struct ci_err *err);

/* Everything above, for m under o.  Runs calc_check first. */
enum ci_status calc_run(const struct calc_model *m, const struct calc_opts *o, struct calc_result *r,
                        struct ci_err *err);

/* The all-reduce model above: S bytes over n ranks. */
double calc_allreduce_s(double bytes, int n, double link_bw, double latency);

/* The seeds' KV formula: 2 · n_layer · n_kv_head · head_dim · bytes_per_elem, per token. */
double calc_kv_bytes_per_token(int n_layer, int n_kv_head, int head_dim, double bytes_per_elem);
/* Bytes per element of a KV element type name ("f32" 4, "f16" 2, "q8_0" 34/32); false for other names. */
bool calc_kv_type_bytes(const char *name, double *bytes);
/* Fills the roofline part of p from its flops and bytes. */
void calc_roofline(struct calc_phase *p, double peak_flops, double bandwidth);

/* Human units, written into buf (always NUL-terminated; returns buf).
 *   calc_fmt_bytes: decimal and binary, e.g. "8.26 TB (7.51 TiB)", "34.36 GB (32.00 GiB)", "512 B"
 *   calc_fmt_bytes_dec: decimal only, "810.00 GB"
 *   calc_fmt_flops: "1.64e17 FLOP (163.58 PFLOP)"
 *   calc_fmt_time:  "744 ms", "0.818 s" → "818 ms", "2.52 h" (µs, ms, s, min, h)
 *   calc_fmt_group: an integer with thousands separators, "189,851" */
char *calc_fmt_bytes(double bytes, char *buf, size_t n);
char *calc_fmt_bytes_dec(double bytes, char *buf, size_t n);
char *calc_fmt_flops(double flops, char *buf, size_t n);
char *calc_fmt_time(double seconds, char *buf, size_t n);
char *calc_fmt_group(double v, char *buf, size_t n);

#endif
