/* The thin MPI layer of tensor parallelism: the one file that includes <mpi.h> (standard MPI C API only, so
 * Open MPI and MPICH both work).  Every call uses MPI_COMM_WORLD with MPI_ERRORS_RETURN set, so a failed
 * collective comes back as a status (CI_ERR_IO naming the call and MPI's message) instead of aborting or
 * hanging silently.  Built without MPI (the Makefile found no mpicc), ci_mpi_available() is false and every
 * other call returns CI_ERR_UNSUPPORTED.
 *
 * Watchdog: the calls of a running step take timeout_s (> 0) and wait for completion by polling nonblocking
 * MPI (MPI_Test between short sleeps), so a rank that is alive but hung (stopped, deadlocked, swapping) turns
 * into CI_ERR_IO naming the call and the ranks it waited for, instead of a wait without end.  timeout_s <= 0
 * waits as long as it takes.
 *
 * Threads: initialised with MPI_THREAD_SERIALIZED; the caller makes sure one thread at a time calls in
 * (the engine thread during a run, the main thread before and after). */
#ifndef CINFER_CORE_MPI_H
#define CINFER_CORE_MPI_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

bool ci_mpi_available(void);
/* MPI_Init_thread (once per process); *rank and *size of MPI_COMM_WORLD. */
enum ci_status ci_mpi_init(int *rank, int *size, struct ci_err *err);
/* MPI_Finalize when initialised (nothing otherwise). */
void ci_mpi_finalize(void);
/* Ends every process of the job (MPI_Abort): for a failure that leaves the ranks out of step. */
void ci_mpi_abort(int code);
/* A group of ranks (MPI_Comm_split of the world: those of one color, ordered by key); NULL is the world. */
struct ci_mpi_comm;
enum ci_status ci_mpi_split(int color, int key, struct ci_mpi_comm **out, struct ci_err *err);
void ci_mpi_comm_free(struct ci_mpi_comm *c);

/* buf[0..bytes) of world rank root to every rank.  call (NULL: "MPI_Bcast") and peers (the ranks waited for)
 * name the wait in a timeout's message. */
enum ci_status ci_mpi_bcast(void *buf, size_t bytes, int root, double timeout_s, const char *call,
                            const char *peers, struct ci_err *err);
/* buf[0..n) summed over the ranks of c (float32), the sum on each of them. */
enum ci_status ci_mpi_allreduce_sum(struct ci_mpi_comm *c, float *buf, size_t n, double timeout_s,
                                    const char *peers, struct ci_err *err);
/* mine[0..n) of each rank of c to its rank 0, into all[displs[r] .. + counts[r]) for rank r (all, counts and
 * displs are read on rank 0 only). */
enum ci_status ci_mpi_gatherv(struct ci_mpi_comm *c, const float *mine, int n, float *all, const int *counts,
                              const int *displs, double timeout_s, const char *peers, struct ci_err *err);
/* Point to point between world ranks (bytes < 2 GiB).  ci_mpi_isend starts a send of buf, which must stay
 * untouched until ci_mpi_wait_sends has waited for every send started (they are kept in this file). */
enum ci_status ci_mpi_isend(const void *buf, size_t bytes, int dest, int tag, struct ci_err *err);
enum ci_status ci_mpi_wait_sends(double timeout_s, struct ci_err *err);
enum ci_status ci_mpi_recv(void *buf, size_t bytes, int src, int tag, double timeout_s, struct ci_err *err);
/* Each rank's mine[0..bytes) into all[rank * bytes ...) on every rank. */
enum ci_status ci_mpi_allgather(const void *mine, size_t bytes, void *all, struct ci_err *err);

#endif
