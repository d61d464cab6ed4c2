/* The thin MPI layer of tensor parallelism: the one file that includes <mpi.h> (standard MPI C API only, so
 * Open MPI and MPICH both work).  Every call uses MPI_COMM_WORLD with MPI_ERRORS_RETURN set, so a failed
 * collective comes back as a status (CI_ERR_IO naming the call and MPI's message) instead of aborting or
 * hanging silently.  Built without MPI (the Makefile found no mpicc), ci_mpi_available() is false and every
 * other call returns CI_ERR_UNSUPPORTED.
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
/* buf[0..bytes) of rank root to every rank. */
enum ci_status ci_mpi_bcast(void *buf, size_t bytes, int root, struct ci_err *err);
/* buf[0..n) summed over the ranks (float32), the sum on every rank. */
enum ci_status ci_mpi_allreduce_sum(float *buf, size_t n, struct ci_err *err);
/* Each rank's mine[0..bytes) into all[rank * bytes ...) on every rank. */
enum ci_status ci_mpi_allgather(const void *mine, size_t bytes, void *all, struct ci_err *err);

#endif
