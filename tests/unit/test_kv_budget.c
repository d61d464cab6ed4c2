/* engine/kv_budget (the default KV pool size from available memory) against hand-computed numbers, and
 * core/sysmem's reading of the available memory (the CINFER_MEM_AVAILABLE override, /proc/meminfo). */
#include "engine/kv_budget.h" // first: the header must compile on its own

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sysmem.h"
#include "test.h"

#define MIB (1ll << 20)
#define GIB (1ll << 30)

static int64_t blocks(int64_t avail, int64_t weights, double frac, int64_t block, int64_t max,
                      enum kv_sizing *why) {
    struct kv_budget b = {avail, weights, frac, block, max};
    return kv_budget_blocks(&b, why);
}

TEST(memory_share_minus_weights) {
    enum kv_sizing why;
    // 8 GiB available, half of it is 4 GiB, minus 1 GiB of weights: 3 GiB of 1 MiB blocks.
    CHECK(blocks(8 * GIB, 1 * GIB, 0.5, MIB, 100000, &why) == 3072 && why == KV_SIZED_MEMORY);
    // 10e9 x 0.3 = 3e9, minus 123456789 = 2876543211 bytes; / 3e6 = 958.85 -> 958 whole blocks (the floor
    // would be 64 MiB / 3e6 = 22).
    CHECK(blocks(10000000000ll, 123456789, 0.3, 3000000, 100000, &why) == 958 && why == KV_SIZED_MEMORY);
    // A quarter of 1 GiB minus stories260K's 1171200 bytes of F32 weights, in its f16 blocks of 16 tokens
    // (2 x 5 layers x 4 KV heads x 8 dims x 2 bytes x 16 = 10240 bytes): 267264256 / 10240 = 26100.02.
    CHECK(blocks(GIB, 1171200, 0.25, 10240, 4096 * 128, &why) == 26100 && why == KV_SIZED_MEMORY);
}

TEST(capped_at_what_the_sequences_can_use) {
    enum kv_sizing why;
    // 4 GiB could hold 4096 blocks, but max_seqs whole contexts are only 1000 blocks.
    CHECK(blocks(8 * GIB, 0, 0.5, MIB, 1000, &why) == 1000 && why == KV_SIZED_CAP);
    // Exactly at the cap counts as the cap.
    CHECK(blocks(8 * GIB, 0, 0.5, MIB, 4096, &why) == 4096 && why == KV_SIZED_CAP);
    CHECK(blocks(8 * GIB, 0, 0.5, MIB, 4097, &why) == 4096 && why == KV_SIZED_MEMORY);
}

TEST(floor_when_memory_is_short) {
    enum kv_sizing why;
    // Half of 1 GiB is 512 MiB, the weights 600 MiB: nothing left; the floor is 64 MiB / 1 MiB = 64 blocks.
    CHECK(blocks(GIB, 600 * MIB, 0.5, MIB, 100000, &why) == 64 && why == KV_SIZED_FLOOR);
    // 40 MiB left is below the 64 MiB floor too.
    CHECK(blocks(GIB, 472 * MIB, 0.5, MIB, 100000, &why) == 64 && why == KV_SIZED_FLOOR);
    // The floor is itself capped: 10 blocks are all the sequences could use.
    CHECK(blocks(GIB, 600 * MIB, 0.5, MIB, 10, &why) == 10 && why == KV_SIZED_CAP);
    // A block larger than the floor: at least one block.
    CHECK(blocks(GIB, 600 * MIB, 0.5, 100 * MIB, 100, &why) == 1 && why == KV_SIZED_FLOOR);
    // Nothing available at all.
    CHECK(blocks(0, 0, 0.5, MIB, 100, &why) == 64 && why == KV_SIZED_FLOOR);
}

TEST(fallback_when_memory_is_unknown) {
    enum kv_sizing why;
    CHECK(blocks(-1, 5 * GIB, 0.5, MIB, 100000, &why) == 256 && why == KV_SIZED_FALLBACK);
    CHECK(blocks(-1, 0, 0.5, MIB, 100, &why) == 100 && why == KV_SIZED_CAP);
    CHECK(blocks(-1, 0, 0.5, GIB, 100, &why) == 1 && why == KV_SIZED_FALLBACK);
}

TEST(parse_bytes) {
    CHECK(ci_parse_bytes("4096") == 4096);
    CHECK(ci_parse_bytes("512K") == 512 * 1024);
    CHECK(ci_parse_bytes("64MiB") == 64 * MIB);
    CHECK(ci_parse_bytes("1.5G") == 3 * GIB / 2);
    CHECK(ci_parse_bytes("2GB") == 2 * GIB);
    CHECK(ci_parse_bytes("1T") == 1024 * GIB);
    CHECK(ci_parse_bytes("") == -1 && ci_parse_bytes("abc") == -1 && ci_parse_bytes("-5M") == -1);
    CHECK(ci_parse_bytes("0") == -1 && ci_parse_bytes("12Q") == -1 && ci_parse_bytes("1e30") == -1);
    CHECK(ci_parse_bytes(NULL) == -1);
}

/* MemAvailable read as the kernel states it (kB), compared with our own parse of /proc/meminfo here. */
static long long meminfo_kib(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char key[64];
    long long v;
    long long found = -1;
    while (fscanf(f, "%63s %lld kB", key, &v) == 2)
        if (found < 0 && !strcmp(key, "MemAvailable:"))
            found = v;
    fclose(f);
    return found;
}

TEST(mem_available) {
    CHECK(setenv("CINFER_MEM_AVAILABLE", "3G", 1) == 0);
    CHECK(ci_mem_available() == 3 * GIB);
    CHECK(setenv("CINFER_MEM_AVAILABLE", "lots", 1) == 0);
    CHECK(ci_mem_available() == -1);
    CHECK(unsetenv("CINFER_MEM_AVAILABLE") == 0);
    int64_t a = ci_mem_available();
    CHECK(a > 0);
    long long kib = meminfo_kib();
    if (kib > 0) { // Linux: the same figure within what other processes did meanwhile (1 GiB of slack)
        long long diff = (long long)a - kib * 1024;
        CHECK(diff > -GIB && diff < GIB);
    }
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(memory_share_minus_weights);
    RUN(capped_at_what_the_sequences_can_use);
    RUN(floor_when_memory_is_short);
    RUN(fallback_when_memory_is_unknown);
    RUN(parse_bytes);
    RUN(mem_available);
    return test_exit_code();
}
