/* The ONNX importer's values and helpers, shared by its files: import.c (reading, the walk over the nodes, values,
 * weights), import_fold.c (constants and shape arithmetic), import_nchw.c (the layers of convolutional networks)
 * and import_nd.c (tensors of any rank: transformers). Private to src/onnx. */
#ifndef FEDHET_ONNX_IMPORT_INTERNAL_H
#define FEDHET_ONNX_IMPORT_INTERNAL_H

#include <stdint.h>

#include "fedhet/core.h"
#include "fedhet/nn.h"
#include "fedhet/onnx.h"
#include "onnx.pb-c.h"
#include "onnx_internal.h"

/* A constant: an initializer, a Constant node, or anything computed from constants alone. An integer may depend on
 * the batch size N, which is unknown at import (the shape arithmetic PyTorch exports reads it with Shape): its value
 * is i[k] + ib[k] N (ib NULL: none does). */
typedef struct {
    int ndim;
    int64_t dims[8];
    int64_t n;
    int is_int;   /* values in i (shapes, indices), else in f */
    float *f;
    int64_t *i;
    int64_t *ib;  /* integers: the multiple of the batch size each holds, NULL for none */
    int init;     /* index of the initializer it is, -1 */
} Const;

/* An activation's ONNX shape. The axis that holds the batch holds d[bax] times it, and within that axis the batch
 * sits after bouter values and before d[bax] / bouter (PyTorch's attention merges it with the heads: N x H at
 * [T, N * H, dh]). The engine tensor's dims are these with the batch axis split into (bouter, N, d / bouter), sizes 1
 * dropped (import_nd.c, imp_od_dims). */
typedef struct {
    int rank;
    int64_t d[8];
    int bax;        /* the axis holding the batch; -1: none (a parameter read as a tensor) */
    int64_t bouter;
} Od;

enum {
    V_NONE = 0, V_CONST, V_TENSOR,
    V_GN_SPLIT, V_GN_NORMED, V_GN_BACK, V_GN_SCALED, /* PyTorch's GroupNorm pattern (import_nchw.c) */
    V_SHUF_SPLIT, V_SHUF_SWAPPED,                    /* a channel shuffle */
    V_FILL, V_RAND, V_KEEP /* stochastic depth: a batch-shaped fill, its per-sample draw, the mask (import_nd.c) */
};

typedef struct {
    const char *name;
    int kind;
    Const c;
    int t;       /* engine tensor (V_TENSOR; the pattern's source tensor for V_GN_*) */
    Od od;       /* V_TENSOR, V_RAND, V_KEEP: the ONNX shape */
    int layer;   /* the layer that wrote t, -1 */
    int groups;  /* V_GN_*: groups, eps, scale */
    float eps;
    const Const *gamma;
    float p, scale; /* V_RAND: the draw's bounds; V_KEEP: the drop probability and the scale applied so far */
    int pad[4];  /* V_TENSOR: a constant zero Pad not applied yet (top, left, bottom, right): the next Conv or
                  * AveragePool takes it into its own pads */
} Val;

struct OnnxNet {
    char *path;
    Onnx__ModelProto *model;
    int opset;
    char *features_node;
    Const *inits;        /* decoded initializers, [graph->n_initializer] */
    OnnxWeight *weights; /* the last build's map of parameters to initializers */
    int n_weights, cap_weights;
};

/* how an initializer was taken: as a layer's weight (tied weights must agree on all of it), or as a tensor */
typedef struct {
    int layer, role, transpose_rows; /* the first layer that took it, -1 */
    float scale;
    int tensor;                      /* the parameter tensor (NN_OP_PARAM) read where it is an operand, -1 */
} InitUse;

typedef struct {
    OnnxNet *net;
    NnModel *m;
    const Onnx__GraphProto *g;
    Val **vals;
    int n_vals, cap_vals;
    InitUse *init_used;  /* per initializer */
    void **arena;        /* allocations of this build */
    int n_arena, cap_arena;
    int features;        /* tensor, -1 */
    int features_named;  /* model.features was found */
    int node;            /* the node being read */
    unsigned char *absorbed; /* nodes already done by a node before them (MatMul's bias Add, patterns) */
    int proj_dim, classes;
    int logits;
} Bld;

static inline const Onnx__NodeProto *imp_cur(const Bld *b) { return b->g->node[b->node]; }
const char *imp_node_name(const Bld *b, const Onnx__NodeProto *n);

/* "FILE: node NAME (OP): ..." */
#define NODE_FAIL(b, status, ...)                                                                             \
    do {                                                                                                      \
        char why_[1024];                                                                                      \
        snprintf(why_, sizeof why_, __VA_ARGS__);                                                             \
        return fh_error_raise((status), __FILE__, __LINE__, "%s: node '%s' (%s): %s", (b)->net->path,        \
                              imp_node_name(b, imp_cur(b)), imp_cur(b)->op_type, why_);                       \
    } while (0)
#define NEED_MEM(p)                                                                                           \
    do {                                                                                                      \
        if (!(p)) FH_FAIL(FH_ERR_MEMORY, "out of memory");                                                        \
    } while (0)

/* ---- import.c ---- */
void *imp_alloc(Bld *b, size_t bytes); /* zeroed, freed with the build */
/* an initializer or a Constant node's tensor into c (its buffers malloc'ed) */
int imp_decode_tensor(const Onnx__TensorProto *t, Const *c, const char *path, const char *what);
Val *imp_find(Bld *b, const char *name);
Val *imp_put(Bld *b, const char *name, int kind);
/* a batch-first activation of rank 2 to 4 (rank 4: N C H W from the tensor's shape; 2: N x size; 3: N x C x H) */
Val *imp_put_tensor(Bld *b, const char *name, int t, int rank);
/* an activation of ONNX shape od */
Val *imp_put_nd(Bld *b, const char *name, int t, const Od *od);
/* an alias of x under another name (its layer no longer fuses an activation: others read it) */
int imp_put_alias(Bld *b, const char *name, const Val *x);
int imp_consumers(const Bld *b, const char *name, int from);
int imp_next_reader(const Bld *b, const char *name);
/* the only reader of `name` after the current node, when it is a node of type op (NULL: any type): its index, -1 */
int imp_sole_reader(const Bld *b, const char *name, const char *op);
const Onnx__AttributeProto *imp_attr(const Onnx__NodeProto *n, const char *name);
int64_t imp_attr_i(const Onnx__NodeProto *n, const char *name, int64_t dflt);
float imp_attr_f(const Onnx__NodeProto *n, const char *name, float dflt);
int imp_attr_ints(const Onnx__NodeProto *n, const char *name, const int64_t **v);
int imp_check_attrs(Bld *b, const char *const *known);
Val *imp_in_val(Bld *b, int k);
const Const *imp_in_const(Bld *b, int k);
int imp_in_tensor(Bld *b, int k, Val **v);
int imp_need_const(Bld *b, int k, const Const **c, const char *what);
/* layer `layer`'s parameter of ONNX role (ONNX_W ...) starts from c; a second layer taking the same initializer ties
 * to the first (one parameter) */
int imp_record_weight(Bld *b, int layer, int role, const Const *c, int transpose_rows, float scale);
int imp_is_features_name(const Bld *b, const char *value);
int imp_act_node(Bld *b, NnAct act);
int imp_act_node_ex(Bld *b, NnActSpec spec, const char *out);

/* ---- import_fold.c ---- */
int imp_const_new(Bld *b, Const *c, int ndim, const int64_t *dims, int is_int);
double imp_cval(const Const *c, int64_t k);
int64_t imp_cint(const Const *c, int64_t k); /* exact for integers (a double loses INT64_MAX) */
/* the integer at k, failing when it depends on the batch size */
int imp_const_plain(Bld *b, const Const *c, int64_t k, int64_t *v, const char *what);
int64_t imp_norm_axis(int64_t a, int ndim);
/* ONNX Slice's clamping of one axis of size dim (step not 0): the first index and how many (0: empty) */
void imp_slice_range(int64_t dim, int64_t s, int64_t e, int64_t step, int64_t *start, int64_t *count);
/* folds the current node when its inputs are constants: *done 1 when it did */
int imp_fold(Bld *b, int *done);

/* ---- import_nchw.c: convolutional networks ---- */
int imp_need_rank4(Bld *b, Val *x);
int imp_op_conv(Bld *b);
int imp_op_batchnorm(Bld *b);
int imp_op_pool(Bld *b, int max);
int imp_op_instnorm(Bld *b);
int imp_op_sigmoid(Bld *b);
int imp_op_pad(Bld *b);
int imp_op_clip(Bld *b);
int imp_op_dropout(Bld *b);
int imp_finish_pattern(Bld *b, Val *v);
/* the NCHW forms of these ops: 1 in *done when the node was one (else the general form of import_nd.c runs) */
int imp_nchw_reshape(Bld *b, int *done);
int imp_nchw_transpose(Bld *b, int *done);
int imp_nchw_binary(Bld *b, int *done);
int imp_nchw_concat(Bld *b, int *done);
int imp_nchw_slice(Bld *b, int *done);
int imp_nchw_split(Bld *b, int *done);
int imp_nchw_gap(Bld *b, int *done);
int imp_op_linear(Bld *b, int gemm);
int imp_flatten_to(Bld *b, Val *x, const char *out);

/* ---- import_nd.c: tensors of any rank ---- */
/* the engine dims of an ONNX shape */
NnDims imp_od_dims(const Od *od);
/* x's engine tensor with exactly the dims of its ONNX shape (a view is added when they differ) */
int imp_as_engine(Bld *b, Val *x);
/* input k as an activation: a tensor, or a float constant made one (an initializer: a trainable parameter) */
int imp_in_operand(Bld *b, int k, Val **v);
int imp_op_reshape(Bld *b);
int imp_op_flatten(Bld *b);
int imp_op_squeeze(Bld *b, int unsqueeze);
int imp_op_transpose(Bld *b);
int imp_op_matmul(Bld *b);
int imp_op_binary(Bld *b, NnBinOp op);
int imp_op_concat(Bld *b);
int imp_op_slice(Bld *b);
int imp_op_split(Bld *b);
int imp_op_gather(Bld *b);
/* x padded with zeros: pads[k] entries before axis k and pads[rank + k] after it */
int imp_pad_nd(Bld *b, Val *x, const int64_t *pads);
int imp_op_expand(Bld *b);
int imp_op_reduce_mean(Bld *b);
int imp_op_softmax(Bld *b);
int imp_op_layernorm(Bld *b);
int imp_op_unary(Bld *b, NnAct act); /* Erf, Sqrt, Exp */
int imp_op_pow(Bld *b);
int imp_op_constant_of_shape(Bld *b);
int imp_op_random_like(Bld *b);
int imp_op_less(Bld *b);
int imp_op_identity(Bld *b);

#endif
