/* Model hyper-parameters, from GGUF keys (<arch>.embedding_length, ...) or a llama2.c header. */
#ifndef CINFER_MODEL_CONFIG_H
#define CINFER_MODEL_CONFIG_H

#include <stdbool.h>

#include "core/status.h"

struct gguf;
struct llama2c;

enum model_arch { MODEL_ARCH_LLAMA, MODEL_ARCH_QWEN2 };

struct model_config {
    enum model_arch arch;
    int n_vocab;
    int n_embd;
    int n_layer;
    int n_head;
    int n_kv_head;
    int head_dim; // n_embd / n_head
    int n_ff;
    int n_ctx_train; // context length the model was trained for
    int rope_dim;    // dimensions rotated per head (<= head_dim)
    float rope_base;
    float rms_eps;
    bool rope_neox; // qwen2: rotate (x[i], x[i + rope_dim/2]); llama: adjacent pairs
};

const char *model_arch_name(enum model_arch a);
/* Reads and validates the hyper-parameters of a GGUF model (n_vocab comes from the token_embd tensor). */
enum ci_status model_config_from_gguf(struct model_config *c, const struct gguf *g, struct ci_err *err);
/* A llama2.c checkpoint's hyper-parameters: arch llama, rope_base 10000, rms_eps 1e-5, rope_dim = head_dim,
 * adjacent-pair rope, n_ctx_train = seq_len (the header itself is validated by llama2c_open). */
void model_config_from_llama2c(struct model_config *c, const struct llama2c *l);
/* Checks ranges and consistency (positive sizes, n_head % n_kv_head == 0, even rope_dim, ...). */
enum ci_status model_config_validate(const struct model_config *c, struct ci_err *err);

#endif
