/* --tp N / --pp M on the command line (tensor and pipeline parallelism over MPI, README "Past one machine"): joins the MPI world
 * and prepares the load options so that each rank keeps its shard and the ranks check they agree. */
#ifndef CINFER_CLI_TP_H
#define CINFER_CLI_TP_H

#include <stdbool.h>

#include "cinfer.h"
#include "cli/args.h"

/* --tp, --pp and --dist-timeout, as every command that runs a model takes them. */
struct cli_dist {
    int tp, pp;
    float timeout_s;
};
#define CLI_DIST_DEFAULT                                                                                     \
    { 1, 1, 120.0f }
#define CLI_DIST_N_SPECS 3
#define CLI_DIST_SPECS(d)                                                                                    \
    {"--tp",                                                                                                 \
     NULL,                                                                                                   \
     ARG_INT,                                                                                                \
     &(d)->tp,                                                                                               \
     1,                                                                                                      \
     4096,                                                                                                   \
     "N  tensor parallelism over N MPI ranks (each a 1/N of every layer): run under mpirun -np N*M "         \
     "(default 1: none)"},                                                                                   \
        {"--pp",                                                                                             \
         NULL,                                                                                               \
         ARG_INT,                                                                                            \
         &(d)->pp,                                                                                           \
         1,                                                                                                  \
         4096,                                                                                               \
         "M  pipeline parallelism over M stages of contiguous layers (--tp ranks each; a batch goes "        \
         "through "                                                                                          \
         "them in M micro-batches): run under mpirun -np N*M (default 1: none)"},                            \
    {                                                                                                        \
        "--dist-timeout", NULL, ARG_FLOAT, &(d)->timeout_s, 0, 86400,                                        \
            "S  with --tp/--pp: a rank that does not answer within S seconds (inside a step; rank 0 also "   \
            "between steps, idle ticks keeping an idle one alive) ends every rank (0: wait forever; "        \
            "default 120)"                                                                                   \
    }

/* tp * pp > 1: cinfer_tp_init and sets lo->tp, lo->tp_options (a hash of argv[1..argc) without --threads/-t
 * and their values: every rank must get the same command line).  Prints the error and returns false on
 * failure (*tp may then be set: cinfer_tp_end it with ok false).  1 x 1: nothing. */
bool cli_tp_start(const char *cmd, const struct cli_dist *d, int argc, char **argv, struct cinfer_tp **tp,
                  struct cinfer_load_options *lo);

/* Rank 0's summary of the run's communication on stderr. */
void cli_tp_report(const char *cmd, const struct cinfer_tp *tp, int n_layer);

#endif
