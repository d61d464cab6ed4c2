/* Times decode attention (ci_attention_paged) on one layer: n_head query heads over n_kv_head KV heads
 * (head_dim 64 unless given, block size 16, random K/V), D decode tokens (default 1) each at the end of its own
 * sequence of CTX positions, with T threads, and prints the median microseconds of 300 calls after 20 warm-up
 * calls.  Not part of the build: compile it against a release build's library to compare two commits side by
 * side (bench/RESULTS.md, issue 15):
 *   make -j2 && cc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude bench/attn_decode.c build/release/libcinfer.a \
 *       -lpthread -lm -o /tmp/attn_decode
 *   /tmp/attn_decode CTX T f16|f32|q8_0 [n_head n_kv_head [head_dim [layers [ordered|shuffled [D [P]]]]]]
 * (default 9 3 64: smollm2-135m; tinyllama-1.1b: 32 4; qwen3-0.6b: 16 8 128).  With layers > 1 each call walks
 * the next of that many layers' caches, so a cache larger than the last-level cache is read from memory, as
 * in a model's decode step.  shuffled: each block table in a random order, as a pool's after some churn (else
 * the blocks lie in order, which the hardware prefetchers follow across blocks).  P > 0: the batch also holds
 * a prompt chunk of P tokens at positions 0..P-1 of the first sequence, as a step of continuous batching with
 * chunked prefill does (the decode tokens then run beside the chunk's grouped tasks). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "micro.h" // bench/micro.h, beside this file
#include "core/threadpool.h"
#include "kernels/dot.h"
#include "kernels/kernels.h"

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr,
                "usage: %s CTX THREADS f16|f32|q8_0 [n_head n_kv_head [head_dim [layers [ordered|shuffled [D "
                "[P]]]]]]\n",
                argv[0]);
        return 2;
    }
    int ctx = atoi(argv[1]), threads = atoi(argv[2]);
    uint32_t type = !strcmp(argv[3], "f16")    ? CI_TYPE_F16
                    : !strcmp(argv[3], "q8_0") ? CI_TYPE_Q8_0
                                               : CI_TYPE_F32;
    int nh = argc > 5 ? atoi(argv[4]) : 9, nkv = argc > 5 ? atoi(argv[5]) : 3;
    const int HD = argc > 6 ? atoi(argv[6]) : 64, nl = argc > 7 ? atoi(argv[7]) : 1;
    const bool shuffled = argc > 8 && !strcmp(argv[8], "shuffled");
    const int nd = argc > 9 ? atoi(argv[9]) : 1, np = argc > 10 ? atoi(argv[10]) : 0;
    enum { BS = 16, ITERS = 300 };
    if (ctx < 1 || threads < 1 || nkv < 1 || nh % nkv != 0 || HD < 8 || HD > CI_ATTN_MAX_HEAD_DIM || HD % 8 ||
        nl < 1 || nd < 1 || nd > 256 || np < 0 || np > ctx)
        return 2;
    int nb = (ctx + BS - 1) / BS, nt = nd + np;
    size_t rb = ci_kv_row_bytes(type, HD), per_block = (size_t)nkv * BS * rb;
    size_t layer_bytes = (size_t)nd * nb * per_block;
    unsigned char *k = malloc(nl * layer_bytes), *v = malloc(nl * layer_bytes);
    int32_t *table = malloc((size_t)nd * nb * sizeof *table), *pos = malloc(nt * sizeof *pos),
            *tok_seq = malloc(nt * sizeof *tok_seq);
    struct ci_attn_seq *seqs = malloc(nd * sizeof *seqs);
    float *q = malloc((size_t)nt * nh * HD * sizeof *q), *out = malloc((size_t)nt * nh * HD * sizeof *out),
          row[CI_ATTN_MAX_HEAD_DIM];
    double *t = malloc(ITERS * sizeof *t);
    struct ci_threadpool *tp = NULL;
    if (!k || !v || !table || !pos || !tok_seq || !seqs || !q || !out || !t ||
        ci_threadpool_create(threads, &tp, NULL) != CI_OK)
        return 1;
    srand(1);
    for (size_t off = 0; off + rb <= nl * layer_bytes; off += rb) {
        for (int i = 0; i < HD; i++)
            row[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        ci_kv_store_row(type, row, k + off, HD);
        ci_kv_store_row(type, row, v + off, HD);
    }
    for (int i = 0; i < nd * nb; i++)
        table[i] = i;
    for (int i = nd * nb - 1; shuffled && i > 0; i--) { // a pool after churn: the blocks in no order
        int r = rand() % (i + 1), x = table[i];
        table[i] = table[r];
        table[r] = x;
    }
    for (int i = 0; i < nt * nh * HD; i++)
        q[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int d = 0; d < nd; d++) { // the decode tokens, then the prompt chunk
        seqs[d] = (struct ci_attn_seq){table + (size_t)d * nb, nb};
        pos[d] = ctx - 1;
        tok_seq[d] = d;
    }
    for (int i = 0; i < np; i++) {
        pos[nd + i] = i;
        tok_seq[nd + i] = 0;
    }
    struct ci_kv_layer kv = {k, v, type, rb, BS, nkv, HD};
    struct ci_attn_args a = {.n_tokens = nt,
                             .q = q,
                             .pos = pos,
                             .seq = tok_seq,
                             .seqs = seqs,
                             .kv = &kv,
                             .n_head = nh,
                             .scale = 1.0f / sqrtf((float)HD),
                             .out = out};
    for (int i = 0; i < 20; i++)
        ci_attention_paged(tp, &a);
    for (int i = 0; i < ITERS; i++) {
        kv.k = k + (size_t)(i % nl) * layer_bytes;
        kv.v = v + (size_t)(i % nl) * layer_bytes;
        double t0 = now_us();
        ci_attention_paged(tp, &a);
        t[i] = now_us() - t0;
    }
    qsort(t, ITERS, sizeof *t, micro_cmp_double);
    printf("%.1f\n", t[ITERS / 2]);
    ci_threadpool_free(tp);
    free(t);
    free(out);
    free(q);
    free(seqs);
    free(tok_seq);
    free(pos);
    free(table);
    free(v);
    free(k);
    return 0;
}
