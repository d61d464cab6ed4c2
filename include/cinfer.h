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

struct cinfer_model_info {
    const char *arch; // "llama" / "qwen2"
    int n_vocab, n_embd, n_layer, n_head, n_kv_head, head_dim, n_ff, n_ctx_train;
    uint64_t n_params;
    uint64_t weight_bytes;
    uint64_t kv_bytes_per_token; // 2 · layers · kv_heads · head_dim · sizeof(float)
};
CINFER_API void cinfer_model_info(const struct cinfer_model *m, struct cinfer_model_info *out);

/* Token ids of text (add_special: BOS/EOS as the vocabulary asks; special-token texts are parsed).  *ids is
 * allocated: release it with cinfer_free. */
CINFER_API enum cinfer_status cinfer_tokenize(const struct cinfer_model *m, const char *text, size_t len,
                                              bool add_special, cinfer_token **ids, int *n_ids,
                                              struct cinfer_error *err);
CINFER_API void cinfer_free(void *p);

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

#ifdef __cplusplus
}
#endif

#endif
