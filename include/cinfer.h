/* cinfer — public API.  Opaque handles with the cinfer_ prefix; the engine can be embedded without the CLI or
 * the server.  Every function that can fail returns a cinfer_status and, where given, fills a cinfer_error. */
#ifndef CINFER_H
#define CINFER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t cinfer_token;
typedef int32_t cinfer_pos;
typedef int32_t cinfer_seq;

#ifdef __cplusplus
}
#endif

#endif
