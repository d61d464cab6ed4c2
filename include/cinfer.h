/* cinfer — public API.  Opaque handles with the cinfer_ prefix, so the engine can be embedded without the
 * CLI or the server.  Every function that can fail returns an enum cinfer_status and, where given a
 * struct cinfer_error, fills it with a one-line message.
 *
 * Threads: a loaded struct cinfer_model is immutable; tokenization may run on any number of threads at once.
 * cinfer_generate runs one request on the calling thread (with its own kernel thread pool). */
#ifndef CINFER_H
#define CINFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CINFER_API __attribute__((visibility("default")))
#else
#define CINFER_API
#endif

typedef int32_t cinfer_token;
typedef int32_t cinfer_pos;
typedef int32_t cinfer_seq;

/* Same values as the engine's internal statuses. */
enum cinfer_status {
    CINFER_OK = 0,
    CINFER_ERR_NOMEM,
    CINFER_ERR_IO,
    CINFER_ERR_FORMAT,
    CINFER_ERR_INVALID,
    CINFER_ERR_UNSUPPORTED,
    CINFER_ERR_LIMIT,
    CINFER_ERR_BUSY,
    CINFER_ERR_CANCELLED,
    CINFER_ERR_INTERNAL,
};

struct cinfer_error {
    enum cinfer_status code;
    char message[256];
};

struct cinfer_model;

/* Loads a GGUF file (tokenizer from its metadata) or a llama2.c checkpoint (tokenizer_path: its
 * tokenizer.bin; for GGUF files it overrides the embedded vocabulary).  The file is validated completely. */
CINFER_API enum cinfer_status cinfer_model_load(const char *path, const char *tokenizer_path,
                                                struct cinfer_model **out, struct cinfer_error *err);
CINFER_API void cinfer_model_free(struct cinfer_model *m);

/* When the weight matrices are copied into the kernels' own layout (where the CPU's kernels have one: 16 rows
 * side by side, read in one stream by decode and once per block of tokens by prefill). */
enum cinfer_pack {
    // Quantized matrices when the first engine or logits pass is set up; F16/BF16 ones, a copy as large as
    // the file's weights, after the first forward pass: no copy delays the first token.  The default.
    CINFER_PACK_LAZY = 0,
    CINFER_PACK_EAGER = 1, // all of them when the first engine or logits pass is set up (a server, at start)
    CINFER_PACK_OFF = 2,   // none: every matrix runs from the file's mapping (llama.cpp's --no-repack)
};

/* Loading with choices; cinfer_model_load(path, tok, ...) is this with {tok, false, false}. */
struct cinfer_load_options {
    const char *tokenizer_path; // a llama2.c tokenizer.bin (for a GGUF file it overrides the embedded one)
    bool tokenizer_optional;    // a model without a tokenizer loads anyway (token ids work, text does not)
    bool vocab_only;            // the tokenizer alone (the file may be a vocab-only GGUF): no weights, so
                                // no generation, engine or logits
    struct cinfer_tp *tp;       // tensor parallelism: keep this rank's shard, agree with the other ranks
    uint64_t tp_options;        // with tp: a hash of the options every rank must share (the command line)
    enum cinfer_pack pack;      // when the weights are packed for the kernels (default: CINFER_PACK_LAZY)
};
CINFER_API enum cinfer_status cinfer_model_load_with(const char *path, const struct cinfer_load_options *o,
                                                     struct cinfer_model **out, struct cinfer_error *err);

/* ---- tensor parallelism over MPI (README "Past one machine") ------------------------------------------
 * `mpirun -np N cinfer run|logits --tp N ...`: every process calls cinfer_tp_init(N, 1, ...) (MPI_Init), then
 * loads the model with load options .tp (each keeps its 1/N shard of every layer and the ranks check that they
 * agree: same model, same options, all loaded).  Rank 0 then goes on as a single process would: its engine
 * and cinfer_logits drive the other ranks, which call cinfer_tp_worker and return when rank 0 ends.  Every
 * rank calls cinfer_tp_end last (ok false on a worker, or after an MPI failure, ends the whole job, so no
 * rank waits forever).  Built without MPI, cinfer_tp_init returns CINFER_ERR_UNSUPPORTED. */
struct cinfer_tp;
/* tp x pp ranks (pp > 1: pipeline parallelism, each stage a contiguous run of layers, tp ranks each);
 * timeout_s > 0: a rank that does not answer within it inside a step ends the job (the watchdog), <= 0: no
 * limit. */
CINFER_API enum cinfer_status cinfer_tp_init(int tp, int pp, double timeout_s, struct cinfer_tp **out,
                                             struct cinfer_error *err);
CINFER_API int cinfer_tp_rank(const struct cinfer_tp *t);
CINFER_API enum cinfer_status cinfer_tp_worker(struct cinfer_tp *t, const struct cinfer_model *m,
                                               int n_threads, struct cinfer_error *err);
struct cinfer_tp_stats {
    long long steps;        // batches rank 0 broadcast
    long long allreduces;   // all-reduces run (two per layer and batch)
    double allreduce_ms;    // time in them (waiting for the slowest rank included)
    double allreduce_mib;   // float32 data summed
    double bcast_ms;        // time broadcasting the batches
    double p2p_ms;          // pipeline: time sending and receiving hidden states (waiting included)
    double p2p_mib;         // pipeline: hidden states received
    long long head_rows;    // output head split by vocabulary (--tp without --pp; else 0): rank 0's rows
    long long n_vocab;      // of the whole head's
    long long embd_rows;    // token embedding split by vocabulary (--tp): rank 0's rows, else 0
    double read_ahead_mib;  // what rank 0 asked the kernel to read ahead of the model file: its shard
    double file_mib;        // of the whole file
    long long head_gathers; // gathers of the logits slices to rank 0
    double head_ms;         // time in them (waiting included)
};
CINFER_API void cinfer_tp_stats(const struct cinfer_tp *t, struct cinfer_tp_stats *out);
CINFER_API void cinfer_tp_end(struct cinfer_tp *t, bool ok);

#define CINFER_MAX_TENSOR_TYPES 32
struct cinfer_model_info {
    const char
        *arch; // "llama", "qwen2", "qwen3", "gemma2", "gemma3", "qwen2moe", "qwen3moe", "phi3", "gpt-oss",
               // "bert"
    const char *format; // "GGUF" or "llama2.c"
    bool has_weights;   // false for a model loaded vocab_only (the sizes below are then 0)
    int n_vocab, n_embd, n_layer, n_head, n_kv_head, head_dim, n_ff, n_ctx_train;
    int rope_dim;             // dimensions of each head that are rotated
    float rope_base;          // RoPE frequency base
    bool rope_neox;           // NeoX pairing (i, i + d/2) rather than adjacent pairs
    const char *rope_scaling; // "none", "linear", "llama3", "yarn" or "longrope"
    float rope_linear_factor; // positions are divided by this (1 unless linear scaling; YaRN's factor)
    bool rope_freqs;          // rope_freqs.weight's per-pair frequency divisors are applied
    int rope_orig_ctx; // rope.scaling.original_context_length (YaRN, LongRoPE), else the context length
    float rope_mscale; // RoPE's cos/sin multiplier: attn_factor (times 1 + 0.1 ln factor for YaRN)
    float yarn_beta_fast, yarn_beta_slow; // YaRN's correction range
    bool rope_longrope; // rope_factors_long/short.weight (Phi-3): long above rope_orig_ctx, else short
    bool qkv_fused;     // attn_qkv.weight: one Q/K/V projection (phi3)
    bool ffn_fused;     // ffn_up.weight holds the gate and up projections (phi3)
    bool qk_norm;       // per-head RMSNorm of Q and K before RoPE (qwen3)
    int n_expert, n_expert_used; // mixture of experts: experts per layer and per token (0, 0: a dense FFN)
    int n_ff_exp, n_ff_shexp;    // one expert's FFN length; the shared expert's (qwen2moe), else 0
    bool expert_weights_norm;    // the top-k router weights are renormalised to sum 1
    bool expert_softmax_topk;    // the weights are a softmax of the top-k router logits (gpt-oss)
    bool attn_sinks;             // per-head attention sink logits (gpt-oss)
    float rms_eps;               // RMSNorm epsilon
    bool tied_output;            // the output head is the token embedding matrix
    bool encoder; // BERT: bidirectional, LayerNorm, no head: embeddings only (no completions, no logits)
    uint64_t n_params;
    uint64_t weight_bytes; // as stored (quantized types included)
    uint64_t file_bytes;
    uint64_t kv_bytes_per_token; // 2 · layers · kv_heads · head_dim · 4: an f32 cache (the default; an engine
                                 // reports its own --kv-type in cinfer_engine_info)
    unsigned gguf_version;       // GGUF files: the container's version, tensors and metadata keys (else 0)
    long long gguf_n_tensors, gguf_n_metadata;
    struct {
        const char *type;       // "f32", "q8_0", ... (static)
        int count;              // tensors of that type in the model
        double bits_per_weight; // of the type's blocks: 8 · bytes per block / elements per block
    } tensor_types[CINFER_MAX_TENSOR_TYPES];
    int n_tensor_types;
    const char *tokenizer_type; // "SPM", "BPE" or "WPM" (WordPiece); NULL when the model has no tokenizer
    const char *tokenizer_pre;  // BPE: the pre-tokenizer ("llama-bpe", "qwen2", ...); SPM: "default"
    cinfer_token bos, eos;      // -1 when absent
    // Sliding-window attention and soft-capping (0: none).
    int sliding_window;  // local layers attend to the last sliding_window positions
    int n_swa_layers;    // how many layers are local (the rest attend to the whole context)
    float rope_base_swa; // RoPE base of the local layers
    float attn_softcap;  // attention scores capped as cap · tanh(s / cap)
    float final_softcap; // logits capped the same way
    bool post_norms;     // gemma: RMSNorm of each sub-block's output before the residual add
    bool gelu_ffn;       // gemma: GeGLU (tanh GeLU) feed-forward instead of SwiGLU
    float embd_scale;    // token embeddings multiplied by this (gemma: sqrt(n_embd); else 1)
};
CINFER_API void cinfer_model_info(const struct cinfer_model *m, struct cinfer_model_info *out);
/* The pooling an embedding request uses by default: the file's <arch>.pooling_type ("mean", "cls", "last"),
 * else "last" (a decoder's last token sees the whole input; vLLM's default for decoder embedding models), or
 * "cls" for an encoder (BERT).
 * NULL with a message in *why when the file asks for one cinfer does not implement ("rank": a
 * classification head). */
CINFER_API const char *cinfer_model_embedding_pooling(const struct cinfer_model *m, const char **why);
CINFER_API bool cinfer_pooling_known(const char *name); // "mean", "cls", "last"
/* KV cache bytes one token costs with elements of kv_type ("f32", "f16", "q8_0"): 2 · layers · kv_heads ·
 * the bytes of head_dim elements; 0 for an unknown type or one the head size does not fit (q8_0 needs
 * head_dim % 32 == 0). */
CINFER_API uint64_t cinfer_kv_bytes_per_token(const struct cinfer_model *m, const char *kv_type);

/* Token ids of text (add_special: BOS/EOS as the vocabulary asks; special-token texts are parsed).  *ids is
 * allocated: release it with cinfer_free. */
CINFER_API enum cinfer_status cinfer_tokenize(const struct cinfer_model *m, const char *text, size_t len,
                                              bool add_special, cinfer_token **ids, int *n_ids,
                                              struct cinfer_error *err);
/* The same, choosing whether special-token texts in text are parsed as those tokens (parse_special) or
 * tokenized as plain text. */
CINFER_API enum cinfer_status cinfer_tokenize_ex(const struct cinfer_model *m, const char *text, size_t len,
                                                 bool add_special, bool parse_special, cinfer_token **ids,
                                                 int *n_ids, struct cinfer_error *err);
CINFER_API void cinfer_free(void *p);

/* Text of ids (special tokens rendered as nothing unless render_special).  *text is allocated and
 * NUL-terminated: release it with cinfer_free. */
CINFER_API enum cinfer_status cinfer_detokenize(const struct cinfer_model *m, const cinfer_token *ids,
                                                int n_ids, bool render_special, char **text, size_t *len,
                                                struct cinfer_error *err);
/* The raw vocabulary text of a token ("\u2581Hello", "<0x0A>"); NULL for an id out of range. */
CINFER_API const char *cinfer_token_piece(const struct cinfer_model *m, cinfer_token id, size_t *len);
/* The model's Jinja chat template (GGUF tokenizer.chat_template), NULL if it has none; valid for the model's
 * life. */
CINFER_API const char *cinfer_model_chat_template(const struct cinfer_model *m, size_t *len);
/* The model's name (GGUF general.name, else the file name without directories). */
CINFER_API const char *cinfer_model_name(const struct cinfer_model *m);
/* End-of-generation token (EOS/EOT)? */
CINFER_API bool cinfer_token_is_eog(const struct cinfer_model *m, cinfer_token id);

/* ---- chat templates --------------------------------------------------------------------------------------
 * The built-in prompt formats (llama.cpp's names: chatml, llama2, llama3, mistral-v7, phi3, gemma, zephyr,
 * ...), picked from a model's own tokenizer.chat_template or by name. */
struct cinfer_chat_message {
    const char *role;    // "system", "user" or "assistant" ("developer" is read as "system" by servers)
    const char *content; // UTF-8, NUL-terminated
};
#define CINFER_CHAT_TEMPLATE_DEFAULT "chatml" // what to use when a model has no recognisable template
CINFER_API int cinfer_chat_n_templates(void);
CINFER_API const char *cinfer_chat_template_name(int i); // 0 <= i < cinfer_chat_n_templates(); static
/* The canonical name of the built-in template called name ("mistral" names llama.cpp does not know map to
 * llama2, as in llama.cpp); NULL when there is none.  Static storage. */
CINFER_API const char *cinfer_chat_template_lookup(const char *name);
/* The built-in template the model's own chat template corresponds to, by llama.cpp's detection; NULL when the
 * model has none or it is not one cinfer implements.  Static storage. */
CINFER_API const char *cinfer_chat_template_detect(const struct cinfer_model *m);
/* The prompt of msgs[0..n) in the named template; *out is allocated (release with cinfer_free), *len excludes
 * its NUL.  CINFER_ERR_INVALID for an unknown template, a bad role or a missing content (the message says
 * which). */
CINFER_API enum cinfer_status cinfer_chat_apply(const char *template_name,
                                                const struct cinfer_chat_message *msgs, int n,
                                                bool add_generation_prompt, char **out, size_t *len,
                                                struct cinfer_error *err);

/* ---- Jinja chat templates --------------------------------------------------------------------------------
 * A model's own tokenizer.chat_template (or a --chat-template-file), rendered as Hugging Face renders it
 * (@huggingface/jinja's semantics: trim_blocks and lstrip_blocks on).  A parsed template is immutable: one may
 * be rendered by many threads at once. */
struct cinfer_template;
/* CINFER_ERR_INVALID for a syntax error ("chat template syntax error, line N: ..."). */
CINFER_API enum cinfer_status cinfer_template_parse(const char *src, size_t len, struct cinfer_template **out,
                                                    struct cinfer_error *err);
CINFER_API void cinfer_template_free(struct cinfer_template *t);
/* Renders t with the variables of context_json (the text of a JSON object: "messages", "add_generation_prompt",
 * "tools", and any template keyword arguments such as "enable_thinking").  With a model (m may be NULL),
 * "bos_token" and "eos_token" default to its vocabulary's texts, and, as llama.cpp does, a BOS text the
 * template writes at the start is removed when tokenization adds BOS itself (an EOS text at the end likewise),
 * so the prompt holds one BOS.  *out is allocated (release with cinfer_free), NUL-terminated, *len excludes the
 * NUL.  CINFER_ERR_INVALID for a render error ("chat template error, line N: ...": a type error, an unknown
 * filter, raise_exception's message, a bound on output, steps, depth or memory exceeded). */
CINFER_API enum cinfer_status cinfer_template_render(const struct cinfer_template *t,
                                                     const struct cinfer_model *m, const char *context_json,
                                                     size_t len, char **out, size_t *out_len,
                                                     struct cinfer_error *err);

/* One forward pass over ids as one sequence at positions 0..n-1, without the engine: the logits of every
 * position into out[n][n_vocab] (n_vocab from cinfer_model_info).  The reference tests compare these with an
 * independent implementation. */
struct cinfer_logits_options {
    int n_threads;       // kernel threads (default 2)
    int kv_block_size;   // KV block size in tokens (default 16)
    const char *kv_type; // KV element type (default "f32")
};
CINFER_API void cinfer_logits_options_default(struct cinfer_logits_options *o);
CINFER_API enum cinfer_status cinfer_logits(const struct cinfer_model *m, const cinfer_token *ids, int n_ids,
                                            const struct cinfer_logits_options *o, float *out,
                                            struct cinfer_error *err);

/* ---- model files ------------------------------------------------------------------------------------------
 * Writing GGUF files that llama.cpp loads: a llama2.c checkpoint converted, or a random-weight model of a
 * real shape (for tests and benchmarks; the same preset, type and seed give the same bytes). */
CINFER_API enum cinfer_status cinfer_convert_llama2c(const char *in, const char *tokenizer_path,
                                                     const char *type, const char *out,
                                                     struct cinfer_error *err);
CINFER_API enum cinfer_status cinfer_synth(const char *preset, const char *type, uint64_t seed,
                                           const char *out, struct cinfer_error *err);
/* cinfer_synth with the matrices that write into the residual stream (attn_output, ffn_down) scaled by
 * residual_scale (1: cinfer_synth's bytes).  Far below 1 the token embedding dominates the residual stream and
 * the logits have wide margins, so a quantization of the file predicts its greedy tokens as a trained model's
 * own quantization does (the high-acceptance draft pair of bench/spec.sh). */
CINFER_API enum cinfer_status cinfer_synth_scaled(const char *preset, const char *type, uint64_t seed,
                                                  float residual_scale, const char *out,
                                                  struct cinfer_error *err);
/* The uniform matrix types a file can be written in: "f32", "f16", "bf16", "q8_0", "q4_0" (convert: f32, f16,
 * q8_0).  cinfer_synth and cinfer_convert_llama2c also take any cinfer_quantize type ("Q4_K_M", ...): the
 * tensors are then typed as llama-quantize would type the F32 file. */
CINFER_API bool cinfer_weight_type_known(const char *type);
/* Re-types a GGUF file per one of llama.cpp's quantization presets ("Q4_K_M", "Q6_K", "IQ4_XS", "F16", ...;
 * cinfer_quantize_types lists them), with llama-quantize's choice of each tensor's type (without an
 * importance matrix).  Streams tensor by tensor; a partial output is removed on failure. */
struct cinfer_quantize_params {
    int n_threads; // rows are quantized in parallel (default 1)
    bool pure;     // every quantized tensor in the preset's base type (llama-quantize --pure)
};
struct cinfer_quantize_result {
    struct {
        const char *type;       // "Q4_K", ... (static)
        int count;              // tensors written in that type
        uint64_t n_elements;    // their weights
        uint64_t n_bytes;       // their data bytes
        double bits_per_weight; // 8 · n_bytes / n_elements
    } types[CINFER_MAX_TENSOR_TYPES];
    int n_types;
    int n_tensors;
    int n_fallback; // tensors whose row length forced a fallback type (llama.cpp's warning)
    int file_type;  // the general.file_type written (LLAMA_FTYPE_*)
    uint64_t in_bytes, out_bytes;
};
CINFER_API void cinfer_quantize_params_default(struct cinfer_quantize_params *p);
CINFER_API enum cinfer_status cinfer_quantize(const char *in, const char *out, const char *type,
                                              const struct cinfer_quantize_params *p,
                                              struct cinfer_quantize_result *result,
                                              struct cinfer_error *err);
/* "F32, F16, BF16, Q8_0, Q4_0, ..." (static); cinfer_quantize_type_known is case-insensitive. */
CINFER_API const char *cinfer_quantize_types(void);
CINFER_API bool cinfer_quantize_type_known(const char *type);
struct cinfer_synth_preset {
    const char *name, *arch;
    int n_embd, n_layer, n_head, n_kv_head, n_ff, n_vocab, n_ctx;
    int n_expert, n_expert_used; // mixture of experts (0, 0: dense)
};
CINFER_API int cinfer_synth_n_presets(void);
CINFER_API void cinfer_synth_preset_info(int i, struct cinfer_synth_preset *out); // 0 <= i < n_presets

struct cinfer_sampling {
    float temperature;        // <= 0: greedy
    int top_k;                // 0: off
    float top_p;              // 1: off
    float min_p;              // 0: off
    float repetition_penalty; // 1: off
    float presence_penalty;   // 0: off
    float frequency_penalty;  // 0: off
    uint64_t seed;            // same seed, same tokens
};

struct cinfer_generate_params {
    int max_tokens;
    int n_threads;
    int kv_block_size; // tokens per KV block
    int n_ctx;         // context limit (0: the model's training context)
    bool ignore_eos;
    struct cinfer_sampling sampling;
};
CINFER_API void cinfer_generate_params_default(struct cinfer_generate_params *p);

/* Called for each generated token with the text it completes (UTF-8, possibly empty while a character is
 * incomplete; empty for the end-of-generation token); return false to stop.  Bytes still held at the end
 * (an incomplete character, as U+FFFD) come in one last call with token -1. */
typedef bool (*cinfer_token_fn)(void *user, cinfer_token token, const char *text, size_t len);

struct cinfer_generate_stats {
    int n_prompt;
    int n_generated;
    double ttft_ms; // time to first token (the prefill)
    double tbt_ms;  // mean time between tokens (the decode)
    double tbt_p50_ms;
    double tbt_p99_ms;
    double tps;                // tokens per second of the stream = 1000 / tbt_ms
    double latency_ms;         // TTFT + (n_generated - 1) · TBT
    double prefill_tps;        // prompt tokens per second in the prefill
    uint64_t kv_bytes;         // KV cache allocated for the request
    const char *finish_reason; // "length", "stop" or "caller"
};

/* Generates from prompt (tokenized with BOS).  CINFER_ERR_LIMIT when prompt + max_tokens exceeds the
 * model's context. */
CINFER_API enum cinfer_status cinfer_generate(const struct cinfer_model *m, const char *prompt,
                                              const struct cinfer_generate_params *p,
                                              cinfer_token_fn on_token, void *user,
                                              struct cinfer_generate_stats *stats, struct cinfer_error *err);

/* ---- the serving engine ----------------------------------------------------------------------------------
 * One engine runs many requests at once (continuous batching over a paged KV cache, or the other policies
 * for comparison).  Drive it either with its own thread (cinfer_engine_start) or by calling
 * cinfer_engine_step yourself.  Each request's samples stream their events through cinfer_stream_next. */

struct cinfer_engine_options {
    int n_threads;
    const char *policy;   // "naive", "static" or "continuous" (default)
    bool chunked_prefill; // continuous: split long prompts to fill the token budget (default on)
    int max_batch_tokens; // per-step token budget (default 512)
    int max_seqs;         // running sequences (static: the batch size) (default 64)
    int kv_block_size;    // tokens per KV block (default 16)
    bool contiguous_kv;   // one whole-context block per sequence
    int64_t kv_mem_bytes; // KV pool size (0: sized from the available memory, see kv_mem_fraction)
    const char *kv_type;  // KV element type: "f32" (NULL: the default), "f16" or "q8_0" (head_dim % 32 == 0)
    int kv_blocks;        // KV pool size in blocks (overrides kv_mem_bytes)
    // The default pool (kv_mem_bytes and kv_blocks 0): this share of the available memory (MemAvailable)
    // minus the model's weights, at most what max_seqs whole contexts use (0: 0.5).  Its pages are only
    // touched as blocks are used.
    double kv_mem_fraction;
    bool prefix_cache;   // share full prompt blocks across requests (default on)
    int n_ctx;           // context limit (0: the model's)
    const char *pooling; // embedding requests' default pooling (NULL: cinfer_model_embedding_pooling's)
    // Speculative decoding: "ngram" (prompt lookup in each sequence's own tokens), "draft" (draft_model
    // proposes), NULL or "none": off.  Greedy output is unchanged; sampled output keeps its distribution.
    const char *spec;
    int spec_k;                             // longest proposal, 1..32 (0: 8); adaptive per sequence
    int spec_k_min;                         // shortest (0: 1)
    int spec_ngram_n;                       // ngram: longest suffix looked up (0: 3)
    const struct cinfer_model *draft_model; // "draft": same vocabulary (n_vocab and every token's text)
    // Speculate only in steps where at most this many sequences decode (0: any number; past bench/spec.sh's
    // crossover batch size a verification costs more than it saves).
    int spec_max_batch;
};
CINFER_API void cinfer_engine_options_default(struct cinfer_engine_options *o);
/* Whether name is a policy ("naive", "static", "continuous") or a KV element type ("f32", "f16", "q8_0")
 * that cinfer_engine_create accepts: lets a front end check its flags before loading anything. */
CINFER_API bool cinfer_policy_known(const char *name);
CINFER_API bool cinfer_kv_type_known(const char *name);
CINFER_API bool cinfer_spec_known(const char *name); // "none", "ngram", "draft"

struct cinfer_engine;
CINFER_API enum cinfer_status cinfer_engine_create(const struct cinfer_model *m,
                                                   const struct cinfer_engine_options *o,
                                                   struct cinfer_engine **out, struct cinfer_error *err);
CINFER_API void cinfer_engine_free(struct cinfer_engine *e);
CINFER_API enum cinfer_status cinfer_engine_start(struct cinfer_engine *e, struct cinfer_error *err);
struct cinfer_engine_info {
    int n_ctx;                  // context per sequence
    int kv_block_size;          // tokens per block
    int kv_blocks;              // blocks in the pool
    int64_t kv_bytes;           // the pool's size
    int64_t kv_bytes_per_token; // 2 · layers · kv_heads · bytes of head_dim elements of kv_type
    const char *kv_type;        // "f32", "f16" or "q8_0" (static string)
    int full_context_seqs;      // sequences of the whole context that fit at once
    // What decided the pool's size: "--kv-blocks", "--kv-mem", "memory" (kv_mem_fraction of mem_available
    // minus weight_bytes), "cap" (max_seqs whole contexts), "floor" (memory short: 64 MiB), "fallback"
    // (available memory unknown: 256 MiB).  Static string.
    const char *kv_sizing;
    double kv_mem_fraction; // the share used for the default pool
    int64_t mem_available;  // bytes available when the engine was made (-1: unknown or not asked)
    int64_t weight_bytes;   // the model's (and draft model's) weights
};
CINFER_API void cinfer_engine_info(const struct cinfer_engine *e, struct cinfer_engine_info *out);
/* NULL while the engine works; otherwise why it cannot go on (the model file changed on disk while in use),
 * and every request fails with that message.  Any thread. */
CINFER_API const char *cinfer_engine_failure(const struct cinfer_engine *e);
/* Speculative decoding since the engine started: drafts verified and accepted, and the decoding
 * sequence-steps with the tokens they gained (tokens per step = decode_tokens / decode_steps). */
struct cinfer_spec_stats {
    int64_t draft_tokens, accepted_tokens, decode_steps, decode_tokens;
};
CINFER_API void cinfer_engine_spec_stats(const struct cinfer_engine *e, struct cinfer_spec_stats *out);
/* Synchronous mode: one step; false if there was nothing to do. */
CINFER_API bool cinfer_engine_step(struct cinfer_engine *e);

struct cinfer_logit_bias {
    cinfer_token token;
    float bias; // -INFINITY bans the token
};

struct cinfer_request_options {
    int max_tokens;
    int n; // samples; sample i uses seed + i
    struct cinfer_sampling sampling;
    const char *const *stop; // stop strings, never part of the text
    int n_stop;
    bool ignore_eos;
    const struct cinfer_logit_bias *logit_bias; // added to the logits before sampling
    int n_logit_bias;
    int logprobs; // -1: none; 0..20: the sampled token's log-probability and this many top alternatives
    // An embedding request: the prompt is computed (batched with everything else) and its final hidden
    // states (after the output norm) pooled; nothing is sampled (max_tokens, n, sampling, stop and logprobs
    // are ignored).  The stream ends with DONE; cinfer_stream_embedding then holds the vector.
    bool embedding;
    const char *pooling; // "mean", "cls" or "last"; NULL: cinfer_model_embedding_pooling's choice
    // A GBNF grammar (llama.cpp's format) every sample must follow (NULL or "": none): each token is sampled
    // from those the grammar allows (logprobs too are of that distribution), end-of-generation only where
    // the text is a whole sentence of it, and a sample ends ("stop") when nothing more can follow.  An
    // invalid grammar fails the submit with CINFER_ERR_INVALID (or CINFER_ERR_LIMIT) naming the problem.
    const char *grammar;
    // The text of special (control) tokens is part of the streamed text ("<|channel|>", "[TOOL_CALLS]"):
    // for the servers' tool-call parsers, whose formats are made of such tokens.  End-of-generation tokens
    // still end the text unseen.
    bool render_special;
    // Speculative decoding on an engine that has it: 0: the engine's longest proposal; > 0: at most this
    // many drafts per step; < 0: off for this request.
    int spec_k;
    // What `grammar` is written in: GBNF (0, the default), a JSON Schema (the output is one JSON value the
    // schema accepts; keywords that cannot be honoured exactly fail the submit naming them), or a regular
    // expression the whole output matches (ECMAScript subset; unsupported constructs are named).
    enum cinfer_grammar_kind {
        CINFER_GRAMMAR_GBNF = 0,
        CINFER_GRAMMAR_JSON_SCHEMA,
        CINFER_GRAMMAR_REGEX
    } grammar_kind;
    // A reasoning budget (Anthropic's thinking.budget_tokens): with think_end set, once think_budget tokens
    // were generated inside the reasoning block (from the end of the text think_start, or from the first
    // token when think_open: the prompt left the block open), the text think_end is forced: each following
    // token is sampled among those that spell it (under the grammar too, when both allow one).  NULL: none.
    const char *think_start, *think_end;
    int think_budget; // >= 0
    bool think_open;
};
/* Defaults: 128 tokens, one sample, cinfer_generate_params_default's sampling, no stop strings and no
 * log-probabilities (logprobs -1). */
CINFER_API void cinfer_request_options_default(struct cinfer_request_options *o);

/* Compiles a GBNF grammar into the engine's cache of grammars (keyed by the text), so that a request with it
 * finds it compiled: CINFER_ERR_INVALID / CINFER_ERR_LIMIT with the problem named (syntax errors with line
 * and column, undefined rules, no root, left recursion, an empty language, the size limits).  Any thread. */
CINFER_API enum cinfer_status cinfer_engine_check_grammar(struct cinfer_engine *e, const char *grammar,
                                                          struct cinfer_error *err);
/* The same for a grammar in any of the kinds above (cached by kind and text). */
CINFER_API enum cinfer_status cinfer_engine_check_grammar_kind(struct cinfer_engine *e,
                                                               enum cinfer_grammar_kind kind,
                                                               const char *text, struct cinfer_error *err);
/* GBNF rules "schema0" ... "schema<n-1>", rule i producing the JSON values that JSON Schema schemas[i] accepts
 * (the structured-output compiler), and the shared rules they use; no "root": for a caller that writes its own
 * grammar around them (a tool call whose arguments follow one tool's schema).  *out is allocated (cinfer_free),
 * *len excludes its NUL.  CINFER_ERR_INVALID / CINFER_ERR_UNSUPPORTED / CINFER_ERR_LIMIT name the keyword. */
CINFER_API enum cinfer_status cinfer_json_schemas_gbnf(const char *const *schemas, int n, char **out,
                                                       size_t *len, struct cinfer_error *err);

struct cinfer_stream;
/* Any thread.  CINFER_ERR_LIMIT: the request can never fit (context or KV pool); CINFER_ERR_BUSY: queue full.
 */
CINFER_API enum cinfer_status cinfer_engine_submit(struct cinfer_engine *e, const cinfer_token *prompt,
                                                   int n_prompt, const struct cinfer_request_options *o,
                                                   struct cinfer_stream **out, struct cinfer_error *err);

enum cinfer_event_kind { CINFER_EVENT_TOKEN = 1, CINFER_EVENT_TEXT, CINFER_EVENT_DONE, CINFER_EVENT_ERROR };

struct cinfer_event {
    enum cinfer_event_kind kind;
    cinfer_token token; // TOKEN: the sampled token; otherwise -1
    const char *text;   // TOKEN/TEXT: the UTF-8 text it completed; ERROR: the message
    size_t len;
    const char *finish_reason; // DONE/ERROR: "stop", "length", "cancelled", "error"
    // TOKEN with logprobs >= 0: the sampled token's log-probability and the top alternatives (most likely
    // first)
    float logprob;
    const cinfer_token *top_tokens; // [n_top]
    const float *top_logprobs;      // [n_top]
    int n_top;
};
/* Waits up to timeout_ns (< 0: forever) for sample's next event; text stays valid until the next call.
 * CINFER_ERR_BUSY on timeout; CINFER_ERR_CANCELLED after the final event was returned.  CINFER_ERR_NOMEM
 * when an event's text (longer than a few hundred bytes) could not be joined: that event is lost, so the
 * caller should cancel the stream and fail the request. */
CINFER_API enum cinfer_status cinfer_stream_next(struct cinfer_stream *s, int sample, struct cinfer_event *ev,
                                                 int64_t timeout_ns);
CINFER_API void cinfer_stream_cancel(struct cinfer_stream *s);
/* For callers that do not block in cinfer_stream_next (an event loop): fn(ctx) is called whenever an event
 * becomes ready on any of the stream's samples, the final ones included (and right away if one is ready
 * already).  It runs on the engine's thread with the stream's lock held, so it must be quick and must not
 * call into the stream; it should only wake the caller's loop, which then reads with a timeout of 0.
 * fn == NULL removes it; when that call returns, fn is not running and will not run again. */
CINFER_API void cinfer_stream_set_notify(struct cinfer_stream *s, void (*fn)(void *ctx), void *ctx);
/* An embedding request's pooled vector ([*n] = n_embd floats, not normalized), valid until the stream is
 * released; CINFER_ERR_INVALID before its DONE event or for a request that is not an embedding. */
CINFER_API enum cinfer_status cinfer_stream_embedding(const struct cinfer_stream *s, const float **v, int *n);
/* Request metrics of a finished sample (the seeds' yardstick). */
CINFER_API void cinfer_stream_stats(const struct cinfer_stream *s, int sample,
                                    struct cinfer_generate_stats *out);
/* Prometheus text exposition of the engine's metrics (prefix "cinfer:", vLLM's names).  *text is allocated:
 * release it with cinfer_free.  Any thread. */
CINFER_API enum cinfer_status cinfer_engine_metrics(const struct cinfer_engine *e, char **text, size_t *len);
/* Releases the caller's hold (cancelling the request if it is still running). */
CINFER_API void cinfer_stream_release(struct cinfer_stream *s);

#ifdef __cplusplus
}
#endif

#endif
