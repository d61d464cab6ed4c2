/* A GGUF model file from outside bytes, loaded as `cinfer run` loads one and then run: the gguf harness stops
 * where the weights are bound, this one goes on through the forward pass, where a file that passed every
 * check but is still odd (a head_dim that is not n_embd / n_head, experts, a sliding window, RoPE factors,
 * fused tensors, soft-capping, any weight type) would read out of bounds.  The seeds are the gguf harness's
 * (tests/fuzz/corpus/model is a link to it): one small model per architecture and feature.
 *
 * Properties checked:
 *   - a file refused comes with a status and a message; so does a forward pass that fails;
 *   - a file accepted runs the forward pass over 1-8 tokens (ids, KV type and block size from the input's
 *     last bytes) with 1 or 2 threads, without a crash, an out-of-bounds access or undefined behaviour (ASan,
 *     UBSan) and without a leak;
 *   - an encoder (BERT) is refused by the logits call with a message instead of computed. */
#include <unistd.h>

#include "cinfer.h"
#include "fuzz.h"

static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet();
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/cinfer-fuzz-model-%d.gguf", dir && strlen(dir) < 24 ? dir : "/tmp",
             (int)getpid());
    return 0;
}

static bool write_file(const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

/* The forward pass over 1-8 tokens (past the seeds' 4-token windows); the choices (tokens, threads, KV block
 * size and type) come from the file's last bytes (c, then the ids). */
static void run(const struct cinfer_model *m, const uint8_t *tail, size_t n_tail) {
    struct cinfer_model_info info;
    cinfer_model_info(m, &info);
    FUZZ_CHECK(info.n_vocab > 0, "a loaded model with %d tokens", info.n_vocab);
    static const char *const kv_types[] = {"f32", "f16", "q8_0"};
    unsigned c = n_tail ? tail[0] : 0;
    cinfer_token ids[8];
    int n = 1 + (int)(c % 8);
    for (int i = 0; i < n; i++)
        ids[i] = (cinfer_token)((1 + (size_t)i < n_tail ? tail[1 + i] : i) % info.n_vocab);
    float *out = malloc((size_t)n * (size_t)info.n_vocab * sizeof *out);
    FUZZ_CHECK(out != NULL, "out of memory for %d x %d logits", n, info.n_vocab);
    struct cinfer_logits_options o;
    cinfer_logits_options_default(&o);
    o.n_threads = 1 + (int)(c / 8 % 2);
    o.kv_block_size = c / 16 % 2 ? 1 : 16;
    o.kv_type = kv_types[c / 32 % 3];
    struct cinfer_error err = {0};
    enum cinfer_status s = cinfer_logits(m, ids, n, &o, out, &err);
    if (s != CINFER_OK)
        FUZZ_CHECK(err.message[0], "forward pass failed without a message");
    FUZZ_CHECK(!info.encoder || s != CINFER_OK, "an encoder computed logits");
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_MEM_BEGIN();
    FUZZ_CHECK(write_file(data, size), "cannot write %s", path);
    struct cinfer_load_options lo = {.tokenizer_optional = true};
    struct cinfer_model *m = NULL;
    struct cinfer_error err = {0};
    if (cinfer_model_load_with(path, &lo, &m, &err) == CINFER_OK) {
        run(m, size > 9 ? data + size - 9 : data, size > 9 ? 9 : size);
        cinfer_model_free(m);
    } else {
        FUZZ_CHECK(err.message[0], "model refused without a message");
    }
    unlink(path);
    FUZZ_MEM_END();
    return 0;
}
