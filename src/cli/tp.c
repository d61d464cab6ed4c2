#include "cli/tp.h"

#include <stdio.h>
#include <string.h>

#include "core/hash.h"

bool cli_tp_start(const char *cmd, const struct cli_dist *d, int argc, char **argv, struct cinfer_tp **tp,
                  struct cinfer_load_options *lo) {
    *tp = NULL;
    if (d->tp * d->pp <= 1)
        return true;
    struct cinfer_error err = {0};
    if (cinfer_tp_init(d->tp, d->pp, d->timeout_s, tp, &err) != CINFER_OK) {
        fprintf(stderr, "cinfer %s: %s\n", cmd, err.message);
        return false;
    }
    uint64_t h = 0x74702d6f707473u;
    for (int i = 1; i < argc; i++) { // not argv[0]: the binary may sit at another path on another machine
        const char *a = argv[i];
        if (!strcmp(a, "--threads") || !strcmp(a, "-t")) { // the value that follows may differ too
            i++;
            continue;
        }
        if (!strncmp(a, "--threads=", 10))
            continue;
        h = ci_hash_bytes(h, a, strlen(a) + 1);
    }
    lo->tp = *tp;
    lo->tp_options = h;
    return true;
}

void cli_tp_report(const char *cmd, const struct cinfer_tp *tp, int n_layer) {
    (void)n_layer;
    if (!tp)
        return;
    struct cinfer_tp_stats s;
    cinfer_tp_stats(tp, &s);
    double per = s.allreduces ? s.allreduce_ms * 1e3 / (double)s.allreduces : 0.0;
    fprintf(stderr,
            "cinfer %s: tensor parallel: %lld batches broadcast (%.2f ms), %lld all-reduces of %.2f MiB in "
            "all (%.2f ms: %.1f us each, %.1f us per layer and batch)\n",
            cmd, s.steps, s.bcast_ms, s.allreduces, s.allreduce_mib, s.allreduce_ms, per,
            s.allreduces ? 2.0 * per : 0.0); // two per layer (of rank 0's stage) and batch, one per embedding
    if (s.p2p_mib > 0)
        fprintf(stderr,
                "cinfer %s: pipeline: %.2f MiB of hidden states received by rank 0, %.2f ms in its "
                "sends and receives (waiting for the stages included)\n",
                cmd, s.p2p_mib, s.p2p_ms);
    if (s.file_mib > 0)
        fprintf(stderr, "cinfer %s: rank 0 read ahead %.1f of the model file's %.1f MiB (its shard)\n", cmd,
                s.read_ahead_mib, s.file_mib);
    if (s.embd_rows > 0)
        fprintf(stderr, "cinfer %s: token embedding split by vocabulary: rank 0 holds %lld of %lld rows\n",
                cmd, s.embd_rows, s.n_vocab);
    if (s.head_rows > 0)
        fprintf(stderr,
                "cinfer %s: output head split by vocabulary: rank 0 holds %lld of %lld rows; %lld gathers of "
                "logits (%.2f ms)\n",
                cmd, s.head_rows, s.n_vocab, s.head_gathers, s.head_ms);
}
