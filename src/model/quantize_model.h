/* `cinfer quantize`: one GGUF file to another with its tensors re-typed per a llama.cpp quantization preset
 * (model/quant_rules.h).  Every key/value is copied (general.file_type becomes the preset's LLAMA_FTYPE
 * number, general.quantization_version 2); the tensors keep their order, names and shapes.  A tensor whose
 * type does not change is copied byte for byte; any other is dequantized row by row (ci_dequantize_row: F32,
 * F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants) and quantized again (ci_quantize_row), rows
 * spread over n_threads.  Streamed: memory is one output tensor plus a row per thread.  A partial output is
 * removed on failure. */
#ifndef CINFER_MODEL_QUANTIZE_MODEL_H
#define CINFER_MODEL_QUANTIZE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "kernels/quant.h"

struct quantize_report {
    struct {
        int count;           // tensors written in this type
        uint64_t n_elements; // their elements
        uint64_t n_bytes;    // their data bytes
    } types[CI_TYPE_COUNT];  // by enum ci_type
    int n_tensors;
    int n_fallback;               // tensors whose row length forced a fallback type
    int ftype;                    // general.file_type written
    uint64_t in_bytes, out_bytes; // file sizes
};

struct quantize_options {
    int n_threads; // >= 1
    bool pure;     // every quantized tensor in the preset's base type (fallbacks still apply)
};

/* preset: a name quant_preset_find knows.  CI_ERR_INVALID for an unknown preset (the message lists them) or
 * an output path that is the input; CI_ERR_IO/CI_ERR_FORMAT for an unreadable or invalid input;
 * CI_ERR_UNSUPPORTED for a tensor that must change type but whose source type does not dequantize here. */
enum ci_status quantize_model(const char *in, const char *out, const char *preset,
                              const struct quantize_options *opt, struct quantize_report *rep,
                              struct ci_err *err);

#endif
