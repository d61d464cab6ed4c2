/* The model's weight matrices packed once for the selected kernels (kernels.h ci_pack), as llama.cpp's CPU
 * repack buffers do: where the kernels have a layout of their own for a matrix's type and shape (AVX-512
 * VNNI: Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_K, Q5_K, Q6_K, IQ4_XS, F16 and BF16; AVX2: Q8_0, Q4_0, those
 * K-quants, F16 and BF16; 16 rows side by side), the matrix is copied into it and its mapped pages are given back, so
 * decode streams one sequential layout with no horizontal reductions.  The results keep the same bits (the
 * packed kernels follow the reduction order of kernels/dot.h). */
#ifndef CINFER_MODEL_PACK_H
#define CINFER_MODEL_PACK_H

struct ci_threadpool;
struct model;

/* Packs what the selected kernels can use, once per model (CINFER_NO_PACK=1 in the environment: nothing).
 * forward_create calls it, so only models that run pay for it (not one loaded for its configuration or
 * tensor table).  The packing is a cache of the weights, computing the same bits: the model stays logically
 * const, and concurrent first calls are serialised.  Without memory for it the matrices run as stored.  The
 * packing runs on the threads of tp (NULL: the caller's alone; no other job may use tp meanwhile). */
void model_pack_weights(const struct model *m, struct ci_threadpool *tp);

#endif
