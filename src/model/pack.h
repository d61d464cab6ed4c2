/* The model's weight matrices packed once for the selected kernels (kernels.h ci_pack), as llama.cpp's CPU
 * repack buffers do: where the kernels have a layout of their own for a matrix's type and shape (AVX-512
 * VNNI: Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_K, Q5_K, Q6_K, IQ4_XS, F16 and BF16; AVX2: Q8_0, Q4_0, those
 * K-quants, F16 and BF16; 16 rows side by side), the matrix is copied into it and its mapped pages are given
 * back, so decode streams one sequential layout with no horizontal reductions.  The results keep the same
 * bits (the packed kernels follow the reduction order of kernels/dot.h). */
#ifndef CINFER_MODEL_PACK_H
#define CINFER_MODEL_PACK_H

struct ci_threadpool;
struct model;

/* Packs what the selected kernels can use, once per model (CINFER_NO_PACK=1 in the environment, or the model's
 * pack mode MODEL_PACK_OFF: nothing).  forward_create calls it, so only models that run pay for it (not one
 * loaded for its configuration or tensor table).  The packing is a cache of the weights, computing the same
 * bits: the model stays logically const, and concurrent first calls are serialised.  Without memory for it the
 * matrices run as stored.  The packing runs on the threads of tp (NULL: the caller's alone; no other job may
 * use tp meanwhile).
 *
 * A lazy model (MODEL_PACK_LAZY) leaves its F16/BF16 matrices for model_pass_begin after its first pass.  Their
 * packing is a copy as large as the file's weights (2 GiB for a 1.1B model), whose first touch on a VM that
 * hands freed memory back to its host costs seconds, and the first pass runs well from the file's rows (a
 * one-token run never needs it); quantized matrices are packed before, as their prefill kernels need it. */
void model_pack_weights(const struct model *m, struct ci_threadpool *tp);

/* Bracket every forward pass over m (forward_batch; passes of several forwards may overlap).  Once a pass has
 * run, the next begin packs the float matrices a lazy model left, on the threads of tp: it waits for the passes
 * under way to end, and passes that begin meanwhile wait for it. */
void model_pass_begin(const struct model *m, struct ci_threadpool *tp);
void model_pass_end(const struct model *m);

#endif
