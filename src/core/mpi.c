#include "core/mpi.h"

#ifdef CINFER_MPI

#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/mem.h"

static bool inited;
static MPI_Request *sends; // ci_mpi_isend's pending sends (below), to ranks send_dest
static int *send_dest;
static int n_sends, cap_sends;

bool ci_mpi_available(void) {
    return true;
}

/* MPI's error string for rc, in err with the call's name. */
static enum ci_status fail(struct ci_err *err, const char *call, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        len = 0;
    msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    return ci_err_set(err, CI_ERR_IO, "MPI: %s failed: %s", call, len ? msg : "(no message)");
}

enum ci_status ci_mpi_init(int *rank, int *size, struct ci_err *err) {
    int rc, provided = 0;
    if (!inited) {
        if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided)) != MPI_SUCCESS)
            return fail(err, "MPI_Init_thread", rc);
        inited = true;
        if ((rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) != MPI_SUCCESS)
            return fail(err, "MPI_Comm_set_errhandler", rc);
        if (provided < MPI_THREAD_SERIALIZED)
            return ci_err_set(err, CI_ERR_UNSUPPORTED,
                              "MPI: the library gives thread level %d, cinfer needs MPI_THREAD_SERIALIZED",
                              provided);
    }
    if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, rank)) != MPI_SUCCESS)
        return fail(err, "MPI_Comm_rank", rc);
    if ((rc = MPI_Comm_size(MPI_COMM_WORLD, size)) != MPI_SUCCESS)
        return fail(err, "MPI_Comm_size", rc);
    return CI_OK;
}

void ci_mpi_finalize(void) {
    if (inited)
        MPI_Finalize();
    inited = false;
    ci_free(sends);
    ci_free(send_dest);
    sends = NULL;
    send_dest = NULL;
    n_sends = cap_sends = 0;
}

void ci_mpi_abort(int code) {
    if (inited)
        MPI_Abort(MPI_COMM_WORLD, code);
}

// MPI counts are ints: large buffers go in pieces.
#define CHUNK ((size_t)1 << 30)

struct ci_mpi_comm {
    MPI_Comm comm;
};

enum ci_status ci_mpi_split(int color, int key, struct ci_mpi_comm **out, struct ci_err *err) {
    *out = NULL;
    struct ci_mpi_comm *c = ci_calloc(1, sizeof *c);
    if (!c)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    int rc = MPI_Comm_split(MPI_COMM_WORLD, color, key, &c->comm);
    if (rc != MPI_SUCCESS) {
        ci_free(c);
        return fail(err, "MPI_Comm_split", rc);
    }
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    *out = c;
    return CI_OK;
}

void ci_mpi_comm_free(struct ci_mpi_comm *c) {
    if (!c)
        return;
    if (inited)
        MPI_Comm_free(&c->comm);
    ci_free(c);
}

static MPI_Comm comm_of(const struct ci_mpi_comm *c) {
    return c ? c->comm : MPI_COMM_WORLD;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Waits for r by polling: a short spin (an all-reduce inside a step completes in microseconds), then sleeps
 * growing by 20 us to 1 ms (an idle wait costs no CPU), until timeout_s (<= 0: none).  On a timeout the request is
 * left pending: the ranks are out of step and the caller ends the job. */
static enum ci_status wait_req(MPI_Request *r, double timeout_s, const char *call, const char *peers,
                               struct ci_err *err) {
    int64_t t0 = now_ns(), limit = timeout_s > 0 ? (int64_t)(timeout_s * 1e9) : 0;
    long nap_ns = 0;
    for (;;) {
        int done = 0, rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return fail(err, call, rc);
        if (done)
            return CI_OK;
        // A spin of 200 us (measured on 2 oversubscribed cores: about as fast as a blocking MPI_Wait, while
        // sched_yield between tests was 5-7x slower under load), then naps.
        if (now_ns() - t0 < 200000)
            continue;
        if (limit && now_ns() - t0 > limit) {
            int me = 0;
            MPI_Comm_rank(MPI_COMM_WORLD, &me);
            return ci_err_set(err, CI_ERR_IO,
                              "rank %d: %s did not complete within %g s: %s hung, stopped or too slow "
                              "(--dist-timeout)",
                              me, call, timeout_s, peers && *peers ? peers : "another rank");
        }
        nap_ns = nap_ns < 1000000 ? nap_ns + 20000 : 1000000;
        struct timespec ts = {0, nap_ns};
        nanosleep(&ts, NULL);
    }
}

enum ci_status ci_mpi_bcast(void *buf, size_t bytes, int root, double timeout_s, const char *call,
                            const char *peers, struct ci_err *err) {
    for (size_t off = 0; off < bytes; off += CHUNK) {
        size_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
        MPI_Request r;
        int rc = MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD, &r);
        if (rc != MPI_SUCCESS)
            return fail(err, "MPI_Ibcast", rc);
        enum ci_status s = wait_req(&r, timeout_s, call ? call : "MPI_Bcast", peers, err);
        if (s != CI_OK)
            return s;
    }
    return CI_OK;
}

enum ci_status ci_mpi_allreduce_sum(struct ci_mpi_comm *c, float *buf, size_t n, double timeout_s,
                                    const char *peers, struct ci_err *err) {
    for (size_t off = 0; off < n; off += CHUNK / sizeof(float)) {
        size_t k = n - off < CHUNK / sizeof(float) ? n - off : CHUNK / sizeof(float);
        MPI_Request r;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM, comm_of(c), &r);
        if (rc != MPI_SUCCESS)
            return fail(err, "MPI_Iallreduce", rc);
        enum ci_status s = wait_req(&r, timeout_s, "MPI_Allreduce", peers, err);
        if (s != CI_OK)
            return s;
    }
    return CI_OK;
}

enum ci_status ci_mpi_gatherv(struct ci_mpi_comm *c, const float *mine, int n, float *all, const int *counts,
                              const int *displs, double timeout_s, const char *peers, struct ci_err *err) {
    MPI_Request r;
    int rc = MPI_Igatherv(mine, n, MPI_FLOAT, all, counts, displs, MPI_FLOAT, 0, comm_of(c), &r);
    if (rc != MPI_SUCCESS)
        return fail(err, "MPI_Igatherv", rc);
    return wait_req(&r, timeout_s, "MPI_Gatherv of the logits", peers, err);
}

enum ci_status ci_mpi_isend(const void *buf, size_t bytes, int dest, int tag, struct ci_err *err) {
    if (bytes > INT_MAX)
        return ci_err_set(err, CI_ERR_LIMIT, "MPI: a message of %zu bytes", bytes);
    if (n_sends == cap_sends) {
        int cap = cap_sends ? 2 * cap_sends : 16;
        MPI_Request *grown = ci_realloc(sends, (size_t)cap * sizeof *grown);
        if (grown)
            sends = grown;
        int *grown_dest = grown ? ci_realloc(send_dest, (size_t)cap * sizeof *grown_dest) : NULL;
        if (!grown_dest)
            return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
        send_dest = grown_dest;
        cap_sends = cap;
    }
    send_dest[n_sends] = dest;
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, dest, tag, MPI_COMM_WORLD, &sends[n_sends]);
    if (rc != MPI_SUCCESS)
        return fail(err, "MPI_Isend", rc);
    n_sends++;
    return CI_OK;
}

enum ci_status ci_mpi_wait_sends(double timeout_s, struct ci_err *err) {
    enum ci_status s = CI_OK;
    for (int i = 0; i < n_sends && s == CI_OK; i++) {
        char call[64], peer[32];
        snprintf(call, sizeof call, "MPI_Send of hidden states to rank %d", send_dest[i]);
        snprintf(peer, sizeof peer, "rank %d", send_dest[i]);
        s = wait_req(&sends[i], timeout_s, call, peer, err);
    }
    n_sends = 0;
    return s;
}

enum ci_status ci_mpi_recv(void *buf, size_t bytes, int src, int tag, double timeout_s, struct ci_err *err) {
    if (bytes > INT_MAX)
        return ci_err_set(err, CI_ERR_LIMIT, "MPI: a message of %zu bytes", bytes);
    MPI_Request r;
    int rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, src, tag, MPI_COMM_WORLD, &r);
    if (rc != MPI_SUCCESS)
        return fail(err, "MPI_Irecv", rc);
    char call[64], peers[32];
    snprintf(call, sizeof call, "MPI_Recv of hidden states from rank %d", src);
    snprintf(peers, sizeof peers, "rank %d", src);
    return wait_req(&r, timeout_s, call, peers, err);
}

enum ci_status ci_mpi_allgather(const void *mine, size_t bytes, void *all, struct ci_err *err) {
    if (bytes > INT_MAX)
        return ci_err_set(err, CI_ERR_INVALID, "MPI: allgather of %zu bytes", bytes);
    int rc = MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? CI_OK : fail(err, "MPI_Allgather", rc);
}

#else

static enum ci_status none(struct ci_err *err) {
    return ci_err_set(err, CI_ERR_UNSUPPORTED,
                      "this cinfer was built without MPI (install Open MPI, e.g. Debian's openmpi-bin and "
                      "libopenmpi-dev, and rebuild)");
}

bool ci_mpi_available(void) {
    return false;
}

enum ci_status ci_mpi_init(int *rank, int *size, struct ci_err *err) {
    *rank = 0;
    *size = 1;
    return none(err);
}

void ci_mpi_finalize(void) {
}

void ci_mpi_abort(int code) {
    (void)code;
}

enum ci_status ci_mpi_split(int color, int key, struct ci_mpi_comm **out, struct ci_err *err) {
    (void)color, (void)key;
    *out = NULL;
    return none(err);
}

void ci_mpi_comm_free(struct ci_mpi_comm *c) {
    (void)c;
}

enum ci_status ci_mpi_bcast(void *buf, size_t bytes, int root, double timeout_s, const char *call,
                            const char *peers, struct ci_err *err) {
    (void)buf, (void)bytes, (void)root, (void)timeout_s, (void)call, (void)peers;
    return none(err);
}

enum ci_status ci_mpi_allreduce_sum(struct ci_mpi_comm *c, float *buf, size_t n, double timeout_s,
                                    const char *peers, struct ci_err *err) {
    (void)c, (void)buf, (void)n, (void)timeout_s, (void)peers;
    return none(err);
}

enum ci_status ci_mpi_gatherv(struct ci_mpi_comm *c, const float *mine, int n, float *all, const int *counts,
                              const int *displs, double timeout_s, const char *peers, struct ci_err *err) {
    (void)c, (void)mine, (void)n, (void)all, (void)counts, (void)displs, (void)timeout_s, (void)peers;
    return none(err);
}

enum ci_status ci_mpi_isend(const void *buf, size_t bytes, int dest, int tag, struct ci_err *err) {
    (void)buf, (void)bytes, (void)dest, (void)tag;
    return none(err);
}

enum ci_status ci_mpi_wait_sends(double timeout_s, struct ci_err *err) {
    (void)timeout_s;
    return none(err);
}

enum ci_status ci_mpi_recv(void *buf, size_t bytes, int src, int tag, double timeout_s, struct ci_err *err) {
    (void)buf, (void)bytes, (void)src, (void)tag, (void)timeout_s;
    return none(err);
}

enum ci_status ci_mpi_allgather(const void *mine, size_t bytes, void *all, struct ci_err *err) {
    (void)mine, (void)bytes, (void)all;
    return none(err);
}

#endif
