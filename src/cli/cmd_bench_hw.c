/* cinfer bench hw: the flags of the machine measurement (src/bench/hw.c). */
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "bench/perf.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/threadpool.h"

int cmd_bench_hw(int argc, char **argv) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int n_threads = ncpu > 0 && ncpu < 512 ? (int)ncpu : 1, mib = 0, passes = 5, peak_ms = 500;
    bool json = false, portable = false;
    struct arg_spec specs[] = {
        {"--threads", "-t", ARG_INT, &n_threads, 1, 512, "N  threads (default: online CPUs)"},
        {"--mib", NULL, ARG_INT, &mib, 1, 1 << 20,
         "M  bandwidth buffer in MiB (default: max(1024, 4 x last-level cache))"},
        {"--passes", NULL, ARG_INT, &passes, 1, 100,
         "P  bandwidth: P timed passes over the buffer (default 5)"},
        {"--peak-ms", NULL, ARG_INT, &peak_ms, 1, 60000,
         "MS  each peak loop (f32 FMA, int8 dot) and thread count: best of ~0.5 ms passes for MS ms (default "
         "500)"},
        {"--portable", NULL, ARG_FLAG, &portable, 0, 0, "use the portable C loops even where AVX2 exists"},
        {"--json", NULL, ARG_FLAG, &json, 0, 0, "one JSON line instead of the table"},
    };
    int n_specs = sizeof specs / sizeof specs[0];
    if (args_want_help(argc, argv, 3)) {
        args_usage("bench hw", "[-t N] [--mib M] [--passes P] [--peak-ms MS] [--json]", specs, n_specs);
        return 0;
    }
    const char *pos[1];
    int n_pos;
    if (!args_parse("bench hw", argc, argv, 3, specs, n_specs, pos, 0, &n_pos))
        return 2;
    struct bench_hw_opts o;
    bench_hw_opts_default(&o);
    o.buf_bytes = (size_t)mib << 20;
    o.passes = passes;
    o.peak_s = peak_ms * 1e-3;
    o.portable = portable;
    struct ci_err err = {0};
    struct ci_threadpool *tp = NULL;
    struct bench_hw hw;
    if (ci_threadpool_create(n_threads, &tp, &err) != CI_OK || bench_hw_measure(tp, &o, &hw, &err) != CI_OK) {
        fprintf(stderr, "cinfer bench hw: %s\n", err.msg);
        ci_threadpool_free(tp);
        return 1;
    }
    ci_threadpool_free(tp);
    bench_hw_print(&hw, json);
    return 0;
}
