/* fedhet neural-network engine: layers, losses, optimisers and the model zoo, on flat float vectors.
 *
 * A model's whole state is ONE float vector: trainable parameters first (layer order, weight then bias),
 * then non-trainable buffers (BatchNorm running mean and variance). Layers keep offsets into it, so the
 * vector behind `model->state` may be swapped for any other of length n_state. Gradients live in a second
 * vector of the same layout (`model->grad`; its buffer part stays zero).
 *
 * Activations are float32, per-sample shape C x H x W, NCHW (under the onednn backend, channel-blocked
 * between the layers that take it: NnTensor.block; the logits and features are always NCHW), allocated for
 * `max_batch` samples when the model is finalised; a forward/backward step allocates nothing (under the onednn
 * backend no buffer once warm: the first forward at another batch size creates that size's primitives,
 * src/nn/onednn.c). Backward accumulates into model->grad: zeroing is explicit (nn_model_zero_grad). No MPI,
 * no HDF5, no config in here: floats and shapes only. */
#ifndef FEDHET_NN_H
#define FEDHET_NN_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int c, h, w;
} NnShape;

/* A tensor of any rank (sequences, attention heads): logical dims d[0..ndim), row-major, one of them the batch
 * (d[batch] is 1 here, the batch size at run time). The batch may sit anywhere, as PyTorch's attention moves it
 * ([T, N, E]); batch = -1: a tensor the same for every sample (a parameter such as a class token or a position
 * embedding, a constant), held once. The NCHW layers take batch-first tensors (their NnShape: a rank-4 tensor's
 * C x H x W, rank 2's F x 1 x 1). */
#define NN_MAX_DIMS 8
typedef struct {
    int ndim, batch;
    int d[NN_MAX_DIMS];
} NnDims;

/* Activations. Layers fuse NONE, RELU and RELU6 (conv, linear, batch norm, ...); the others are standalone
 * layers (nn_act_ex), whose a and b are the op's parameters. */
typedef enum { NN_ACT_NONE = 0, NN_ACT_RELU, NN_ACT_RELU6,
               NN_ACT_LEAKY_RELU,  /* a = alpha: x > 0 ? x : a x */
               NN_ACT_CLIP,        /* min(max(x, a), b); either may be -INFINITY / INFINITY */
               NN_ACT_SIGMOID,
               NN_ACT_HARDSIGMOID, /* max(0, min(1, a x + b)); ONNX defaults a = 0.2, b = 0.5; PyTorch's 1/6, 0.5 */
               NN_ACT_HARDSWISH,   /* x * relu6(x + 3) / 6 */
               NN_ACT_SILU,        /* x * sigmoid(x) */
               NN_ACT_TANH,
               NN_ACT_GELU,        /* x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 */
               NN_ACT_GELU_TANH,   /* x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2 */
               NN_ACT_ERF,
               NN_ACT_SQRT,
               NN_ACT_EXP,
               NN_ACT_POW,         /* x^a (a: a constant exponent) */
               NN_ACT_AFFINE       /* a x + b: a scalar constant added, subtracted, multiplied or divided */
} NnAct;
typedef struct {
    NnAct act;
    float a, b;
} NnActSpec;

/* A conv's geometry: kernel kh x kw, strides, pads top / left / bottom / right, dilations, groups (cin = groups:
 * depthwise), bias 0/1. Output: (h + pad_t + pad_b - dil_h (kh - 1) - 1) / stride_h + 1, floored. */
typedef struct {
    int kh, kw, stride_h, stride_w, pad_t, pad_l, pad_b, pad_r, dil_h, dil_w, groups, bias;
} NnConvSpec;

/* A pooling window kh x kw with strides and pads. ceil_mode: the output size rounds up, but the last window must
 * start inside the input or its top / left padding (ONNX, PyTorch). count_include_pad (average pooling): the
 * divisor counts the padding a window covers (never beyond the bottom / right pads), else only input values. */
typedef struct {
    int kh, kw, stride_h, stride_w, pad_t, pad_l, pad_b, pad_r, ceil_mode, count_include_pad;
} NnPoolSpec;

/* Who computes the conv layers: OpenBLAS (im2col + sgemm, and direct loops for depthwise) or oneDNN
 * primitives (src/nn/onednn.c; under oneDNN also the batch norms and max pools of training where its
 * primitives pay: model.c, create_onednn_train_layers). Everything else runs the same code under both. The
 * state vector, its views and the semantics of every call are the same; the bits are not (another summation
 * order). AUTO: oneDNN for every conv layer it can create primitives for when the model is built, OpenBLAS for
 * the others (each named in a warning), fixed for the model's life, so that no run changes numbers midway. */
typedef enum { NN_BACKEND_BLAS = 0, NN_BACKEND_ONEDNN, NN_BACKEND_AUTO } NnBackend;

typedef enum {
    NN_OP_LINEAR,
    NN_OP_CONV2D,
    NN_OP_MAXPOOL,
    NN_OP_AVGPOOL,
    NN_OP_GAP,
    NN_OP_BATCHNORM,
    NN_OP_GROUPNORM,
    NN_OP_ACT,     /* standalone activation (any NnAct) */
    NN_OP_DROPOUT,
    NN_OP_ADD,     /* residual add */
    NN_OP_FLATTEN, /* a view: shares its input's buffers */
    NN_OP_MUL,     /* element-wise product, the second operand the same shape or C x 1 x 1 (broadcast) */
    NN_OP_CONCAT,  /* channels of n inputs (NnLayer.ins) */
    NN_OP_SLICE,   /* channels [start, end) */
    NN_OP_SHUFFLE, /* channel shuffle of `groups` groups */
    /* tensors of any rank (NnDims) */
    NN_OP_RESHAPE,   /* a view with other dims (Reshape, Flatten, Squeeze, Unsqueeze) */
    NN_OP_TRANSPOSE, /* dims permuted (perm) */
    NN_OP_MATMUL,    /* batched product of two tensors (attention): [..., M, K] x [..., K, N] */
    NN_OP_LAYERNORM, /* over the last cin values, affine */
    NN_OP_SOFTMAX,   /* along dim `axis` */
    NN_OP_BINARY,    /* add, sub, mul, div with broadcasting (bin_op) */
    NN_OP_PARAM,     /* a trainable tensor without batch (class token, position embedding, layer scale) */
    NN_OP_CONST,     /* a constant tensor without batch */
    NN_OP_EXPAND,    /* broadcast to larger dims */
    NN_OP_REDUCE_MEAN, /* mean over the dims in reduce_mask, kept as 1 */
    NN_OP_GATHER,    /* entries index[] of dim `axis`, -1 a zero entry */
    NN_OP_DROP_PATH  /* stochastic depth: a whole sample kept (x scale) or dropped */
} NnOpType;

typedef enum { NN_BIN_ADD = 0, NN_BIN_SUB, NN_BIN_MUL, NN_BIN_DIV } NnBinOp;

typedef struct {
    NnShape shape;
    NnDims dims;      /* its rank and where its batch is; shape is the per-sample view of the NCHW layers */
    int64_t size;     /* per sample (a tensor without batch: all of it) */
    float *data;      /* [max_batch * size]; a slice of the model's data pool when backward never reads it,
                       * shared with tensors that are never live at the same time */
    float *grad;      /* [max_batch * size]: a slice of the model's gradient pool, shared with tensors whose
                       * gradients are never live at the same time (the input's is its own) */
    int alias_of;     /* -1, or the tensor whose buffers this one shares */
    int grad_from_start; /* its gradient is zeroed when backward starts (logits, features, tensors nothing reads) */
    int block;        /* layout of data and grad: 0 NCHW; 8 or 16 channels blocked (nChw8c / nChw16c), set at
                       * finalize under onednn where every reader takes it (src/nn/model.c, plan_layouts) */
    int folded_from;  /* -1, or the folded layer (NnLayer.folded) that makes it: its reader sees it through strides */
} NnTensor;

#define NN_MAX_BLOCK 16 /* the widest channel block of a blocked layout */

typedef struct {
    NnOpType type;
    NnAct act;          /* fused activation applied to this layer's output */
    char name[40];
    int in, in2, out;   /* tensor indices (in2: second operand of ADD and MUL, else -1) */
    int64_t w_off, b_off;   /* trainable offsets into state, -1 if absent */
    int64_t rm_off, rv_off; /* BatchNorm running mean / var offsets into state (buffers), -1 if absent */
    int cin, cout, k, stride, pad, groups; /* k, stride, pad: kh, stride_h, pad_t below */
    /* conv and pooling geometry (NnConvSpec, NnPoolSpec); the old square calls set all of it */
    int kh, kw, stride_h, stride_w, pad_t, pad_l, pad_b, pad_r, dil_h, dil_w;
    unsigned char ceil_mode, count_include_pad;
    float act_a, act_b; /* NnActSpec.a, .b of a standalone activation */
    int start, end;     /* SLICE: [start, end) along dim `axis` */
    int axis;           /* CONCAT, SLICE, SOFTMAX, GATHER: the dim they work along */
    int perm[NN_MAX_DIMS]; /* TRANSPOSE: output dim k is input dim perm[k] */
    unsigned reduce_mask;  /* REDUCE_MEAN: bit k set: dim k is averaged */
    NnBinOp bin_op;     /* BINARY */
    unsigned char trans_b; /* MATMUL: b is [..., N, K] */
    unsigned char tied; /* a parameter of this layer is another's too (nn_tie_param): its backward adds */
    float alpha;        /* MATMUL: the product's scale */
    unsigned char folded; /* a copy (transpose, slice, scale) that a batched product does through strides instead:
                           * no pass, no buffer of its own (src/nn/layers_nd.c, nn_nd_fold_products) */
    int y_via;          /* MATMUL: the folded transpose whose output holds the product, -1 */
    int rows;           /* LINEAR: rows per sample it maps (the flattened sample: 1) */
    unsigned char per_row; /* LINEAR: on the last dim of every row (nn_linear_rows), not the flattened sample */
    float *values;      /* CONST: its floats */
    int32_t *index;     /* GATHER: the entries taken, -1 zeros */
    int n_index;
    int *ins, n_ins;    /* CONCAT: its inputs (in = ins[0]) */
    unsigned char *zero_ins; /* CONCAT: as zero_in, per input */
    unsigned char zero_in, zero_in2; /* backward zeroes the gradient of in / in2 first: the first step to write it */
    float eps, momentum, p; /* norm eps, BN momentum, dropout (and drop path) probability */
    /* per-layer scratch sized for max_batch */
    float *save_mean, *save_invstd; /* norm statistics of the last training forward */
    int32_t *argmax;                /* max-pool winners */
    uint8_t *mask;                  /* dropout keep mask (drop path: one per sample) */
    uint8_t *act_pattern;           /* NN_PATTERN_*: side of each activation output (layers with an activation) */
    int32_t *pool_pattern;          /* NN_PATTERN_*: max-pool winners */
    int64_t flops;                  /* forward FLOPs per sample (2 x multiply-adds) */
    struct NnOnednnConv *onednn;    /* a conv layer's oneDNN primitives (src/nn/onednn.c); NULL under blas */
    unsigned char onednn_refused;   /* oneDNN could not build this conv (backend auto): it runs on blas */
    unsigned char dw_direct;        /* a depthwise conv on NCHW (or blocked 1x1) planes where fedhet's direct kernels
                                     * (src/nn/kernels_isa.inc) beat oneDNN: they run its backward weights
                                     * (NN_DW_WEIGHTS), both backward passes (NN_DW_BACKWARD) or every pass
                                     * (NN_DW_ALL) */
    struct NnOnednnLayer *onednn_train; /* a batch norm's or max pool's oneDNN primitives for training mode */
    unsigned char onednn_ran;       /* the last forward ran them (its backward must too); a batch norm's
                                     * save_invstd then holds the batch variance */
    double seconds_forward, seconds_backward; /* accumulated while model->profile is set */
} NnLayer;

typedef enum { NN_ROLE_WEIGHT, NN_ROLE_BIAS, NN_ROLE_NORM_WEIGHT, NN_ROLE_NORM_BIAS, NN_ROLE_RUNNING_MEAN,
               NN_ROLE_RUNNING_VAR,
               NN_ROLE_TENSOR /* a free tensor (NN_OP_PARAM): class token, position embedding, layer scale */
} NnParamRole;

/* One named tensor of the state vector: "conv1.weight" at [offset, offset + count) */
typedef struct {
    char name[48];
    int64_t offset, count;
    int trainable;
    int ndim;
    int dims[4];
    int layer;        /* index of the owning layer */
    NnParamRole role;
    char source[128]; /* where its starting values came from (an ONNX initializer's name), or "" */
} NnParamView;

enum { NN_DW_WEIGHTS = 1, NN_DW_BACKWARD = 2, NN_DW_ALL = 3 }; /* NnLayer.dw_direct: each runs more passes direct */

typedef struct NnModel {
    char arch[256]; /* a zoo name or an ONNX file's path, for messages */
    NnLayer *layers;
    int n_layers, cap_layers;
    NnTensor *tensors;
    int n_tensors, cap_tensors;
    NnParamView *views;
    int n_views, cap_views;
    int64_t n_params;   /* trainable */
    int64_t n_buffers;  /* non-trainable */
    int64_t n_state;    /* n_params + n_buffers */
    float *state;       /* [n_state]; points at own_state unless swapped */
    float *grad;        /* [n_state] */
    float *own_state;
    int max_batch;
    int batch;          /* batch of the last forward */
    int input, logits, features; /* tensor indices; features = input of the classifier */
    int classes;
    int training;           /* 1: BN uses batch statistics, dropout active */
    int bn_update_running;  /* 1: training forward updates BN running stats; 0 freezes them (SAM's 2nd pass) */
    int need_input_grad;    /* 1: backward also fills tensors[input].grad (tests) */
    int profile;            /* 1: accumulate per-layer wall time in layers[i].seconds_* */
    int pattern;            /* NN_PATTERN_OFF, _RECORD or _REPLAY (nn_model_pattern_alloc first) */
    uint64_t dropout_seed;
    uint32_t dropout_ctr[3]; /* (round, client, step) chosen by the caller before a forward */
    /* activation memory planned by liveness at finalize: every activation gradient, and the activations that
     * backward never reads, are slices of two pools */
    float *grad_pool, *data_pool;
    int64_t grad_pool_floats, data_pool_floats; /* per sample */
    int no_activation_reuse; /* set before finalize: every activation and gradient in a buffer of its own (tests
                              * check that the planned model computes the same bits) */
    int no_product_folding;  /* set before finalize: every transpose, slice and scale around a batched product runs as
                              * its own layer (tests; NnLayer.folded) */
    NnBackend backend;       /* set before finalize (nn_zoo_build: NnZooOptions.backend) */
    struct NnOnednn *onednn; /* oneDNN's engine, stream and staging buffers; NULL under blas */
    float *workspace;        /* im2col columns and gemm staging (blas) */
    size_t workspace_floats;
    int status;              /* first build error (sticky), FH_OK otherwise */
    int finalized;
    /* samples through nn_model_forward / nn_model_backward since the build: callers take differences
     * around a phase to count its compute where it happens (metrics.csv cum_* columns) */
    int64_t forward_samples, backward_samples;
    int grad_zero; /* set by nn_model_zero_grad, cleared by nn_model_backward: the parameter gradients are zeros
                    * (each parameter belongs to one layer, whose backward may then write it instead of adding) */
} NnModel;

/* ---- building ---------------------------------------------------------------------------------
 * Builder calls return the output tensor index. Errors are sticky: the first one is recorded in
 * model->status with a message (fh_error_message) naming the layer and the shape; later calls do
 * nothing and nn_model_finalize returns it. */
int nn_model_init(NnModel *m, const char *arch, NnShape input, int max_batch);
int nn_linear(NnModel *m, int in, int n_out, int bias, NnAct act);
int nn_conv2d(NnModel *m, int in, int cout, int k, int stride, int pad, int groups, int bias, NnAct act);
int nn_maxpool(NnModel *m, int in, int k, int stride, int pad);
int nn_avgpool(NnModel *m, int in, int k, int stride, int pad);
int nn_gap(NnModel *m, int in);
int nn_batchnorm(NnModel *m, int in, NnAct act);
int nn_groupnorm(NnModel *m, int in, int groups, NnAct act);
int nn_act(NnModel *m, int in, NnAct act);
/* ---- the general forms (the calls above are their square / symmetric cases, with the same bits) ----
 * act of nn_conv2d_ex: NONE, RELU or RELU6 (fused); the others follow as an nn_act_ex layer */
int nn_act_ex(NnModel *m, int in, NnActSpec spec);
int nn_conv2d_ex(NnModel *m, int in, int cout, const NnConvSpec *spec, NnAct act);
int nn_maxpool_ex(NnModel *m, int in, const NnPoolSpec *spec);
int nn_avgpool_ex(NnModel *m, int in, const NnPoolSpec *spec);
/* element-wise product; b has a's shape, or C x 1 x 1 (broadcast over H, W: squeeze-and-excitation) */
int nn_mul(NnModel *m, int a, int b);
/* along channels; the inputs share H x W */
int nn_concat(NnModel *m, const int *ins, int n);
/* channels [start, end) */
int nn_slice_channels(NnModel *m, int in, int start, int end);
/* ShuffleNet's reshape (groups, C / groups) - transpose - reshape: output channel i * groups + g is input channel
 * g * (C / groups) + i */
int nn_channel_shuffle(NnModel *m, int in, int groups);
int nn_dropout(NnModel *m, int in, float p);
/* b has a's shape, or C x 1 x 1 (broadcast over H, W) */
int nn_add(NnModel *m, int a, int b, NnAct act);
int nn_flatten(NnModel *m, int in);

/* ---- tensors of any rank (NnDims); dims and dim indices are logical, the batch's included ---- */
/* the same floats with other dims: the per-sample size and the product of the dims before the batch unchanged */
int nn_reshape(NnModel *m, int in, const NnDims *dims);
/* output dim k = input dim perm[k] */
int nn_transpose(NnModel *m, int in, const int *perm);
/* y = x w^T + b along the last dim (w [n_out, last dim]): a linear layer on every row (every token) */
int nn_linear_rows(NnModel *m, int in, int n_out, int bias, NnAct act);
/* alpha a b over the last two dims, a [..., M, K], b [..., K, N] (trans_b: [..., N, K]); the dims before are
 * batched, equal or 1 (broadcast); a and b have the same rank */
int nn_matmul(NnModel *m, int a, int b, int trans_b, float alpha);
/* (x - mean) / sqrt(var + eps) over the last n_dims dims, then weight and bias of that size when affine */
int nn_layernorm(NnModel *m, int in, int n_dims, float eps, int affine);
int nn_softmax(NnModel *m, int in, int axis);
/* a op b with broadcasting: the same rank, each dim equal or 1 on one side */
int nn_binary(NnModel *m, NnBinOp op, int a, int b);
/* a trainable tensor of these dims (batch -1), initialised as NN_ROLE_TENSOR */
int nn_param(NnModel *m, const NnDims *dims);
/* a constant tensor (batch -1); values copied */
int nn_constant(NnModel *m, const NnDims *dims, const float *values);
/* in broadcast to dims (its dims equal or 1 there; a tensor without batch gains one) */
int nn_expand(NnModel *m, int in, const NnDims *dims);
/* the mean over the dims whose bit is set in mask (never the batch's), kept as dims of 1 */
int nn_reduce_mean(NnModel *m, int in, unsigned mask);
/* entries index[0..n) of dim axis (each in range, or -1 for an entry of zeros: a constant zero pad) */
int nn_gather(NnModel *m, int in, int axis, const int32_t *index, int n);
/* inputs of equal dims but along `axis` */
int nn_concat_axis(NnModel *m, const int *ins, int n, int axis);
/* [start, end) of dim axis */
int nn_slice_axis(NnModel *m, int in, int axis, int start, int end);
/* stochastic depth: in training each sample is kept with probability 1 - p (times scale) or zeroed, from the run's
 * counter-based draws; the identity in evaluation. The batch must be the first dim. */
int nn_drop_path(NnModel *m, int in, float p, float scale);
/* Parameter `role` (NN_ROLE_WEIGHT or _BIAS) of layer `layer`, which must be the last layer built, becomes that of
 * `from_layer` (tied weights: one parameter, read by both, its gradient the sum). The sizes must agree. */
int nn_tie_param(NnModel *m, int layer, NnParamRole role, int from_layer);

/* Names the output and the classifier's input; allocates state, gradients, activations, workspace. */
int nn_model_finalize(NnModel *m, int logits, int features, int classes);
void nn_model_free(NnModel *m);

/* ---- running ------------------------------------------------------------------------------------ */
/* Kaiming-uniform(a=sqrt 5) weights and biases, norm weight 1 bias 0, running var 1, from Philox
 * purpose `init` keyed by seed, one counter per parameter tensor in layer order. */
void nn_model_init_params(NnModel *m, uint64_t seed);
void nn_model_set_training(NnModel *m, int training);
/* input: [batch, C, H, W], must stay valid until backward. Returns FH_OK or an error for batch out of range. */
int nn_model_forward(NnModel *m, const float *input, int batch);
/* dlogits: [batch, classes] (d loss / d logits); dfeatures: optional extra gradient at the features
 * tensor [batch, features size] (MOON, FedDecorr). Accumulates into m->grad. */
void nn_model_backward(NnModel *m, const float *dlogits, const float *dfeatures);
void nn_model_zero_grad(NnModel *m);
/* SAM's perturbed pass without touching the weights: writes the state with a g added to the parameters into
 * `beside` (n_state floats; the buffers copied) and points m->state there. Returns the state the model had,
 * which the caller puts back (m->state = it) after the pass. */
float *nn_model_perturb_beside(NnModel *m, float *beside, float a, const float *g);
/* Activation patterns (eval mode only): a forward with m->pattern = NN_PATTERN_RECORD keeps, per output,
 * the side of every ReLU / ReLU6 and every max-pool's winner; with NN_PATTERN_REPLAY later forwards and
 * backwards use that pattern instead of their own, so that the network is, for other weights, the
 * piecewise-linear part it was at the recorded ones: smooth in the weights, with the same first and
 * second derivatives there (no kink is crossed by a finite difference). Replaying at the recorded
 * weights gives the same bits as a plain forward. The pattern belongs to the last recorded batch. */
enum { NN_PATTERN_OFF = 0, NN_PATTERN_RECORD = 1, NN_PATTERN_REPLAY = 2 };
int nn_model_pattern_alloc(NnModel *m);
float *nn_model_logits(const NnModel *m);
float *nn_model_features(const NnModel *m);
int64_t nn_model_features_size(const NnModel *m);
int64_t nn_model_flops_forward(const NnModel *m); /* per sample */
/* activations + their gradients (the liveness-planned pool) + scratch + workspace for `batch` samples, from
 * the shapes of a finalised model (one finalised for batch 1 reports any batch); oneDNN's buffers are apart */
size_t nn_model_activation_bytes(const NnModel *m, int batch);
/* bytes the oneDNN backend holds now (staging for reorders, scratchpad; 0 under blas): sized at finalize for
 * max_batch, grown only if a later batch size needs more */
size_t nn_model_backend_bytes(const NnModel *m);
/* the backend of a run (train.backend's default), fedhet bench and fedhet inspect */
#define NN_BACKEND_DEFAULT "onednn"
/* "blas", "onednn", "auto" -> NN_BACKEND_*; NULL or "" is blas (the library's default; a run's is
 * train.backend's); else FH_ERR_USAGE */
int nn_backend_parse(const char *name, NnBackend *out);
const char *nn_backend_name(NnBackend backend);
/* The oneDNN implementations conv layer `layer` got for max_batch, "fwd A, bwd-data B, bwd-weights C" (one name
 * when all three agree), e.g. "jit:avx512_core"; "" for a layer that is no conv or under blas. */
void nn_model_layer_impl(const NnModel *m, int layer, char *out, size_t size);
/* The named view, or NULL */
const NnParamView *nn_model_view(const NnModel *m, const char *name);

/* ---- losses ---------------------------------------------------------------------------------------
 * All accumulate into dlogits (zero it first) the gradient of the returned mean loss. */

/* Softmax cross-entropy, mean over the batch of w_i * l_i (labels must lie in [0, classes): callers
 * validate data when it is loaded; w_i = 1 when weights is NULL; the mean
 * divides by batch, not by the sum of weights). logit_adjust [classes] (tau * log prior) is added to
 * the logits first when not NULL. per_sample [batch] (optional) receives the unweighted l_i. */
float nn_softmax_xent(float *dlogits, float *per_sample, const float *logits, const int32_t *labels,
                      const float *weights, const float *logit_adjust, int batch, int classes);
/* weight * T^2 * mean_i KL(softmax(teacher_i / T) || softmax(student_i / T)) */
float nn_kl_distill(float *dlogits, const float *student, const float *teacher, float temperature,
                    float weight, int batch, int classes);
/* argmax per row; returns the number equal to labels (labels may be NULL: returns 0) */
int nn_count_correct(int32_t *pred, const float *logits, const int32_t *labels, int batch, int classes);

/* ---- optimisers on flat vectors ------------------------------------------------------------------ */
typedef struct {
    int64_t n;
    float momentum, dampening, weight_decay;
    int nesterov;
    int64_t steps;
    float *buf; /* momentum buffer [n], NULL when momentum == 0 */
} NnSgd;
int nn_sgd_init(NnSgd *opt, int64_t n, float momentum, float weight_decay, int nesterov);
/* PyTorch torch.optim.SGD semantics; grad is read only. */
void nn_sgd_step(NnSgd *opt, float *params, const float *grad, float lr);
void nn_sgd_reset(NnSgd *opt);
void nn_sgd_free(NnSgd *opt);

typedef struct {
    int64_t n;
    float beta1, beta2, eps, weight_decay;
    int decoupled; /* 1: AdamW */
    int64_t steps;
    float *m, *v;
} NnAdam;
int nn_adam_init(NnAdam *opt, int64_t n, float beta1, float beta2, float eps, float weight_decay, int decoupled);
void nn_adam_step(NnAdam *opt, float *params, const float *grad, float lr);
void nn_adam_reset(NnAdam *opt);
void nn_adam_free(NnAdam *opt);

/* Scales grad so that its L2 norm is at most max_norm; returns the norm before clipping. */
float nn_clip_grad_norm(float *grad, int64_t n, float max_norm);

/* The run's lr schedule (docs/methods/baselines.md §0.1.5): lr multiplied by decay once at the end of every round.
 * nn_lr_next is that step; nn_lr_of_round(lr, decay, t) = lr decay^t by the same t multiplications, so that a
 * method's view of round t has the runtime's bits. */
static inline double nn_lr_next(double lr, double decay) { return lr * decay; }
double nn_lr_of_round(double lr, double decay, int round);

/* ---- vector helpers (BLAS level 1) -------------------------------------------------------------- */
void nn_vec_axpy(float *y, float a, const float *x, int64_t n);  /* y += a x */
void nn_vec_scale(float *x, float a, int64_t n);
void nn_vec_copy(float *dst, const float *src, int64_t n);
void nn_vec_zero(float *x, int64_t n);
void nn_vec_add_scaled(float *out, const float *x, float a, const float *y, int64_t n); /* out = x + a y */
float nn_vec_dot(const float *x, const float *y, int64_t n);
float nn_vec_norm(const float *x, int64_t n);
/* the same in double accumulation (x.y, ||x||, ||x - y||), without BLAS */
double nn_vec_dot_f64(const float *x, const float *y, int64_t n);
double nn_vec_norm_f64(const float *x, int64_t n);
double nn_vec_dist_f64(const float *x, const float *y, int64_t n);
/* x.y and ||x - y||^2 summed in index order: the same bits on any build and CPU (Hessian probes, drift metrics) */
double nn_vec_dot_ordered(const float *x, const float *y, int64_t n);
double nn_vec_dist2_ordered(const float *x, const float *y, int64_t n);

/* ---- exact sums of weighted vectors (the server's aggregation; docs/architecture.md "Aggregation") ------------
 * sum_i a_i x_i[j] with every term a_i x_i[j] rounded once to double, then split without error over
 * NN_SUM_BINS fixed bins (multiples of 1, 2^-32, 2^-64 and 2^-96): each bin's additions are exact, so the sum is
 * the same whatever the order of the terms and however they are split over partial sums (ranks) whose bins are
 * added (MPI_SUM). A term's part below 2^-97 is dropped; a term of magnitude 2^32 or more, an infinity or a NaN
 * makes that element's sum NaN (the run reports a divergence). At most NN_SUM_MAX_TERMS terms per sum.
 * An accumulator of n elements is NN_SUM_BINS * n doubles in blocks of NN_SUM_BLOCK elements, bin-major within
 * a block (bin k of element j at NN_SUM_BINS * b + k * len + j - b, b = the block's first element, len = its
 * length): the part from an element that is a multiple of NN_SUM_BLOCK on is an accumulator of its own. */
#define NN_SUM_BINS 4
#define NN_SUM_BLOCK 512
#define NN_SUM_MAX_TERMS (1 << 21)
void nn_sum_zero(double *acc, int64_t n);
void nn_sum_add(double *acc, double a, const float *x, int64_t n);      /* acc += a x */
void nn_sum_add_diff(double *acc, double a, const float *x, const float *y, int64_t n); /* acc += a (x - y) */
void nn_sum_merge(double *acc, const double *other, int64_t n);         /* acc += other (both exact) */
void nn_sum_result(const double *acc, int64_t n, float *out);           /* out = the sums, rounded to float */
void nn_sum_result_f64(const double *acc, int64_t n, double *out);     /* the same, rounded to double */

/* ---- model zoo (docs/methods/models.md) --------------------------------------------------------------------- */
typedef struct {
    const char *norm;  /* "bn" (default) or "gn", for resnet18 */
    int gn_groups;     /* GroupNorm groups, default 2 */
    float dropout;     /* unused by the zoo's models; 0 */
    int proj_dim;      /* > 0: a projection head Linear(f, f), ReLU, Linear(f, proj_dim) between the representation
                        * (width f) and the classifier, whose input (the model's features) becomes its output
                        * (MOON's ModelFedCon); 0: none */
    int no_activation_reuse; /* NnModel.no_activation_reuse (tests) */
    const char *backend;     /* "blas" (NULL or "": the default), "onednn" or "auto": NnModel.backend */
    /* A model from outside the zoo (an imported graph, src/onnx): when set, nn_zoo_build calls it on the
     * initialised model instead of a zoo builder (proj_dim: NnZooOptions.proj_dim); it adds the layers and
     * returns the logits tensor with *features set, or -1 with m->status set. The engine never learns where the
     * graph came from. */
    int (*build)(void *ctx, NnModel *m, int classes, int proj_dim, int *features);
    void *build_ctx;
} NnZooOptions;
/* Builds and finalises model `name` for input C x H x W and `classes`; parameters are NOT initialised
 * (call nn_model_init_params). Unknown names and inputs too small for the model are FH_ERR_USAGE. */
int nn_zoo_build(NnModel *m, const char *name, NnShape input, int classes, int max_batch,
                 const NnZooOptions *opt);
/* "mlp, cnn, ..." */
const char *nn_zoo_names(void);

/* ---- curvature: top Hessian eigenvalue and trace (src/nn/hessian.c) ------------------------------
 * The estimators see the Hessian only through Hessian-vector products, so one code serves a single
 * process and a probe set spread over MPI ranks. */
typedef int (*NnHvFn)(void *ctx, const float *v, float *hv); /* hv = H v over n values; an fh status */

/* Power iteration from a N(0, 1) start drawn from Philox (seed, FH_RNG_HESSIAN) at counter (ctr, 0, 0):
 * *eig = the Rayleigh quotient v.Hv of the unit iterate, the eigenvalue largest in magnitude; stops when
 * |eig_k - eig_{k-1}| <= tol |eig_k| or after max_iters products (*iters: how many). work: 2n floats. */
int nn_hessian_top_eig(int64_t n, NnHvFn hv, void *ctx, int max_iters, double tol, uint64_t seed, uint32_t ctr,
                       float *work, double *eig, int *iters);
/* Hutchinson: *trace = mean over `samples` Rademacher vectors z of z.Hz, z drawn from Philox
 * (seed, FH_RNG_HESSIAN) at counters (ctr, s + 1, 0); *std_error: that mean's standard error (NAN for
 * one sample). work: 2n floats. */
int nn_hessian_trace(int64_t n, NnHvFn hv, void *ctx, int samples, uint64_t seed, uint32_t ctr, float *work,
                     double *trace, double *std_error);
/* Step of the central difference Hv ~ (g(w + eps v) - g(w - eps v)) / (2 eps): eps ||v|| is
 * step max(||w||, 1), a relative step (1e-3: small against the weights, far above the float rounding
 * of the gradients). */
double nn_hessian_fd_eps(const float *w, const float *v, int64_t n, double step);

/* Exact sums of float vectors: fixed point with 2^-48 resolution in 128-bit integers, so partial sums
 * add up to the same bits in any order (and on any number of ranks). */
__extension__ typedef __int128 NnExact;
/* acc[j] += sign * x[j] in fixed point; FH_ERR_NUMERIC naming `what` when some |x[j]| >= 2^48 or is not finite */
int nn_exact_add(NnExact *acc, const float *x, int64_t n, int sign, const char *what);
double nn_exact_value(NnExact a);

/* Hessian of the mean cross-entropy of a model on a probe set, in eval mode (BatchNorm running
 * statistics), over the trainable parameters, by central differences of probe gradients taken with the
 * activation pattern at w (NN_PATTERN_*): the Hessian that exact second-order backpropagation gives,
 * without the gradient jumps of ReLU and max-pool kinks inside the step. The probe is
 * cut into batches of `batch` rows; this process computes batches first_batch, first_batch + stride, ...
 * and `reduce` (NULL for one process), called by every process with its own status, returns the first
 * failure of any process or FH_OK with acc summed over all of them. */
typedef struct {
    NnModel *model;
    const float *x;                /* [n_rows, C, H, W] */
    const int32_t *y;              /* [n_rows] */
    int64_t n_rows;
    int batch;                     /* <= model->max_batch */
    int64_t first_batch, stride;
    double step;                   /* relative step of nn_hessian_fd_eps */
    const float *w;                /* [n_state] the point */
    float *pert;                   /* [n_state] scratch */
    float *dlogits;                /* [batch * classes] scratch */
    NnExact *acc;                  /* [n_params] scratch */
    int (*reduce)(void *reduce_ctx, int status, NnExact *acc, int64_t n);
    void *reduce_ctx;
    int64_t gradients;             /* probe gradients evaluated (two per product), counted here */
} NnProbeHessian;
/* NnHvFn over an NnProbeHessian (ctx); leaves model->state, its training mode and pattern as they were
 * (the pattern buffers stay allocated) */
int nn_probe_hvp(void *ctx, const float *v, float *hv);

/* ---- threads ----
 * OpenBLAS's and OpenMP's (oneDNN's) thread count. oneDNN fixes a primitive's thread count when it is
 * created: call this before building models. */
void nn_set_threads(int n_threads);
/* 1 with `why` filled when n_threads > 1 cannot run side by side here: the process may use fewer cores (an
 * MPI binding), or OpenBLAS is not its OpenMP build (two thread pools spinning in turn) */
int nn_threads_problem(int n_threads, char *why, size_t size);

#endif
