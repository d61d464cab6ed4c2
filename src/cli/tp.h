/* --tp N on the command line (tensor parallelism over MPI, README "Past one machine"): joins the MPI world
 * and prepares the load options so that each rank keeps its shard and the ranks check they agree. */
#ifndef CINFER_CLI_TP_H
#define CINFER_CLI_TP_H

#include <stdbool.h>

#include "cinfer.h"

#define CLI_TP_HELP "N  tensor parallelism over N MPI ranks: run under mpirun -np N (default 1: none)"

/* n > 1: cinfer_tp_init(n) and sets lo->tp, lo->tp_options (a hash of argv[1..argc) without --threads/-t and
 * their values: every rank must get the same command line).  Prints the error and returns false on failure
 * (*tp may then be set: cinfer_tp_end it with ok false).  n == 1: nothing. */
bool cli_tp_start(const char *cmd, int n, int argc, char **argv, struct cinfer_tp **tp,
                  struct cinfer_load_options *lo);

/* Rank 0's summary of the run's communication on stderr. */
void cli_tp_report(const char *cmd, const struct cinfer_tp *tp, int n_layer);

#endif
