/* Shared between the ONNX importer and exporter (src/onnx). */
#ifndef FEDHET_ONNX_INTERNAL_H
#define FEDHET_ONNX_INTERNAL_H

#include <stdint.h>

enum { ONNX_W = 0, ONNX_B, ONNX_RM, ONNX_RV };

/* one parameter tensor of a built model and the floats it starts from */
typedef struct {
    int layer, role;      /* ONNX_W ...: the layer's w_off, b_off, rm_off or rv_off */
    const float *src;
    int64_t count;
    int transpose_rows;   /* > 0: src is [rows, count / rows] and goes in transposed (MatMul's [in, out]) */
    float scale;          /* Gemm's alpha or beta */
    int owned;            /* src is the map's own copy */
} OnnxWeight;

#endif
