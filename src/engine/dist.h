/* Tensor and pipeline parallelism over MPI (the engine's side of it; the MPI calls are core/mpi.h, the shards
 * model/shard.h).  Pipeline (pp > 1): world rank r is tensor-parallel rank r % tp of stage r / tp; every rank
 * gets each step's broadcast, the all-reduces run within a stage's group, and the forward pass moves each
 * micro-batch's hidden states stage to stage point to point (struct fwd_dist's recv/send/flush/gather), the
 * last stage's back to rank 0 (the head's).  Every wait inside a step has the watchdog's deadline.
 * Tensor parallelism:  Every rank loads the same file and keeps its shard; rank 0 runs everything the engine does
 * (scheduling, the prefix cache, sampling, HTTP above it) and, for each forward pass, broadcasts the batch
 * (token ids, positions, sequence indices, block tables) and the KV block copies made since the last one
 * (copy-on-write); ranks > 0 sit in dist_worker_run and run the same forward pass on their shard, each over
 * its own KV pool (its own heads), until rank 0 says stop.  The forward pass sums the shards' partial
 * outputs with two all-reduces per layer (struct fwd_dist).  Without stages the head is split by vocabulary
 * (model/shard.h): each rank computes its slice of every logit row, rank 0 gathers them (MPI_Gatherv).  Logits
 * exist on rank 0 only.
 *
 * Messages (MPI_Bcast from rank 0): a header of DIST_HDR int32 {kind, ...}, then for STEP one int32 payload.
 *   OPEN  {block_size, n_blocks, kv_type, max_tokens, n_ctx, max_rows}: a forward pass and KV pool to make
 *         (they replace any earlier ones);
 *   STEP  {n_tokens, n_seqs, n_copies, n_ids}: payload [n_copies][3] (dst, src, slots), token[n_tokens],
 *         pos[n_tokens], seq[n_tokens], logits[n_tokens] (1: the row wants logits), blocks[n_seqs], ids[n_ids]
 *         (the block tables one after another);
 *   CLOSE: free them;  STOP: leave the loop;  TICK: nothing (rank 0 is alive: with a timeout, rank 0's ticker
 *         thread sends one whenever no header went out for timeout/4 s, at most 5 s, outside forward passes, so
 *         workers wait for each header with the watchdog's deadline and an idle server never trips it).
 *
 * Failures: an MPI call that fails marks the world broken and comes back as a status; dist_end then ends
 * every process (MPI_Abort), as it does for any failure on a worker, so no rank waits forever on a
 * collective.  Failures every rank sees alike (the start-up agreement) end each rank cleanly. */
#ifndef CINFER_ENGINE_DIST_H
#define CINFER_ENGINE_DIST_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

struct dist;
struct model;
struct forward;
struct kv_pool;
struct kv_pool_params;

/* Joins the MPI world (MPI_Init) as one of tp x pp ranks: rank = stage * tp + tp_rank (stage of pp, tp_rank
 * of the stage's tensor-parallel group).  timeout_s (> 0) bounds every wait inside a step (the watchdog:
 * a rank hung longer fails the step, naming whom it waited for, and the job ends); <= 0: none.
 * CI_ERR_INVALID when the world has another size, CI_ERR_UNSUPPORTED without MPI.  On failure *out may still
 * be set: dist_end it. */
enum ci_status dist_create(int tp, int pp, double timeout_s, struct dist **out, struct ci_err *err);
int dist_rank(const struct dist *d);
int dist_size(const struct dist *d);

/* Start-up, on every rank, right after its load (m NULL when the load failed with load_err): shards m to
 * this rank's part and checks with every other rank that all loaded, sharded, and hold the same model (its
 * fingerprint) with the same options (options_hash, e.g. of the command line).  The first problem, naming
 * the rank, on every rank alike. */
enum ci_status dist_agree(struct dist *d, struct model *m, const struct ci_err *load_err,
                          uint64_t options_hash, struct ci_err *err);

/* Rank 0: the workers make a forward pass and KV pool like these; f (over pool) becomes the shard that
 * broadcasts each batch, and pool's block copies are repeated on the workers.  One open at a time. */
enum ci_status dist_open(struct dist *d, struct forward *f, struct kv_pool *pool,
                         const struct kv_pool_params *kp, int max_tokens, int max_rows, int n_ctx,
                         struct ci_err *err);
/* Rank 0: the workers free what dist_open made them make (nothing if the world is broken). */
void dist_close(struct dist *d);

/* True once an MPI call failed (or timed out): the ranks are out of step, dist_end ends them all. */
bool dist_broken(const struct dist *d);

/* Ranks > 0: the worker loop over m (sharded by dist_agree), with n_threads kernel threads, until STOP. */
enum ci_status dist_worker_run(struct dist *d, const struct model *m, int n_threads, struct ci_err *err);

struct dist_stats {
    int64_t n_steps;     // batches broadcast (rank 0)
    int64_t n_allreduce; // all-reduces run
    int64_t allreduce_ns;
    int64_t allreduce_floats;
    int64_t bcast_ns;
    int64_t p2p_ns;      // pipeline: time in sends and receives of hidden states (waiting included)
    int64_t p2p_floats;  // hidden-state floats received
    int64_t head_rows;   // a vocabulary-split head (else 0): this rank's rows of its n_vocab
    int64_t embd_rows;   // a vocabulary-split token embedding (else 0): this rank's rows
    uint64_t read_ahead; // the bytes of this rank's shard read ahead (model_read_ahead)
    uint64_t file_bytes; // the whole file's
    int64_t n_vocab;
    int64_t n_head;  // the gathers of its logits
    int64_t head_ns; // time in them
};
void dist_get_stats(const struct dist *d, struct dist_stats *out);

/* Leaves the world: rank 0 tells the workers to stop (after a successful agreement); then MPI_Finalize.
 * ok false on a worker, or a broken world anywhere: MPI_Abort ends every process.  NULL: nothing. */
void dist_end(struct dist *d, bool ok);

#endif
