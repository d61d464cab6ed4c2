/* The built-in web UI page (src/server/webui.html), compiled in by scripts/embed.sh, which generates the file
 * that defines these at build time.  The server sends it for GET / as text/html; charset=utf-8. */
#ifndef CINFER_SERVER_WEBUI_H
#define CINFER_SERVER_WEBUI_H

#include <stddef.h>

/* [cinfer_webui_html_len + 1] bytes: the page, then a NUL (so it is also a C string; the page has no NUL). */
extern const char cinfer_webui_html[];
extern const size_t cinfer_webui_html_len;

#endif
