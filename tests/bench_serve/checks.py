#!/usr/bin/env python3
"""Checks of one `cinfer bench serve` run against the mock server (tests/bench_serve/mock_server.py).

    checks.py CASE DIR [key=value ...]

DIR holds rc, stdout, stderr, stats.json (the mock's GET /stats after the run) and out/results.json.
Prints PASS/FAIL lines named CASE_<check>.  Expected values come from the mock's configuration (its
timings and what it recorded), never from the client's own output; the statistics are recomputed here
with numpy from the per-request arrays.

The first `probes` requests the mock saw (key=value, default 2) are the client's initial test requests.
"""
import json
import os
import re
import sys

import numpy as np

CASE = sys.argv[1]
D = sys.argv[2]
KV = dict(a.split("=", 1) for a in sys.argv[3:])
failed = 0


def check(name, cond, why=""):
    global failed
    if cond:
        print("PASS %s_%s" % (CASE, name))
    else:
        failed += 1
        print("FAIL %s_%s: %s" % (CASE, name, why))


def near(x, want, rel):
    return x is not None and abs(x - want) <= rel * want


def read(name):
    with open(os.path.join(D, name)) as f:
        return f.read()


rc = int(read("rc").strip())
stdout = read("stdout")
stderr = read("stderr")
stats = json.loads(read("stats.json"))
probes = int(KV.get("probes", "2"))
bench_reqs = stats["requests"][probes:]  # in the order the mock received them
try:
    R = json.loads(read("out/results.json"))
except (OSError, ValueError) as e:
    R = None
    check("json_valid", False, "results.json: %s" % e)


def printed(label):
    """The value vLLM-style summary line `label` shows on stdout (None if absent)."""
    m = re.search(r"^" + re.escape(label) + r"\s+(\S+)\s*$", stdout, re.M)
    return float(m.group(1)) if m else None


def common(n, n_failed=0):
    want_rc = 0 if n_failed < n else 1
    check("exit_status", rc == want_rc, "exit %d, want %d; stderr: %s" % (rc, want_rc, stderr[-300:]))
    check("no_crash", not re.search(r"Sanitizer|runtime error|Segmentation|Aborted", stderr), stderr[-500:])
    if R is None:
        return False
    check("json_valid", True)
    check("counts", R["completed"] == n - n_failed and R["failed"] == n_failed and R["num_prompts"] == n,
          "completed %s failed %s of %s, want %d/%d" % (R["completed"], R["failed"], R["num_prompts"],
                                                        n - n_failed, n_failed))
    arrays = ["input_lens", "target_input_lens", "output_lens", "max_tokens", "chunks", "ttfts", "tpots",
              "e2els", "start_times", "arrival_times", "http_status", "itls", "errors"]
    bad = [a for a in arrays if len(R.get(a, [])) != n]
    check("arrays", not bad, "arrays of the wrong length: %s" % bad)
    check("printed_counts", printed("Successful requests:") == n - n_failed
          and printed("Failed requests:") == n_failed, "stdout:\n" + stdout)
    return not bad


def recompute():
    """numpy's view of the summary from the per-request arrays (ms)."""
    ok = [i for i, e in enumerate(R["errors"]) if e == ""]
    ttft = np.array([R["ttfts"][i] for i in ok]) * 1e3
    e2el = np.array([R["e2els"][i] for i in ok]) * 1e3
    itl = np.array([x for i in ok for x in R["itls"][i]]) * 1e3
    tpot = np.array([(R["e2els"][i] - R["ttfts"][i]) / (R["output_lens"][i] - 1) for i in ok
                     if R["output_lens"][i] > 1]) * 1e3
    return {"ttft": ttft, "e2el": e2el, "itl": itl, "tpot": tpot}


def check_stats():
    """The summary's numbers are numpy's (mean, median, std, p90, p99 with linear interpolation) of the
    per-request arrays, and stdout shows them."""
    m = recompute()
    bad = []
    for k, v in m.items():
        for stat, f in [("mean", np.mean), ("median", np.median), ("std", np.std),
                        ("p90", lambda x: np.percentile(x, 90)), ("p99", lambda x: np.percentile(x, 99))]:
            want = float(f(v)) if len(v) else 0.0
            got = R["%s_%s_ms" % (stat, k)]
            if abs(got - want) > 1e-6 * max(1.0, abs(want)):
                bad.append("%s_%s_ms %g != %g" % (stat, k, got, want))
    check("stats_match_numpy", not bad, "; ".join(bad))
    labels = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}
    badp = []
    for k, name in labels.items():
        for stat, word in [("mean", "Mean"), ("median", "Median"), ("p90", "P90"), ("p99", "P99")]:
            got = printed("%s %s (ms):" % (word, name))
            if got is None or abs(got - R["%s_%s_ms" % (stat, k)]) > 0.006:
                badp.append("%s %s" % (word, name))
    thr = [("Request throughput (req/s):", "request_throughput"),
           ("Output token throughput (tok/s):", "output_throughput"),
           ("Total Token throughput (tok/s):", "total_token_throughput"),
           ("Benchmark duration (s):", "duration"), ("Total input tokens:", "total_input_tokens"),
           ("Total generated tokens:", "total_output_tokens")]
    for label, key in thr:
        got = printed(label)
        if got is None or abs(got - R[key]) > 0.006:
            badp.append(label)
    check("stdout_matches_json", not badp and "Serving Benchmark Result" in stdout,
          "missing or different on stdout: %s" % badp)
    dur = R["duration"]
    ok = R["completed"]
    check("throughput_defs",
          near(R["request_throughput"], ok / dur, 1e-9)
          and near(R["output_throughput"], R["total_output_tokens"] / dur, 1e-9)
          and near(R["total_token_throughput"], (R["total_input_tokens"] + R["total_output_tokens"]) / dur,
                   1e-9), "throughputs are not tokens / duration")


def truth():
    """The mock's own account of the successful benchmark requests (ms): when the first content chunk, every
    later one and the last byte actually left.  On a busy machine they leave later than due; the client can
    only see them later still, by the time the bytes take to reach it."""
    ok = [r for r in bench_reqs if r["status"] == 200]
    out = {"ttft": np.mean([r["sent"][0] for r in ok]) * 1e3,
           "e2el": np.mean([r["end"] for r in ok]) * 1e3,
           "itl": np.median([b - a for r in ok for a, b in zip(r["sent"], r["sent"][1:])]) * 1e3}
    tp = [(r["end"] - r["sent"][0]) / (r["max_tokens"] - 1) for r in ok if r["max_tokens"] > 1]
    out["tpot"] = np.mean(tp) * 1e3 if tp else 0.0
    return out


def close(name, got, want, nominal, one_sided=False):
    """got (the client's measurement) against want (the mock's): within 30% or 5 ms, and for a latency
    counted from the send, not before the mock sent it (2 ms slack)."""
    tol = max(5.0, 0.3 * want)
    ok = got - want <= tol and (got - want >= -2.0 if one_sided else got - want >= -tol)
    check(name, ok, "client %.2f ms, mock %.2f ms (nominal %.2f)" % (got, want, nominal))


def mock_prompt_tokens(prompt):
    tpw = int(KV.get("tpw", "2"))
    return tpw * len(prompt.split()) + 1


def main():
    n = int(KV.get("n", "0"))
    if CASE == "basic":
        if not common(n):
            return
        ttft_ms, itl_ms, out = 50.0, 10.0, 16
        m, t = recompute(), truth()
        close("ttft", float(np.mean(m["ttft"])), t["ttft"], ttft_ms, one_sided=True)
        close("itl", float(np.median(m["itl"])), t["itl"], itl_ms)
        close("tpot", R["mean_tpot_ms"], t["tpot"], itl_ms)
        close("e2el", R["mean_e2el_ms"], t["e2el"], ttft_ms + (out - 1) * itl_ms, one_sided=True)
        check("itl_count", all(len(x) == out - 1 for x in R["itls"]), "itls per request: %s" %
              [len(x) for x in R["itls"]])
        check("output_tokens", R["total_output_tokens"] == n * out == sum(r["max_tokens"] for r in bench_reqs),
              "total_output_tokens %s, want %d" % (R["total_output_tokens"], n * out))
        want_in = sum(mock_prompt_tokens(r["prompt"]) for r in bench_reqs)
        check("input_tokens_from_usage", R["total_input_tokens"] == want_in,
              "total_input_tokens %s, the mock counted %d" % (R["total_input_tokens"], want_in))
        inl = int(KV["input_len"])
        check("calibration", near(R["total_input_tokens"], n * inl, 0.15) and R["calibrated"]
              and near(R["tokens_per_word"], 2.0, 0.01),
              "input tokens %s for %d prompts of %d; tokens/word %s" % (R["total_input_tokens"], n, inl,
                                                                        R["tokens_per_word"]))
        conc = int(KV["conc"])
        check("max_concurrency", stats["peak"] == conc and R["peak_concurrency"] == conc,
              "mock saw %d in flight, client %d, cap %d" % (stats["peak"], R["peak_concurrency"], conc))
        fields = all(r["ignore_eos"] is True and r["stream"] is True and r["temperature"] == 0
                     and r["stream_options"] == {"include_usage": True} and r["model"] == "mock-model"
                     for r in stats["requests"])
        check("request_fields", fields, "a request lacked ignore_eos/stream/temperature 0/stream_options/model")
        check("n_requests", len(bench_reqs) == n, "mock saw %d benchmark requests" % len(bench_reqs))
        check_stats()
        check("no_goodput_without_slo", printed("Request goodput (req/s):") is None
              and R["request_goodput"] is None, "goodput reported without --goodput")
        if KV.get("plots") == "1":
            pngs = ["ttft_cdf.png", "itl_hist.png", "e2el_vs_time.png"]
            okp = all(open(os.path.join(D, "out", p), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
                      for p in pngs if os.path.exists(os.path.join(D, "out", p)))
            have = all(os.path.exists(os.path.join(D, "out", p)) for p in pngs)
            check("plots", okp and have, "PNGs: %s" % os.listdir(os.path.join(D, "out")))
    elif CASE == "concurrency":
        if not common(n):
            return
        conc = int(KV["conc"])
        check("peak", stats["peak"] == conc and R["peak_concurrency"] == conc,
              "mock saw %d in flight, client %d, cap %d" % (stats["peak"], R["peak_concurrency"], conc))
    elif CASE == "poisson":
        if not common(n):
            return
        rate = float(KV["rate"])
        t = np.array([r["t"] for r in bench_reqs])
        gaps = np.diff(np.sort(t))
        check("rate", near(float(np.mean(gaps)), 1 / rate, 0.35), "mean gap %.4f s at the mock, want %.4f" %
              (np.mean(gaps), 1 / rate))
        cv = float(np.std(gaps) / np.mean(gaps))
        check("exponential_gaps", 0.5 <= cv <= 1.6, "coefficient of variation %.2f (Poisson: 1)" % cv)
        lag = np.array(R["start_times"]) - np.array(R["arrival_times"])
        check("sent_on_schedule", float(np.max(np.abs(lag))) < 0.05, "max |send - arrival| %.4f s" %
              np.max(np.abs(lag)))
        check("arrivals_increase", all(np.diff(R["arrival_times"]) >= 0), "arrival_times not sorted")
    elif CASE == "errors":
        nf = int(KV["n_failed"])
        check("mock_failed", stats["n_500"] == nf, "mock sent %d errors, expected %d" % (stats["n_500"], nf))
        if not common(n, nf):
            return
        errs = [e for e in R["errors"] if e]
        check("error_text", len(errs) == nf and all("HTTP 500" in e and "mock failure" in e for e in errs),
              "errors: %s" % errs)
        check("error_status", sorted(R["http_status"]) == sorted([500] * nf + [200] * (n - nf)),
              "http_status %s" % R["http_status"])
        check("failed_nulls", all(R["ttfts"][i] is None for i, e in enumerate(R["errors"]) if e),
              "failed requests must have no ttft")
        check("stderr_summary", "%d failed requests: HTTP 500" % nf in stderr, stderr[-300:])
        check("output_counts_ok_only", R["total_output_tokens"] == (n - nf) * int(KV["out"]),
              "total_output_tokens %s" % R["total_output_tokens"])
    elif CASE == "error_event":
        nf = int(KV["n_failed"])
        check("mock_failed", sum(r["status"] == "error_event" for r in bench_reqs) == nf, "mock statuses")
        if not common(n, nf):
            return
        errs = [e for e in R["errors"] if e]
        check("error_text", len(errs) == nf and all("error event in the stream: mock error event" in e
                                                    for e in errs), "errors: %s" % errs)
    elif CASE == "no_stream":
        check("exit_status", rc == 1, "exit %d, want 1 (no request can succeed)" % rc)
        check("json_valid", R is not None and R["failed"] == n and R["completed"] == 0,
              "completed/failed %s" % str(None if R is None else (R["completed"], R["failed"])))
        check("error_text", R is not None and all("not an SSE stream" in e for e in R["errors"]),
              "errors: %s" % str(R["errors"][:2] if R else None))
    elif CASE == "no_usage":
        if not common(n):
            return
        out, k = int(KV["out"]), int(KV["chunk"])
        chunks = (out + k - 1) // k
        check("tokens_from_chunks", all(x == chunks for x in R["output_lens"]) and
              R["total_output_tokens"] == n * chunks, "output_lens %s, want %d each" % (R["output_lens"], chunks))
        check("input_estimated", R["total_input_tokens"] == sum(R["target_input_lens"]) and
              all(x is None for x in R["input_lens"]) and not R["calibrated"],
              "total_input_tokens %s vs targets %s" % (R["total_input_tokens"], sum(R["target_input_lens"])))
        check("notes", "had no usage" in stdout, "stdout lacks the no-usage notes")
        close("itl_per_chunk", R["median_itl_ms"], truth()["itl"], k * float(KV["itl"]))
    elif CASE == "multi_token":
        if not common(n):
            return
        out, k, itl, ttft = int(KV["out"]), int(KV["chunk"]), float(KV["itl"]), float(KV["ttft"])
        check("tokens_from_usage", all(x == out for x in R["output_lens"]) and
              all(c == (out + k - 1) // k for c in R["chunks"]), "output_lens %s chunks %s" %
              (R["output_lens"], R["chunks"]))
        # The first chunk leaves when its last token is due (ttft + (k-1)*itl), the last at ttft + (out-1)*itl;
        # TPOT divides by tokens (from usage), ITL is per chunk.
        t = truth()
        close("tpot_over_tokens", R["mean_tpot_ms"], t["tpot"], (out - k) * itl / (out - 1))
        close("itl_per_chunk", R["median_itl_ms"], t["itl"], k * itl)
        # Medians on both sides: on a loaded machine one starved read must not decide the check.
        client = float(np.median([x for x in R["ttfts"] if x is not None])) * 1e3  # seconds, as vLLM
        mock = float(np.median([r["sent"][0] for r in bench_reqs if r["status"] == 200])) * 1e3
        close("ttft_first_chunk", client, mock, ttft + (k - 1) * itl, one_sided=True)
        check_stats()
    elif CASE == "awkward_sse":
        if not common(n):
            return
        out = int(KV["out"])
        check("all_tokens", all(x == out for x in R["output_lens"]) and all(c == out for c in R["chunks"])
              and all(len(x) == out - 1 for x in R["itls"]),
              "output_lens %s chunks %s" % (R["output_lens"], R["chunks"]))
    elif CASE == "reject_field":
        if not common(n):
            return
        check("retried_without", not R["ignore_eos"] and "retrying without ignore_eos" in stderr
              and stats["n_400"] >= 1 and all(r["ignore_eos"] is None for r in bench_reqs),
              "ignore_eos %s, mock 400s %s" % (R["ignore_eos"], stats["n_400"]))
    elif CASE == "goodput_all":
        if not common(n):
            return
        check("goodput", near(R["request_goodput"], R["request_throughput"], 1e-9)
              and near(printed("Request goodput (req/s):"), R["request_goodput"], 0.01),
              "goodput %s, throughput %s" % (R["request_goodput"], R["request_throughput"]))
        check("slo_echo", R["goodput_slo_ms"] == {"ttft": 1000, "tpot": 1000}, str(R.get("goodput_slo_ms")))
    elif CASE == "goodput_none":
        if not common(n):
            return
        check("goodput", R["request_goodput"] == 0 and printed("Request goodput (req/s):") == 0,
              "goodput %s with an SLO no request meets" % R["request_goodput"])
    elif CASE == "goodput_some":
        if not common(n):
            return
        # Independent count: requests whose E2EL (from the arrays) is within the SLO.
        slo = float(KV["e2el"]) / 1e3
        good = sum(1 for e in R["e2els"] if e is not None and e <= slo)
        check("goodput", near(R["request_goodput"], good / R["duration"], 1e-9),
              "goodput %s, want %d / %s" % (R["request_goodput"], good, R["duration"]))
        check("mixed", 0 < good < n, "%d of %d requests within the SLO: pick one that splits them" % (good, n))
    elif CASE == "shared_prefix":
        if not common(n):
            return
        groups, pre = int(KV["groups"]), int(KV["prefix_words"])
        heads = {}
        for r in bench_reqs:
            heads.setdefault(" ".join(r["prompt"].split()[:pre]), []).append(r["prompt"])
        sizes = sorted(len(v) for v in heads.values())
        check("groups", len(heads) == groups and sizes == [n // groups] * groups,
              "%d distinct %d-word prefixes, sizes %s" % (len(heads), pre, sizes))
        check("unique_suffixes", len(set(r["prompt"] for r in bench_reqs)) == n, "duplicate prompts")
    elif CASE == "sharegpt":
        if not common(n):
            return
        mt = sorted(r["max_tokens"] for r in bench_reqs)
        check("max_tokens_sent", mt == sorted(R["max_tokens"]), "mock saw %s, client says %s" % (mt, R["max_tokens"]))
        check("long_tailed", len(set(mt)) >= 5 and max(mt) > 2 * float(np.median(mt)),
              "output lengths %s" % mt)
        check("outputs", R["output_lens"] == R["max_tokens"], "output_lens != max_tokens")
    elif CASE == "chat":
        if not common(n):
            return
        out = int(KV["out"])
        check("chat_route", all(r["chat"] for r in stats["requests"]) and R["backend"] == "openai-chat",
              "requests did not go to /v1/chat/completions")
        check("role_chunk_skipped", all(len(x) == out - 1 for x in R["itls"]) and
              all(c == out for c in R["chunks"]), "chunks %s" % R["chunks"])
    else:
        check("known_case", False, "unknown case " + CASE)


main()
sys.exit(1 if failed else 0)
