/* The subcommands of the one `cinfer` binary.  Each takes the full argv (argv[1] is its name) and returns the
 * process exit status: 0 success, 1 runtime failure (bad model file, ...), 2 usage error. */
#ifndef CINFER_CLI_COMMANDS_H
#define CINFER_CLI_COMMANDS_H

int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_template(int argc, char **argv); // cinfer template: render a Jinja chat template
int cmd_info(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_calc(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_router(int argc, char **argv);        // cinfer router: a front for several serve replicas
int cmd_bench(int argc, char **argv);         // cinfer bench: offline workloads under each policy
int cmd_bench_serve(int argc, char **argv);   // cinfer bench serve: load generator for any OpenAI server
int cmd_bench_hw(int argc, char **argv);      // cinfer bench hw: memory bandwidth and FMA peak
int cmd_bench_kernels(int argc, char **argv); // cinfer bench kernels: pp512, tg128, batched decode

#endif
