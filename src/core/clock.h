/* Monotonic clock in nanoseconds. */
#ifndef CINFER_CORE_CLOCK_H
#define CINFER_CORE_CLOCK_H

#include <stdint.h>

int64_t ci_now_ns(void);

#endif
