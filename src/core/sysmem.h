/* How much memory the machine can give this process now: what the default KV pool is sized from
 * (engine/kv_budget.h). */
#ifndef CINFER_CORE_SYSMEM_H
#define CINFER_CORE_SYSMEM_H

#include <stdint.h>

/* Bytes of memory available without swapping: CINFER_MEM_AVAILABLE when set (a size such as 4096, 512M or
 * 2G: pretend the machine has that much, for tests and capacity planning), else MemAvailable of
 * /proc/meminfo (Linux: free memory plus the page cache and reclaimable slabs the kernel can give back),
 * else sysconf(_SC_AVPHYS_PAGES) pages (free pages only: a smaller, safe answer).  -1 when none of them
 * answers (or CINFER_MEM_AVAILABLE is malformed). */
int64_t ci_mem_available(void);

/* Parses "4096", "512K", "64M", "1.5G" (binary multiples, optional "iB"/"B") into bytes; -1 if malformed,
 * not positive or above 2^62. */
int64_t ci_parse_bytes(const char *s);

#endif
