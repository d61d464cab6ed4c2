/* cinfer bench: statistics, the comparison table, CSV/JSON output and gnuplot plots (bench_report.h has the
 * definitions of every figure). */
#include "bench/report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/stats.h"
#include "core/mem.h"

#define MIB (1024.0 * 1024.0)

/* ---- statistics --------------------------------------------------------------------------------------- */

double bench_throughput(int64_t tokens, int64_t t_first_ns, int64_t t_last_ns) {
    int64_t span = t_last_ns - t_first_ns;
    return span > 0 ? (double)tokens / ((double)span * 1e-9) : 0;
}

static double mean_of(const double *x, int n) {
    if (n <= 0)
        return NAN;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += x[i];
    return sum / n;
}

static void percentiles(double *x, int n, double out[3]) {
    ci_sort_doubles(x, n);
    out[0] = ci_quantile(x, n, 0.5);
    out[1] = ci_quantile(x, n, 0.9);
    out[2] = ci_quantile(x, n, 0.99);
}

static void roofline_finish(struct bench_roofline *r) {
    r->gflops_per_s = r->time_s > 0 ? r->flops / r->time_s * 1e-9 : 0;
    r->gbytes_per_s = r->time_s > 0 ? r->bytes / r->time_s * 1e-9 : 0;
    r->intensity = r->bytes > 0 ? r->flops / r->bytes : 0;
}

enum ci_status bench_summarize(const struct bench_run *r, struct bench_summary *s, struct ci_err *err) {
    memset(s, 0, sizeof *s);
    snprintf(s->label, sizeof s->label, "%s", r->label);
    s->n_requests = r->n_reqs;
    int64_t n_gaps = 0;
    for (int i = 0; i < r->n_reqs; i++)
        n_gaps += r->reqs[i].n_output > 1 ? r->reqs[i].n_output - 1 : 0;
    int n = r->n_reqs;
    double *ttft = ci_malloc(((size_t)n + 1) * sizeof *ttft), *e2e = ci_malloc(((size_t)n + 1) * sizeof *e2e);
    double *tpot = ci_malloc(((size_t)n + 1) * sizeof *tpot);
    double *itl = ci_malloc(((size_t)n_gaps + 1) * sizeof *itl);
    if (!ttft || !e2e || !tpot || !itl) {
        ci_free(ttft);
        ci_free(e2e);
        ci_free(tpot);
        ci_free(itl);
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    }
    int n_done = 0, n_tpot = 0, n_itl = 0;
    int64_t t_first = INT64_MAX, t_last = INT64_MIN;
    for (int i = 0; i < n; i++) {
        const struct bench_req_result *q = &r->reqs[i];
        s->n_prompt_tokens += q->n_prompt;
        s->n_output_tokens += q->n_output;
        t_first = q->t_arrival_ns < t_first ? q->t_arrival_ns : t_first;
        if (q->finish != ENGINE_FINISH_LENGTH && q->finish != ENGINE_FINISH_STOP)
            continue;
        t_last = q->t_finish_ns > t_last ? q->t_finish_ns : t_last;
        double tt = (double)(q->t_first_token_ns - q->t_arrival_ns) * 1e-6;
        double ee = (double)(q->t_finish_ns - q->t_arrival_ns) * 1e-6;
        ttft[n_done] = tt;
        e2e[n_done++] = ee;
        if (q->n_output > 1)
            tpot[n_tpot++] = (ee - tt) / (q->n_output - 1);
        for (int k = 1; k < q->n_output; k++)
            itl[n_itl++] = (double)(q->t_token_ns[k] - q->t_token_ns[k - 1]) * 1e-6;
    }
    s->n_completed = n_done;
    s->ttft_mean_ms = mean_of(ttft, n_done);
    s->e2e_mean_ms = mean_of(e2e, n_done);
    s->tpot_mean_ms = mean_of(tpot, n_tpot);
    s->itl_mean_ms = mean_of(itl, n_itl);
    percentiles(ttft, n_done, s->ttft_ms);
    percentiles(e2e, n_done, s->e2e_ms);
    percentiles(itl, n_itl, s->itl_ms);
    ci_free(ttft);
    ci_free(e2e);
    ci_free(tpot);
    ci_free(itl);

    if (n_done > 0) {
        s->duration_s = (double)(t_last - t_first) * 1e-9;
        s->output_tps = bench_throughput(s->n_output_tokens, t_first, t_last);
        s->total_tps = bench_throughput(s->n_output_tokens + s->n_prompt_tokens, t_first, t_last);
        s->requests_per_s = bench_throughput(n_done, t_first, t_last);
    }

    s->block_size = r->info.block_size;
    s->n_kv_blocks = r->info.n_blocks;
    s->kv_pool_bytes = r->info.kv_bytes;
    int64_t bytes_per_block = (int64_t)r->info.block_size * r->info.kv_bytes_per_token;
    double slots_alloc = 0, slots_used = 0;
    for (int i = 0; i < r->n_steps; i++) {
        const struct step_metrics *m = &r->steps[i];
        int64_t kv = m->kv_blocks_used * bytes_per_block;
        s->peak_kv_bytes = kv > s->peak_kv_bytes ? kv : s->peak_kv_bytes;
        slots_alloc += (double)m->kv_slots_allocated;
        slots_used += (double)m->kv_slots_used;
        s->n_preemptions += m->n_preempted;
        s->n_pad_tokens += m->n_pad_tokens;
        s->n_prefix_hit_tokens += m->n_prefix_hit_tokens;
        bool prefill = m->n_prefill_tokens > 0 && m->n_prefill_tokens >= m->n_decode_tokens;
        struct bench_roofline *c = prefill ? &s->prefill : &s->decode;
        c->n_steps++;
        c->n_tokens += m->n_tokens + m->n_pad_tokens;
        c->time_s += (double)(m->t_end_ns - m->t_start_ns) * 1e-9;
        c->flops += m->flops;
        c->bytes += m->bytes;
    }
    s->n_steps = r->n_steps;
    s->kv_waste_pct = slots_alloc > 0 ? 100.0 * (slots_alloc - slots_used) / slots_alloc : 0;
    s->prefix_hit_rate =
        s->n_prompt_tokens > 0 ? (double)s->n_prefix_hit_tokens / (double)s->n_prompt_tokens : 0;
    roofline_finish(&s->prefill);
    roofline_finish(&s->decode);
    return CI_OK;
}

/* ---- table -------------------------------------------------------------------------------------------- */

static void triple(char *buf, size_t n, const double v[3]) {
    snprintf(buf, n, "%.1f/%.1f/%.1f", v[0], v[1], v[2]);
}

void bench_print_table(FILE *f, const struct bench_summary *s, int n) {
    fprintf(f, "%-11s %-22s %-22s %-24s %9s %9s %7s %9s %6s %6s %7s %7s\n", "policy", "TTFT ms p50/p90/p99",
            "TBT ms p50/p90/p99", "E2E ms p50/p90/p99", "out tok/s", "tot tok/s", "req/s", "peak KV", "waste",
            "hit", "preempt", "pad");
    for (int i = 0; i < n; i++) {
        char a[48], b[48], c[48], kv[24];
        triple(a, sizeof a, s[i].ttft_ms);
        triple(b, sizeof b, s[i].itl_ms);
        triple(c, sizeof c, s[i].e2e_ms);
        snprintf(kv, sizeof kv, "%.1fMiB", (double)s[i].peak_kv_bytes / MIB);
        fprintf(f, "%-11s %-22s %-22s %-24s %9.1f %9.1f %7.2f %9s %5.1f%% %5.1f%% %7lld %7lld\n", s[i].label,
                a, b, c, s[i].output_tps, s[i].total_tps, s[i].requests_per_s, kv, s[i].kv_waste_pct,
                100 * s[i].prefix_hit_rate, (long long)s[i].n_preemptions, (long long)s[i].n_pad_tokens);
    }
}

static void roofline_line(FILE *f, const char *label, const char *cls, const struct bench_roofline *r) {
    if (r->n_steps == 0) {
        fprintf(f, "  %-11s %-14s (no steps)\n", label, cls);
        return;
    }
    fprintf(f, "  %-11s %-14s %6lld steps %8lld tokens %8.2f s  %8.2f GFLOP/s %7.2f GB/s  %8.1f FLOP/byte\n",
            label, cls, (long long)r->n_steps, (long long)r->n_tokens, r->time_s, r->gflops_per_s,
            r->gbytes_per_s, r->intensity);
}

void bench_print_roofline(FILE *f, const struct bench_summary *s, int n) {
    fprintf(
        f,
        "achieved compute and bandwidth (engine estimates per step; prefill-heavy: prompt tokens >= decode "
        "tokens):\n");
    for (int i = 0; i < n; i++) {
        roofline_line(f, s[i].label, "prefill-heavy", &s[i].prefill);
        roofline_line(f, s[i].label, "decode-heavy", &s[i].decode);
    }
}

/* ---- files -------------------------------------------------------------------------------------------- */

enum ci_status bench_mkdirs(const char *dir, struct ci_err *err) {
    char path[4096];
    size_t len = strlen(dir);
    if (len == 0 || len >= sizeof path)
        return ci_err_set(err, CI_ERR_INVALID, "bad output directory '%s'", dir);
    memcpy(path, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return ci_err_set(err, CI_ERR_IO, "cannot create directory '%s': %s", path, strerror(errno));
        path[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ci_err_set(err, CI_ERR_IO, "'%s' is not a directory", dir);
    return CI_OK;
}

/* s as a JSON string literal, quoted and escaped by cJSON; free with cJSON_free.  NULL when out of memory. */
static char *json_quote(const char *s) {
    cJSON *str = cJSON_CreateString(s);
    char *out = str ? cJSON_PrintUnformatted(str) : NULL;
    cJSON_Delete(str);
    return out;
}

bool bench_json_str(char *buf, size_t size, const char *s) {
    char *q = json_quote(s);
    size_t n = strlen(buf);
    bool ok = q && n + strlen(q) < size;
    if (ok)
        memcpy(buf + n, q, strlen(q) + 1);
    cJSON_free(q);
    return ok;
}

void bench_json_fputs(FILE *f, const char *s) {
    char *q = json_quote(s);
    fputs(q ? q : "null", f);
    cJSON_free(q);
}

static FILE *open_in(const char *dir, const char *name, const char *suffix, struct ci_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s%s", dir, name, suffix);
    FILE *f = fopen(path, "w");
    if (!f)
        ci_err_set(err, CI_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    return f;
}

static enum ci_status close_file(FILE *f, const char *dir, const char *name, struct ci_err *err) {
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad)
        return ci_err_set(err, CI_ERR_IO, "error writing '%s/%s'", dir, name);
    return CI_OK;
}

static void json_num(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, "%.6g", v);
    else
        fputs("null", f);
}

static double ms(int64_t ns) {
    return (double)ns * 1e-6;
}

static double req_tpot_ms(const struct bench_req_result *q) {
    if (q->n_output < 2)
        return NAN;
    return ms(q->t_finish_ns - q->t_first_token_ns) / (q->n_output - 1);
}

static double req_max_gap_ms(const struct bench_req_result *q) {
    double best = NAN;
    for (int k = 1; k < q->n_output; k++) {
        double g = ms(q->t_token_ns[k] - q->t_token_ns[k - 1]);
        best = !(best >= g) ? g : best;
    }
    return best;
}

static void write_summary_csv_row(FILE *f, const struct bench_summary *s) {
    fprintf(f, "%s,%d,%d,%lld,%lld", s->label, s->n_requests, s->n_completed, (long long)s->n_prompt_tokens,
            (long long)s->n_output_tokens);
    const double lat[] = {s->ttft_ms[0],  s->ttft_ms[1],  s->ttft_ms[2],  s->itl_ms[0], s->itl_ms[1],
                          s->itl_ms[2],   s->e2e_ms[0],   s->e2e_ms[1],   s->e2e_ms[2], s->ttft_mean_ms,
                          s->itl_mean_ms, s->e2e_mean_ms, s->tpot_mean_ms};
    for (size_t i = 0; i < sizeof lat / sizeof *lat; i++)
        fprintf(f, ",%.3f", lat[i]);
    fprintf(f, ",%.4f,%.3f,%.3f,%.4f,%lld,%.3f,%lld,%.5f,%lld,%lld,%lld,%d,%d,%lld", s->duration_s,
            s->output_tps, s->total_tps, s->requests_per_s, (long long)s->peak_kv_bytes, s->kv_waste_pct,
            (long long)s->n_prefix_hit_tokens, s->prefix_hit_rate, (long long)s->n_preemptions,
            (long long)s->n_pad_tokens, (long long)s->n_steps, s->block_size, s->n_kv_blocks,
            (long long)s->kv_pool_bytes);
    fprintf(f, ",%.4f,%.4f,%.3f,%.4f,%.4f,%.3f\n", s->prefill.gflops_per_s, s->prefill.gbytes_per_s,
            s->prefill.intensity, s->decode.gflops_per_s, s->decode.gbytes_per_s, s->decode.intensity);
}

static enum ci_status write_summary_csv(const char *dir, const struct bench_summary *s, int n,
                                        struct ci_err *err) {
    FILE *f = open_in(dir, "summary", ".csv", err);
    if (!f)
        return CI_ERR_IO;
    fputs("policy,requests,completed,prompt_tokens,output_tokens,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,"
          "tbt_p50_ms,tbt_p90_ms,tbt_p99_ms,e2e_p50_ms,e2e_p90_ms,e2e_p99_ms,ttft_mean_ms,tbt_mean_ms,"
          "e2e_mean_ms,tpot_mean_ms,duration_s,output_tok_s,total_tok_s,requests_s,peak_kv_bytes,"
          "kv_waste_pct,prefix_hit_tokens,prefix_hit_rate,preemptions,pad_tokens,steps,"
          "block_size,kv_blocks,kv_pool_bytes,prefill_gflop_s,prefill_gb_s,prefill_flop_per_byte,"
          "decode_gflop_s,decode_gb_s,decode_flop_per_byte\n",
          f);
    for (int i = 0; i < n; i++)
        write_summary_csv_row(f, &s[i]);
    return close_file(f, dir, "summary.csv", err);
}

static enum ci_status write_requests_csv(const char *dir, const struct bench_run *runs, int n,
                                         struct ci_err *err) {
    FILE *f = open_in(dir, "requests", ".csv", err);
    if (!f)
        return CI_ERR_IO;
    fputs("policy,request,group,arrival_ms,scheduled_ms,first_token_ms,finish_ms,prompt_tokens,output_tokens,"
          "ttft_ms,e2e_ms,tpot_ms,max_gap_ms,preemptions,finish\n",
          f);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < runs[r].n_reqs; i++) {
            const struct bench_req_result *q = &runs[r].reqs[i];
            fprintf(f, "%s,%d,%d,%.3f,%.3f,%.3f,%.3f,%d,%d,%.3f,%.3f,%.3f,%.3f,%d,%s\n", runs[r].label, i,
                    q->group, ms(q->t_arrival_ns), ms(q->t_scheduled_ns), ms(q->t_first_token_ns),
                    ms(q->t_finish_ns), q->n_prompt, q->n_output, ms(q->t_first_token_ns - q->t_arrival_ns),
                    ms(q->t_finish_ns - q->t_arrival_ns), req_tpot_ms(q), req_max_gap_ms(q), q->n_preempted,
                    engine_finish_str(q->finish));
        }
    return close_file(f, dir, "requests.csv", err);
}

static enum ci_status write_steps_csv(const char *dir, const struct bench_run *r, struct ci_err *err) {
    char name[64];
    snprintf(name, sizeof name, "steps_%s", r->label);
    FILE *f = open_in(dir, name, ".csv", err);
    if (!f)
        return CI_ERR_IO;
    fputs(
        "t_start_ms,t_end_ms,dur_ms,tokens,prefill_tokens,decode_tokens,pad_tokens,running,waiting,passes,"
        "preempted,prefix_hit_tokens,kv_blocks_used,kv_slots_used,kv_slots_allocated,flops,bytes,grammar_ms,"
        "grammar_masks\n",
        f);
    for (int i = 0; i < r->n_steps; i++) {
        const struct step_metrics *m = &r->steps[i];
        fprintf(f, "%.3f,%.3f,%.3f,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%lld,%lld,%.6g,%.6g,%.4f,%d\n",
                ms(m->t_start_ns), ms(m->t_end_ns), ms(m->t_end_ns - m->t_start_ns), m->n_tokens,
                m->n_prefill_tokens, m->n_decode_tokens, m->n_pad_tokens, m->n_running, m->n_waiting,
                m->n_passes, m->n_preempted, m->n_prefix_hit_tokens, m->kv_blocks_used,
                (long long)m->kv_slots_used, (long long)m->kv_slots_allocated, m->flops, m->bytes,
                (double)m->grammar_ns / 1e6, m->n_grammar_masks);
    }
    strcat(name, ".csv");
    return close_file(f, dir, name, err);
}

static void json_summary(FILE *f, const struct bench_summary *s) {
    const char *names[3] = {"p50", "p90", "p99"};
    fprintf(f, "{\"requests\": %d, \"completed\": %d, \"prompt_tokens\": %lld, \"output_tokens\": %lld",
            s->n_requests, s->n_completed, (long long)s->n_prompt_tokens, (long long)s->n_output_tokens);
    const struct {
        const char *name;
        const double *v;
        double mean;
    } lat[] = {{"ttft", s->ttft_ms, s->ttft_mean_ms},
               {"tbt", s->itl_ms, s->itl_mean_ms},
               {"e2e", s->e2e_ms, s->e2e_mean_ms}};
    for (int k = 0; k < 3; k++) {
        for (int j = 0; j < 3; j++) {
            fprintf(f, ", \"%s_%s_ms\": ", lat[k].name, names[j]);
            json_num(f, lat[k].v[j]);
        }
        fprintf(f, ", \"%s_mean_ms\": ", lat[k].name);
        json_num(f, lat[k].mean);
    }
    fputs(", \"tpot_mean_ms\": ", f);
    json_num(f, s->tpot_mean_ms);
    fprintf(f,
            ", \"duration_s\": %.6g, \"output_tok_s\": %.6g, \"total_tok_s\": %.6g, \"requests_s\": %.6g, "
            "\"peak_kv_bytes\": %lld, \"kv_waste_pct\": %.6g, \"prefix_hit_tokens\": %lld, "
            "\"prefix_hit_rate\": %.6g, \"preemptions\": %lld, \"pad_tokens\": %lld, \"steps\": %lld, "
            "\"block_size\": %d, \"kv_blocks\": %d, \"kv_pool_bytes\": %lld",
            s->duration_s, s->output_tps, s->total_tps, s->requests_per_s, (long long)s->peak_kv_bytes,
            s->kv_waste_pct, (long long)s->n_prefix_hit_tokens, s->prefix_hit_rate,
            (long long)s->n_preemptions, (long long)s->n_pad_tokens, (long long)s->n_steps, s->block_size,
            s->n_kv_blocks, (long long)s->kv_pool_bytes);
    const struct bench_roofline *rl[2] = {&s->prefill, &s->decode};
    const char *cls[2] = {"prefill_heavy", "decode_heavy"};
    for (int k = 0; k < 2; k++)
        fprintf(f,
                ", \"%s\": {\"steps\": %lld, \"tokens\": %lld, \"time_s\": %.6g, \"flops\": %.6g, \"bytes\": "
                "%.6g, \"gflop_s\": %.6g, \"gb_s\": %.6g, \"flop_per_byte\": %.6g}",
                cls[k], (long long)rl[k]->n_steps, (long long)rl[k]->n_tokens, rl[k]->time_s, rl[k]->flops,
                rl[k]->bytes, rl[k]->gflops_per_s, rl[k]->gbytes_per_s, rl[k]->intensity);
    fputc('}', f);
}

enum req_field { RF_ARRIVAL, RF_TTFT, RF_E2E, RF_TPOT, RF_PROMPT, RF_OUTPUT, RF_PREEMPT, RF_GROUP };

static double req_field(const struct bench_req_result *q, enum req_field k) {
    switch (k) {
    case RF_ARRIVAL:
        return ms(q->t_arrival_ns);
    case RF_TTFT:
        return ms(q->t_first_token_ns - q->t_arrival_ns);
    case RF_E2E:
        return ms(q->t_finish_ns - q->t_arrival_ns);
    case RF_TPOT:
        return req_tpot_ms(q);
    case RF_PROMPT:
        return q->n_prompt;
    case RF_OUTPUT:
        return q->n_output;
    case RF_PREEMPT:
        return q->n_preempted;
    case RF_GROUP:
        return q->group;
    }
    return NAN;
}

static enum ci_status write_json(const char *dir, const struct bench_run *runs, const struct bench_summary *s,
                                 int n, const char *config_json, struct ci_err *err) {
    FILE *f = open_in(dir, "summary", ".json", err);
    if (!f)
        return CI_ERR_IO;
    fprintf(f, "{\n  \"config\": %s,\n  \"runs\": [\n", config_json ? config_json : "{}");
    static const char *const fields[] = {"arrival_ms",    "ttft_ms",       "e2e_ms",      "tpot_ms",
                                         "prompt_tokens", "output_tokens", "preemptions", "group"};
    for (int r = 0; r < n; r++) {
        fprintf(f, "    {\"policy\": \"%s\",\n     \"summary\": ", runs[r].label);
        json_summary(f, &s[r]);
        fputs(",\n     \"requests\": {", f);
        for (int k = 0; k < (int)(sizeof fields / sizeof *fields); k++) {
            fprintf(f, "%s\n       \"%s\": [", k ? "," : "", fields[k]);
            for (int i = 0; i < runs[r].n_reqs; i++) {
                if (i)
                    fputs(", ", f);
                json_num(f, req_field(&runs[r].reqs[i], (enum req_field)k));
            }
            fputc(']', f);
        }
        fprintf(f, "}}%s\n", r + 1 < n ? "," : "");
    }
    fputs("  ]\n}\n", f);
    return close_file(f, dir, "summary.json", err);
}

enum ci_status bench_write_files(const char *dir, const struct bench_run *runs, const struct bench_summary *s,
                                 int n, const char *config_json, struct ci_err *err) {
    enum ci_status st;
    if ((st = write_summary_csv(dir, s, n, err)) || (st = write_requests_csv(dir, runs, n, err)) ||
        (st = write_json(dir, runs, s, n, config_json, err)))
        return st;
    for (int r = 0; r < n; r++)
        if ((st = write_steps_csv(dir, &runs[r], err)))
            return st;
    return CI_OK;
}

/* ---- plots -------------------------------------------------------------------------------------------- */

static int gnuplot_state = -1; // -1 unknown, 0 missing, 1 png, 2 pngcairo

static int run_in(const char *dir, const char *const argv[], bool quiet) {
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (quiet) {
            FILE *nul = freopen("/dev/null", "w", stderr);
            (void)nul;
        }
        if (dir && chdir(dir) != 0)
            _exit(126);
        execvp(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int gnuplot_probe(void) {
    if (gnuplot_state < 0) {
        const char *cairo[] = {"gnuplot", "-e", "set terminal pngcairo", NULL};
        const char *png[] = {"gnuplot", "-e", "set terminal png", NULL};
        gnuplot_state = run_in(NULL, cairo, true) == 0 ? 2 : run_in(NULL, png, true) == 0 ? 1 : 0;
        if (gnuplot_state == 0)
            fprintf(stderr, "cinfer bench: gnuplot not found (Debian: gnuplot-nox); skipping plots, data and "
                            "scripts are still written\n");
    }
    return gnuplot_state;
}

const char *bench_gnuplot_terminal(void) {
    int g = gnuplot_probe();
    return g == 2 ? "pngcairo" : g == 1 ? "png" : NULL;
}

bool bench_gnuplot_run(const char *dir, const char *script) {
    if (gnuplot_probe() == 0)
        return false;
    const char *argv[] = {"gnuplot", script, NULL};
    if (run_in(dir, argv, false) != 0) {
        fprintf(stderr, "cinfer bench: gnuplot failed on %s/%s (the data and the script stay there)\n", dir,
                script);
        return false;
    }
    return true;
}

/* The terminal a script is written for: gnuplot's best, or pngcairo when there is no gnuplot to ask (the
 * script is still written, for a machine that has it). */
static const char *script_terminal(void) {
    const char *t = bench_gnuplot_terminal();
    return t ? t : "pngcairo";
}

/* Opens <dir>/<stem>.gp with the terminal and output set. */
static FILE *script_open(const char *dir, const char *stem) {
    struct ci_err err = {0};
    FILE *f = open_in(dir, stem, ".gp", &err);
    if (!f) {
        fprintf(stderr, "cinfer bench: %s\n", err.msg);
        return NULL;
    }
    int g = gnuplot_probe();
    if (g == 1)
        fputs("set terminal png size 1100,650\n", f);
    else
        fputs("set terminal pngcairo size 1100,650 font 'sans,10'\n", f);
    fprintf(f, "set output '%s.png'\nset grid\nset key outside right top\n", stem);
    return f;
}

static bool script_run(FILE *f, const char *dir, const char *stem) {
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "cinfer bench: error writing %s/%s.gp\n", dir, stem);
        return false;
    }
    char script[128];
    snprintf(script, sizeof script, "%s.gp", stem);
    return bench_gnuplot_run(dir, script);
}

static FILE *data_open(const char *dir, const char *prefix, const char *label) {
    char name[96];
    snprintf(name, sizeof name, "%s_%s", prefix, label);
    struct ci_err err = {0};
    FILE *f = open_in(dir, name, ".dat", &err);
    if (!f)
        fprintf(stderr, "cinfer bench: %s\n", err.msg);
    return f;
}

static bool data_close(FILE *f) {
    bool bad = ferror(f) != 0;
    return fclose(f) == 0 && !bad;
}

bool bench_plot_ttft_cdf(const char *dir, const struct bench_run *runs, int n) {
    for (int r = 0; r < n; r++) {
        FILE *d = data_open(dir, "ttft", runs[r].label);
        if (!d)
            return false;
        double *x = ci_malloc(((size_t)runs[r].n_reqs + 1) * sizeof *x);
        if (!x) {
            fclose(d);
            return false;
        }
        int k = 0;
        for (int i = 0; i < runs[r].n_reqs; i++)
            if (runs[r].reqs[i].t_first_token_ns > 0)
                x[k++] = ms(runs[r].reqs[i].t_first_token_ns - runs[r].reqs[i].t_arrival_ns);
        ci_sort_doubles(x, k);
        fprintf(d, "# ttft_ms cumulative_fraction\n");
        for (int i = 0; i < k; i++)
            fprintf(d, "%.4f %.6f\n", x[i], (double)(i + 1) / k);
        ci_free(x);
        if (!data_close(d))
            return false;
    }
    FILE *f = script_open(dir, "ttft_cdf");
    if (!f)
        return false;
    fputs("set title 'TTFT distribution per policy'\nset xlabel 'TTFT (ms)'\nset ylabel 'fraction of "
          "requests'\nset yrange [0:1]\nset key inside right bottom\nset logscale x\n",
          f);
    fputs("plot ", f);
    for (int r = 0; r < n; r++)
        fprintf(f, "%s'ttft_%s.dat' using 1:2 with steps lw 2 title '%s'", r ? ", \\\n     " : "",
                runs[r].label, runs[r].label);
    fputc('\n', f);
    return script_run(f, dir, "ttft_cdf");
}

bool bench_plot_tbt_timeline(const char *dir, const struct bench_run *runs, int n) {
    bool any = false;
    for (int r = 0; r < n; r++) {
        const struct bench_run *run = &runs[r];
        if (run->long_index < 0)
            continue;
        any = true;
        int64_t t_long = run->reqs[run->long_index].t_arrival_ns;
        FILE *d = data_open(dir, "tbt", run->label);
        if (!d)
            return false;
        fprintf(d, "# seconds_since_long_prompt_arrival gap_ms (every token gap of the short streams)\n");
        for (int i = 0; i < run->n_reqs; i++) {
            const struct bench_req_result *q = &run->reqs[i];
            if (i == run->long_index)
                continue;
            for (int k = 1; k < q->n_output; k++)
                fprintf(d, "%.6f %.4f\n", (double)(q->t_token_ns[k] - t_long) * 1e-9,
                        ms(q->t_token_ns[k] - q->t_token_ns[k - 1]));
        }
        if (!data_close(d))
            return false;
        if (!(d = data_open(dir, "stepdur", run->label)))
            return false;
        fprintf(d, "# seconds_since_long_prompt_arrival (step end) step_ms\n");
        for (int i = 0; i < run->n_steps; i++)
            fprintf(d, "%.6f %.4f\n", (double)(run->steps[i].t_end_ns - t_long) * 1e-9,
                    ms(run->steps[i].t_end_ns - run->steps[i].t_start_ns));
        if (!data_close(d))
            return false;
    }
    if (!any)
        return true;
    FILE *f = script_open(dir, "tbt_timeline");
    if (!f)
        return false;
    // One panel per run, the same y range in all of them so that the spikes compare at a glance.
    int n_long = 0;
    double y_max = 1;
    for (int r = 0; r < n; r++) {
        if (runs[r].long_index < 0)
            continue;
        n_long++;
        for (int i = 0; i < runs[r].n_steps; i++) {
            double d = ms(runs[r].steps[i].t_end_ns - runs[r].steps[i].t_start_ns);
            y_max = d > y_max ? d : y_max;
        }
        for (int i = 0; i < runs[r].n_reqs; i++)
            if (i != runs[r].long_index) {
                double g = req_max_gap_ms(&runs[r].reqs[i]);
                y_max = g > y_max ? g : y_max;
            }
    }
    int cols = n_long > 1 ? 2 : 1, rows = (n_long + cols - 1) / cols;
    fprintf(f, "set terminal %s size %d,%d\nset output 'tbt_timeline.png'\n", script_terminal(), cols * 650,
            rows * 360 + 40);
    fprintf(
        f,
        "set multiplot layout %d,%d title 'Token gaps of the decoding streams (points) and step times (line) "
        "around the long prompt (x = 0: it arrives)'\n"
        "set xlabel 'seconds since the long prompt arrived'\nset ylabel 'ms'\nset logscale y\n"
        "set yrange [0.1:%g]\nset key inside left top\n"
        "set arrow 1 from 0, graph 0 to 0, graph 1 nohead dt 2 lc rgb 'black'\n",
        rows, cols, y_max * 2);
    for (int r = 0; r < n; r++)
        if (runs[r].long_index >= 0)
            fprintf(
                f,
                "set title '%s'\nplot 'tbt_%s.dat' using 1:2 with points pt 7 ps 0.4 lc 1 title 'token gap', "
                "'stepdur_%s.dat' using 1:2 with lines lw 1 lc 2 title 'step time'\n",
                runs[r].label, runs[r].label, runs[r].label);
    fputs("unset multiplot\n", f);
    return script_run(f, dir, "tbt_timeline");
}

bool bench_plot_kv_usage(const char *dir, const struct bench_run *runs, int n) {
    for (int r = 0; r < n; r++) {
        FILE *d = data_open(dir, "kv", runs[r].label);
        if (!d)
            return false;
        double bpt = (double)runs[r].info.kv_bytes_per_token;
        fprintf(d, "# seconds allocated_MiB used_MiB\n");
        for (int i = 0; i < runs[r].n_steps; i++) {
            const struct step_metrics *m = &runs[r].steps[i];
            fprintf(d, "%.6f %.4f %.4f\n", (double)m->t_end_ns * 1e-9,
                    (double)m->kv_slots_allocated * bpt / MIB, (double)m->kv_slots_used * bpt / MIB);
        }
        if (!data_close(d))
            return false;
    }
    FILE *f = script_open(dir, "kv_usage");
    if (!f)
        return false;
    // One panel per run: their time axes differ by orders of magnitude (naive vs the rest).
    int cols = n > 1 ? 2 : 1, rows = (n + cols - 1) / cols;
    fprintf(f, "set terminal %s size %d,%d\nset output 'kv_usage.png'\n", script_terminal(), cols * 600,
            rows * 320 + 40);
    fprintf(f,
            "set multiplot layout %d,%d title 'KV cache bytes allocated (solid) vs holding tokens (dashed)'\n"
            "set xlabel 'seconds since the first arrival'\nset ylabel 'MiB'\nset key inside right top\n"
            "set yrange [0:*]\n",
            rows, cols);
    for (int r = 0; r < n; r++)
        fprintf(
            f,
            "set title '%s'\nplot 'kv_%s.dat' using 1:2 with lines lw 2 lc 1 title 'allocated', 'kv_%s.dat' "
            "using 1:3 with lines lw 2 dt 2 lc 2 title 'used'\n",
            runs[r].label, runs[r].label, runs[r].label);
    fputs("unset multiplot\n", f);
    return script_run(f, dir, "kv_usage");
}

bool bench_plot_sweep(const char *dir, const char *stem, const char *title, const char *xlabel,
                      const char *ylabel, const char *const *series, int n_series,
                      const struct bench_sweep_point *pts, int n_pts, bool logx) {
    struct ci_err err = {0};
    FILE *d = open_in(dir, stem, ".dat", &err);
    if (!d) {
        fprintf(stderr, "cinfer bench: %s\n", err.msg);
        return false;
    }
    fprintf(d, "# x");
    for (int k = 0; k < n_series; k++)
        fprintf(d, " %s", series[k]);
    fputc('\n', d);
    for (int i = 0; i < n_pts; i++) {
        fprintf(d, "%g", pts[i].x);
        for (int k = 0; k < n_series; k++) {
            if (isfinite(pts[i].y[k]))
                fprintf(d, " %.6g", pts[i].y[k]);
            else
                fputs(" NaN", d);
        }
        fputc('\n', d);
    }
    if (!data_close(d))
        return false;
    FILE *f = script_open(dir, stem);
    if (!f)
        return false;
    fprintf(f,
            "set title '%s'\nset xlabel '%s'\nset ylabel '%s'\nset key inside left top\nset yrange [0:*]\n",
            title, xlabel, ylabel);
    if (logx)
        fputs("set logscale x 2\n", f);
    fputs("plot ", f);
    for (int k = 0; k < n_series; k++)
        fprintf(f, "%s'%s.dat' using 1:%d with linespoints lw 2 pt 7 title '%s'", k ? ", \\\n     " : "",
                stem, k + 2, series[k]);
    fputc('\n', f);
    return script_run(f, dir, stem);
}

/* ---- progress ---- */

void bench_progress_draw(const char *label, int n_done, int n_total, const char *extra, int64_t elapsed_ns) {
    char bar[31];
    int fill = n_total > 0 ? (int)((int64_t)n_done * 30 / n_total) : 30;
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    fprintf(stderr, "\r\033[K%s%s[%s] %d/%d requests%s%s  %.1f s", label ? label : "", label ? " " : "", bar,
            n_done, n_total, extra ? ", " : "", extra ? extra : "", (double)elapsed_ns * 1e-9);
    fflush(stderr);
}

void bench_progress_clear(void) {
    fputs("\r\033[K", stderr);
    fflush(stderr);
}
