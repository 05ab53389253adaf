/* The model graph's building blocks, shared by model.c (the graph, the NCHW layers), model_plan.c (finalising: its
 * memory plan and layouts) and layers_nd.c (the layers on tensors of any rank). Private to src/nn. */
#ifndef FEDHET_NN_MODEL_INTERNAL_H
#define FEDHET_NN_MODEL_INTERNAL_H

#include "fedhet/core.h"
#include "fedhet/nn.h"
#include "kernels.h"

/* a build error (sticky in m->status), naming the model; returns -1 */
int nn_build_fail(NnModel *m, const char *fmt, ...) FH_PRINTF(2, 3);
/* validates `in` (a layer without input passes the model's input: nn_layer_inputs then counts none) and appends a
 * layer named by its type and ordinal; NULL after an error */
NnLayer *nn_add_layer(NnModel *m, NnOpType type, int in, NnAct act);
/* a tensor of these dims; alias_of: the tensor whose buffers it shares (a view), or -1 */
int nn_add_tensor(NnModel *m, const NnDims *dims, int alias_of);
/* a parameter (or buffer) of layer `layer`: its offset in the state vector (see model.c) */
int64_t nn_add_view(NnModel *m, int layer, const char *suffix, NnParamRole role, int ndim, const int *dims);

/* a layer's inputs: in and in2, a concat's list, none for a parameter or constant */
int nn_layer_inputs(const NnLayer *l);
int nn_layer_input(const NnLayer *l, int k);
/* a view of its input's buffers (flatten, reshape): no work, no buffers of its own */
int nn_layer_is_view(const NnLayer *l);

/* the tensor whose buffers t's are (t itself unless t is a view) */
int nn_tensor_root(const NnModel *m, int t);
float *nn_tdata(const NnModel *m, int t);
float *nn_tgrad(const NnModel *m, int t);
int nn_is_input_tensor(const NnModel *m, int t);
/* the floats of tensor t at this batch (a tensor without batch: its size) */
int64_t nn_tensor_floats(const NnModel *m, int t, int batch);
/* dims at run time: the batch's filled in */
void nn_dims_at(const NnDims *d, int batch, int64_t *n);
int64_t nn_dims_size(const NnDims *d);
/* the dims of a batch-first tensor of per-sample shape s and rank 2 to 4 */
NnDims nn_dims_nchw(NnShape s, int rank);

/* a conv layer's shape for `batch` samples */
NnConvShape nn_layer_conv_shape(const NnModel *m, const NnLayer *l, int batch);
/* a pool the general kernel computes (the square kernels compute the others) */
int nn_pool_general(const NnModel *m, const NnLayer *l);
/* ADD, MUL: operand in2 broadcast over in's H x W */
int nn_layer_broadcasts(const NnModel *m, const NnLayer *l);
/* a standalone activation beyond ReLU / ReLU6, computed from the layer's input */
int nn_layer_own_act(const NnLayer *l);

static inline float *nn_param_at(const NnModel *m, int64_t off) { return off >= 0 ? m->state + off : NULL; }
static inline float *nn_pgrad_at(const NnModel *m, int64_t off) { return off >= 0 ? m->grad + off : NULL; }

/* ---- layers_nd.c: the layers on tensors of any rank ---- */
/* whether its backward reads the data of its input k (0 or 1), or of its output (k = -1) */
int nn_nd_reads(const NnModel *m, const NnLayer *l, int k);
/* scratch sized for max_batch, at finalize */
int nn_nd_finalize_layer(NnModel *m, NnLayer *l);
/* folds the copies around batched products into their strides (NnLayer.folded); before the memory plan */
void nn_nd_fold_products(NnModel *m);
void nn_nd_forward(NnModel *m, NnLayer *l, int batch);
void nn_nd_backward(NnModel *m, NnLayer *l, int batch);
/* forward FLOPs per sample */
int nn_nd_is_op(NnOpType type);

#endif
