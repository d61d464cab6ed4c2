#include "core/mpi.h"

#ifdef CINFER_MPI

#include <limits.h>
#include <mpi.h>

static bool inited;

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
}

void ci_mpi_abort(int code) {
    if (inited)
        MPI_Abort(MPI_COMM_WORLD, code);
}

// MPI counts are ints: large buffers go in pieces.
#define CHUNK ((size_t)1 << 30)

enum ci_status ci_mpi_bcast(void *buf, size_t bytes, int root, struct ci_err *err) {
    for (size_t off = 0; off < bytes; off += CHUNK) {
        size_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
        int rc = MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return fail(err, "MPI_Bcast", rc);
    }
    return CI_OK;
}

enum ci_status ci_mpi_allreduce_sum(float *buf, size_t n, struct ci_err *err) {
    for (size_t off = 0; off < n; off += CHUNK / sizeof(float)) {
        size_t k = n - off < CHUNK / sizeof(float) ? n - off : CHUNK / sizeof(float);
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return fail(err, "MPI_Allreduce", rc);
    }
    return CI_OK;
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

enum ci_status ci_mpi_bcast(void *buf, size_t bytes, int root, struct ci_err *err) {
    (void)buf, (void)bytes, (void)root;
    return none(err);
}

enum ci_status ci_mpi_allreduce_sum(float *buf, size_t n, struct ci_err *err) {
    (void)buf, (void)n;
    return none(err);
}

enum ci_status ci_mpi_allgather(const void *mine, size_t bytes, void *all, struct ci_err *err) {
    (void)mine, (void)bytes, (void)all;
    return none(err);
}

#endif
