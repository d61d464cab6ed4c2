/* cinfer bench serve: a load generator for any OpenAI-compatible server, in the manner of `vllm bench serve`.
 *
 * It builds a seeded text workload (random | sharegpt-like | shared-prefix; the server tokenizes), sends it
 * to POST /v1/completions (or /v1/chat/completions) as streaming requests with Poisson arrivals (or all at
 * once) under an optional cap on in-flight requests, measures TTFT, every inter-chunk gap (ITL), TPOT and
 * E2EL from the SSE stream of each request, and prints vLLM's summary (throughput, goodput under --goodput
 * SLOs, mean/median/p90/p99 latencies).  It writes results.json (summary + per-request arrays) and gnuplot
 * PNGs (TTFT CDF, ITL histogram, E2EL against send time) into --out.  bench/serve.md documents the flags, the
 * definitions and the JSON fields.
 *
 * Nothing here is shared state: the command owns every buffer it allocates and frees it before returning. */
#ifndef CINFER_BENCH_SERVE_H
#define CINFER_BENCH_SERVE_H

/* argv[1] is "bench" and argv[2] "serve"; flags start at argv[3].  Returns the process exit status: 0 when
 * the benchmark ran and at least one request succeeded, 1 on a runtime failure (server unreachable, the
 * initial test request failed, no request succeeded, files could not be written), 2 on a usage error. */
int cmd_bench_serve(int argc, char **argv);

#endif
