#!/usr/bin/env bash
# Runs test programs and prints the closing "N passed, N failed" line.
#   tests/run.sh BUILD_DIR [fast|full|tsan]     the suite ("full" when no mode is given)
#   tests/run.sh BUILD_DIR NAME [FILTER...]     one test program or script, by name
# Test programs print "PASS name" / "FAIL name: why" lines; a program that exits non-zero without printing a
# FAIL line (a crash) counts as one failure.  "fast" runs the C unit tests and the CLI tests in tests/cli;
# "full" also runs the other script tests in tests/*/test_*.{py,sh} (the numpy reference, the server tests,
# the OpenAI SDK, the llama.cpp cross-check, the web UI); "tsan" runs the threaded tests only (make tsan):
# test_queue, test_sched, test_threadpool, the threaded tests of test_engine, test_kernels and test_forward,
# and the server tests but the two grammar corpora.
#
# One test by name: NAME is a C unit test program (test_engine, or just engine: BUILD_DIR/tests/test_engine,
# built from tests/unit/test_engine.c, which may be named too) or a script test under tests/ (test_server,
# test_server.py or tests/server/test_server.py).  FILTERs, for a C program only, are passed to it: only its
# tests whose name holds one of them run (tests/test.h; `BUILD_DIR/tests/test_engine --list` names them).
#   tests/run.sh build/release test_sse
#   tests/run.sh build/release test_engine engine_thread
#   tests/run.sh build/release test_server
#   make test T=test_sse    make test-fast T="test_engine engine_thread"    make asan T=test_http
# The environment, the sanitizer options and the closing line are the same as for the whole suite.
#
# Sanitizers: the options below make every ASan, UBSan, LeakSanitizer or TSan report fatal, and send it to
# a file in a directory of this run instead of stderr.  After each test program, any report file there (from
# the program itself or from any cinfer it started, whatever it did with that process's stderr) is printed
# and counts as a failure of that program: "FAIL <program>: sanitizer report".  The options only concern
# binaries built with -fsanitize (build/asan, build/tsan); options already in the environment come after
# these, so they win.
set -u
B=${1:?build dir}
MODE=${2:-full}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CINFER_MODELS=${CINFER_MODELS:-$ROOT/../shared/models}
export CINFER_BIN=$ROOT/$B/cinfer
export CINFER_BUILD=$ROOT/$B
export CINFER_ROOT=$ROOT
# The sanitizer builds (build/asan, build/tsan) run 5-30 times slower.  There the corpus and model sweeps (the
# grammar and schema corpora, JSONSchemaBench's subsets, test_tp's models) take every 3rd item, which reaches
# the same code, and the llama.cpp cross-checks (tests/llamacpp: numbers against another engine, on model code
# the numpy reference tests also run) are left out; the release suite runs everything whole.
sanitized=0
case "${B%/}" in
*asan | *tsan)
    sanitized=1
    export CINFER_TEST_SAMPLE=${CINFER_TEST_SAMPLE:-3}
    ;;
esac
# Debian's python3 carries python3-numpy; a pyenv python on PATH may not.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
export CINFER_PY=$PY

passed=0
failed=0
log=$(mktemp)
san=$(mktemp -d)
# every FAIL line and the head of every sanitizer report, printed again at the end: a CI log shows its head
# and tail, and the cause of a failure in the middle would otherwise be cut out
recap=$(mktemp)
recap_san=$(mktemp)
trap 'rm -rf "$log" "$san" "$recap" "$recap_san"' EXIT

export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:disable_coredump=1:\
detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:log_path=$san/asan:\
${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:disable_coredump=1:\
log_path=$san/ubsan:${UBSAN_OPTIONS:-}"
export TSAN_OPTIONS="halt_on_error=1:abort_on_error=1:disable_coredump=1:second_deadlock_stack=1:\
suppressions=$ROOT/tests/tsan.supp:log_path=$san/tsan:${TSAN_OPTIONS:-}"

run_one() { # name, command...
    local name=$1
    shift
    echo "== $name"
    local t0=$SECONDS
    "$@" >"$log" 2>&1
    local rc=$?
    cat "$log"
    local p f
    p=$(grep -c '^PASS ' "$log")
    f=$(grep -c '^FAIL ' "$log")
    grep '^FAIL ' "$log" | cut -c1-300 >>"$recap"
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $name: exited with status $rc" | tee -a "$recap"
        f=1
    fi
    local r
    for r in "$san"/*; do
        [ -e "$r" ] || continue
        echo "-- sanitizer report ${r##*/}:"
        cat "$r"
        echo "FAIL $name: sanitizer report ${r##*/}" | tee -a "$recap"
        # the error and the first frames: enough to name the cause; a sanitizer's own fatal error (LeakSanitizer's
        # tracer faulting) has no ERROR line: its first lines then
        local head
        head=$(grep -m 1 -B 2 -A 14 -E 'ERROR|runtime error|WARNING: ThreadSanitizer' "$r")
        [ -n "$head" ] || head=$(head -n 12 "$r")
        { echo "$name, ${r##*/}:" && echo "$head" | cut -c1-200 | sed 's/^/    /'; } >>"$recap_san"
        rm -f "$r"
        f=$((f + 1))
    done
    echo "-- $name: $((SECONDS - t0)) s"
    passed=$((passed + p))
    failed=$((failed + f))
}

print_recap() { # the failures once more at the end of the log: the first 40 FAIL lines, 3 sanitizer reports
    [ -s "$recap" ] || return 0
    echo "== the failures again ($(wc -l <"$recap") FAIL lines; the first 40):"
    head -n 40 "$recap"
    [ -s "$recap_san" ] || return 0
    echo "== the first sanitizer reports ($(grep -c '^[^ ]' "$recap_san") in all; the error and its first frames):"
    awk '/^[^ ]/ { n++ } n <= 3' "$recap_san"
}

# The program or script a NAME stands for: prints "bin PATH", "py PATH" or "sh PATH", or says why none.
resolve() {
    local n=$1 c
    local -a found=()
    case "$n" in tests/unit/test_*.c) n=${n#tests/unit/} && n=${n%.c} ;; esac
    for c in "$B/tests/$n" "$B/tests/test_$n"; do
        if [ -f "$c" ] && [ -x "$c" ]; then
            echo "bin $c"
            return 0
        fi
    done
    for c in "tests/unit/$n.c" "tests/unit/test_$n.c"; do
        if [ -f "$c" ]; then
            echo "run.sh: $c is not built in $B (run make, or make VARIANT=... for $B)" >&2
            return 1
        fi
    done
    for c in "$n" tests/*/"$n" tests/*/"$n".py tests/*/"$n".sh tests/*/test_"$n" tests/*/test_"$n".py \
        tests/*/test_"$n".sh; do
        case "${c##*/}" in test_*.py | test_*.sh) ;; *) continue ;; esac
        [ -f "$c" ] || continue
        c=${c#./}
        case " ${found[*]:-} " in *" $c "*) ;; *) found+=("$c") ;; esac
    done
    if [ "${#found[@]}" -eq 1 ]; then
        echo "${found[0]##*.} ${found[0]}"
        return 0
    fi
    if [ "${#found[@]}" -gt 1 ]; then
        echo "run.sh: '$n' names several tests: ${found[*]}" >&2
        return 1
    fi
    echo "run.sh: no test named '$n'; the tests are:" >&2
    for c in "$B"/tests/test_*; do
        case "$c" in *.d) continue ;; esac
        [ -x "$c" ] && echo "  ${c##*/}" >&2
    done
    for c in tests/*/test_*.py tests/*/test_*.sh; do
        [ -e "$c" ] && echo "  $c" >&2
    done
    return 1
}

cd "$ROOT"
case "$MODE" in
fast | full | tsan) ;;
*)
    shift
    what=$(resolve "$1") || exit 2
    shift
    kind=${what%% *}
    path=${what#* }
    if [ "$kind" != bin ] && [ $# -gt 0 ]; then
        echo "run.sh: name filters ($*) apply to C unit test programs only, not to $path" >&2
        exit 2
    fi
    case "$kind" in
    bin) run_one "${path##*/}" "$path" "$@" ;;
    py) run_one "$path" "$PY" "$path" ;;
    sh) run_one "$path" bash "$path" ;;
    esac
    print_recap
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
    ;;
esac

if [ "$MODE" = tsan ]; then
    # Tests that run one thread give TSan nothing to check and run ~20 times slower under it: of test_engine,
    # the engine thread with its kernel pool and client threads (the policy tests step the engine on the test's
    # thread with one kernel thread); of test_kernels, the matmul across 1-3 threads; of
    # test_forward, the batch invariance with 1 and 2 threads, and two forwards on one lazily packed model.  The
    # others print SKIP lines.
    run_one "test_engine (threaded)" env CINFER_TEST_ONLY=engine_thread "$B/tests/test_engine"
    run_one test_queue "$B/tests/test_queue"
    run_one test_sched "$B/tests/test_sched"
    run_one test_threadpool "$B/tests/test_threadpool"
    run_one "test_kernels (threaded)" env CINFER_TEST_ONLY=across_threads "$B/tests/test_kernels"
    run_one "test_forward (threaded)" env CINFER_TEST_ONLY=invariance_stories260k_gguf,lazy_float_packing \
        "$B/tests/test_forward"
    for t in tests/server/test_*.py tests/server/test_*.sh; do
        [ -e "$t" ] || continue
        # The schema and grammar corpora send hundreds of grammars down the paths test_grammar.py already
        # takes under TSan (the shared grammar cache, the engine thread's masks); their breadth is single-
        # threaded work, over ten minutes each under TSan, and runs in the release and ASan suites.
        case "$t" in */test_grammar_corpus.py | */test_json_schema.py) continue ;; esac
        case "$t" in *.py) run_one "$t" "$PY" "$t" ;; *) run_one "$t" bash "$t" ;; esac
    done
    print_recap
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
fi

for t in "$B"/tests/test_*; do
    case "$t" in *.d) continue ;; esac
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done

for t in tests/cli/test_*.sh; do
    [ -e "$t" ] || continue
    run_one "$t" bash "$t"
done

if [ "$MODE" = full ]; then
    for t in tests/*/test_*.py; do
        [ -e "$t" ] || continue
        [ "$sanitized" = 1 ] && [[ "$t" == tests/llamacpp/* ]] && continue
        run_one "$t" "$PY" "$t"
    done
    for t in tests/*/test_*.sh; do
        [ -e "$t" ] || continue
        case "$t" in tests/cli/*) continue ;; esac
        [ "$sanitized" = 1 ] && [[ "$t" == tests/llamacpp/* ]] && continue
        run_one "$t" bash "$t"
    done
fi

print_recap
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
