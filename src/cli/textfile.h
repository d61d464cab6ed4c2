/* Reading a whole text file for a subcommand (a Jinja template, a JSON context). */
#ifndef CINFER_CLI_TEXTFILE_H
#define CINFER_CLI_TEXTFILE_H

#include <stddef.h>

/* The bytes of path, NUL-terminated, ci_malloc'ed (release with ci_free); *len excludes the NUL.  NULL (after
 * printing "cinfer CMD: ..." to stderr) when it cannot be read or is larger than max bytes. */
char *cli_read_text_file(const char *cmd, const char *path, size_t max, size_t *len);

#endif
