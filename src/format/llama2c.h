/* llama2.c checkpoint loader: the legacy export (7 int32 header, fp32 tensors, freq_cis tables) and the
 * "version 1" export (256-byte header with magic "ak42", fp32 tensors in a different order, no freq_cis).
 * llama2c_open validates the header (ranges, head divisibility) and that the file size equals the implied
 * layout with overflow-checked arithmetic before handing out any view.  Tensors are exposed as F32 struct
 * ci_tensor views under GGUF names (token_embd.weight, blk.N.attn_q.weight, ...), so model_weights_bind can
 * bind a llama2.c file exactly as it binds a GGUF one.
 *
 * Ownership: struct llama2c owns the mapping (or borrows the caller's bytes for llama2c_open_mem); every
 * tensor and its data is a view valid until llama2c_free. */
#ifndef CINFER_FORMAT_LLAMA2C_H
#define CINFER_FORMAT_LLAMA2C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "kernels/quant.h"

#define LLAMA2C_MAGIC_V1 0x616b3432u // bytes "24ka" as a little-endian uint32

struct llama2c;

enum ci_status llama2c_open(const char *path, struct llama2c **out, struct ci_err *err);
/* Parses caller-owned bytes (must outlive the struct llama2c).  Used by tests and fuzzers. */
/* True once a read of the mapped file hit a part that was truncated away (see ci_mapfile_damaged). */
bool llama2c_file_damaged(const struct llama2c *l);
enum ci_status llama2c_open_mem(const void *data, uint64_t size, struct llama2c **out, struct ci_err *err);
void llama2c_free(struct llama2c *l);

/* The header's hyper-parameters, validated (vocab made positive; the sign only says whether the classifier
 * is shared).  model_config_from_llama2c turns them into a model's configuration. */
struct llama2c_hparams {
    int32_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
};
const struct llama2c_hparams *llama2c_hparams(const struct llama2c *l);
int llama2c_version(const struct llama2c *l);            // 0 for the legacy export, 1 for version 1
bool llama2c_shared_classifier(const struct llama2c *l); // output.weight is token_embd's data

/* Looks a tensor up by GGUF name; NULL if absent.  Matches weights_lookup_fn (src is a struct llama2c). */
const struct ci_tensor *llama2c_find_tensor(const void *l, const char *name);
/* All tensors, in GGUF order (token_embd, output_norm, output, then each layer's). */
int llama2c_n_tensors(const struct llama2c *l);
const struct ci_tensor *llama2c_tensor(const struct llama2c *l, int i);

/* True if the bytes look like a llama2.c checkpoint: a version-1 magic, or (not "GGUF") a legacy header with
 * plausible values.  A cheap format probe for the model loader; llama2c_open still validates everything. */
bool llama2c_sniff(const void *data, size_t n);

#endif
