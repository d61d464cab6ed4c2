# cinfer — one plain Makefile.  Variants build out of tree in build/<variant>.
#   make            release build of build/release/cinfer
#   make test       install missing Debian packages, build, run every test
#   make test T=NAME  the same for one test program or script (tests/run.sh NAME: test_engine, test_server;
#                   T="test_engine engine_thread" runs that program's tests whose name holds engine_thread);
#                   T= works for test-fast, test-full, asan and tsan too
#   make asan       ASan+UBSan build (build/asan), then the tests under it (LeakSanitizer on; sweeps sampled and
#                   the llama.cpp cross-checks left out, tests/run.sh)
#   make tsan       ThreadSanitizer build (build/tsan), then the engine, queue, scheduler, thread pool and
#                   server tests under it (tests/tsan.supp: reports from uninstrumented libraries only)
#   make fuzz       libFuzzer harnesses (clang) in build/fuzz/; make fuzz-smoke runs each briefly
#   make demo       the README's quick start: deps, build, synth a model, run it
#   make format / format-check

VARIANT ?= release
B       := build/$(VARIANT)
CC      ?= cc

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wundef -Wvla \
           -Wformat=2 -Wpointer-arith -Wcast-qual -Wwrite-strings -fno-common
CFLAGS_release := -O2 -g -D_FORTIFY_SOURCE=2
# float-cast-overflow too: gcc's "undefined" leaves out float-to-int conversions of NaN or out-of-range values
# (clang's fuzz variant has them), e.g. a NaN K/V row quantized for a q8_0 KV cache.
CFLAGS_asan    := -O1 -g -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all \
                  -fno-omit-frame-pointer -DCI_DEBUG_CHECKS=1
CFLAGS_tsan    := -O1 -g -fsanitize=thread -fno-omit-frame-pointer -DCI_DEBUG_CHECKS=1
CFLAGS_debug   := -O0 -g -DCI_DEBUG_CHECKS=1
# The libFuzzer variant (make fuzz, CC=clang): coverage instrumentation on every object, the fuzzer's main
# only at link time.  clang's -Wstring-concatenation flags vocab.c's deliberately split literals.
CFLAGS_fuzz    := -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
                  -fno-omit-frame-pointer -DCI_DEBUG_CHECKS=1 -Wno-string-concatenation
CFLAGS  := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS_$(VARIANT)) -Iinclude -Isrc -MMD -MP
LDFLAGS_asan := -fsanitize=address,undefined,float-cast-overflow
LDFLAGS_fuzz := -fsanitize=fuzzer,address,undefined
LDFLAGS_tsan := -fsanitize=thread
LDFLAGS := $(LDFLAGS_$(VARIANT))
LDLIBS  := -lpcre2-8 -lmicrohttpd -lcjson -lcurl -lpthread -lm

# Tensor parallelism over MPI (--tp, src/core/mpi.c, the only file that includes mpi.h): on when an MPI
# compiler wrapper is found (Debian: openmpi-bin, libopenmpi-dev); MPI=0 builds without it (--tp N > 1 is then
# refused), MPI_CFLAGS / MPI_LIBS override what `mpicc --showme` says (MPICH: `mpicc -show`).
MPI ?= $(if $(shell command -v mpicc 2>/dev/null),1,0)
ifeq ($(MPI),1)
MPI_CFLAGS ?= $(patsubst -I%,-isystem %,$(shell mpicc --showme:compile 2>/dev/null))
MPI_LIBS   ?= $(shell mpicc --showme:link 2>/dev/null)
$(B)/src/core/mpi.o: CFLAGS += $(MPI_CFLAGS) -DCINFER_MPI=1
LDLIBS += $(MPI_LIBS)
endif

# SIMD translation units get the ISA flags; everything else stays portable (runtime dispatch picks).
SIMD_FLAGS := -mavx2 -mfma -mf16c

LIB_SRC  := $(sort $(wildcard src/core/*.c src/kernels/*.c src/format/*.c src/tokenizer/*.c src/grammar/*.c src/chat/*.c src/model/*.c src/engine/*.c))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))

SRV_SRC  := $(sort $(wildcard src/server/*.c))
BENCH_SRC := $(sort $(wildcard src/bench/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(B)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(B)/%.o)
SRV_OBJ  := $(SRV_SRC:%.c=$(B)/%.o)
BENCH_OBJ := $(BENCH_SRC:%.c=$(B)/%.o)
# The web UI page is compiled into the binary as a C array generated from src/server/webui.html.
ifneq ($(wildcard src/server/webui.html),)
CLI_OBJ  += $(B)/gen/webui_data.o
endif
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(B)/tests/%)
LIB      := $(B)/libcinfer.a
# The layers above the engine, each an archive that the binary and the unit tests link: the server
# (tests/unit/test_faults.c serves in-process) and the benchmarks (tests/unit/test_bench.c).
SRV_LIB  := $(B)/libcinfer_server.a
BENCH_LIB := $(B)/libcinfer_bench.a
BIN      := $(B)/cinfer
# Fuzzing (tests/fuzz/README.md): each tests/fuzz/fuzz_<target>.c is one harness.  Every gcc variant links
# it with tests/fuzz/replay.c into $(B)/tests/test_fuzz_<target>, which tests/run.sh runs like the unit
# tests (it replays the target's seed corpus and past crashers); the fuzz variant links it with libFuzzer
# into build/fuzz/fuzz_<target>.
FUZZ_SRC     := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_NAMES   := $(FUZZ_SRC:tests/fuzz/fuzz_%.c=%)
FUZZ_OBJ     := $(FUZZ_SRC:%.c=$(B)/%.o) $(FUZZ_NAMES:%=$(B)/tests/fuzz/replay_%.o)
REPLAY_BIN   := $(FUZZ_NAMES:%=$(B)/tests/test_fuzz_%)
FUZZ_BIN     := $(FUZZ_NAMES:%=$(B)/fuzz_%)
FUZZ_SECONDS ?= 15

.PHONY: all test test-fast test-full asan tsan demo deps format format-check clean bench fuzz fuzz-smoke
ifeq ($(VARIANT),fuzz)
all: $(FUZZ_BIN)
else
all: $(BIN) $(TEST_BIN) $(REPLAY_BIN)
endif
.SECONDARY: $(FUZZ_OBJ)
ifeq ($(VARIANT),fuzz)
# The SIMD kernels read no outside input, and instrumented they take minutes to compile (dot_avx512.c alone
# over four): they are built without sanitizers or coverage.
$(filter %_avx2.o %_avx512.o,$(LIB_OBJ)): CFLAGS := $(filter-out -fsanitize=%,$(CFLAGS))
endif

$(B)/%_avx2.o: %_avx2.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SIMD_FLAGS) -c $< -o $@

$(B)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/gen/webui_data.c: src/server/webui.html scripts/embed.sh
	@mkdir -p $(@D)
	scripts/embed.sh $< $@

$(B)/gen/webui_data.o: $(B)/gen/webui_data.c
	$(CC) $(CFLAGS) -Isrc/server -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(SRV_LIB): $(SRV_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BENCH_LIB): $(BENCH_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BIN): $(CLI_OBJ) $(BENCH_LIB) $(SRV_LIB) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BENCH_LIB) $(SRV_LIB) $(LIB) $(LDLIBS)

$(B)/tests/%: tests/unit/%.c $(BENCH_LIB) $(SRV_LIB) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -Itests -MF $@.d -o $@ $< $(BENCH_LIB) $(SRV_LIB) $(LIB) $(LDLIBS)

# replay.c is compiled once per target, with the target's name (for its corpus directories and messages).
$(B)/tests/fuzz/replay_%.o: tests/fuzz/replay.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DFUZZ_TARGET='"$*"' -c $< -o $@

$(B)/tests/test_fuzz_%: $(B)/tests/fuzz/fuzz_%.o $(B)/tests/fuzz/replay_%.o $(SRV_LIB) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/fuzz_%: $(B)/tests/fuzz/fuzz_%.o $(SRV_LIB) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

deps:
	@scripts/deps.sh

test: deps
	$(MAKE) all
	tests/run.sh $(B) $(or $(T),full)

test-fast: all
	tests/run.sh $(B) $(or $(T),fast)

test-full: all
	tests/run.sh $(B) $(or $(T),full)

# tests/run.sh sets the sanitizer options: every report is fatal and fails the test that produced it.
asan: deps
	$(MAKE) VARIANT=asan test-full

tsan: deps
	$(MAKE) VARIANT=tsan all
	tests/run.sh build/tsan $(or $(T),tsan)

demo: deps
	$(MAKE) $(BIN)
	scripts/demo.sh $(B)

fuzz: deps
	$(MAKE) VARIANT=fuzz CC=clang all

# Each harness for FUZZ_SECONDS (CI); tests/fuzz/run.sh also does the long runs (see tests/fuzz/README.md).
fuzz-smoke: fuzz
	tests/fuzz/run.sh -t $(FUZZ_SECONDS)

bench: deps
	$(MAKE) $(BIN)
	bench/kernels.sh --quick

FORMAT_FILES = $(shell git ls-files '*.c' '*.h')
format:
	@clang-format -i $(FORMAT_FILES)
format-check:
	@clang-format --dry-run --Werror $(FORMAT_FILES) && echo "format-check: ok"

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(SRV_OBJ:.o=.d) $(BENCH_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_BIN:=.d) $(FUZZ_OBJ:.o=.d)
