/* A loaded model: hyper-parameters and weight views over one read-only mapping of a GGUF file or a llama2.c
 * checkpoint (detected by magic).  The tokenizer is loaded separately by the layer above (tokenizer/ and
 * model/ know nothing of each other); model_gguf() exposes the GGUF metadata it needs. */
#ifndef CINFER_MODEL_MODEL_H
#define CINFER_MODEL_MODEL_H

#include <pthread.h>
#include <stdint.h>

#include "core/status.h"
#include "model/config.h"
#include "model/weights.h"

struct gguf;
struct llama2c;

enum model_format { MODEL_FORMAT_GGUF, MODEL_FORMAT_LLAMA2C };

/* When the weight matrices are copied into the kernels' own layout (model/pack.h). */
enum model_pack_mode {
    MODEL_PACK_EAGER, // all of them when the first forward pass is created (the default)
    MODEL_PACK_LAZY,  // F16/BF16 ones only once a forward pass has run: none before the first token
    MODEL_PACK_OFF,   // none: every matrix runs from the file's layout
};

/* model/pack.c's state: the packed copies and which of them exist. */
struct model_packing {
    enum model_pack_mode mode;
    void *first;         // packed when the first forward is created, owned; NULL: none
    void *later;         // the F16/BF16 matrices of a lazy model, packed after its first pass, owned
    bool tried;          // the first packing ran (whatever it packed)
    bool vectors_copied; // the norm weights and biases were copied next to packed matrices
    // The gate between forward passes and the packing after the first pass, under gate:
    pthread_mutex_t gate;
    pthread_cond_t changed; // running fell to 0, or the packing ended
    int running;            // passes under way
    bool passed;            // a pass has run
    bool waiting;           // a lazy model's float matrices wait for the end of its first pass
    bool packing;           // they are being packed: new passes wait
};

struct model {
    struct model_config config;
    struct model_weights weights;
    enum model_format format;
    struct gguf *gguf;       // GGUF files (NULL otherwise)
    struct llama2c *llama2c; // llama2.c checkpoints (NULL otherwise)
    uint64_t file_bytes;
    bool read_whole; // the whole file was asked to be read ahead at load (model_load_ex's read_ahead)
    struct model_packing pack;
};

enum ci_status model_load(const char *path, struct model **out, struct ci_err *err);
/* model_load; a GGUF file is read ahead whole only when read_ahead (a tensor-parallel or pipeline rank loads
 * without, then model_read_ahead once its shard is cut). */
enum ci_status model_load_ex(const char *path, bool read_ahead, struct model **out, struct ci_err *err);
/* Asks the kernel to read ahead the file bytes of m's tensors (its shard after model_shard; the column slices'
 * whole row ranges); returns those bytes (0 for a llama2.c file, read ahead at load). */
uint64_t model_read_ahead(const struct model *m);
void model_free(struct model *m);

/* Bytes of weights (sum of tensor sizes as stored), parameter count. */
uint64_t model_weight_bytes(const struct model *m);
uint64_t model_n_params(const struct model *m);
/* True once the weights' file was found truncated while mapped: the weights read since are not the
 * model's (zeros stand in for the lost part), so nothing computed from them may be trusted. */
bool model_file_damaged(const struct model *m);

#endif
