/* Special tokens recognised by their text, as llama.cpp recognises them: the EOT, EOM and fill-in-the-middle
 * ids that converters often do not write, the end-of-generation set, and the per-family exceptions. */
#ifndef CINFER_TOKENIZER_SPECIAL_H
#define CINFER_TOKENIZER_SPECIAL_H

#include "core/status.h"

struct vocab;

/* Fills the ids the file left unset, marks the tokens found as control (so text never spells them), and
 * builds v->eog (sorted).  Call once the ids from the file are read, before vocab_build_tables. */
enum ci_status vocab_detect_special(struct vocab *v, struct ci_err *err);

#endif
