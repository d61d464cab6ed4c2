#include "engine/dist.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/mpi.h"
#include "core/threadpool.h"
#include "engine/kv_pool.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/pack.h"
#include "model/shard.h"

enum { MSG_OPEN = 1, MSG_STEP, MSG_CLOSE, MSG_STOP, MSG_TICK };
#define DIST_HDR 8

// Point-to-point tags: hidden states to the next stage, and the last stage's back to rank 0.
enum { TAG_FWD = 1, TAG_BACK };

struct dist {
    int rank, size;
    int tp, pp, tp_rank, stage;  // rank = stage * tp + tp_rank
    double timeout_s;            // the watchdog on every wait inside a step (<= 0: none)
    struct ci_mpi_comm *tp_comm; // the stage's tensor-parallel group (NULL: the world, when pp is 1)
    char tp_peers[96];           // its other ranks, for a timeout's message
    char others[32];             // rank 0's receivers of a broadcast, likewise
    bool inited;                 // MPI_Init succeeded
    bool met;           // dist_agree's exchange took place: every rank knows whether the start failed
    bool agreed;        // dist_agree succeeded: the workers are (or will be) in their loop
    atomic_bool broken; // an MPI call failed: the ranks may be out of step (rank 0's ticker may set it)
    bool opened;        // rank 0: a dist_open not yet closed
    int n_blocks;       // of the open pool (rank 0: copies are checked against it)
    // Rank 0: KV block copies since the last step, [n_copies][3]; a failed growth fails the next step.
    int32_t *copies;
    int n_copies, cap_copies;
    bool copies_lost;
    int32_t *buf; // the STEP payload (either side)
    size_t cap_buf;
    // A vocabulary-split head (model/shard.h): n_vocab, each group rank's count and offset of a gather,
    // and rank 0's receive buffer.
    bool head_split;
    int64_t n_vocab;
    int *counts, *displs;
    float *gath;
    size_t cap_gath;
    struct dist_stats stats;
    // Rank 0's idle ticks (timeout_s > 0): a thread sends a TICK header whenever no header went out for
    // tick_s, so a worker waiting for the next step can give rank 0 timeout_s.  lock serialises rank 0's
    // MPI calls between the two threads; in_pass (a forward pass runs, its collectives in flight) keeps
    // the ticker out of the pass's sequence of collectives.
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t ticker;
    bool lock_made, ticking, stop_tick, in_pass;
    double tick_s;
    int64_t last_hdr_ns;
};

static enum ci_status mpi(struct dist *d, enum ci_status s) {
    if (s != CI_OK)
        d->broken = true;
    return s;
}

enum ci_status dist_create(int tp, int pp, double timeout_s, struct dist **out, struct ci_err *err) {
    *out = NULL;
    int n = tp * pp;
    if (!ci_mpi_available())
        return ci_err_set(err, CI_ERR_UNSUPPORTED,
                          "--tp %d --pp %d: this cinfer was built without MPI (install Debian's openmpi-bin "
                          "and libopenmpi-dev, then rebuild)",
                          tp, pp);
    struct dist *d = ci_calloc(1, sizeof *d);
    if (!d)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    *out = d;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) == 0) {
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        if (pthread_mutex_init(&d->lock, NULL) == 0) {
            if (pthread_cond_init(&d->wake, &ca) == 0)
                d->lock_made = true;
            else
                pthread_mutex_destroy(&d->lock);
        }
        pthread_condattr_destroy(&ca);
    }
    if (!d->lock_made)
        return ci_err_set(err, CI_ERR_NOMEM, "tensor parallelism: no mutex for the idle ticks");
    enum ci_status s = ci_mpi_init(&d->rank, &d->size, err);
    d->inited = s == CI_OK;
    if (s != CI_OK)
        return mpi(d, s);
    d->met = true; // every rank sees the same world size: a mismatch is everybody's, ended cleanly
    if (d->size != n)
        return ci_err_set(err, CI_ERR_INVALID,
                          "--tp %d --pp %d needs %d ranks but this MPI world has %d process(es): start it as "
                          "mpirun -np %d cinfer ... --tp %d --pp %d",
                          tp, pp, n, d->size, n, tp, pp);
    d->tp = tp, d->pp = pp, d->timeout_s = timeout_s;
    d->head_split = shard_head_split(&(struct shard_spec){0, tp, 0, pp});
    d->counts = ci_calloc((size_t)tp, sizeof *d->counts);
    d->displs = ci_calloc((size_t)tp, sizeof *d->displs);
    if (!d->counts || !d->displs)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    // A tick well inside the workers' deadline (a loaded machine may run the ticker late), every 5 s at most.
    d->tick_s = timeout_s / 4 < 5 ? timeout_s / 4 : 5;
    d->stage = d->rank / tp, d->tp_rank = d->rank % tp;
    if (d->size == 2)
        snprintf(d->others, sizeof d->others, "rank 1");
    else
        snprintf(d->others, sizeof d->others, "one of ranks 1-%d", d->size - 1);
    int first = d->stage * tp, len = 0;
    d->tp_peers[0] = '\0';
    for (int r = first; r < first + tp; r++) // the others of this rank's group
        if (r != d->rank && len < (int)sizeof d->tp_peers - 16)
            len += snprintf(d->tp_peers + len, sizeof d->tp_peers - (size_t)len, "%srank %d", len ? ", " : "",
                            r);
    // Every rank splits (a collective), and the same way: a failure is everybody's.
    if (pp > 1 && tp > 1 && (s = mpi(d, ci_mpi_split(d->stage, d->tp_rank, &d->tp_comm, err))) != CI_OK)
        return s;
    return CI_OK;
}

int dist_rank(const struct dist *d) {
    return d->rank;
}

bool dist_broken(const struct dist *d) {
    return d->broken;
}

int dist_size(const struct dist *d) {
    return d->size;
}

/* A message's header.  Rank 0 sends one (a step, or an idle tick) at least every tick_s, so a worker gives it
 * timeout_s like any other wait: a rank 0 stopped or dead is caught even while the server idles.  Rank 0
 * calls it with d->lock held. */
static enum ci_status bcast_hdr(struct dist *d, int32_t *h, struct ci_err *err) {
    if (d->rank == 0) {
        d->last_hdr_ns = ci_now_ns();
        return mpi(d, ci_mpi_bcast(h, DIST_HDR * sizeof *h, 0, d->timeout_s, NULL, d->others, err));
    }
    char call[96];
    snprintf(call, sizeof call, "the wait for rank 0's next step or idle tick (sent every %g s)", d->tick_s);
    return mpi(d, ci_mpi_bcast(h, DIST_HDR * sizeof *h, 0, d->timeout_s, call, "rank 0", err));
}

/* Rank 0: a header outside a forward pass (open, close, stop), serialised with the ticker. */
static enum ci_status send_hdr(struct dist *d, int32_t *h, struct ci_err *err) {
    pthread_mutex_lock(&d->lock);
    enum ci_status s = bcast_hdr(d, h, err);
    pthread_mutex_unlock(&d->lock);
    return s;
}

/* Rank 0's ticker thread: a TICK whenever no header went out for tick_s and no pass runs. */
static void *tick_main(void *arg) {
    struct dist *d = arg;
    pthread_mutex_lock(&d->lock);
    while (!d->stop_tick) {
        int64_t due = d->last_hdr_ns + (int64_t)(d->tick_s * 1e9), now = ci_now_ns();
        if (d->in_pass || now < due) {
            if (d->in_pass || due - now > (int64_t)(d->tick_s * 1e9))
                due = now + (int64_t)(d->tick_s * 1e9);
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            int64_t at = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + (due - now);
            ts.tv_sec = (time_t)(at / 1000000000), ts.tv_nsec = (long)(at % 1000000000);
            pthread_cond_timedwait(&d->wake, &d->lock, &ts);
            continue;
        }
        int32_t h[DIST_HDR] = {MSG_TICK};
        struct ci_err e;
        if (bcast_hdr(d, h, &e) != CI_OK) { // broken: the engine's next step fails, dist_end aborts
            CI_LOG_ERR("tensor parallelism: idle tick: %s", e.msg);
            break;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

static void stop_ticker(struct dist *d) {
    if (!d->ticking)
        return;
    pthread_mutex_lock(&d->lock);
    d->stop_tick = true;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->ticker, NULL);
    d->ticking = false;
}

/* What each rank contributes to the start-up agreement. */
struct agree_msg {
    int32_t status; // enum ci_status of its load and shard
    int32_t pad;
    uint64_t fingerprint;
    uint64_t options;
    char msg[200];
};

enum ci_status dist_agree(struct dist *d, struct model *m, const struct ci_err *load_err,
                          uint64_t options_hash, struct ci_err *err) {
    struct agree_msg mine = {0};
    struct ci_err e = {0};
    enum ci_status s = m ? CI_OK : (load_err && load_err->code != CI_OK ? load_err->code : CI_ERR_INTERNAL);
    if (!m)
        snprintf(mine.msg, sizeof mine.msg, "%.199s", load_err ? load_err->msg : "the model did not load");
    if (m) {
        d->n_vocab = m->config.n_vocab;
        mine.fingerprint = model_fingerprint(m);
        struct shard_spec sp = {d->tp_rank, d->tp, d->stage, d->pp};
        if ((s = model_shard(m, &sp, &e)) != CI_OK)
            snprintf(mine.msg, sizeof mine.msg, "%.199s", e.msg);
        else // loaded without reading the file ahead (cinfer_model_load_with): now this rank's part of it
            d->stats.read_ahead = m->read_whole ? m->file_bytes : model_read_ahead(m);
        d->stats.file_bytes = m->file_bytes;
        d->stats.n_vocab = m->config.n_vocab;
        d->stats.head_rows = d->head_split && m->weights.output.data ? m->weights.output.ne[1] : 0;
        d->stats.embd_rows = d->tp > 1 && m->weights.tok_embd.data ? m->weights.tok_embd.ne[1] : 0;
    }
    mine.status = (int32_t)s;
    mine.options = options_hash;
    struct agree_msg *all = ci_calloc((size_t)d->size, sizeof *all);
    if (!all) // the others wait in the allgather: only an abort ends them
        return mpi(d, ci_err_set(err, CI_ERR_NOMEM, "out of memory"));
    if ((s = mpi(d, ci_mpi_allgather(&mine, sizeof mine, all, err))) != CI_OK) {
        ci_free(all);
        return s;
    }
    d->met = true;
    s = CI_OK;
    for (int r = 0; r < d->size && s == CI_OK; r++) {
        all[r].msg[sizeof all[r].msg - 1] = '\0';
        if (all[r].status != CI_OK)
            s = ci_err_set(err, (enum ci_status)all[r].status, "rank %d of %d failed to start: %s", r,
                           d->size, all[r].msg);
        else if (all[r].fingerprint != all[0].fingerprint)
            s = ci_err_set(err, CI_ERR_INVALID,
                           "rank %d loaded a different model than rank 0 (its hyper-parameters or tensor "
                           "table differ): every rank must load the same file",
                           r);
        else if (all[r].options != all[0].options)
            s = ci_err_set(err, CI_ERR_INVALID,
                           "rank %d was started with other options than rank 0: every rank must be given the "
                           "same command line (only --threads may differ)",
                           r);
    }
    ci_free(all);
    d->agreed = s == CI_OK;
    if (d->agreed && d->rank == 0 && d->size > 1 && d->timeout_s > 0) {
        d->last_hdr_ns = ci_now_ns();
        if (pthread_create(&d->ticker, NULL, tick_main, d) != 0) {
            d->broken = true; // the workers are in their loop: dist_end must abort them
            return ci_err_set(err, CI_ERR_NOMEM, "tensor parallelism: could not start the idle tick thread");
        }
        d->ticking = true;
    }
    return s;
}

/* ---- rank 0 ---- */

static void on_copy(void *ctx, int32_t dst, int32_t src, int n_slots) {
    struct dist *d = ctx;
    if (d->n_copies == d->cap_copies) {
        int cap = d->cap_copies ? 2 * d->cap_copies : 64;
        int32_t *grown = ci_realloc(d->copies, (size_t)cap * 3 * sizeof *grown);
        if (!grown) {
            d->copies_lost = true;
            return;
        }
        d->copies = grown;
        d->cap_copies = cap;
    }
    int32_t *c = d->copies + (size_t)d->n_copies++ * 3;
    c[0] = dst, c[1] = src, c[2] = n_slots;
}

static enum ci_status reserve_buf(struct dist *d, size_t n, struct ci_err *err) {
    if (n <= d->cap_buf)
        return CI_OK;
    int32_t *grown = ci_realloc(d->buf, n * sizeof *grown);
    if (!grown)
        return ci_err_set(err, CI_ERR_NOMEM, "tensor parallelism: out of memory for a step of %zu ints", n);
    d->buf = grown;
    d->cap_buf = n;
    return CI_OK;
}

/* A step's payload, right after its header: inside the watchdog. */
static enum ci_status bcast_payload(struct dist *d, size_t n, struct ci_err *err) {
    return mpi(d, ci_mpi_bcast(d->buf, n * sizeof *d->buf, 0, d->timeout_s, NULL,
                               d->rank ? "rank 0 or a rank relaying its broadcast" : d->others, err));
}

static enum ci_status on_begin(void *ctx, const struct fwd_batch *b, struct ci_err *err) {
    struct dist *d = ctx;
    if (d->copies_lost) // the workers' KV would differ from ours from here on
        return mpi(d, ci_err_set(err, CI_ERR_NOMEM, "tensor parallelism: out of memory recording KV copies"));
    int64_t t0 = ci_now_ns();
    size_t n_ids = 0;
    for (int i = 0; i < b->n_seqs; i++)
        n_ids += (size_t)b->seqs[i].n_blocks;
    size_t n = (size_t)d->n_copies * 3 + (size_t)b->n_tokens * 4 + (size_t)b->n_seqs + n_ids;
    enum ci_status s;
    if (n_ids > INT32_MAX || (s = reserve_buf(d, n, err)) != CI_OK)
        return mpi(d, n_ids > INT32_MAX ? ci_err_set(err, CI_ERR_LIMIT, "tensor parallelism: step too large")
                                        : s);
    int32_t *p = d->buf;
    if (d->n_copies) // copies is NULL before the first
        memcpy(p, d->copies, (size_t)d->n_copies * 3 * sizeof *p);
    p += (size_t)d->n_copies * 3;
    memcpy(p, b->token, (size_t)b->n_tokens * sizeof *p);
    memcpy(p + b->n_tokens, b->pos, (size_t)b->n_tokens * sizeof *p);
    memcpy(p + 2 * (size_t)b->n_tokens, b->seq, (size_t)b->n_tokens * sizeof *p);
    p += 3 * (size_t)b->n_tokens;
    for (int i = 0; i < b->n_tokens; i++) // which rows want logits: a split head's ranks compute them too
        *p++ = b->logits[i] != 0;
    for (int i = 0; i < b->n_seqs; i++)
        *p++ = b->seqs[i].n_blocks;
    for (int i = 0; i < b->n_seqs; i++) {
        if (b->seqs[i].n_blocks)
            memcpy(p, b->seqs[i].block_table, (size_t)b->seqs[i].n_blocks * sizeof *p);
        p += b->seqs[i].n_blocks;
    }
    int32_t h[DIST_HDR] = {MSG_STEP, b->n_tokens, b->n_seqs, d->n_copies, (int32_t)n_ids};
    pthread_mutex_lock(&d->lock);
    s = d->broken ? ci_err_set(err, CI_ERR_IO, "tensor parallelism: an earlier MPI call failed")
                  : bcast_hdr(d, h, err);
    d->in_pass = s == CI_OK; // on_end clears it
    pthread_mutex_unlock(&d->lock);
    if (s != CI_OK || (s = bcast_payload(d, n, err)) != CI_OK)
        return s;
    d->n_copies = 0;
    d->stats.n_steps++;
    d->stats.bcast_ns += ci_now_ns() - t0;
    return CI_OK;
}

static void on_end(void *ctx) {
    struct dist *d = ctx;
    pthread_mutex_lock(&d->lock);
    d->in_pass = false;
    pthread_mutex_unlock(&d->lock);
}

static enum ci_status on_allreduce(void *ctx, float *buf, size_t n, struct ci_err *err) {
    struct dist *d = ctx;
    int64_t t0 = ci_now_ns();
    enum ci_status s = mpi(d, ci_mpi_allreduce_sum(d->tp_comm, buf, n, d->timeout_s, d->tp_peers, err));
    d->stats.allreduce_ns += ci_now_ns() - t0;
    d->stats.n_allreduce++;
    d->stats.allreduce_floats += (int64_t)n;
    return s;
}

/* A vocabulary-split head: each rank's part [rows][its slice] to rank 0, which lays the slices side by side
 * in logits [rows][n_vocab]. */
static enum ci_status on_head(void *ctx, const float *part, int rows, float *logits, struct ci_err *err) {
    struct dist *d = ctx;
    const int64_t V = d->n_vocab;
    int64_t off = 0, v0, nv;
    for (int r = 0; r < d->tp; r++) {
        shard_vocab_range(V, r, d->tp, &v0, &nv);
        if ((int64_t)rows * nv > INT32_MAX || off > INT32_MAX)
            return mpi(d, ci_err_set(err, CI_ERR_LIMIT, "tensor parallelism: %d logit rows too many", rows));
        d->counts[r] = (int)((int64_t)rows * nv);
        d->displs[r] = (int)off;
        off += (int64_t)rows * nv;
    }
    if (d->rank == 0 && (size_t)off > d->cap_gath) {
        float *grown = ci_realloc(d->gath, (size_t)off * sizeof *grown);
        if (!grown) // the others wait in the gather: dist_end aborts them
            return mpi(d, ci_err_set(err, CI_ERR_NOMEM, "tensor parallelism: out of memory for the logits"));
        d->gath = grown;
        d->cap_gath = (size_t)off;
    }
    int64_t t0 = ci_now_ns();
    enum ci_status s = mpi(d, ci_mpi_gatherv(d->tp_comm, part, d->counts[d->tp_rank], d->gath, d->counts,
                                             d->displs, d->timeout_s, d->tp_peers, err));
    d->stats.head_ns += ci_now_ns() - t0;
    d->stats.n_head++;
    if (s != CI_OK || d->rank != 0)
        return s;
    for (int r = 0; r < d->tp; r++) {
        shard_vocab_range(V, r, d->tp, &v0, &nv);
        for (int i = 0; i < rows; i++)
            memcpy(logits + (size_t)i * (size_t)V + v0, d->gath + d->displs[r] + (size_t)i * (size_t)nv,
                   (size_t)nv * sizeof *logits);
    }
    return CI_OK;
}

/* ---- pipeline stages (every rank) ---- */

static enum ci_status timed(struct dist *d, int64_t t0, size_t n, enum ci_status s) {
    d->stats.p2p_ns += ci_now_ns() - t0;
    d->stats.p2p_floats += (int64_t)n;
    return mpi(d, s);
}

/* A micro-batch's residual stream from the same tensor-parallel rank of the stage before. */
static enum ci_status on_recv(void *ctx, float *x, size_t n, struct ci_err *err) {
    struct dist *d = ctx;
    int64_t t0 = ci_now_ns();
    int src = (d->stage - 1) * d->tp + d->tp_rank;
    return timed(d, t0, n, ci_mpi_recv(x, n * sizeof *x, src, TAG_FWD, d->timeout_s, err));
}

/* To the same rank of the next stage; from the last stage, its group's rank 0 to rank 0 (the head's). */
static enum ci_status on_send(void *ctx, float *x, size_t n, struct ci_err *err) {
    struct dist *d = ctx;
    if (d->stage == d->pp - 1 && d->tp_rank != 0)
        return CI_OK;
    int64_t t0 = ci_now_ns();
    bool last = d->stage == d->pp - 1;
    int dest = last ? 0 : (d->stage + 1) * d->tp + d->tp_rank;
    enum ci_status s = ci_mpi_isend(x, n * sizeof *x, dest, last ? TAG_BACK : TAG_FWD, err);
    // To the next stage the send completes before this stage goes on: MPI moves a large message only while
    // both sides call into it, and this rank computes the next micro-batch without calling MPI, so a send
    // left pending would reach the next stage only at the flush, after that computation (no overlap).  The
    // next stage is idle in its receive by then in a balanced pipeline.  Rank 0 takes the last stage's output
    // only after its own micro-batches: that send stays pending to the flush.
    if (s == CI_OK && !last)
        s = ci_mpi_wait_sends(d->timeout_s, err);
    return timed(d, t0, 0, s);
}

static enum ci_status on_flush(void *ctx, float *x, size_t n, struct ci_err *err) {
    (void)x, (void)n;
    struct dist *d = ctx;
    int64_t t0 = ci_now_ns();
    return timed(d, t0, 0, ci_mpi_wait_sends(d->timeout_s, err));
}

static enum ci_status on_gather(void *ctx, float *x, size_t n, struct ci_err *err) {
    struct dist *d = ctx;
    int64_t t0 = ci_now_ns();
    return timed(d, t0, n, ci_mpi_recv(x, n * sizeof *x, (d->pp - 1) * d->tp, TAG_BACK, d->timeout_s, err));
}

/* What this rank's forward pass does with the others (begin: rank 0's step broadcast). */
static struct fwd_dist rank_fd(struct dist *d, bool begin) {
    struct fwd_dist fd = {.ctx = d,
                          .allreduce = d->tp > 1 ? on_allreduce : NULL,
                          .begin = begin ? on_begin : NULL,
                          .end = begin ? on_end : NULL,
                          .head = d->head_split ? on_head : NULL};
    if (d->pp > 1) {
        fd.n_micro = d->pp;
        fd.recv = d->stage > 0 ? on_recv : NULL;
        fd.send = on_send;
        fd.flush = on_flush;
        fd.gather = d->rank == 0 ? on_gather : NULL;
    }
    return fd;
}

enum ci_status dist_open(struct dist *d, struct forward *f, struct kv_pool *pool,
                         const struct kv_pool_params *kp, int max_tokens, int max_rows, int n_ctx,
                         struct ci_err *err) {
    if (d->rank != 0 || d->opened || d->broken)
        return ci_err_set(err, CI_ERR_INTERNAL, "tensor parallelism: dist_open on rank %d (open %d)", d->rank,
                          d->opened);
    int32_t h[DIST_HDR] = {MSG_OPEN,   kp->block_size, kp->n_blocks, (int32_t)kp->type,
                           max_tokens, n_ctx,          max_rows};
    enum ci_status s = send_hdr(d, h, err);
    if (s != CI_OK)
        return s;
    d->opened = true;
    d->n_copies = 0;
    d->copies_lost = false;
    struct fwd_dist fd = rank_fd(d, true);
    forward_set_dist(f, &fd);
    kv_pool_set_copy_hook(pool, on_copy, d);
    return CI_OK;
}

void dist_close(struct dist *d) {
    if (!d || !d->opened)
        return;
    d->opened = false;
    int32_t h[DIST_HDR] = {MSG_CLOSE};
    struct ci_err e;
    if (!d->broken)
        send_hdr(d, h, &e);
}

/* ---- ranks > 0 ---- */

struct worker {
    struct ci_threadpool *tp;
    struct kv_pool *pool;
    struct forward *fwd;
    struct ci_kv_layer *layers;
    uint8_t *want;            // [max_tokens] the rows that want logits (zeros unless the head is split)
    struct ci_attn_seq *seqs; // [max_tokens]
    int max_tokens, n_blocks, block_size;
};

static void worker_close(struct worker *w) {
    forward_free(w->fwd);
    kv_pool_free(w->pool);
    ci_free(w->layers);
    ci_free(w->want);
    ci_free(w->seqs);
    w->fwd = NULL;
    w->pool = NULL;
    w->layers = NULL;
    w->want = NULL;
    w->seqs = NULL;
}

static enum ci_status worker_open(struct dist *d, struct worker *w, const struct model *m, const int32_t *h,
                                  struct ci_err *err) {
    worker_close(w);
    const struct model_config *c = &m->config;
    struct kv_pool_params kp = {c->n_layer, c->n_kv_head, c->head_dim, h[1], h[2], (uint32_t)h[3]};
    w->max_tokens = h[4];
    w->n_blocks = h[2];
    w->block_size = h[1];
    enum ci_status s;
    if (w->max_tokens < 1 || h[6] < 1 || h[6] > w->max_tokens)
        return ci_err_set(err, CI_ERR_INVALID, "tensor parallelism: OPEN for %d tokens, %d logit rows",
                          w->max_tokens, h[6]);
    if ((s = kv_pool_create(&kp, &w->pool, err)) ||
        (s = forward_create(m, w->max_tokens, h[6], w->tp, &w->fwd, err)))
        return s;
    forward_set_n_ctx(w->fwd, h[5]);
    struct fwd_dist fd = rank_fd(d, false);
    forward_set_dist(w->fwd, &fd);
    w->layers = ci_calloc((size_t)c->n_layer, sizeof *w->layers);
    w->want = ci_calloc((size_t)w->max_tokens, 1);
    w->seqs = ci_calloc((size_t)w->max_tokens, sizeof *w->seqs);
    if (!w->layers || !w->want || !w->seqs)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    for (int il = 0; il < c->n_layer; il++)
        kv_pool_layer(w->pool, il, &w->layers[il]);
    return CI_OK;
}

static bool block_ok(const struct worker *w, int32_t b) {
    return b >= -1 && b < w->n_blocks; // -1: a hole of a sliding-window table
}

static enum ci_status worker_step(struct dist *d, struct worker *w, const int32_t *h, struct ci_err *err) {
    int n_tok = h[1], n_seqs = h[2], n_copies = h[3], n_ids = h[4];
    if (!w->fwd || n_tok < 1 || n_tok > w->max_tokens || n_seqs < 1 || n_seqs > n_tok || n_copies < 0 ||
        n_ids < 0)
        return ci_err_set(err, CI_ERR_INVALID,
                          "tensor parallelism: a malformed step (%d tokens, %d sequences)", n_tok, n_seqs);
    size_t n = (size_t)n_copies * 3 + (size_t)n_tok * 4 + (size_t)n_seqs + (size_t)n_ids;
    enum ci_status s;
    if ((s = reserve_buf(d, n, err)) != CI_OK || (s = bcast_payload(d, n, err)))
        return s;
    const int32_t *p = d->buf;
    for (int i = 0; i < n_copies; i++, p += 3) {
        if (p[0] < 0 || p[0] >= w->n_blocks || p[1] < 0 || p[1] >= w->n_blocks || p[2] < 0 ||
            p[2] > w->block_size)
            return ci_err_set(err, CI_ERR_INVALID, "tensor parallelism: a malformed KV copy");
        kv_pool_copy_block(w->pool, p[0], p[1], p[2]);
    }
    const int32_t *tok = p, *pos = p + n_tok, *seq = p + 2 * (size_t)n_tok;
    p += 3 * (size_t)n_tok;
    for (int i = 0; i < n_tok; i++) // the rows a split head computes (check_batch bounds their count)
        w->want[i] = d->head_split && p[i];
    p += n_tok;
    const int32_t *counts = p, *ids = p + n_seqs;
    int64_t used = 0;
    for (int i = 0; i < n_seqs; i++) {
        if (counts[i] < 0 || used + counts[i] > n_ids)
            return ci_err_set(err, CI_ERR_INVALID, "tensor parallelism: malformed block tables");
        w->seqs[i].block_table = ids + used;
        w->seqs[i].n_blocks = counts[i];
        used += counts[i];
    }
    for (int64_t i = 0; i < used; i++)
        if (!block_ok(w, ids[i]))
            return ci_err_set(err, CI_ERR_INVALID, "tensor parallelism: block id %d out of range", ids[i]);
    struct fwd_batch b = {.n_tokens = n_tok,
                          .token = tok,
                          .pos = pos,
                          .seq = seq,
                          .logits = w->want,
                          .n_seqs = n_seqs,
                          .seqs = w->seqs};
    const float *logits;
    int rows;
    return forward_batch(w->fwd, &b, w->layers, &logits, &rows, err);
}

enum ci_status dist_worker_run(struct dist *d, const struct model *m, int n_threads, struct ci_err *err) {
    struct worker w = {0};
    enum ci_status s = ci_threadpool_create(n_threads, &w.tp, err);
    // Pack the shard now, while rank 0 packs its own, not at the first OPEN: there rank 0's first step would
    // wait for it.
    if (s == CI_OK)
        model_pack_weights(m, w.tp);
    while (s == CI_OK) {
        int32_t h[DIST_HDR];
        if ((s = bcast_hdr(d, h, err)) != CI_OK)
            break;
        if (h[0] == MSG_STOP)
            break;
        else if (h[0] == MSG_OPEN)
            s = worker_open(d, &w, m, h, err);
        else if (h[0] == MSG_STEP)
            s = worker_step(d, &w, h, err);
        else if (h[0] == MSG_CLOSE)
            worker_close(&w);
        else if (h[0] == MSG_TICK)
            continue; // rank 0 is alive and idle
        else
            s = ci_err_set(err, CI_ERR_INVALID, "tensor parallelism: unknown message %d", h[0]);
    }
    if (s != CI_OK)
        d->broken = true; // rank 0 may be waiting on this rank in a collective
    worker_close(&w);
    ci_threadpool_free(w.tp);
    return s;
}

void dist_get_stats(const struct dist *d, struct dist_stats *out) {
    *out = d->stats;
}

void dist_end(struct dist *d, bool ok) {
    if (!d)
        return;
    // A failure the others cannot know of (before the agreement, or on a worker after it) leaves them
    // waiting on a collective: only an abort ends them.
    stop_ticker(d); // before any other MPI call: one thread at a time
    bool unseen = !ok && (!d->met || (d->agreed && d->rank != 0));
    if (d->inited && d->size > 1 && (d->broken || unseen)) {
        CI_LOG_ERR("tensor parallelism: rank %d ends every rank of the job", d->rank);
        ci_mpi_abort(1);
    }
    if (d->rank == 0 && d->agreed && d->inited) {
        dist_close(d);
        int32_t h[DIST_HDR] = {MSG_STOP};
        struct ci_err e;
        if (bcast_hdr(d, h, &e) != CI_OK)
            ci_mpi_abort(1);
    }
    ci_mpi_comm_free(d->tp_comm);
    ci_mpi_finalize();
    ci_free(d->copies);
    ci_free(d->buf);
    ci_free(d->counts);
    ci_free(d->displs);
    ci_free(d->gath);
    if (d->lock_made) {
        pthread_mutex_destroy(&d->lock);
        pthread_cond_destroy(&d->wake);
    }
    ci_free(d);
}
