/* ONNX models in and out (src/onnx): a graph exported by PyTorch (or anyone) becomes an engine model built with
 * the builder calls of fedhet/nn.h, its initializers the initial state; a finalised model goes back out as an
 * inference graph. The protobuf code is generated at build time by protoc-c from Debian's onnx.proto.
 *
 * The engine (src/nn) knows nothing of files or formats: this module reads and writes them and hands the engine
 * a builder (NnZooOptions.build). Supported: opsets 11-17, the default domain, float32 tensors. */
#ifndef FEDHET_ONNX_H
#define FEDHET_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "fedhet/nn.h"

typedef struct OnnxNet OnnxNet;

/* Reads and parses `path`: FH_ERR_DATA naming the file when it is no ONNX model (damaged, truncated), FH_ERR_USAGE
 * for an opset outside 11-17, FH_ERR_IO when it cannot be read. Nothing of the graph is checked yet. */
int onnx_net_read(OnnxNet **out, const char *path);
/* the same from bytes in memory (the file's name only in messages) */
int onnx_net_parse(OnnxNet **out, const uint8_t *buf, size_t len, const char *name);
void onnx_net_free(OnnxNet *net);
/* model.features: the node (its name or its output's) whose output is the features tensor; NULL or "": the
 * input of the last Gemm / MatMul */
void onnx_net_set_features(OnnxNet *net, const char *node);
/* The input's shape as the file gives it: 1 with *shape set when C, H and W are fixed numbers there, else 0
 * (symbolic: the caller's data decides). A 2-D input N x F is F x 1 x 1. */
int onnx_net_input_shape(const OnnxNet *net, NnShape *shape);
/* the number of logits the graph's output has (0 when unknown before a build) */
int onnx_net_classes(const OnnxNet *net);
/* NnZooOptions for this net: .build and .build_ctx set, the rest from `base` (may be NULL) */
NnZooOptions onnx_zoo_options(OnnxNet *net, const NnZooOptions *base);
/* Builds and finalises the net on `m` (nn_zoo_build with onnx_zoo_options) for input `shape` and `classes` */
int onnx_net_build(OnnxNet *net, NnModel *m, NnShape shape, int classes, int max_batch, const NnZooOptions *base);
/* The graph's initializers into state (m->n_state floats) of a model built from this net: every parameter and
 * BN statistic comes from the file, nothing else is touched (a projection head's layers keep theirs). */
int onnx_net_copy_weights(OnnxNet *net, const NnModel *m, float *state);
/* "Add, AveragePool, ..." */
const char *onnx_supported_ops(void);

/* Writes model m with state as an inference graph (opset 13): batch norms in their inference form with the
 * running statistics, dropout left out, the batch dimension symbolic. Written to a temporary name and renamed. */
int onnx_export(const NnModel *m, const float *state, const char *path);

/* Whether a name means an ONNX file (ends in .onnx) */
int onnx_is_path(const char *name);

#endif
