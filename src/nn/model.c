/* The model graph: a list of layers over a list of activation tensors, and the flat state vector.
 * Building records shapes and parameter sizes; finalising allocates everything a step will touch. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/buf.h"
#include "fedhet/core.h"
#include "fedhet/rng.h"
#include "kernels.h"
#include "model_internal.h"

#define NN_MAX_DIM 65536

/* ============================== building ============================== */

int nn_build_fail(NnModel *m, const char *fmt, ...)
{
    if (m->status == FH_OK) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        m->status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "model %s: %s", m->arch, msg);
    }
    return -1;
}

int64_t nn_dims_size(const NnDims *d)
{
    int64_t n = 1;
    for (int k = 0; k < d->ndim; k++) n *= d->d[k];
    return n;
}

void nn_dims_at(const NnDims *d, int batch, int64_t *n)
{
    for (int k = 0; k < d->ndim; k++) n[k] = k == d->batch ? batch : d->d[k];
}

NnDims nn_dims_nchw(NnShape s, int rank)
{
    NnDims d = {rank, 0, {1, s.c, s.h, s.w}};
    if (rank == 3) d.d[2] = s.h * s.w;
    if (rank == 2) d.d[1] = s.c * s.h * s.w;
    return d;
}

int nn_add_tensor(NnModel *m, const NnDims *dims_in, int alias_of)
{
    /* a copy first: callers often pass another tensor's dims, which growing the array may move */
    const NnDims dims_copy = *dims_in, *dims = &dims_copy;
    if (fh_grow(&m->tensors, &m->cap_tensors, m->n_tensors + 1, sizeof(NnTensor), "the model's tensors")) {
        m->status = FH_ERR_MEMORY;
        return -1;
    }
    NnTensor *t = &m->tensors[m->n_tensors];
    t->dims = *dims;
    t->size = nn_dims_size(dims);
    /* the NCHW layers' per-sample view: a batch-first rank-4 tensor's C x H x W, else the values in a row */
    const NnDims *d = dims;
    if (d->batch == 0 && d->ndim == 4) t->shape = (NnShape){d->d[1], d->d[2], d->d[3]};
    else if (d->batch == 0 && d->ndim == 3) t->shape = (NnShape){d->d[1], d->d[2], 1};
    else t->shape = (NnShape){(int)(t->size <= INT32_MAX ? t->size : 0), 1, 1};
    t->alias_of = alias_of;
    t->folded_from = -1;
    return m->n_tensors++;
}

/* a batch-first tensor of per-sample shape C x H x W (the NCHW layers' outputs) */
static int add_tensor(NnModel *m, NnShape shape, int alias_of)
{
    const NnDims d = nn_dims_nchw(shape, 4);
    return nn_add_tensor(m, &d, alias_of);
}

static const char *op_prefix(NnOpType type)
{
    switch (type) {
    case NN_OP_LINEAR: return "fc";
    case NN_OP_CONV2D: return "conv";
    case NN_OP_MAXPOOL: return "maxpool";
    case NN_OP_AVGPOOL: return "avgpool";
    case NN_OP_GAP: return "gap";
    case NN_OP_BATCHNORM: return "bn";
    case NN_OP_GROUPNORM: return "gn";
    case NN_OP_ACT: return "act";
    case NN_OP_DROPOUT: return "dropout";
    case NN_OP_ADD: return "add";
    case NN_OP_FLATTEN: return "flatten";
    case NN_OP_MUL: return "mul";
    case NN_OP_CONCAT: return "concat";
    case NN_OP_SLICE: return "slice";
    case NN_OP_SHUFFLE: return "shuffle";
    case NN_OP_RESHAPE: return "reshape";
    case NN_OP_TRANSPOSE: return "transpose";
    case NN_OP_MATMUL: return "matmul";
    case NN_OP_LAYERNORM: return "ln";
    case NN_OP_SOFTMAX: return "softmax";
    case NN_OP_BINARY: return "binop";
    case NN_OP_PARAM: return "param";
    case NN_OP_CONST: return "const";
    case NN_OP_EXPAND: return "expand";
    case NN_OP_REDUCE_MEAN: return "mean";
    case NN_OP_GATHER: return "gather";
    case NN_OP_DROP_PATH: return "droppath";
    }
    return "layer";
}

/* the NCHW layers read batch-first tensors of rank 2 to 4 (their NnShape); the element-wise ones any */
static int takes_nchw(NnOpType type)
{
    switch (type) {
    case NN_OP_CONV2D: case NN_OP_MAXPOOL: case NN_OP_AVGPOOL: case NN_OP_GAP: case NN_OP_BATCHNORM:
    case NN_OP_GROUPNORM: case NN_OP_FLATTEN: case NN_OP_SHUFFLE: case NN_OP_ADD: case NN_OP_MUL: return 1;
    default: return 0;
    }
}

NnLayer *nn_add_layer(NnModel *m, NnOpType type, int in, NnAct act)
{
    if (m->status != FH_OK) return NULL;
    if (m->finalized) {
        nn_build_fail(m, "cannot add layers after nn_model_finalize");
        return NULL;
    }
    if (in < 0 || in >= m->n_tensors) {
        nn_build_fail(m, "layer %d (%s): input tensor %d does not exist", m->n_layers, op_prefix(type), in);
        return NULL;
    }
    const NnDims *d = &m->tensors[in].dims;
    if (takes_nchw(type) && (d->batch != 0 || d->ndim < 2 || d->ndim > 4)) {
        nn_build_fail(m, "layer %d (%s): its input must be batch-first of rank 2 to 4 (N x C x H x W or N x F), not "
                      "rank %d with the batch at dim %d", m->n_layers, op_prefix(type), d->ndim, d->batch);
        return NULL;
    }
    if (fh_grow(&m->layers, &m->cap_layers, m->n_layers + 1, sizeof(NnLayer), "the model's layers")) {
        m->status = FH_ERR_MEMORY;
        return NULL;
    }
    NnLayer *l = &m->layers[m->n_layers];
    int ordinal = 1;
    for (int i = 0; i < m->n_layers; i++) ordinal += m->layers[i].type == type;
    snprintf(l->name, sizeof l->name, "%s%d", op_prefix(type), ordinal);
    l->type = type;
    l->act = act;
    l->in = in;
    l->in2 = l->y_via = -1;
    l->out = -1;
    l->w_off = l->b_off = l->rm_off = l->rv_off = -1;
    l->groups = 1;
    m->n_layers++;
    return l;
}

/* Trainable views get their offset now; buffer views are numbered from 0 and moved behind the
 * trainables in finalize, so the state vector is [parameters | buffers]. */
int64_t nn_add_view(NnModel *m, int layer, const char *suffix, NnParamRole role, int ndim, const int *dims)
{
    if (fh_grow(&m->views, &m->cap_views, m->n_views + 1, sizeof(NnParamView), "the model's parameter views")) {
        m->status = FH_ERR_MEMORY;
        return -1;
    }
    NnParamView *v = &m->views[m->n_views++];
    snprintf(v->name, sizeof v->name, "%s.%s", m->layers[layer].name, suffix);
    v->ndim = ndim;
    v->count = 1;
    for (int i = 0; i < ndim; i++) {
        v->dims[i] = dims[i];
        v->count *= dims[i];
    }
    v->layer = layer;
    v->role = role;
    v->trainable = role != NN_ROLE_RUNNING_MEAN && role != NN_ROLE_RUNNING_VAR;
    if (v->trainable) {
        v->offset = m->n_params;
        m->n_params += v->count;
    } else {
        v->offset = m->n_buffers;
        m->n_buffers += v->count;
    }
    return v->offset;
}

static int shape_ok(NnShape s) { return s.c > 0 && s.h > 0 && s.w > 0 && s.c <= 1 << 20 && s.h <= NN_MAX_DIM && s.w <= NN_MAX_DIM; }

int nn_model_init(NnModel *m, const char *arch, NnShape input, int max_batch)
{
    memset(m, 0, sizeof *m);
    snprintf(m->arch, sizeof m->arch, "%s", arch ? arch : "model");
    m->input = m->logits = m->features = -1;
    m->bn_update_running = 1;
    m->training = 1;
    if (!shape_ok(input)) {
        nn_build_fail(m, "input shape %dx%dx%d must be positive (C x H x W)", input.c, input.h, input.w);
        return m->status;
    }
    if (max_batch < 1) {
        nn_build_fail(m, "batch size %d must be at least 1", max_batch);
        return m->status;
    }
    m->max_batch = max_batch;
    m->input = add_tensor(m, input, -1);
    return m->status;
}

static NnShape tshape(const NnModel *m, int t) { return m->tensors[t].shape; }

int nn_linear(NnModel *m, int in, int n_out, int bias, NnAct act)
{
    NnLayer *l = nn_add_layer(m, NN_OP_LINEAR, in, act);
    if (!l) return -1;
    int li = (int)(l - m->layers);
    int64_t n_in = m->tensors[in].size;
    if (m->tensors[in].dims.batch != 0)
        return nn_build_fail(m, "%s: its input must be batch-first (N x ...): a linear layer on every row is "
                             "nn_linear_rows", l->name);
    if (n_out < 1) return nn_build_fail(m, "%s: output size %d must be positive", l->name, n_out);
    if (n_in > (1 << 28)) return nn_build_fail(m, "%s: input of %lld features is too large", l->name, (long long)n_in);
    l->cin = (int)n_in;
    l->cout = n_out;
    l->w_off = nn_add_view(m, li, "weight", NN_ROLE_WEIGHT, 2, (int[]){n_out, (int)n_in});
    if (bias) l->b_off = nn_add_view(m, li, "bias", NN_ROLE_BIAS, 1, (int[]){n_out});
    l->rows = 1;
    l->flops = 2 * n_in * n_out;
    const NnDims d = {2, 0, {1, n_out}};
    return l->out = nn_add_tensor(m, &d, -1);
}

/* g: kh, kw, stride_h, stride_w, pad_t, pad_l, pad_b, pad_r; k, stride and pad keep the first row's, which is
 * all there is of the square calls */
static void set_window(NnLayer *l, const int g[8])
{
    l->k = l->kh = g[0];
    l->kw = g[1];
    l->stride = l->stride_h = g[2];
    l->stride_w = g[3];
    l->pad = l->pad_t = g[4];
    l->pad_l = g[5];
    l->pad_b = g[6];
    l->pad_r = g[7];
}

int nn_conv2d_ex(NnModel *m, int in, int cout, const NnConvSpec *spec, NnAct act)
{
    NnLayer *l = nn_add_layer(m, NN_OP_CONV2D, in, act);
    if (!l) return -1;
    int li = (int)(l - m->layers);
    NnShape s = tshape(m, in);
    const NnConvSpec c = *spec;
    if (cout < 1 || c.kh < 1 || c.kw < 1 || c.stride_h < 1 || c.stride_w < 1 || c.dil_h < 1 || c.dil_w < 1 ||
        c.groups < 1 || c.pad_t < 0 || c.pad_l < 0 || c.pad_b < 0 || c.pad_r < 0)
        return nn_build_fail(m, "%s: needs positive channels, kernel, stride, dilation and groups and pads >= 0 (got %d, "
                          "%dx%d, %dx%d, %dx%d, %d, pads %d %d %d %d)", l->name, cout, c.kh, c.kw, c.stride_h,
                          c.stride_w, c.dil_h, c.dil_w, c.groups, c.pad_t, c.pad_l, c.pad_b, c.pad_r);
    if (act != NN_ACT_NONE && act != NN_ACT_RELU && act != NN_ACT_RELU6)
        return nn_build_fail(m, "%s: a conv fuses no activation but ReLU and ReLU6 (got %d): add an activation layer",
                          l->name, (int)act);
    if (s.c % c.groups || cout % c.groups)
        return nn_build_fail(m, "%s: %d input and %d output channels are not divisible by %d groups", l->name, s.c, cout,
                          c.groups);
    /* the dilated kernel's extent, and the output by the floor of every framework */
    const int64_t ext_h = (int64_t)c.dil_h * (c.kh - 1) + 1, ext_w = (int64_t)c.dil_w * (c.kw - 1) + 1;
    const int64_t span_h = (int64_t)s.h + c.pad_t + c.pad_b - ext_h, span_w = (int64_t)s.w + c.pad_l + c.pad_r - ext_w;
    if (span_h < 0 || span_w < 0 || span_h / c.stride_h + 1 > NN_MAX_DIM || span_w / c.stride_w + 1 > NN_MAX_DIM)
        return nn_build_fail(m, "%s: input %dx%dx%d is too small for a %dx%d kernel (stride %d, pad %d, dilation %d)",
                          l->name, s.c, s.h, s.w, c.kh, c.kw, c.stride_h, c.pad_t, c.dil_h);
    const int ho = (int)(span_h / c.stride_h) + 1, wo = (int)(span_w / c.stride_w) + 1;
    l->cin = s.c;
    l->cout = cout;
    set_window(l, (const int[]){c.kh, c.kw, c.stride_h, c.stride_w, c.pad_t, c.pad_l, c.pad_b, c.pad_r});
    l->dil_h = c.dil_h;
    l->dil_w = c.dil_w;
    l->groups = c.groups;
    l->w_off = nn_add_view(m, li, "weight", NN_ROLE_WEIGHT, 4, (int[]){cout, s.c / c.groups, c.kh, c.kw});
    if (c.bias) l->b_off = nn_add_view(m, li, "bias", NN_ROLE_BIAS, 1, (int[]){cout});
    l->flops = 2LL * cout * ho * wo * (s.c / c.groups) * c.kh * c.kw;
    return l->out = add_tensor(m, (NnShape){cout, ho, wo}, -1);
}

int nn_conv2d(NnModel *m, int in, int cout, int k, int stride, int pad, int groups, int bias, NnAct act)
{
    const NnConvSpec spec = {k, k, stride, stride, pad, pad, pad, pad, 1, 1, groups, bias};
    return nn_conv2d_ex(m, in, cout, &spec, act);
}

static int add_pool(NnModel *m, NnOpType type, int in, const NnPoolSpec *spec)
{
    NnLayer *l = nn_add_layer(m, type, in, NN_ACT_NONE);
    if (!l) return -1;
    NnShape s = tshape(m, in);
    const NnPoolSpec p = *spec;
    /* a pad as wide as the window would make windows of padding alone */
    if (p.kh < 1 || p.kw < 1 || p.stride_h < 1 || p.stride_w < 1 || p.pad_t < 0 || p.pad_l < 0 || p.pad_b < 0 ||
        p.pad_r < 0 || p.pad_t >= p.kh || p.pad_b >= p.kh || p.pad_l >= p.kw || p.pad_r >= p.kw)
        return nn_build_fail(m, "%s: bad pooling window %dx%d, stride %dx%d, pads %d %d %d %d (each pad must be smaller "
                          "than the window)", l->name, p.kh, p.kw, p.stride_h, p.stride_w, p.pad_t, p.pad_l, p.pad_b,
                          p.pad_r);
    int ho = nn_pool_out_size(s.h, p.kh, p.stride_h, p.pad_t, p.pad_b, p.ceil_mode);
    int wo = nn_pool_out_size(s.w, p.kw, p.stride_w, p.pad_l, p.pad_r, p.ceil_mode);
    if (ho < 1 || wo < 1)
        return nn_build_fail(m, "%s: input %dx%dx%d is too small for a %dx%d pool (stride %d)", l->name, s.c, s.h, s.w,
                          p.kh, p.kw, p.stride_h);
    set_window(l, (const int[]){p.kh, p.kw, p.stride_h, p.stride_w, p.pad_t, p.pad_l, p.pad_b, p.pad_r});
    l->ceil_mode = (unsigned char)!!p.ceil_mode;
    l->count_include_pad = (unsigned char)!!p.count_include_pad;
    l->cin = l->cout = s.c;
    return l->out = add_tensor(m, (NnShape){s.c, ho, wo}, -1);
}

/* the square calls: count_include_pad (the divisor is always k*k), floor */
static int add_square_pool(NnModel *m, NnOpType type, int in, int k, int stride, int pad)
{
    if (m->status == FH_OK && (k < 1 || stride < 1 || pad < 0 || 2 * pad > k)) {
        NnLayer *l = nn_add_layer(m, type, in, NN_ACT_NONE);
        if (!l) return -1;
        return nn_build_fail(m, "%s: bad pooling kernel %d, stride %d, pad %d (pad must be at most half the kernel)",
                          l->name, k, stride, pad);
    }
    const NnPoolSpec spec = {k, k, stride, stride, pad, pad, pad, pad, 0, 1};
    return add_pool(m, type, in, &spec);
}

int nn_maxpool_ex(NnModel *m, int in, const NnPoolSpec *spec) { return add_pool(m, NN_OP_MAXPOOL, in, spec); }
int nn_avgpool_ex(NnModel *m, int in, const NnPoolSpec *spec) { return add_pool(m, NN_OP_AVGPOOL, in, spec); }

/* a pool the square kernels compute (the general one otherwise): one window size, stride and pad, the floor's
 * output size, and for averages a divisor of k*k */
int nn_pool_general(const NnModel *m, const NnLayer *l)
{
    const NnShape si = m->tensors[l->in].shape, so = m->tensors[l->out].shape;
    const int pads_equal = l->pad_t == l->pad_l && l->pad_t == l->pad_b && l->pad_t == l->pad_r;
    return !(l->kh == l->kw && l->stride_h == l->stride_w && pads_equal && 2 * l->pad_t <= l->kh &&
             so.h == nn_conv_out_size(si.h, l->kh, l->stride_h, l->pad_t) &&
             so.w == nn_conv_out_size(si.w, l->kw, l->stride_w, l->pad_l) &&
             (l->type == NN_OP_MAXPOOL || l->count_include_pad || l->pad_t == 0));
}

static NnPoolShape pool_shape(const NnModel *m, const NnLayer *l, int batch)
{
    const NnShape si = m->tensors[l->in].shape, so = m->tensors[l->out].shape;
    return (NnPoolShape){batch * si.c, si.h, si.w, l->kh, l->kw, l->stride_h, l->stride_w, l->pad_t, l->pad_l,
                         l->pad_b, l->pad_r, so.h, so.w, l->count_include_pad};
}

NnConvShape nn_layer_conv_shape(const NnModel *m, const NnLayer *l, int batch)
{
    NnShape si = m->tensors[l->in].shape, so = m->tensors[l->out].shape;
    return (NnConvShape){batch, si.c, si.h, si.w, l->cout, l->k, l->stride, l->pad, l->groups, so.h, so.w,
                         l->kh, l->kw, l->stride_h, l->stride_w, l->pad_t, l->pad_l, l->pad_b, l->pad_r, l->dil_h,
                         l->dil_w};
}

int nn_maxpool(NnModel *m, int in, int k, int stride, int pad) { return add_square_pool(m, NN_OP_MAXPOOL, in, k, stride, pad); }
int nn_avgpool(NnModel *m, int in, int k, int stride, int pad) { return add_square_pool(m, NN_OP_AVGPOOL, in, k, stride, pad); }

int nn_gap(NnModel *m, int in)
{
    NnLayer *l = nn_add_layer(m, NN_OP_GAP, in, NN_ACT_NONE);
    if (!l) return -1;
    l->cin = l->cout = tshape(m, in).c;
    return l->out = add_tensor(m, (NnShape){l->cin, 1, 1}, -1);
}

int nn_batchnorm(NnModel *m, int in, NnAct act)
{
    NnLayer *l = nn_add_layer(m, NN_OP_BATCHNORM, in, act);
    if (!l) return -1;
    int li = (int)(l - m->layers);
    NnShape s = tshape(m, in);
    l->cin = l->cout = s.c;
    l->eps = 1e-5f;
    l->momentum = 0.1f;
    l->w_off = nn_add_view(m, li, "weight", NN_ROLE_NORM_WEIGHT, 1, (int[]){s.c});
    l->b_off = nn_add_view(m, li, "bias", NN_ROLE_NORM_BIAS, 1, (int[]){s.c});
    l->rm_off = nn_add_view(m, li, "running_mean", NN_ROLE_RUNNING_MEAN, 1, (int[]){s.c});
    l->rv_off = nn_add_view(m, li, "running_var", NN_ROLE_RUNNING_VAR, 1, (int[]){s.c});
    return l->out = add_tensor(m, s, -1);
}

int nn_groupnorm(NnModel *m, int in, int groups, NnAct act)
{
    NnLayer *l = nn_add_layer(m, NN_OP_GROUPNORM, in, act);
    if (!l) return -1;
    int li = (int)(l - m->layers);
    NnShape s = tshape(m, in);
    if (groups < 1 || s.c % groups)
        return nn_build_fail(m, "%s: %d channels are not divisible by %d groups", l->name, s.c, groups);
    l->cin = l->cout = s.c;
    l->groups = groups;
    l->eps = 1e-5f;
    l->w_off = nn_add_view(m, li, "weight", NN_ROLE_NORM_WEIGHT, 1, (int[]){s.c});
    l->b_off = nn_add_view(m, li, "bias", NN_ROLE_NORM_BIAS, 1, (int[]){s.c});
    return l->out = add_tensor(m, s, -1);
}

int nn_act(NnModel *m, int in, NnAct act)
{
    NnLayer *l = nn_add_layer(m, NN_OP_ACT, in, act);
    if (!l) return -1;
    return l->out = nn_add_tensor(m, &m->tensors[in].dims, -1);
}

int nn_dropout(NnModel *m, int in, float p)
{
    NnLayer *l = nn_add_layer(m, NN_OP_DROPOUT, in, NN_ACT_NONE);
    if (!l) return -1;
    if (!(p >= 0.0f && p < 1.0f)) return nn_build_fail(m, "%s: probability %g must be in [0, 1)", l->name, (double)p);
    l->p = p;
    return l->out = nn_add_tensor(m, &m->tensors[in].dims, -1);
}

/* ADD and MUL: b of a's shape, or C x 1 x 1 (broadcast) */
static int add_binary(NnModel *m, NnOpType type, int a, int b, NnAct act)
{
    NnLayer *l = nn_add_layer(m, type, a, act);
    if (!l) return -1;
    if (b < 0 || b >= m->n_tensors) return nn_build_fail(m, "%s: input tensor %d does not exist", l->name, b);
    NnShape sa = tshape(m, a), sb = tshape(m, b);
    if (sa.c != sb.c || ((sa.h != sb.h || sa.w != sb.w) && (sb.h != 1 || sb.w != 1)))
        return nn_build_fail(m, "%s: shapes %dx%dx%d and %dx%dx%d differ (the second may be %dx1x1)", l->name, sa.c, sa.h,
                          sa.w, sb.c, sb.h, sb.w, sa.c);
    l->in2 = b;
    if (type == NN_OP_MUL) l->cin = l->cout = sa.c;
    return l->out = nn_add_tensor(m, &m->tensors[a].dims, -1);
}

int nn_add(NnModel *m, int a, int b, NnAct act) { return add_binary(m, NN_OP_ADD, a, b, act); }
int nn_mul(NnModel *m, int a, int b) { return add_binary(m, NN_OP_MUL, a, b, NN_ACT_NONE); }

/* b broadcast over a's H x W (ADD, MUL) */
int nn_layer_broadcasts(const NnModel *m, const NnLayer *l)
{
    return l->in2 >= 0 && m->tensors[l->in2].size != m->tensors[l->in].size;
}

int nn_act_ex(NnModel *m, int in, NnActSpec spec)
{
    if (spec.act == NN_ACT_NONE || spec.act == NN_ACT_RELU || spec.act == NN_ACT_RELU6) return nn_act(m, in, spec.act);
    NnLayer *l = nn_add_layer(m, NN_OP_ACT, in, spec.act);
    if (!l) return -1;
    if (spec.act < NN_ACT_NONE || spec.act > NN_ACT_AFFINE)
        return nn_build_fail(m, "%s: unknown activation %d", l->name, (int)spec.act);
    const int finite_a = spec.act == NN_ACT_LEAKY_RELU || spec.act == NN_ACT_HARDSIGMOID || spec.act == NN_ACT_POW ||
                         spec.act == NN_ACT_AFFINE;
    if (isnan(spec.a) || isnan(spec.b) || (spec.act == NN_ACT_CLIP && !(spec.a <= spec.b)) ||
        (finite_a && !isfinite(spec.a)) ||
        ((spec.act == NN_ACT_HARDSIGMOID || spec.act == NN_ACT_AFFINE) && !isfinite(spec.b)))
        return nn_build_fail(m, "%s: bad activation parameters %g, %g (Clip needs min <= max; LeakyRelu, HardSigmoid, "
                          "Pow and the affine map finite ones)", l->name, (double)spec.a, (double)spec.b);
    l->act_a = spec.a;
    l->act_b = spec.b;
    l->cin = l->cout = tshape(m, in).c;
    return l->out = nn_add_tensor(m, &m->tensors[in].dims, -1);
}

/* a standalone activation beyond ReLU / ReLU6: the layer computes it from its input (not read off the output),
 * branch patterns included */
int nn_layer_own_act(const NnLayer *l)
{
    return l->type == NN_OP_ACT && l->act != NN_ACT_NONE && l->act != NN_ACT_RELU && l->act != NN_ACT_RELU6;
}

int nn_concat_axis(NnModel *m, const int *ins, int n, int axis)
{
    NnLayer *l = nn_add_layer(m, NN_OP_CONCAT, n >= 1 ? ins[0] : -1, NN_ACT_NONE);
    if (!l) return -1;
    const NnDims d0 = m->tensors[ins[0]].dims;
    if (axis < 0 || axis >= d0.ndim || axis == d0.batch)
        return nn_build_fail(m, "%s: axis %d is not a dim of its rank-%d inputs other than the batch's", l->name, axis,
                             d0.ndim);
    NnDims out = d0;
    out.d[axis] = 0;
    for (int k = 0; k < n; k++) {
        if (ins[k] < 0 || ins[k] >= m->n_tensors)
            return nn_build_fail(m, "%s: input %d: tensor %d does not exist", l->name, k, ins[k]);
        const NnDims dk = m->tensors[ins[k]].dims;
        int same = dk.ndim == d0.ndim && dk.batch == d0.batch;
        for (int j = 0; j < d0.ndim && same; j++) same = j == axis || dk.d[j] == d0.d[j];
        if (!same) {
            const NnShape s = m->tensors[ins[k]].shape, s0 = m->tensors[ins[0]].shape;
            return nn_build_fail(m, "%s: input %d is %dx%dx%d, input 0 %dx%dx%d: %s", l->name, k, s.c, s.h, s.w, s0.c,
                                 s0.h, s0.w, axis == 1 ? "the spatial sizes differ" : "the sizes differ beyond the axis");
        }
        if (out.d[axis] > (1 << 20) - dk.d[axis]) return nn_build_fail(m, "%s: too many channels", l->name);
        out.d[axis] += dk.d[axis];
    }
    if (fh_calloc(&l->ins, (size_t)n, sizeof *l->ins, "concat inputs") ||
        fh_calloc(&l->zero_ins, (size_t)n, 1, "concat inputs")) {
        m->status = FH_ERR_MEMORY;
        return -1;
    }
    memcpy(l->ins, ins, sizeof *ins * (size_t)n);
    l->n_ins = n;
    l->axis = axis;
    l->cin = d0.d[axis];
    l->cout = out.d[axis];
    return l->out = nn_add_tensor(m, &out, -1);
}

/* along channels: dim 1 of batch-first inputs */
int nn_concat(NnModel *m, const int *ins, int n)
{
    if (m->status == FH_OK && n >= 1 && ins[0] >= 0 && ins[0] < m->n_tensors && m->tensors[ins[0]].dims.batch != 0) {
        nn_build_fail(m, "concat: its inputs must be batch-first");
        return -1;
    }
    return nn_concat_axis(m, ins, n, 1);
}

int nn_slice_axis(NnModel *m, int in, int axis, int start, int end)
{
    NnLayer *l = nn_add_layer(m, NN_OP_SLICE, in, NN_ACT_NONE);
    if (!l) return -1;
    NnDims d = m->tensors[in].dims;
    if (axis < 0 || axis >= d.ndim || axis == d.batch)
        return nn_build_fail(m, "%s: axis %d is not a dim of its rank-%d input other than the batch's", l->name, axis,
                             d.ndim);
    if (start < 0 || end > d.d[axis] || start >= end)
        return nn_build_fail(m, "%s: channels [%d, %d) are not a non-empty range of the input's %d", l->name, start, end,
                             d.d[axis]);
    l->start = start;
    l->end = end;
    l->axis = axis;
    l->cin = d.d[axis];
    l->cout = end - start;
    d.d[axis] = end - start;
    return l->out = nn_add_tensor(m, &d, -1);
}

int nn_slice_channels(NnModel *m, int in, int start, int end)
{
    if (m->status == FH_OK && in >= 0 && in < m->n_tensors && m->tensors[in].dims.batch != 0) {
        nn_build_fail(m, "slice: its input must be batch-first");
        return -1;
    }
    return nn_slice_axis(m, in, 1, start, end);
}

int nn_channel_shuffle(NnModel *m, int in, int groups)
{
    NnLayer *l = nn_add_layer(m, NN_OP_SHUFFLE, in, NN_ACT_NONE);
    if (!l) return -1;
    NnShape s = tshape(m, in);
    if (groups < 1 || s.c % groups)
        return nn_build_fail(m, "%s: %d channels are not divisible by %d groups", l->name, s.c, groups);
    l->groups = groups;
    l->cin = l->cout = s.c;
    return l->out = add_tensor(m, s, -1);
}

int nn_layer_inputs(const NnLayer *l)
{
    if (l->type == NN_OP_PARAM || l->type == NN_OP_CONST) return 0;
    return l->ins ? l->n_ins : 1 + (l->in2 >= 0);
}
int nn_layer_input(const NnLayer *l, int k) { return l->ins ? l->ins[k] : k ? l->in2 : l->in; }
int nn_layer_is_view(const NnLayer *l) { return l->type == NN_OP_FLATTEN || l->type == NN_OP_RESHAPE || l->folded; }


int nn_flatten(NnModel *m, int in)
{
    NnLayer *l = nn_add_layer(m, NN_OP_FLATTEN, in, NN_ACT_NONE);
    if (!l) return -1;
    const NnDims d = {2, 0, {1, (int)m->tensors[in].size}};
    return l->out = nn_add_tensor(m, &d, in);
}

int nn_tie_param(NnModel *m, int layer, NnParamRole role, int from_layer)
{
    if (m->status != FH_OK) return m->status;
    if (layer != m->n_layers - 1 || from_layer < 0 || from_layer >= layer)
        return nn_build_fail(m, "tying parameters: layer %d must be the last built and %d one before it", layer,
                             from_layer), m->status;
    NnLayer *l = &m->layers[layer], *f = &m->layers[from_layer];
    const int bias = role == NN_ROLE_BIAS || role == NN_ROLE_NORM_BIAS;
    int64_t *off = bias ? &l->b_off : &l->w_off;
    const int64_t from = bias ? f->b_off : f->w_off;
    int vi = -1, vf = -1;
    for (int i = 0; i < m->n_views; i++) {
        if (m->views[i].trainable && m->views[i].layer == layer && m->views[i].offset == *off) vi = i;
        if (m->views[i].trainable && m->views[i].layer == from_layer && m->views[i].offset == from) vf = i;
    }
    if (*off < 0 || from < 0 || vi < 0 || vf < 0 || m->views[vi].count != m->views[vf].count)
        return nn_build_fail(m, "%s: its %s cannot be that of %s (absent, or of another size)", l->name,
                             bias ? "bias" : "weight", f->name), m->status;
    /* the tied view goes; the trainables after it move down */
    const int64_t gone = *off, count = m->views[vi].count;
    memmove(&m->views[vi], &m->views[vi + 1], sizeof *m->views * (size_t)(m->n_views - vi - 1));
    m->n_views--;
    for (int i = 0; i < m->n_views; i++)
        if (m->views[i].trainable && m->views[i].offset > gone) m->views[i].offset -= count;
    for (int i = 0; i < m->n_layers; i++) {
        if (m->layers[i].w_off > gone) m->layers[i].w_off -= count;
        if (m->layers[i].b_off > gone) m->layers[i].b_off -= count;
    }
    m->n_params -= count;
    *off = from;
    l->tied = f->tied = 1;
    return FH_OK;
}

static int in_pool(const float *p, const float *pool, int64_t pool_floats, int max_batch)
{
    return pool && p >= pool && p < pool + (size_t)max_batch * (size_t)(pool_floats + 1);
}

void nn_model_free(NnModel *m)
{
    if (!m) return;
    for (int t = 0; t < m->n_tensors; t++) {
        if (m->tensors[t].alias_of >= 0) continue;
        if (t == m->input || m->tensors[t].dims.batch < 0) fh_free(&m->tensors[t].grad);
        if (t == m->input) continue;
        if (!in_pool(m->tensors[t].data, m->data_pool, m->data_pool_floats, m->max_batch)) fh_free(&m->tensors[t].data);
    }
    fh_free(&m->grad_pool);
    fh_free(&m->data_pool);
    for (int i = 0; i < m->n_layers; i++) {
        fh_free(&m->layers[i].save_mean);
        fh_free(&m->layers[i].save_invstd);
        fh_free(&m->layers[i].argmax);
        fh_free(&m->layers[i].mask);
        fh_free(&m->layers[i].act_pattern);
        fh_free(&m->layers[i].pool_pattern);
        fh_free(&m->layers[i].ins);
        fh_free(&m->layers[i].zero_ins);
        fh_free(&m->layers[i].values);
        fh_free(&m->layers[i].index);
        nn_onednn_conv_free(&m->layers[i].onednn);
        nn_onednn_layer_free(&m->layers[i].onednn_train);
    }
    nn_onednn_free(&m->onednn);
    fh_free(&m->layers);
    fh_free(&m->tensors);
    fh_free(&m->views);
    fh_free(&m->own_state);
    fh_free(&m->grad);
    fh_free(&m->workspace);
    memset(m, 0, sizeof *m);
}

/* ============================== initialisation ============================== */

static int fan_in(const NnLayer *l)
{
    if (l->type == NN_OP_LINEAR) return l->cin;
    return (l->cin / l->groups) * l->kh * l->kw;
}

void nn_model_init_params(NnModel *m, uint64_t seed)
{
    for (int vi = 0; vi < m->n_views; vi++) {
        const NnParamView *v = &m->views[vi];
        float *p = m->state + v->offset;
        switch (v->role) {
        case NN_ROLE_WEIGHT:
        case NN_ROLE_BIAS: {
            /* kaiming_uniform(a = sqrt 5) gives bound 1/sqrt(fan_in); PyTorch's bias bound is the same */
            float bound = 1.0f / sqrtf((float)fan_in(&m->layers[v->layer]));
            FhRng rng;
            fh_rng_init(&rng, seed, FH_RNG_INIT, (uint32_t)vi, 0, 0);
            for (int64_t i = 0; i < v->count; i++) p[i] = (2.0f * fh_rng_uniform_f(&rng) - 1.0f) * bound;
            break;
        }
        case NN_ROLE_TENSOR: { /* N(0, 0.02^2), the position embeddings' and class tokens' init of ViT */
            FhRng rng;
            fh_rng_init(&rng, seed, FH_RNG_INIT, (uint32_t)vi, 0, 0);
            for (int64_t i = 0; i < v->count; i++) p[i] = 0.02f * (float)fh_rng_normal(&rng);
            break;
        }
        case NN_ROLE_NORM_WEIGHT:
        case NN_ROLE_RUNNING_VAR:
            for (int64_t i = 0; i < v->count; i++) p[i] = 1.0f;
            break;
        case NN_ROLE_NORM_BIAS:
        case NN_ROLE_RUNNING_MEAN:
            for (int64_t i = 0; i < v->count; i++) p[i] = 0.0f;
            break;
        }
    }
}

/* ============================== running ============================== */

int nn_tensor_root(const NnModel *m, int t)
{
    while (m->tensors[t].alias_of >= 0) t = m->tensors[t].alias_of;
    return t;
}

float *nn_tdata(const NnModel *m, int t) { return m->tensors[nn_tensor_root(m, t)].data; }

float *nn_tgrad(const NnModel *m, int t) { return m->tensors[nn_tensor_root(m, t)].grad; }

int nn_is_input_tensor(const NnModel *m, int t) { return nn_tensor_root(m, t) == m->input; }

void nn_model_set_training(NnModel *m, int training) { m->training = training; }

int64_t nn_tensor_floats(const NnModel *m, int t, int batch)
{
    const NnTensor *x = &m->tensors[t];
    return x->dims.batch < 0 ? x->size : (int64_t)batch * x->size;
}



static void dropout_forward(NnModel *m, NnLayer *l, float *y, const float *x, int64_t n)
{
    int ordinal = 0;
    for (NnLayer *o = m->layers; o < l; o++) ordinal += o->type == NN_OP_DROPOUT;
    /* counter (round, client, step * 256 + which dropout layer): independent of rank and batch layout */
    FhRng rng;
    fh_rng_init(&rng, m->dropout_seed, FH_RNG_DROPOUT, m->dropout_ctr[0], m->dropout_ctr[1],
                m->dropout_ctr[2] * 256u + (uint32_t)ordinal);
    float scale = 1.0f / (1.0f - l->p);
    for (int64_t i = 0; i < n; i++) {
        l->mask[i] = fh_rng_uniform_f(&rng) >= l->p;
        y[i] = l->mask[i] ? x[i] * scale : 0.0f;
    }
}

int nn_model_pattern_alloc(NnModel *m)
{
    const size_t B = (size_t)m->max_batch;
    for (int i = 0; i < m->n_layers; i++) {
        NnLayer *l = &m->layers[i];
        const size_t out = B * (size_t)m->tensors[l->out].size;
        if (l->act != NN_ACT_NONE && !l->act_pattern)
            FH_CHECK(fh_calloc(&l->act_pattern, out, 1, "activation pattern"));
        if (l->type == NN_OP_MAXPOOL && !l->pool_pattern)
            FH_CHECK(fh_calloc(&l->pool_pattern, out, sizeof(int32_t), "max-pool pattern"));
    }
    return FH_OK;
}

/* 0: clamped at 0, 1: passed, 2: clamped at 6 (ReLU6); read off the output as nn_act_backward does */
static void pattern_record(uint8_t *pattern, const float *y, int64_t n, NnAct act)
{
    for (int64_t i = 0; i < n; i++)
        pattern[i] = y[i] > 0.0f ? (act == NN_ACT_RELU6 && y[i] >= 6.0f ? 2 : 1) : 0;
}

static void pattern_forward(float *y, const uint8_t *pattern, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (pattern[i] != 1) y[i] = pattern[i] == 2 ? 6.0f : 0.0f;
}

static void pattern_backward(float *dy, const uint8_t *pattern, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (pattern[i] != 1) dy[i] = 0.0f;
}

/* oneDNN's batch norm with batch statistics, then what it leaves to fedhet: the running statistics (unless frozen)
 * and an activation it cannot fuse */
static int bn_forward_onednn(NnModel *m, NnLayer *l, float *y, const float *x, int batch, NnShape si)
{
    FH_CHECK(nn_onednn_bn_forward(l->onednn_train, y, l->save_mean, l->save_invstd, x, nn_param_at(m, l->w_off),
                                  nn_param_at(m, l->b_off), batch));
    const int64_t count = (int64_t)batch * si.h * si.w;
    if (m->bn_update_running)
        for (int ch = 0; ch < si.c; ch++)
            nn_batchnorm_running_update(nn_param_at(m, l->rm_off), nn_param_at(m, l->rv_off), ch, l->save_mean[ch],
                                        l->save_invstd[ch], count, l->momentum);
    if (l->act != NN_ACT_RELU) nn_act_forward(y, count * si.c, l->act);
    return FH_OK;
}

static void maxpool_replay(float *y, int32_t *argmax, const int32_t *winners, const float *x, int planes, int hw,
                           int hwo)
{
    memcpy(argmax, winners, sizeof(int32_t) * (size_t)planes * hwo);
    for (int p = 0; p < planes; p++)
        for (int i = 0; i < hwo; i++) y[(int64_t)p * hwo + i] = x[(int64_t)p * hw + winners[(int64_t)p * hwo + i]];
}

/* The linear layers on rows (tokens) run on oneDNN's gemm under the onednn backend: a transformer is mostly those,
 * and oneDNN's kernels follow the CPU where an OpenBLAS build can fall back to old ones (Debian's 0.3.21 takes a CPU
 * it does not know for a Prescott). The zoo's linear layers keep OpenBLAS and their bits. */
static int linear_on_onednn(const NnModel *m, const NnLayer *l) { return m->onednn != NULL && l->per_row; }

/* the values before dim `axis` of tensor t (its batch counted) and after it */
static void axis_split(const NnModel *m, int t, int axis, int batch, int64_t *outer, int64_t *inner)
{
    int64_t n[NN_MAX_DIMS];
    const NnDims *d = &m->tensors[t].dims;
    nn_dims_at(d, batch, n);
    *outer = *inner = 1;
    for (int k = 0; k < d->ndim; k++) {
        if (k < axis) *outer *= n[k];
        if (k > axis) *inner *= n[k];
    }
}

int nn_model_forward(NnModel *m, const float *input, int batch)
{
    if (!m->finalized) FH_FAIL(FH_ERR_USAGE, "model %s: forward before nn_model_finalize", m->arch);
    if (batch < 1 || batch > m->max_batch)
        FH_FAIL(FH_ERR_USAGE, "model %s: batch of %d samples is outside 1..%d (the size it was built for)", m->arch,
                batch, m->max_batch);
    if (m->pattern != NN_PATTERN_OFF && m->training)
        FH_FAIL(FH_ERR_USAGE, "model %s: activation patterns need eval mode", m->arch);
    const int replay = m->pattern == NN_PATTERN_REPLAY;
    if (replay && batch != m->batch)
        FH_FAIL(FH_ERR_USAGE, "model %s: replaying the pattern of a batch of %d with %d samples", m->arch, m->batch,
                batch);
    m->batch = batch;
    m->forward_samples += batch;
    m->tensors[m->input].data = (float *)input;
    for (int i = 0; i < m->n_layers; i++) {
        NnLayer *l = &m->layers[i];
        if (l->folded) continue; /* its reader's pass does its work */
        double t0 = m->profile ? fh_time_now() : 0.0;
        const float *x = nn_tdata(m, l->in);
        float *y = nn_tdata(m, l->out);
        NnShape si = m->tensors[l->in].shape, so = m->tensors[l->out].shape;
        const int block = m->tensors[l->in].block;
        int64_t n_out = nn_tensor_floats(m, l->out, batch);
        int continue_without_act = 0; /* set by layers that apply their activation themselves */
        const int use_pattern = m->pattern != NN_PATTERN_OFF && l->act != NN_ACT_NONE;
        if (use_pattern && !l->act_pattern)
            FH_FAIL(FH_ERR_USAGE, "model %s: activation patterns without nn_model_pattern_alloc", m->arch);
        const NnAct kernel_act = replay ? NN_ACT_NONE : l->act; /* replay: the pattern acts instead */
        /* oneDNN's batch norm and max pool in training, unless a pattern is recorded or replayed: those read and
         * write fedhet's max-pool winners and batch-norm activation */
        l->onednn_ran = l->onednn_train && m->training && m->pattern == NN_PATTERN_OFF;
        switch (l->type) {
        case NN_OP_LINEAR:
            nn_linear_forward_ex(y, x, nn_param_at(m, l->w_off), nn_param_at(m, l->b_off), batch * l->rows, l->cin,
                                 l->cout, linear_on_onednn(m, l));
            break;
        case NN_OP_CONV2D: {
            NnConvShape s = nn_layer_conv_shape(m, l, batch);
            if (l->dw_direct == NN_DW_ALL)
                nn_isa_dwconv_forward(y, x, nn_param_at(m, l->w_off), nn_param_at(m, l->b_off), &s);
            else if (l->onednn)
                FH_CHECK(nn_onednn_conv_forward(l->onednn, y, x, nn_param_at(m, l->w_off), nn_param_at(m, l->b_off), batch,
                                                kernel_act));
            else
                nn_conv2d_forward_act(y, x, nn_param_at(m, l->w_off), nn_param_at(m, l->b_off), &s, kernel_act, m->workspace);
            continue_without_act = 1;
            break;
        }
        case NN_OP_MAXPOOL:
            if (m->pattern != NN_PATTERN_OFF && !l->pool_pattern)
                FH_FAIL(FH_ERR_USAGE, "model %s: activation patterns without nn_model_pattern_alloc", m->arch);
            if (l->onednn_ran) {
                FH_CHECK(nn_onednn_maxpool_forward(l->onednn_train, y, x, batch));
            } else if (replay) {
                const int lanes = block ? block : 1; /* a blocked run is a plane of its lanes' values */
                maxpool_replay(y, l->argmax, l->pool_pattern, x, batch * si.c / lanes, si.h * si.w * lanes,
                               so.h * so.w * lanes);
            } else {
                const NnPoolShape ps = pool_shape(m, l, batch);
                if (nn_pool_general(m, l))
                    nn_maxpool_ex_forward(y, l->argmax, x, &ps);
                else if (block)
                    nn_maxpool_forward_blocked(y, l->argmax, x, batch, si.c, si.h, si.w, l->k, l->stride, l->pad, so.h,
                                               so.w, block);
                else
                    nn_maxpool_forward(y, l->argmax, x, batch * si.c, si.h, si.w, l->k, l->stride, l->pad, so.h, so.w);
                if (m->pattern == NN_PATTERN_RECORD)
                    memcpy(l->pool_pattern, l->argmax, sizeof(int32_t) * (size_t)n_out);
            }
            break;
        case NN_OP_AVGPOOL:
            if (nn_pool_general(m, l)) {
                const NnPoolShape ps = pool_shape(m, l, batch);
                nn_avgpool_ex_forward(y, x, &ps);
            } else {
                nn_avgpool_forward(y, x, batch * si.c, si.h, si.w, l->k, l->stride, l->pad, so.h, so.w);
            }
            break;
        case NN_OP_GAP:
            if (block) nn_gap_forward_blocked(y, x, batch, si.c, si.h * si.w, block);
            else nn_gap_forward(y, x, batch * si.c, si.h * si.w);
            break;
        case NN_OP_BATCHNORM:
            if (l->onednn_ran)
                FH_CHECK(bn_forward_onednn(m, l, y, x, batch, si));
            else if (m->training)
                nn_batchnorm_forward_train_act(y, l->save_mean, l->save_invstd,
                                               m->bn_update_running ? nn_param_at(m, l->rm_off) : NULL, nn_param_at(m, l->rv_off),
                                               x, nn_param_at(m, l->w_off), nn_param_at(m, l->b_off), batch, si.c, si.h * si.w,
                                               l->eps, l->momentum, l->act, block);
            else
                nn_batchnorm_forward_eval_act(y, x, nn_param_at(m, l->w_off), nn_param_at(m, l->b_off), nn_param_at(m, l->rm_off),
                                              nn_param_at(m, l->rv_off), batch, si.c, si.h * si.w, l->eps, kernel_act,
                                              block);
            continue_without_act = 1;
            break;
        case NN_OP_GROUPNORM:
            nn_groupnorm_forward(y, l->save_mean, l->save_invstd, x, nn_param_at(m, l->w_off), nn_param_at(m, l->b_off), batch,
                                 si.c, si.h * si.w, l->groups, l->eps, block);
            break;
        case NN_OP_ACT:
            if (nn_layer_own_act(l)) {
                const NnActSpec spec = {l->act, l->act_a, l->act_b};
                nn_act_ex_forward(y, m->pattern == NN_PATTERN_RECORD ? l->act_pattern : NULL, x, n_out, spec,
                                  replay ? l->act_pattern : NULL);
            } else {
                memcpy(y, x, sizeof(float) * (size_t)n_out);
            }
            break;
        case NN_OP_DROPOUT:
            if (m->training && l->p > 0.0f) dropout_forward(m, l, y, x, n_out);
            else memcpy(y, x, sizeof(float) * (size_t)n_out);
            break;
        case NN_OP_ADD: {
            const float *x2 = nn_tdata(m, l->in2);
            if (nn_layer_broadcasts(m, l))
                nn_add_bcast_forward(y, x, x2, batch, si.c, (int64_t)si.h * si.w, block);
            else
                NN_PARALLEL_FOR(n_out, for (int64_t j = 0; j < n_out; j++) y[j] = x[j] + x2[j];);
            break;
        }
        case NN_OP_MUL:
            nn_mul_forward(y, x, nn_tdata(m, l->in2), batch, si.c, (int64_t)si.h * si.w,
                           nn_layer_broadcasts(m, l) ? 1 : (int64_t)si.h * si.w, block);
            break;
        case NN_OP_CONCAT: {
            int64_t outer, inner;
            axis_split(m, l->out, l->axis, batch, &outer, &inner);
            for (int k = 0, c0 = 0; k < l->n_ins; k++) {
                const int ck = m->tensors[l->ins[k]].dims.d[l->axis];
                nn_channels_copy(y, l->cout, c0, nn_tdata(m, l->ins[k]), ck, 0, ck, (int)outer, inner, 0);
                c0 += ck;
            }
            break;
        }
        case NN_OP_SLICE: {
            int64_t outer, inner;
            axis_split(m, l->in, l->axis, batch, &outer, &inner);
            nn_channels_copy(y, l->cout, 0, x, l->cin, l->start, l->cout, (int)outer, inner, 0);
            break;
        }
        case NN_OP_SHUFFLE: nn_shuffle_forward(y, x, batch, si.c, l->groups, (int64_t)si.h * si.w); break;
        case NN_OP_FLATTEN: break;
        default: nn_nd_forward(m, l, batch); break;
        }
        if (!nn_layer_own_act(l)) { /* an own activation's kernel applied it, and recorded or replayed its pattern */
            if (replay && use_pattern) pattern_forward(y, l->act_pattern, n_out);
            else if (!continue_without_act) nn_act_forward(y, n_out, l->act);
            if (m->pattern == NN_PATTERN_RECORD && use_pattern) pattern_record(l->act_pattern, y, n_out, l->act);
        }
        if (m->profile) l->seconds_forward += fh_time_now() - t0;
    }
    return FH_OK;
}

void nn_model_zero_grad(NnModel *m)
{
    nn_vec_zero(m->grad, m->n_state);
    m->grad_zero = 1;
}

float *nn_model_perturb_beside(NnModel *m, float *beside, float a, const float *g)
{
    float *w = m->state;
    nn_vec_add_scaled(beside, w, a, g, m->n_params);
    nn_vec_copy(beside + m->n_params, w + m->n_params, m->n_state - m->n_params); /* batch-norm running statistics */
    m->state = beside;
    return w;
}

/* a max pool whose backward is the dense pass: windows that tile a blocked input */
static int maxpool_backward_dense(const NnModel *m, const NnLayer *l)
{
    const NnShape si = m->tensors[l->in].shape;
    return m->tensors[l->in].block && nn_maxpool_tiles(si.h, si.w, l->k, l->stride, l->pad);
}

/* a layer that writes every value of its input's gradient when it is the first to reach it (zero_in), so that
 * the gradient need not be zeroed first */
static int writes_whole_dx(const NnModel *m, const NnLayer *l)
{
    switch (l->type) {
    case NN_OP_CONV2D: return l->onednn != NULL && l->dw_direct < NN_DW_BACKWARD; /* the blas and direct kernels add */
    case NN_OP_BATCHNORM: return m->training;
    case NN_OP_GROUPNORM: return 1;
    case NN_OP_MAXPOOL: return l->onednn_ran || maxpool_backward_dense(m, l);
    default: return 0;
    }
}

void nn_model_backward(NnModel *m, const float *dlogits, const float *dfeatures)
{
    int batch = m->batch;
    m->backward_samples += batch;
    for (int t = 0; t < m->n_tensors; t++) {
        NnTensor *x = &m->tensors[t];
        if (x->alias_of >= 0 || !(t == m->input ? m->need_input_grad : x->grad_from_start)) continue;
        memset(x->grad, 0, sizeof(float) * (size_t)nn_tensor_floats(m, t, batch));
    }
    nn_vec_axpy(nn_tgrad(m, m->logits), 1.0f, dlogits, (int64_t)batch * m->classes);
    if (dfeatures) nn_vec_axpy(nn_tgrad(m, m->features), 1.0f, dfeatures, (int64_t)batch * m->tensors[m->features].size);

    for (int i = m->n_layers - 1; i >= 0; i--) {
        NnLayer *l = &m->layers[i];
        double t0 = m->profile ? fh_time_now() : 0.0;
        if (l->folded) continue; /* its reader's pass did its work */
        /* the whole buffer: a folded input is a part of it */
        const int root_in = nn_tensor_root(m, l->in), root_in2 = l->in2 >= 0 ? nn_tensor_root(m, l->in2) : -1;
        if (l->zero_in && !writes_whole_dx(m, l))
            memset(nn_tgrad(m, root_in), 0, sizeof(float) * (size_t)nn_tensor_floats(m, root_in, batch));
        if (l->zero_in2) memset(nn_tgrad(m, root_in2), 0, sizeof(float) * (size_t)nn_tensor_floats(m, root_in2, batch));
        const float *x = nn_tdata(m, l->in), *y = nn_tdata(m, l->out);
        float *dy = nn_tgrad(m, l->out);
        float *dx = (nn_is_input_tensor(m, l->in) && !m->need_input_grad) ? NULL : nn_tgrad(m, l->in);
        NnShape si = m->tensors[l->in].shape, so = m->tensors[l->out].shape;
        const int block = m->tensors[l->in].block;
        int64_t n_out = nn_tensor_floats(m, l->out, batch);
        /* conv and training-mode batch norm fold the activation's mask into their own passes (oneDNN's batch norm
         * a ReLU's only) */
        const int fused_mask = l->type == NN_OP_CONV2D ||
                               (l->type == NN_OP_BATCHNORM && m->training && (!l->onednn_ran || l->act == NN_ACT_RELU));
        const int replay = m->pattern == NN_PATTERN_REPLAY && l->act != NN_ACT_NONE;
        if (nn_layer_own_act(l)) { /* its case below: f'(x) from the input, or the replayed pieces */
        } else if (replay) {
            pattern_backward(dy, l->act_pattern, n_out);
        } else if (!fused_mask) {
            nn_act_backward(dy, y, n_out, l->act);
        }
        switch (l->type) {
        case NN_OP_LINEAR:
            nn_linear_backward_ex(dx, nn_pgrad_at(m, l->w_off), nn_pgrad_at(m, l->b_off), dy, x,
                                  nn_param_at(m, l->w_off), batch * l->rows, l->cin, l->cout, linear_on_onednn(m, l));
            break;
        case NN_OP_CONV2D: {
            NnConvShape s = nn_layer_conv_shape(m, l, batch);
            float *dw = nn_pgrad_at(m, l->w_off), *db = nn_pgrad_at(m, l->b_off);
            if (l->dw_direct) { /* act NONE: no mask to apply */
                nn_isa_dwconv_backward_weights(dw, db, dy, x, &s);
                dw = db = NULL;
            }
            if (l->dw_direct >= NN_DW_BACKWARD) {
                if (dx) nn_isa_dwconv_backward_data(dx, dy, nn_param_at(m, l->w_off), &s);
            } else if (l->onednn)
                nn_onednn_conv_backward(l->onednn, dx, dw, db, dy, y, x, nn_param_at(m, l->w_off), batch,
                                        replay ? NN_ACT_NONE : l->act, m->grad_zero && !l->tied, l->zero_in);
            else
                nn_conv2d_backward_act(dx, nn_pgrad_at(m, l->w_off), nn_pgrad_at(m, l->b_off), dy, y, x, nn_param_at(m, l->w_off), &s,
                                       replay ? NN_ACT_NONE : l->act, m->workspace);
            break;
        }
        case NN_OP_MAXPOOL:
            if (dx && l->onednn_ran) {
                nn_onednn_maxpool_backward(l->onednn_train, dx, dy, batch, l->zero_in);
            } else if (dx) {
                const int lanes = block ? block : 1;
                if (maxpool_backward_dense(m, l))
                    nn_maxpool_backward_tiled(dx, dy, l->argmax, batch * si.c / lanes, si.h, si.w, l->k, lanes,
                                              l->zero_in);
                else
                    nn_maxpool_backward(dx, dy, l->argmax, batch * si.c / lanes, (int64_t)si.h * si.w * lanes,
                                        (int64_t)so.h * so.w * lanes);
            }
            break;
        case NN_OP_AVGPOOL:
            if (dx && nn_pool_general(m, l)) {
                const NnPoolShape ps = pool_shape(m, l, batch);
                nn_avgpool_ex_backward(dx, dy, &ps);
            } else if (dx) {
                nn_avgpool_backward(dx, dy, batch * si.c, si.h, si.w, l->k, l->stride, l->pad, so.h, so.w);
            }
            break;
        case NN_OP_GAP:
            if (dx && block) nn_gap_backward_blocked(dx, dy, batch, si.c, si.h * si.w, block);
            else if (dx) nn_gap_backward(dx, dy, batch * si.c, si.h * si.w);
            break;
        case NN_OP_BATCHNORM:
            if (l->onednn_ran)
                nn_onednn_bn_backward(l->onednn_train, dx, nn_pgrad_at(m, l->w_off), nn_pgrad_at(m, l->b_off), dy, x,
                                      nn_param_at(m, l->w_off), nn_param_at(m, l->b_off), l->save_mean, l->save_invstd, batch,
                                      m->grad_zero && !l->tied, l->zero_in);
            else if (m->training)
                nn_batchnorm_backward_train_act(dx, nn_pgrad_at(m, l->w_off), nn_pgrad_at(m, l->b_off), dy, y, x,
                                                nn_param_at(m, l->w_off), l->save_mean, l->save_invstd, batch, si.c,
                                                si.h * si.w, l->act, block, l->zero_in);
            else
                nn_batchnorm_backward_eval(dx, nn_pgrad_at(m, l->w_off), nn_pgrad_at(m, l->b_off), dy, x, nn_param_at(m, l->w_off),
                                           nn_param_at(m, l->rm_off), nn_param_at(m, l->rv_off), batch, si.c, si.h * si.w,
                                           l->eps, block);
            break;
        case NN_OP_GROUPNORM:
            nn_groupnorm_backward(dx, nn_pgrad_at(m, l->w_off), nn_pgrad_at(m, l->b_off), dy, x, nn_param_at(m, l->w_off), l->save_mean,
                                  l->save_invstd, batch, si.c, si.h * si.w, l->groups, block, l->zero_in);
            break;
        case NN_OP_ACT:
            if (dx && nn_layer_own_act(l)) {
                const NnActSpec spec = {l->act, l->act_a, l->act_b};
                nn_act_ex_backward(dx, dy, x, n_out, spec, replay ? l->act_pattern : NULL);
            } else if (dx) {
                /* the mask was applied to dy above (l->act is the layer's own activation) */
                nn_vec_axpy(dx, 1.0f, dy, n_out);
            }
            break;
        case NN_OP_DROPOUT:
            if (!dx) break;
            if (m->training && l->p > 0.0f) {
                float scale = 1.0f / (1.0f - l->p);
                for (int64_t j = 0; j < n_out; j++) dx[j] += l->mask[j] ? dy[j] * scale : 0.0f;
            } else {
                nn_vec_axpy(dx, 1.0f, dy, n_out);
            }
            break;
        case NN_OP_ADD: {
            float *dx2 = (nn_is_input_tensor(m, l->in2) && !m->need_input_grad) ? NULL : nn_tgrad(m, l->in2);
            if (nn_layer_broadcasts(m, l)) {
                nn_add_bcast_backward(dx, dx2, dy, batch, si.c, (int64_t)si.h * si.w, block);
                break;
            }
            if (dx) nn_vec_axpy(dx, 1.0f, dy, n_out);
            if (dx2) nn_vec_axpy(dx2, 1.0f, dy, n_out);
            break;
        }
        case NN_OP_MUL: {
            float *dx2 = (nn_is_input_tensor(m, l->in2) && !m->need_input_grad) ? NULL : nn_tgrad(m, l->in2);
            nn_mul_backward(dx, dx2, dy, x, nn_tdata(m, l->in2), batch, si.c, (int64_t)si.h * si.w,
                            nn_layer_broadcasts(m, l) ? 1 : (int64_t)si.h * si.w, block);
            break;
        }
        case NN_OP_CONCAT: {
            int64_t outer, inner;
            axis_split(m, l->out, l->axis, batch, &outer, &inner);
            for (int k = 0; k < l->n_ins; k++) /* every first write zeroed before any input adds (an input twice) */
                if (l->zero_ins[k])
                    memset(nn_tgrad(m, l->ins[k]), 0, sizeof(float) * (size_t)nn_tensor_floats(m, l->ins[k], batch));
            for (int k = 0, c0 = 0; k < l->n_ins; k++) {
                const int ck = m->tensors[l->ins[k]].dims.d[l->axis];
                if (!nn_is_input_tensor(m, l->ins[k]) || m->need_input_grad)
                    nn_channels_copy(nn_tgrad(m, l->ins[k]), ck, 0, dy, l->cout, c0, ck, (int)outer, inner, 1);
                c0 += ck;
            }
            break;
        }
        case NN_OP_SLICE:
            if (dx) {
                int64_t outer, inner;
                axis_split(m, l->in, l->axis, batch, &outer, &inner);
                nn_channels_copy(dx, l->cin, l->start, dy, l->cout, 0, l->cout, (int)outer, inner, 1);
            }
            break;
        case NN_OP_SHUFFLE:
            if (dx) nn_shuffle_backward(dx, dy, batch, si.c, l->groups, (int64_t)si.h * si.w);
            break;
        case NN_OP_FLATTEN: break;
        default: nn_nd_backward(m, l, batch); break;
        }
        if (m->profile) l->seconds_backward += fh_time_now() - t0;
    }
    m->grad_zero = 0;
}

float *nn_model_logits(const NnModel *m) { return nn_tdata(m, m->logits); }
float *nn_model_features(const NnModel *m) { return nn_tdata(m, m->features); }
int64_t nn_model_features_size(const NnModel *m) { return m->tensors[m->features].size; }

int64_t nn_model_flops_forward(const NnModel *m)
{
    int64_t f = 0;
    for (int i = 0; i < m->n_layers; i++) f += m->layers[i].flops;
    return f;
}

size_t nn_model_activation_bytes(const NnModel *m, int batch)
{
    /* from shapes alone, so that a model built for batch 1 can report any batch without allocating */
    size_t bytes = 0, B = (size_t)batch;
    int64_t ws = 0;
    for (int t = 0; t < m->n_tensors; t++)
        if (m->tensors[t].alias_of < 0 && (t == m->input || !in_pool(m->tensors[t].data, m->data_pool,
                                                                      m->data_pool_floats, m->max_batch)))
            bytes += sizeof(float) * B * (size_t)m->tensors[t].size; /* the input's: its gradient */
    bytes += sizeof(float) * B * (size_t)(m->grad_pool_floats + m->data_pool_floats);
    for (int i = 0; i < m->n_layers; i++) {
        const NnLayer *l = &m->layers[i];
        size_t out = B * (size_t)m->tensors[l->out].size;
        if (l->type == NN_OP_MAXPOOL) bytes += sizeof(int32_t) * out;
        if (l->type == NN_OP_DROPOUT) bytes += out;
        if (l->type == NN_OP_CONV2D && !l->onednn) {
            NnConvShape s = nn_layer_conv_shape(m, l, batch);
            int64_t need = nn_conv2d_workspace(&s, nn_conv2d_chunk(&s));
            if (need > ws) ws = need;
        }
    }
    return bytes + sizeof(float) * (size_t)ws;
}

size_t nn_model_backend_bytes(const NnModel *m) { return nn_onednn_bytes(m->onednn); }

int nn_backend_parse(const char *name, NnBackend *out)
{
    if (!name || !*name || !strcmp(name, "blas")) *out = NN_BACKEND_BLAS;
    else if (!strcmp(name, "onednn")) *out = NN_BACKEND_ONEDNN;
    else if (!strcmp(name, "auto")) *out = NN_BACKEND_AUTO;
    else FH_FAIL(FH_ERR_USAGE, "backend '%s' must be blas, onednn or auto", name);
    return FH_OK;
}

const char *nn_backend_name(NnBackend backend)
{
    return backend == NN_BACKEND_ONEDNN ? "onednn" : backend == NN_BACKEND_AUTO ? "auto" : "blas";
}

void nn_model_layer_impl(const NnModel *m, int layer, char *out, size_t size)
{
    const NnLayer *l = layer >= 0 && layer < m->n_layers ? &m->layers[layer] : NULL;
    if (l && l->onednn_train) {
        const char *fwd = nn_onednn_layer_impl(l->onednn_train, 0), *bwd = nn_onednn_layer_impl(l->onednn_train, 1);
        if (!strcmp(fwd, bwd)) snprintf(out, size, "%s (training)", fwd);
        else snprintf(out, size, "fwd %s, bwd %s (training)", fwd, bwd);
        return;
    }
    const char *direct = "fedhet direct depthwise";
    if (l && l->dw_direct == NN_DW_ALL) {
        snprintf(out, size, "%s", direct);
        return;
    }
    const NnOnednnConv *c = l ? l->onednn : NULL;
    const char *fwd = nn_onednn_conv_impl(c, 0),
               *bwd_data = l && l->dw_direct >= NN_DW_BACKWARD ? direct : nn_onednn_conv_impl(c, 1),
               *bwd_weights = l && l->dw_direct ? direct : nn_onednn_conv_impl(c, 2);
    if (!strcmp(fwd, bwd_data) && !strcmp(fwd, bwd_weights)) snprintf(out, size, "%s", fwd);
    else snprintf(out, size, "fwd %s, bwd-data %s, bwd-weights %s", fwd, bwd_data, bwd_weights);
}

const NnParamView *nn_model_view(const NnModel *m, const char *name)
{
    for (int i = 0; i < m->n_views; i++)
        if (strcmp(m->views[i].name, name) == 0) return &m->views[i];
    return NULL;
}
