/* Internal invariants.  CI_ASSERT is always on (file:line, then abort); CI_DASSERT is for hot loops and
 * compiles out unless CI_DEBUG_CHECKS is set.  Never use these for input from outside: that is a status. */
#ifndef CINFER_CORE_CHECK_H
#define CINFER_CORE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CI_ASSERT(cond)                                                                                      \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond);                     \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

#if defined(CI_DEBUG_CHECKS) && CI_DEBUG_CHECKS
#define CI_DASSERT(cond) CI_ASSERT(cond)
#else
#define CI_DASSERT(cond) ((void)0)
#endif

/* Elements of an array (not a pointer), counted by the compiler. */
#define CI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define CI_UNREACHABLE()                                                                                     \
    do {                                                                                                     \
        fprintf(stderr, "%s:%d: unreachable\n", __FILE__, __LINE__);                                         \
        abort();                                                                                             \
    } while (0)

#endif
