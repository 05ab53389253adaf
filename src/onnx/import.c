/* ONNX graph -> engine model. The graph is walked once in node order (ONNX requires a topological order): a value
 * is a constant (initializers, Constant and everything computed from constants alone, folded here), an engine
 * tensor (per sample C x H x W; a 2-D value N x F is F x 1 x 1) or a step of the GroupNorm pattern PyTorch
 * exports (Reshape to N x G x -1, InstanceNormalization, Reshape back, Mul, Add), which becomes one group-norm
 * layer. A Relu or Clip(0, 6) whose input is read by nothing else fuses into the layer before it, as the zoo
 * builds its models, so that a zoo model exported and imported is the same model, bit for bit.
 *
 * Everything this cannot represent exactly is refused, naming the node, its op type and attribute: a silent
 * change of semantics is worse than an error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"
#include "fedhet/onnx.h"
#include "onnx.pb-c.h"
#include "onnx_internal.h"

static const char *supported[] = {
    "Add", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Constant", "Conv", "Div", "Dropout",
    "Flatten", "Gather", "Gemm", "GlobalAveragePool", "HardSigmoid", "HardSwish", "Identity", "InstanceNormalization",
    "LeakyRelu", "MatMul", "MaxPool", "Mul", "Pad", "ReduceMean", "Relu", "Reshape", "Shape", "Sigmoid", "Slice", "Split",
    "Squeeze", "Sub", "Tanh", "Transpose", "Unsqueeze",
};

const char *onnx_supported_ops(void)
{
    static char text[512];
    if (!text[0])
        for (size_t i = 0; i < sizeof supported / sizeof supported[0]; i++)
            snprintf(text + strlen(text), sizeof text - strlen(text), "%s%s", i ? ", " : "", supported[i]);
    return text;
}

int onnx_is_path(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    return n > 5 && !strcmp(name + n - 5, ".onnx");
}

/* ---- constants ---- */

typedef struct {
    int ndim;
    int64_t dims[8];
    int64_t n;
    int is_int;   /* values in i (shapes, indices), else in f */
    float *f;
    int64_t *i;
    int init;     /* index of the initializer it is, -1 */
} Const;

enum { V_NONE = 0, V_CONST, V_TENSOR, V_GN_SPLIT, V_GN_NORMED, V_GN_BACK, V_GN_SCALED, V_SHUF_SPLIT, V_SHUF_SWAPPED };

typedef struct {
    const char *name;
    int kind;
    Const c;
    int t;       /* engine tensor (V_TENSOR; the pattern's source tensor for V_GN_*) */
    int rank;    /* 4 (N C H W) or 2 (N F) */
    int layer;   /* the layer that wrote t, -1 */
    int groups;  /* V_GN_*: groups, eps, scale */
    float eps;
    const Const *gamma;
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

typedef struct {
    OnnxNet *net;
    NnModel *m;
    const Onnx__GraphProto *g;
    Val *vals;
    int n_vals, cap_vals;
    int *init_used;      /* per initializer: the layer that took it as a weight, -1 */
    void **arena;        /* allocations of this build */
    int n_arena, cap_arena;
    int features;        /* tensor, -1 */
    int features_named;  /* model.features was found */
    int node;            /* the node being read */
    unsigned char *absorbed; /* nodes already done by a node before them (MatMul's bias Add) */
    int proj_dim, classes;
    int logits;
} Bld;

static void *bld_alloc(Bld *b, size_t bytes)
{
    if (b->n_arena == b->cap_arena) {
        int cap = b->cap_arena ? 2 * b->cap_arena : 64;
        void **grown = realloc(b->arena, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        b->arena = grown;
        b->cap_arena = cap;
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (p) b->arena[b->n_arena++] = p;
    return p;
}

static const Onnx__NodeProto *cur(const Bld *b) { return b->g->node[b->node]; }

/* "FILE: node NAME (OP): ..." */
#define NODE_FAIL(b, status, ...)                                                                             \
    do {                                                                                                      \
        char why_[1024];                                                                                      \
        snprintf(why_, sizeof why_, __VA_ARGS__);                                                             \
        return fh_error_raise((status), __FILE__, __LINE__, "%s: node '%s' (%s): %s", (b)->net->path,        \
                              node_name(b, cur(b)), cur(b)->op_type, why_);                                   \
    } while (0)

static const char *node_name(const Bld *b, const Onnx__NodeProto *n)
{
    if (n->name && *n->name) return n->name;
    return n->n_output && n->output[0] ? n->output[0] : "?";
}

/* ---- tensor decoding ---- */

static int decode_tensor(const Onnx__TensorProto *t, Const *c, const char *path, const char *what)
{
    memset(c, 0, sizeof *c);
    c->init = -1;
    if (t->n_dims > 8) FH_FAIL(FH_ERR_USAGE, "%s: tensor %s has %zu dimensions (at most 8)", path, what, t->n_dims);
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        FH_FAIL(FH_ERR_USAGE, "%s: tensor %s keeps its data in an external file, which is not supported (export "
                "without external data: models under 2 GB need none)", path, what);
    c->ndim = (int)t->n_dims;
    c->n = 1;
    for (int d = 0; d < c->ndim; d++) {
        if (t->dims[d] < 0 || t->dims[d] > (1LL << 31))
            FH_FAIL(FH_ERR_DATA, "%s: tensor %s has dimension %lld", path, what, (long long)t->dims[d]);
        c->dims[d] = t->dims[d];
        c->n *= t->dims[d];
        if (c->n > (1LL << 31)) FH_FAIL(FH_ERR_DATA, "%s: tensor %s is too large", path, what);
    }
    const int type = t->has_data_type ? t->data_type : 0;
    const size_t raw = t->has_raw_data ? t->raw_data.len : 0;
    const uint8_t *rd = t->has_raw_data ? t->raw_data.data : NULL;
    size_t have = 0;
    switch (type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
        c->f = malloc((size_t)(c->n ? c->n : 1) * sizeof(float));
        if (!c->f) FH_FAIL(FH_ERR_IO, "%s: out of memory decoding tensor %s", path, what);
        if (type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) {
            have = rd ? raw / 4 : t->n_float_data;
            if (have == (size_t)c->n) {
                if (rd) memcpy(c->f, rd, (size_t)c->n * 4); /* little-endian, as the format says */
                else memcpy(c->f, t->float_data, (size_t)c->n * 4);
            }
        } else {
            have = rd ? raw / 8 : t->n_double_data;
            for (int64_t k = 0; have == (size_t)c->n && k < c->n; k++) {
                double v;
                if (rd) memcpy(&v, rd + 8 * k, 8);
                else v = t->double_data[k];
                c->f[k] = (float)v;
            }
        }
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        c->is_int = 1;
        c->i = malloc((size_t)(c->n ? c->n : 1) * sizeof(int64_t));
        if (!c->i) FH_FAIL(FH_ERR_IO, "%s: out of memory decoding tensor %s", path, what);
        if (type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64) {
            have = rd ? raw / 8 : t->n_int64_data;
            if (have == (size_t)c->n) {
                if (rd) memcpy(c->i, rd, (size_t)c->n * 8);
                else memcpy(c->i, t->int64_data, (size_t)c->n * 8);
            }
        } else {
            const size_t width = type == ONNX__TENSOR_PROTO__DATA_TYPE__INT32 ? 4 : 1;
            have = rd ? raw / width : t->n_int32_data;
            for (int64_t k = 0; have == (size_t)c->n && k < c->n; k++) {
                int32_t v = 0;
                if (rd && width == 4) memcpy(&v, rd + 4 * k, 4);
                else if (rd) v = rd[k];
                else v = t->int32_data[k];
                c->i[k] = v;
            }
        }
        break;
    default:
        FH_FAIL(FH_ERR_USAGE, "%s: tensor %s has element type %d: only float, double, int32, int64 and bool "
                "constants are supported", path, what, type);
    }
    if (have != (size_t)c->n) {
        free(c->f);
        free(c->i);
        c->f = NULL;
        c->i = NULL;
        FH_FAIL(FH_ERR_DATA, "%s: tensor %s holds %zu values for its %lld-element shape (damaged file?)", path, what,
                have, (long long)c->n);
    }
    return FH_OK;
}

/* ---- reading ---- */

void onnx_net_free(OnnxNet *net)
{
    if (!net) return;
    if (net->inits && net->model && net->model->graph)
        for (size_t k = 0; k < net->model->graph->n_initializer; k++) {
            free(net->inits[k].f);
            free(net->inits[k].i);
        }
    free(net->inits);
    for (int k = 0; k < net->n_weights; k++)
        if (net->weights[k].owned) free((void *)net->weights[k].src);
    free(net->weights);
    if (net->model) onnx__model_proto__free_unpacked(net->model, NULL);
    free(net->path);
    free(net->features_node);
    free(net);
}

int onnx_net_parse(OnnxNet **out, const uint8_t *buf, size_t len, const char *name)
{
    *out = NULL;
    OnnxNet *net = calloc(1, sizeof *net);
    if (!net || !(net->path = strdup(name ? name : "model.onnx"))) {
        free(net);
        FH_FAIL(FH_ERR_IO, "%s: out of memory", name);
    }
    net->model = onnx__model_proto__unpack(NULL, len, buf);
    int status = FH_OK;
    if (!net->model || !net->model->graph)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: not an ONNX model (the protobuf is damaged or "
                                "truncated, or holds no graph; %zu bytes)", net->path, len);
    const Onnx__GraphProto *g = status == FH_OK ? net->model->graph : NULL;
    for (size_t k = 0; g && k < net->model->n_opset_import; k++) {
        const Onnx__OperatorSetIdProto *o = net->model->opset_import[k];
        if (!o->domain || !*o->domain || !strcmp(o->domain, "ai.onnx")) net->opset = (int)o->version;
    }
    if (status == FH_OK && (net->opset < 11 || net->opset > 17))
        status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s: opset %d of the default domain: opsets 11 to "
                                "17 are supported (torch.onnx.export(..., opset_version=13))", net->path, net->opset);
    if (status == FH_OK && g->n_initializer) {
        net->inits = calloc(g->n_initializer, sizeof *net->inits);
        if (!net->inits) status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: out of memory", net->path);
    }
    for (size_t k = 0; status == FH_OK && k < (g ? g->n_initializer : 0); k++) {
        status = decode_tensor(g->initializer[k], &net->inits[k], net->path, g->initializer[k]->name);
        net->inits[k].init = (int)k;
    }
    if (status != FH_OK) {
        onnx_net_free(net);
        return fh_error_trace(status, __FILE__, __LINE__, "onnx_net_parse");
    }
    *out = net;
    return FH_OK;
}

int onnx_net_read(OnnxNet **out, const char *path)
{
    *out = NULL;
    char *buf;
    size_t n;
    FH_CHECK(fh_read_bytes(path, &buf, &n, FH_ERR_USAGE)); /* a missing file is the config's error */
    int status = onnx_net_parse(out, (const uint8_t *)buf, n, path);
    free(buf);
    return status;
}

void onnx_net_set_features(OnnxNet *net, const char *node)
{
    free(net->features_node);
    net->features_node = node && *node ? strdup(node) : NULL;
}

static const Onnx__ValueInfoProto *data_input(const OnnxNet *net)
{
    const Onnx__GraphProto *g = net->model->graph;
    for (size_t k = 0; k < g->n_input; k++) {
        int is_init = 0;
        for (size_t j = 0; j < g->n_initializer && !is_init; j++) is_init = !strcmp(g->initializer[j]->name, g->input[k]->name);
        if (!is_init) return g->input[k];
    }
    return NULL;
}

/* dims of a value info: n, with -1 for a symbolic or missing dimension; -1 when it has no tensor shape */
static int info_dims(const Onnx__ValueInfoProto *v, int64_t *dims, int cap)
{
    if (!v || !v->type || v->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !v->type->tensor_type->shape)
        return -1;
    const Onnx__TensorShapeProto *s = v->type->tensor_type->shape;
    int n = (int)s->n_dim;
    for (int d = 0; d < n && d < cap; d++)
        dims[d] = s->dim[d]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ? s->dim[d]->dim_value : -1;
    return n;
}

int onnx_net_input_shape(const OnnxNet *net, NnShape *shape)
{
    int64_t d[8];
    int n = info_dims(data_input(net), d, 8);
    if (n == 4 && d[1] > 0 && d[2] > 0 && d[3] > 0) {
        *shape = (NnShape){ (int)d[1], (int)d[2], (int)d[3] };
        return 1;
    }
    if (n == 3 && d[1] > 0 && d[2] > 0) { /* N x C x L: L on the height axis */
        *shape = (NnShape){ (int)d[1], (int)d[2], 1 };
        return 1;
    }
    if (n == 2 && d[1] > 0) {
        *shape = (NnShape){ (int)d[1], 1, 1 };
        return 1;
    }
    return 0;
}

int onnx_net_classes(const OnnxNet *net)
{
    const Onnx__GraphProto *g = net->model->graph;
    int64_t d[8];
    int n = g->n_output ? info_dims(g->output[0], d, 8) : -1;
    return n == 2 && d[1] > 0 ? (int)d[1] : 0;
}

/* ---- values ---- */

static Val *find(Bld *b, const char *name)
{
    if (!name || !*name) return NULL;
    for (int k = b->n_vals - 1; k >= 0; k--)
        if (!strcmp(b->vals[k].name, name)) return &b->vals[k];
    return NULL;
}

static Val *put(Bld *b, const char *name, int kind)
{
    if (b->n_vals == b->cap_vals) {
        int cap = b->cap_vals ? 2 * b->cap_vals : 256;
        Val *grown = realloc(b->vals, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        b->vals = grown;
        b->cap_vals = cap;
    }
    Val *v = &b->vals[b->n_vals++];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->kind = kind;
    v->layer = -1;
    v->t = -1;
    v->c.init = -1;
    return v;
}

static Val *put_tensor(Bld *b, const char *name, int t, int rank)
{
    Val *v = put(b, name, V_TENSOR);
    if (v) {
        v->t = t;
        v->rank = rank;
        v->layer = b->m->n_layers > 0 && b->m->layers[b->m->n_layers - 1].out == t ? b->m->n_layers - 1 : -1;
    }
    return v;
}

/* readers of value `name` among the nodes after `from` and the graph's outputs */
static int consumers(const Bld *b, const char *name, int from)
{
    int n = 0;
    for (size_t k = (size_t)from + 1; k < b->g->n_node; k++)
        for (size_t j = 0; j < b->g->node[k]->n_input; j++) n += !strcmp(b->g->node[k]->input[j], name);
    for (size_t k = 0; k < b->g->n_output; k++) n += !strcmp(b->g->output[k]->name, name);
    return n;
}

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t k = 0; k < n->n_attribute; k++)
        if (!strcmp(n->attribute[k]->name, name)) return n->attribute[k];
    return NULL;
}

static int64_t attr_i(const Onnx__NodeProto *n, const char *name, int64_t dflt)
{
    const Onnx__AttributeProto *a = attr(n, name);
    return a && a->has_i ? a->i : dflt;
}

static float attr_f(const Onnx__NodeProto *n, const char *name, float dflt)
{
    const Onnx__AttributeProto *a = attr(n, name);
    return a && a->has_f ? a->f : dflt;
}

/* ints attribute: count (0 when absent) */
static int attr_ints(const Onnx__NodeProto *n, const char *name, const int64_t **v)
{
    const Onnx__AttributeProto *a = attr(n, name);
    *v = a ? a->ints : NULL;
    return a ? (int)a->n_ints : 0;
}

/* every attribute of the node must be among `known` (a NULL-terminated list): else refused by name */
static int check_attrs(Bld *b, const char *const *known)
{
    const Onnx__NodeProto *n = cur(b);
    for (size_t k = 0; k < n->n_attribute; k++) {
        int ok = 0;
        for (int j = 0; known[j] && !ok; j++) ok = !strcmp(known[j], n->attribute[k]->name);
        if (!ok) NODE_FAIL(b, FH_ERR_USAGE, "attribute %s is not supported", n->attribute[k]->name);
    }
    return FH_OK;
}

static Val *in_val(Bld *b, int k)
{
    const Onnx__NodeProto *n = cur(b);
    return k < (int)n->n_input ? find(b, n->input[k]) : NULL;
}

/* the node's k-th input as a constant, or NULL (absent or not constant) */
static const Const *in_const(Bld *b, int k)
{
    Val *v = in_val(b, k);
    return v && v->kind == V_CONST ? &v->c : NULL;
}

static int in_tensor(Bld *b, int k, Val **v)
{
    *v = in_val(b, k);
    const Onnx__NodeProto *n = cur(b);
    if (!*v) {
        if (k >= (int)n->n_input) NODE_FAIL(b, FH_ERR_USAGE, "input %d is missing", k);
        NODE_FAIL(b, FH_ERR_USAGE, "input '%s' is not produced by any node before it", n->input[k]);
    }
    if ((*v)->kind != V_TENSOR)
        NODE_FAIL(b, FH_ERR_USAGE, "input '%s' must be an activation tensor of the network here (it is %s)",
                  n->input[k], (*v)->kind == V_CONST ? "a constant" : "part of a GroupNorm pattern read elsewhere");
    const int *p = (*v)->pad;
    if ((p[0] | p[1] | p[2] | p[3]) && strcmp(n->op_type, "Conv") && strcmp(n->op_type, "AveragePool"))
        NODE_FAIL(b, FH_ERR_USAGE, "input '%s' comes from a Pad: a Pad followed by %s is not supported (by Conv or "
                  "AveragePool is)", n->input[k], n->op_type);
    return FH_OK;
}

/* the node's k-th input must be a constant (weights): FH_OK with *c set */
static int need_const(Bld *b, int k, const Const **c, const char *what)
{
    *c = in_const(b, k);
    if (!*c) {
        const Onnx__NodeProto *n = cur(b);
        NODE_FAIL(b, FH_ERR_USAGE, "%s '%s' must be an initializer or fold to a constant at import (weights computed "
                  "by the graph are not supported)", what, k < (int)n->n_input ? n->input[k] : "(missing)");
    }
    return FH_OK;
}

static int record_weight(Bld *b, int layer, int role, const Const *c, int transpose_rows, float scale)
{
    OnnxNet *net = b->net;
    if (c->init >= 0) {
        if (b->init_used[c->init] >= 0 && b->init_used[c->init] != layer)
            NODE_FAIL(b, FH_ERR_USAGE, "initializer '%s' is already the weights of layer %s: weights shared between "
                      "layers are not supported", b->g->initializer[c->init]->name,
                      b->m->layers[b->init_used[c->init]].name);
        b->init_used[c->init] = layer;
    }
    if (net->n_weights == net->cap_weights) {
        int cap = net->cap_weights ? 2 * net->cap_weights : 64;
        OnnxWeight *grown = realloc(net->weights, (size_t)cap * sizeof *grown);
        if (!grown) FH_FAIL(FH_ERR_IO, "out of memory");
        net->weights = grown;
        net->cap_weights = cap;
    }
    /* constants made at import live as long as the build; the map keeps the initializers' own floats, or a copy */
    const float *src = c->f;
    if (c->init < 0) {
        float *copy = malloc((size_t)c->n * sizeof *copy);
        if (!copy) FH_FAIL(FH_ERR_IO, "out of memory");
        memcpy(copy, c->f, (size_t)c->n * sizeof *copy);
        src = copy;
    }
    net->weights[net->n_weights++] = (OnnxWeight){ layer, role, src, c->n, transpose_rows, scale, c->init < 0 };
    return FH_OK;
}

/* ---- constant folding ---- */

static int const_new(Bld *b, Const *c, int ndim, const int64_t *dims, int is_int)
{
    memset(c, 0, sizeof *c);
    c->init = -1;
    c->ndim = ndim;
    c->n = 1;
    for (int d = 0; d < ndim; d++) {
        c->dims[d] = dims[d];
        c->n *= dims[d];
    }
    c->is_int = is_int;
    if (is_int) c->i = bld_alloc(b, (size_t)c->n * sizeof *c->i);
    else c->f = bld_alloc(b, (size_t)c->n * sizeof *c->f);
    if (!(is_int ? (void *)c->i : (void *)c->f)) FH_FAIL(FH_ERR_IO, "out of memory folding constants");
    return FH_OK;
}

static double cval(const Const *c, int64_t k) { return c->is_int ? (double)c->i[k] : (double)c->f[k]; }

/* Element-wise arithmetic on constants with numpy broadcasting */
static int fold_binary(Bld *b, const Const *x, const Const *y, const char *op, Const *out)
{
    int nd = x->ndim > y->ndim ? x->ndim : y->ndim;
    int64_t dims[8];
    for (int d = 0; d < nd; d++) {
        int64_t a = d - (nd - x->ndim) >= 0 ? x->dims[d - (nd - x->ndim)] : 1;
        int64_t c = d - (nd - y->ndim) >= 0 ? y->dims[d - (nd - y->ndim)] : 1;
        if (a != c && a != 1 && c != 1) NODE_FAIL(b, FH_ERR_USAGE, "constant shapes do not broadcast");
        dims[d] = a > c ? a : c;
    }
    const int is_int = x->is_int && y->is_int;
    FH_CHECK(const_new(b, out, nd, dims, is_int));
    for (int64_t k = 0; k < out->n; k++) {
        int64_t rem = k, ix = 0, iy = 0, sx = 1, sy = 1;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t pos = rem % dims[d];
            rem /= dims[d];
            int dx = d - (nd - x->ndim), dy = d - (nd - y->ndim);
            if (dx >= 0) {
                ix += (x->dims[dx] == 1 ? 0 : pos) * sx;
                sx *= x->dims[dx];
            }
            if (dy >= 0) {
                iy += (y->dims[dy] == 1 ? 0 : pos) * sy;
                sy *= y->dims[dy];
            }
        }
        if (is_int) {
            int64_t p = x->i[ix], q = y->i[iy], r;
            if (!strcmp(op, "Add")) r = p + q;
            else if (!strcmp(op, "Sub")) r = p - q;
            else if (!strcmp(op, "Mul")) r = p * q;
            else {
                if (q == 0) NODE_FAIL(b, FH_ERR_USAGE, "integer division by zero in constants");
                r = p / q; /* ONNX integer Div truncates like C */
            }
            out->i[k] = r;
        } else {
            float p = (float)cval(x, ix), q = (float)cval(y, iy);
            out->f[k] = !strcmp(op, "Add") ? p + q : !strcmp(op, "Sub") ? p - q : !strcmp(op, "Mul") ? p * q : p / q;
        }
    }
    return FH_OK;
}

static int64_t norm_axis(int64_t a, int ndim) { return a < 0 ? a + ndim : a; }

/* Folds the current node when every input is a constant: 1 done, 0 not foldable */
static int fold(Bld *b, int *done)
{
    const Onnx__NodeProto *n = cur(b);
    const char *op = n->op_type;
    *done = 0;
    Const out;
    memset(&out, 0, sizeof out);
    out.init = -1;
    if (!strcmp(op, "Constant")) {
        const Onnx__AttributeProto *a = n->n_attribute == 1 ? n->attribute[0] : NULL;
        if (!a) NODE_FAIL(b, FH_ERR_USAGE, "needs exactly one value attribute");
        if (!strcmp(a->name, "value") && a->t) {
            FH_CHECK(decode_tensor(a->t, &out, b->net->path, node_name(b, n)));
            /* the decoded buffers belong to this build */
            void *p = out.is_int ? (void *)out.i : (void *)out.f;
            void *q = bld_alloc(b, (size_t)(out.n ? out.n : 1) * (out.is_int ? 8 : 4));
            if (!q) {
                free(p);
                FH_FAIL(FH_ERR_IO, "out of memory");
            }
            memcpy(q, p, (size_t)out.n * (out.is_int ? 8 : 4));
            free(p);
            if (out.is_int) out.i = q;
            else out.f = q;
        } else if (!strcmp(a->name, "value_float") || !strcmp(a->name, "value_int")) {
            FH_CHECK(const_new(b, &out, 0, NULL, a->name[6] == 'i'));
            if (out.is_int) out.i[0] = a->i;
            else out.f[0] = a->f;
        } else if (!strcmp(a->name, "value_ints") || !strcmp(a->name, "value_floats")) {
            int64_t len = a->name[6] == 'i' ? (int64_t)a->n_ints : (int64_t)a->n_floats;
            FH_CHECK(const_new(b, &out, 1, &len, a->name[6] == 'i'));
            for (int64_t k = 0; k < len; k++) {
                if (out.is_int) out.i[k] = a->ints[k];
                else out.f[k] = a->floats[k];
            }
        } else NODE_FAIL(b, FH_ERR_USAGE, "attribute %s is not supported", a->name);
    } else if (!strcmp(op, "Shape")) {
        Val *x = in_val(b, 0);
        if (!x || (x->kind != V_TENSOR && x->kind != V_CONST)) return FH_OK;
        if (n->n_attribute) FH_CHECK(check_attrs(b, (const char *[]){ NULL }));
        int64_t len = x->kind == V_CONST ? x->c.ndim : x->rank;
        FH_CHECK(const_new(b, &out, 1, &len, 1));
        if (x->kind == V_CONST) memcpy(out.i, x->c.dims, (size_t)len * 8);
        else {
            const NnShape s = b->m->tensors[x->t].shape;
            /* the batch dimension is not known at import: 1 stands for it (Reshape reads any first dim as N) */
            out.i[0] = 1;
            if (len == 4) {
                out.i[1] = s.c;
                out.i[2] = s.h;
                out.i[3] = s.w;
            } else out.i[1] = (int64_t)b->m->tensors[x->t].size;
        }
    } else {
        for (size_t k = 0; k < n->n_input; k++)
            if (*n->input[k] && !in_const(b, (int)k)) return FH_OK;
        if (!n->n_input) return FH_OK;
        const Const *x = in_const(b, 0);
        if (!strcmp(op, "Identity") || !strcmp(op, "Cast")) {
            out = *x;
            if (!strcmp(op, "Cast")) {
                int64_t to = attr_i(n, "to", 1);
                int want_int = to == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 || to == ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
                if (want_int != x->is_int) {
                    FH_CHECK(const_new(b, &out, x->ndim, x->dims, want_int));
                    for (int64_t k = 0; k < x->n; k++) {
                        if (want_int) out.i[k] = (int64_t)x->f[k];
                        else out.f[k] = (float)x->i[k];
                    }
                }
            }
            out.init = -1;
        } else if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div")) {
            FH_CHECK(fold_binary(b, x, in_const(b, 1), op, &out));
        } else if (!strcmp(op, "Gather")) {
            const Const *idx = in_const(b, 1);
            int64_t axis = norm_axis(attr_i(n, "axis", 0), x->ndim);
            if (axis != 0 || x->ndim != 1) NODE_FAIL(b, FH_ERR_USAGE, "constant Gather is folded on 1-D data only");
            FH_CHECK(const_new(b, &out, idx->ndim, idx->dims, x->is_int));
            for (int64_t k = 0; k < idx->n; k++) {
                int64_t j = idx->is_int ? idx->i[k] : (int64_t)idx->f[k];
                if (j < 0) j += x->n;
                if (j < 0 || j >= x->n) NODE_FAIL(b, FH_ERR_USAGE, "index %lld is out of range", (long long)j);
                if (x->is_int) out.i[k] = x->i[j];
                else out.f[k] = x->f[j];
            }
        } else if (!strcmp(op, "Unsqueeze") || !strcmp(op, "Squeeze")) {
            const int64_t *axes = NULL;
            int n_axes = attr_ints(n, "axes", &axes);
            const Const *ac = in_const(b, 1);
            if (ac && ac->is_int) {
                axes = ac->i;
                n_axes = (int)ac->n;
            }
            out = *x;
            out.init = -1;
            int unsq = op[0] == 'U';
            int nd = unsq ? x->ndim + n_axes : x->ndim;
            int64_t dims[8];
            if (nd > 8) NODE_FAIL(b, FH_ERR_USAGE, "too many dimensions");
            if (unsq) {
                int mark[8] = { 0 };
                for (int k = 0; k < n_axes; k++) mark[norm_axis(axes[k], nd)] = 1;
                for (int d = 0, s = 0; d < nd; d++) dims[d] = mark[d] ? 1 : x->dims[s++];
                out.ndim = nd;
            } else {
                int o = 0;
                for (int d = 0; d < x->ndim; d++) {
                    int drop = n_axes == 0 ? x->dims[d] == 1 : 0;
                    for (int k = 0; k < n_axes; k++) drop |= norm_axis(axes[k], x->ndim) == d;
                    if (!drop) dims[o++] = x->dims[d];
                }
                out.ndim = o;
            }
            memcpy(out.dims, dims, sizeof(int64_t) * (size_t)out.ndim);
        } else if (!strcmp(op, "Concat")) {
            int64_t total = 0;
            int is_int = 1;
            for (size_t k = 0; k < n->n_input; k++) {
                const Const *c = in_const(b, (int)k);
                if (c->ndim > 1) NODE_FAIL(b, FH_ERR_USAGE, "constant Concat is folded on 1-D data only");
                total += c->n;
                is_int &= c->is_int;
            }
            FH_CHECK(const_new(b, &out, 1, &total, is_int));
            int64_t o = 0;
            for (size_t k = 0; k < n->n_input; k++) {
                const Const *c = in_const(b, (int)k);
                for (int64_t j = 0; j < c->n; j++, o++) {
                    if (is_int) out.i[o] = c->i[j];
                    else out.f[o] = (float)cval(c, j);
                }
            }
        } else if (!strcmp(op, "Slice")) { /* 1-D constants (shape arithmetic) */
            const Const *st = in_const(b, 1), *en = in_const(b, 2), *sp = in_const(b, 4);
            if (x->ndim != 1 || st->n != 1 || en->n != 1 || (sp && cval(sp, 0) != 1))
                NODE_FAIL(b, FH_ERR_USAGE, "constant Slice is folded on 1-D data with step 1 only");
            int64_t a0 = (int64_t)cval(st, 0), e0 = (int64_t)fmin(cval(en, 0), (double)x->n);
            if (a0 < 0) a0 += x->n;
            if (e0 < 0) e0 += x->n;
            if (a0 < 0) a0 = 0;
            int64_t len = e0 > a0 ? e0 - a0 : 0;
            FH_CHECK(const_new(b, &out, 1, &len, x->is_int));
            for (int64_t k = 0; k < len; k++) {
                if (x->is_int) out.i[k] = x->i[a0 + k];
                else out.f[k] = x->f[a0 + k];
            }
        } else if (!strcmp(op, "Reshape")) {
            const Const *s = in_const(b, 1);
            out = *x;
            out.init = -1;
            out.ndim = (int)s->n;
            int64_t known = 1, free_axis = -1;
            for (int d = 0; d < out.ndim; d++) {
                out.dims[d] = s->i[d] == 0 ? x->dims[d] : s->i[d];
                if (out.dims[d] == -1) free_axis = d;
                else known *= out.dims[d];
            }
            if (free_axis >= 0) out.dims[free_axis] = known ? x->n / known : 0;
        } else return FH_OK; /* not foldable here: the tensor ops decide */
    }
    for (size_t k = 1; k < n->n_output; k++)
        if (*n->output[k] && consumers(b, n->output[k], b->node)) NODE_FAIL(b, FH_ERR_USAGE, "output %zu is read", k);
    Val *v = put(b, n->output[0], V_CONST);
    if (!v) FH_FAIL(FH_ERR_IO, "out of memory");
    v->c = out;
    *done = 1;
    return FH_OK;
}

/* ---- layers ---- */

static int layer_takes_act(const NnLayer *l)
{
    return l->act == NN_ACT_NONE && (l->type == NN_OP_LINEAR || l->type == NN_OP_CONV2D ||
                                     l->type == NN_OP_BATCHNORM || l->type == NN_OP_GROUPNORM || l->type == NN_OP_ADD);
}

static int is_features_name(const Bld *b, const char *value)
{
    const char *f = b->net->features_node;
    return f && !strcmp(f, value);
}

static int act_node_ex(Bld *b, NnActSpec spec, const char *out)
{
    Val *x;
    FH_CHECK(in_tensor(b, 0, &x));
    int t = nn_act_ex(b->m, x->t, spec);
    if (t < 0) return b->m->status;
    if (!put_tensor(b, out, t, x->rank)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

static int act_node(Bld *b, NnAct act)
{
    Val *x;
    FH_CHECK(in_tensor(b, 0, &x));
    NnModel *m = b->m;
    if (x->layer >= 0 && layer_takes_act(&m->layers[x->layer]) && m->layers[x->layer].out == x->t &&
        consumers(b, x->name, b->node - 1) == 1 && !is_features_name(b, x->name) && b->features != x->t) {
        m->layers[x->layer].act = act;
        Val *v = put_tensor(b, cur(b)->output[0], x->t, x->rank);
        if (!v) FH_FAIL(FH_ERR_IO, "out of memory");
        v->layer = -1; /* an alias (see op_pad) */
        return FH_OK;
    }
    int t = nn_act(m, x->t, act);
    if (!put_tensor(b, cur(b)->output[0], t, x->rank)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

/* kernel_shape, strides, pads and dilations of a conv or pool: kh, kw, strides, pads t l b r, dilations */
typedef struct {
    int kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
} Geometry;

static int geometry(Bld *b, int64_t kh, int64_t kw, Geometry *g)
{
    const Onnx__NodeProto *n = cur(b);
    const int64_t *v;
    int c;
    const Onnx__AttributeProto *ap = attr(n, "auto_pad");
    const char *pad = ap && ap->has_s ? (const char *)ap->s.data : "NOTSET";
    const int plen = ap && ap->has_s ? (int)ap->s.len : 6;
    if (!(plen == 6 && !strncmp(pad, "NOTSET", 6)) && !(plen == 5 && !strncmp(pad, "VALID", 5)))
        NODE_FAIL(b, FH_ERR_USAGE, "attribute auto_pad = %.*s is not supported (NOTSET and VALID are; export with "
                  "explicit pads)", plen, pad);
    if ((c = attr_ints(n, "kernel_shape", &v)) && (c != 2 || v[0] != kh || v[1] != kw))
        NODE_FAIL(b, FH_ERR_USAGE, "attribute kernel_shape does not match the weights (2-D kernels only)");
    *g = (Geometry){ (int)kh, (int)kw, 1, 1, 0, 0, 0, 0, 1, 1 };
    if ((c = attr_ints(n, "strides", &v))) {
        if (c != 2) NODE_FAIL(b, FH_ERR_USAGE, "attribute strides: 2 values are supported, not %d", c);
        g->sh = (int)v[0];
        g->sw = (int)v[1];
    }
    if ((c = attr_ints(n, "pads", &v))) { /* ONNX: begins (top, left), then ends (bottom, right) */
        if (c != 4) NODE_FAIL(b, FH_ERR_USAGE, "attribute pads: 4 values are supported, not %d", c);
        g->pt = (int)v[0];
        g->pl = (int)v[1];
        g->pb = (int)v[2];
        g->pr = (int)v[3];
    }
    if ((c = attr_ints(n, "dilations", &v))) {
        if (c != 2) NODE_FAIL(b, FH_ERR_USAGE, "attribute dilations: 2 values are supported, not %d", c);
        g->dh = (int)v[0];
        g->dw = (int)v[1];
    }
    return FH_OK;
}

static int need_rank4(Bld *b, const Val *x)
{
    if (x->rank != 4) NODE_FAIL(b, FH_ERR_USAGE, "input '%s' of rank %d is not supported (N x C x H x W only)", x->name, x->rank);
    return FH_OK;
}

static int op_conv(Bld *b)
{
    FH_CHECK(check_attrs(b, (const char *[]){ "auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", NULL }));
    Val *x;
    const Const *w, *bias = NULL;
    FH_CHECK(in_tensor(b, 0, &x));
    FH_CHECK(need_rank4(b, x));
    FH_CHECK(need_const(b, 1, &w, "weight"));
    if (cur(b)->n_input > 2 && *cur(b)->input[2]) FH_CHECK(need_const(b, 2, &bias, "bias"));
    if (w->ndim != 4) NODE_FAIL(b, FH_ERR_USAGE, "weight must be 4-D (2-D convolutions only)");
    Geometry g;
    FH_CHECK(geometry(b, w->dims[2], w->dims[3], &g));
    g.pt += x->pad[0], g.pl += x->pad[1], g.pb += x->pad[2], g.pr += x->pad[3];
    int groups = (int)attr_i(cur(b), "group", 1);
    const NnShape s = b->m->tensors[x->t].shape;
    if (groups < 1 || w->dims[1] * groups != s.c)
        NODE_FAIL(b, FH_ERR_USAGE, "weight %lldx%lldx%lldx%lld with group %d does not fit %d input channels",
                  (long long)w->dims[0], (long long)w->dims[1], (long long)w->dims[2], (long long)w->dims[3], groups, s.c);
    if (bias && bias->n != w->dims[0]) NODE_FAIL(b, FH_ERR_USAGE, "bias has %lld values for %lld output channels",
                                                 (long long)bias->n, (long long)w->dims[0]);
    const NnConvSpec spec = { g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.pb, g.pr, g.dh, g.dw, groups, bias != NULL };
    int t = nn_conv2d_ex(b->m, x->t, (int)w->dims[0], &spec, NN_ACT_NONE);
    if (t < 0) return b->m->status;
    int li = b->m->n_layers - 1;
    FH_CHECK(record_weight(b, li, ONNX_W, w, 0, 1.0f));
    if (bias) FH_CHECK(record_weight(b, li, ONNX_B, bias, 0, 1.0f));
    if (!put_tensor(b, cur(b)->output[0], t, 4)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

static int op_batchnorm(Bld *b)
{
    FH_CHECK(check_attrs(b, (const char *[]){ "epsilon", "momentum", "training_mode", "spatial", NULL }));
    const Onnx__NodeProto *n = cur(b);
    if (attr_i(n, "spatial", 1) != 1) NODE_FAIL(b, FH_ERR_USAGE, "attribute spatial = 0 is not supported");
    for (size_t k = 1; k < n->n_output; k++)
        if (*n->output[k] && consumers(b, n->output[k], b->node))
            NODE_FAIL(b, FH_ERR_USAGE, "output %zu (the batch statistics) is read by the graph: fedhet keeps the running "
                      "statistics itself", k);
    Val *x;
    const Const *p[4];
    FH_CHECK(in_tensor(b, 0, &x));
    FH_CHECK(need_rank4(b, x));
    static const char *names[] = { "scale", "bias", "mean", "var" };
    const int c = b->m->tensors[x->t].shape.c;
    for (int k = 0; k < 4; k++) {
        FH_CHECK(need_const(b, k + 1, &p[k], names[k]));
        if (p[k]->n != c) NODE_FAIL(b, FH_ERR_USAGE, "%s has %lld values for %d channels", names[k], (long long)p[k]->n, c);
    }
    int t = nn_batchnorm(b->m, x->t, NN_ACT_NONE);
    if (t < 0) return b->m->status;
    int li = b->m->n_layers - 1;
    NnLayer *l = &b->m->layers[li];
    l->eps = attr_f(n, "epsilon", 1e-5f);
    /* ONNX: running = running * momentum + batch * (1 - momentum); the engine's is PyTorch's, the other way round.
     * 1 - 0.9f is 0.100000024, not PyTorch's 0.1f: a momentum that is a round decimal to 1e-6 is taken as that
     * decimal, so that PyTorch's 0.1 (and a fedhet export's) come back exactly */
    const double mom = 1.0 - (double)attr_f(n, "momentum", 0.9f), round6 = nearbyint(mom * 1e4) / 1e4;
    l->momentum = (float)(fabs(mom - round6) < 1e-6 ? round6 : mom);
    static const int roles[] = { ONNX_W, ONNX_B, ONNX_RM, ONNX_RV };
    for (int k = 0; k < 4; k++) FH_CHECK(record_weight(b, li, roles[k], p[k], 0, 1.0f));
    if (!put_tensor(b, n->output[0], t, 4)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

static int op_pool(Bld *b, int max)
{
    if (max) FH_CHECK(check_attrs(b, (const char *[]){ "auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                                                      "storage_order", "strides", NULL }));
    else FH_CHECK(check_attrs(b, (const char *[]){ "auto_pad", "ceil_mode", "count_include_pad", "kernel_shape",
                                                  "pads", "strides", NULL }));
    const Onnx__NodeProto *n = cur(b);
    Val *x;
    FH_CHECK(in_tensor(b, 0, &x));
    FH_CHECK(need_rank4(b, x));
    const int64_t *ks;
    if (attr_ints(n, "kernel_shape", &ks) != 2) NODE_FAIL(b, FH_ERR_USAGE, "attribute kernel_shape must name 2 sizes");
    Geometry g;
    FH_CHECK(geometry(b, ks[0], ks[1], &g));
    if (g.dh != 1 || g.dw != 1) NODE_FAIL(b, FH_ERR_USAGE, "attribute dilations = [%d, %d]: pools with dilation 1 only are "
                                          "supported", g.dh, g.dw);
    if (attr_i(n, "storage_order", 0)) NODE_FAIL(b, FH_ERR_USAGE, "attribute storage_order = 1 is not supported");
    if (n->n_output > 1 && *n->output[1] && consumers(b, n->output[1], b->node))
        NODE_FAIL(b, FH_ERR_USAGE, "output Indices is read by the graph, which is not supported");
    int include = (int)attr_i(n, "count_include_pad", 0);
    if (x->pad[0] | x->pad[1] | x->pad[2] | x->pad[3]) { /* zeros padded before: they count in every window */
        if ((g.pt | g.pl | g.pb | g.pr) && !include)
            NODE_FAIL(b, FH_ERR_USAGE, "a Pad before an AveragePool with its own pads and count_include_pad = 0 is "
                      "not supported");
        g.pt += x->pad[0], g.pl += x->pad[1], g.pb += x->pad[2], g.pr += x->pad[3];
        include = 1;
    }
    const NnPoolSpec spec = { g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.pb, g.pr, (int)attr_i(n, "ceil_mode", 0), include };
    int t = max ? nn_maxpool_ex(b->m, x->t, &spec) : nn_avgpool_ex(b->m, x->t, &spec);
    if (t < 0) return b->m->status;
    if (!put_tensor(b, n->output[0], t, 4)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

static int op_gap(Bld *b, int reduce)
{
    const Onnx__NodeProto *n = cur(b);
    Val *x;
    FH_CHECK(in_tensor(b, 0, &x));
    FH_CHECK(need_rank4(b, x));
    int rank = 4;
    if (reduce) {
        FH_CHECK(check_attrs(b, (const char *[]){ "axes", "keepdims", NULL }));
        const int64_t *ax;
        int c = attr_ints(n, "axes", &ax);
        if (c != 2 || norm_axis(ax[0], 4) + norm_axis(ax[1], 4) != 5 || norm_axis(ax[0], 4) < 2 || norm_axis(ax[1], 4) < 2)
            NODE_FAIL(b, FH_ERR_USAGE, "attribute axes: only the mean over the spatial axes [2, 3] is supported");
        if (!attr_i(n, "keepdims", 1)) rank = 2;
    } else FH_CHECK(check_attrs(b, (const char *[]){ NULL }));
    int t = nn_gap(b->m, x->t);
    if (t < 0) return b->m->status;
    if (!put_tensor(b, n->output[0], t, rank)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

static int flatten_to(Bld *b, Val *x, const char *out)
{
    if (x->rank == 2) {
        Val *v = put_tensor(b, out, x->t, 2);
        if (!v) FH_FAIL(FH_ERR_IO, "out of memory");
        v->layer = -1; /* an alias (see op_pad) */
        return FH_OK;
    }
    int t = nn_flatten(b->m, x->t);
    if (t < 0) return b->m->status;
    if (!put_tensor(b, out, t, 2)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

static int op_flatten(Bld *b)
{
    FH_CHECK(check_attrs(b, (const char *[]){ "axis", NULL }));
    Val *x;
    FH_CHECK(in_tensor(b, 0, &x));
    if (attr_i(cur(b), "axis", 1) != 1) NODE_FAIL(b, FH_ERR_USAGE, "attribute axis = %lld: only axis 1 is supported",
                                                  (long long)attr_i(cur(b), "axis", 1));
    return flatten_to(b, x, cur(b)->output[0]);
}

static int op_reshape(Bld *b)
{
    FH_CHECK(check_attrs(b, (const char *[]){ "allowzero", NULL }));
    const Onnx__NodeProto *n = cur(b);
    Val *x = in_val(b, 0);
    const Const *s;
    FH_CHECK(need_const(b, 1, &s, "shape"));
    if (!s->is_int) NODE_FAIL(b, FH_ERR_USAGE, "shape must be int64");
    if (x && x->kind == V_TENSOR && x->rank == 4 && s->n == 3) { /* GroupNorm: N x C x H x W -> N x G x -1 */
        const NnShape sh = b->m->tensors[x->t].shape;
        int64_t g = s->i[1];
        if (g < 1 || sh.c % g || (s->i[2] != -1 && s->i[2] * g != (int64_t)sh.c * sh.h * sh.w))
            NODE_FAIL(b, FH_ERR_USAGE, "a reshape to 3-D is read as the start of PyTorch's GroupNorm pattern, but %lld "
                      "groups do not divide %d channels", (long long)g, sh.c);
        Val *v = put(b, n->output[0], V_GN_SPLIT);
        if (!v) FH_FAIL(FH_ERR_IO, "out of memory");
        v->t = x->t;
        v->groups = (int)g;
        return FH_OK;
    }
    if (x && x->kind == V_TENSOR && x->rank == 4 && s->n == 5) { /* channel shuffle: N x g x C/g x H x W */
        const NnShape sh = b->m->tensors[x->t].shape;
        int64_t g = s->i[1];
        if (g < 1 || sh.c % g || (s->i[2] != -1 && s->i[2] * g != sh.c))
            NODE_FAIL(b, FH_ERR_USAGE, "a reshape to 5-D is read as the start of a channel shuffle, but %lld groups do "
                      "not divide %d channels", (long long)g, sh.c);
        Val *v = put(b, n->output[0], V_SHUF_SPLIT);
        if (!v) FH_FAIL(FH_ERR_IO, "out of memory");
        v->t = x->t;
        v->groups = (int)g;
        return FH_OK;
    }
    if (x && x->kind == V_SHUF_SWAPPED) {
        int t = nn_channel_shuffle(b->m, x->t, x->groups);
        if (t < 0) return b->m->status;
        if (!put_tensor(b, n->output[0], t, 4)) FH_FAIL(FH_ERR_IO, "out of memory");
        return FH_OK;
    }
    if (x && x->kind == V_GN_NORMED) { /* back to N x C x H x W */
        const NnShape sh = b->m->tensors[x->t].shape;
        if (s->n != 4 || (s->i[1] != sh.c && s->i[1] != 0) || (s->i[2] != sh.h && s->i[2] != 0 && s->i[2] != -1) ||
            (s->i[3] != sh.w && s->i[3] != 0 && s->i[3] != -1))
            NODE_FAIL(b, FH_ERR_USAGE, "the GroupNorm pattern must reshape back to its input's shape");
        Val *v = put(b, n->output[0], V_GN_BACK);
        if (!v) FH_FAIL(FH_ERR_IO, "out of memory");
        *v = *x;
        v->name = n->output[0];
        v->kind = V_GN_BACK;
        return FH_OK;
    }
    FH_CHECK(in_tensor(b, 0, &x));
    const int64_t size = b->m->tensors[x->t].size;
    if (s->n == 2 && (s->i[1] == -1 || s->i[1] == size)) return flatten_to(b, x, n->output[0]);
    NODE_FAIL(b, FH_ERR_USAGE, "a reshape of an activation to a %lld-D shape is not supported (to N x -1, and PyTorch's "
              "GroupNorm pattern, are)", (long long)s->n);
}

static int op_instnorm(Bld *b)
{
    FH_CHECK(check_attrs(b, (const char *[]){ "epsilon", NULL }));
    Val *x = in_val(b, 0);
    if (!x || x->kind != V_GN_SPLIT)
        NODE_FAIL(b, FH_ERR_USAGE, "InstanceNormalization is supported inside PyTorch's GroupNorm pattern only (Reshape "
                  "to N x G x -1 before it)");
    const Const *sc, *bi;
    FH_CHECK(need_const(b, 1, &sc, "scale"));
    FH_CHECK(need_const(b, 2, &bi, "B"));
    for (int64_t k = 0; k < sc->n; k++)
        if (cval(sc, k) != 1.0 || cval(bi, k) != 0.0)
            NODE_FAIL(b, FH_ERR_USAGE, "the GroupNorm pattern's InstanceNormalization must have scale 1 and bias 0 (its "
                      "affine part follows as Mul and Add)");
    Val *v = put(b, cur(b)->output[0], V_GN_NORMED);
    if (!v) FH_FAIL(FH_ERR_IO, "out of memory");
    v->t = x->t;
    v->groups = x->groups;
    v->eps = attr_f(cur(b), "epsilon", 1e-5f);
    return FH_OK;
}

/* a constant of C values shaped C x 1 x 1 or 1 x C x 1 x 1 (a per-channel affine) */
static int per_channel(const Const *c, int channels)
{
    if (!c || c->n != channels) return 0;
    int ones = 0;
    for (int d = 0; d < c->ndim; d++) ones += c->dims[d] == 1;
    return c->ndim >= 3 && c->dims[c->ndim - 1] == 1 && c->dims[c->ndim - 2] == 1 && (channels == 1 || ones == c->ndim - 1);
}

/* the group-norm layer of a finished pattern: gamma and beta may be NULL (1 and 0) */
static int make_groupnorm(Bld *b, const Val *p, const Const *beta, const char *out)
{
    int t = nn_groupnorm(b->m, p->t, p->groups, NN_ACT_NONE);
    if (t < 0) return b->m->status;
    int li = b->m->n_layers - 1;
    b->m->layers[li].eps = p->eps;
    const int c = b->m->tensors[p->t].shape.c;
    Const one, zero;
    int64_t dims[1] = { c };
    if (!p->gamma) {
        FH_CHECK(const_new(b, &one, 1, dims, 0));
        for (int k = 0; k < c; k++) one.f[k] = 1.0f;
    }
    if (!beta) FH_CHECK(const_new(b, &zero, 1, dims, 0));
    FH_CHECK(record_weight(b, li, ONNX_W, p->gamma ? p->gamma : &one, 0, 1.0f));
    FH_CHECK(record_weight(b, li, ONNX_B, beta ? beta : &zero, 0, 1.0f));
    if (!put_tensor(b, out, t, 4)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

/* the first node after the current one that reads `name`, -1 */
static int next_reader(const Bld *b, const char *name)
{
    for (size_t k = (size_t)b->node + 1; k < b->g->n_node; k++)
        for (size_t j = 0; j < b->g->node[k]->n_input; j++)
            if (!strcmp(b->g->node[k]->input[j], name)) return (int)k;
    return -1;
}

static int op_mul(Bld *b)
{
    Val *x = in_val(b, 0), *y = in_val(b, 1);
    if (x && y && x->kind == V_CONST && y->kind == V_GN_BACK) {
        Val *s = x;
        x = y;
        y = s;
    }
    if (x && y && x->kind == V_GN_BACK && y->kind == V_CONST &&
        per_channel(&y->c, b->m->tensors[x->t].shape.c) && !y->c.is_int) {
        Val *v = put(b, cur(b)->output[0], V_GN_SCALED);
        if (!v) FH_FAIL(FH_ERR_IO, "out of memory");
        *v = *x;
        v->name = cur(b)->output[0];
        v->kind = V_GN_SCALED;
        v->gamma = &y->c;
        return FH_OK;
    }
    Val *a, *c;
    FH_CHECK(in_tensor(b, 0, &a));
    FH_CHECK(in_tensor(b, 1, &c));
    if (b->m->tensors[a->t].size < b->m->tensors[c->t].size) { /* the broadcast operand (C x 1 x 1) second */
        Val *t = a;
        a = c;
        c = t;
    }
    int t = nn_mul(b->m, a->t, c->t);
    if (t < 0) return b->m->status;
    if (!put_tensor(b, cur(b)->output[0], t, a->rank)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

/* Sigmoid: SiLU when its one reader is Mul(x, Sigmoid(x)), else a sigmoid layer */
static int op_sigmoid(Bld *b)
{
    FH_CHECK(check_attrs(b, (const char *[]){ NULL }));
    const Onnx__NodeProto *n = cur(b);
    int r = next_reader(b, n->output[0]);
    if (r >= 0 && consumers(b, n->output[0], b->node) == 1 && !strcmp(b->g->node[r]->op_type, "Mul") &&
        b->g->node[r]->n_input == 2) {
        const Onnx__NodeProto *mul = b->g->node[r];
        const char *other = !strcmp(mul->input[0], n->output[0]) ? mul->input[1] : mul->input[0];
        if (!strcmp(other, n->input[0])) {
            b->absorbed[r] = 1;
            return act_node_ex(b, (NnActSpec){ NN_ACT_SILU, 0, 0 }, mul->output[0]);
        }
    }
    return act_node_ex(b, (NnActSpec){ NN_ACT_SIGMOID, 0, 0 }, n->output[0]);
}

static int op_concat(Bld *b)
{
    FH_CHECK(check_attrs(b, (const char *[]){ "axis", NULL }));
    const Onnx__NodeProto *n = cur(b);
    if (attr_i(n, "axis", 0) != 1) NODE_FAIL(b, FH_ERR_USAGE, "attribute axis = %lld: only the channel axis 1 is "
                                             "supported", (long long)attr_i(n, "axis", 0));
    int *ins = bld_alloc(b, n->n_input * sizeof *ins);
    if (!ins) FH_FAIL(FH_ERR_IO, "out of memory");
    for (size_t k = 0; k < n->n_input; k++) {
        Val *x;
        FH_CHECK(in_tensor(b, (int)k, &x));
        FH_CHECK(need_rank4(b, x));
        ins[k] = x->t;
    }
    if (n->n_input == 1) { /* a concatenation of one tensor is that tensor */
        Val *v = put_tensor(b, n->output[0], ins[0], 4);
        if (!v) FH_FAIL(FH_ERR_IO, "out of memory");
        v->layer = -1; /* an alias (see op_pad) */
        return FH_OK;
    }
    int t = nn_concat(b->m, ins, (int)n->n_input);
    if (t < 0) return b->m->status;
    if (!put_tensor(b, n->output[0], t, 4)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

static int slice_to(Bld *b, Val *x, int64_t start, int64_t end, const char *out)
{
    const int c = b->m->tensors[x->t].shape.c;
    if (start < 0) start += c;
    if (end < 0) end += c;
    if (start < 0) start = 0;
    if (end > c) end = c;
    int t = nn_slice_channels(b->m, x->t, (int)start, (int)end);
    if (t < 0) return b->m->status;
    if (!put_tensor(b, out, t, 4)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

static int op_slice(Bld *b)
{
    FH_CHECK(check_attrs(b, (const char *[]){ NULL }));
    Val *x;
    FH_CHECK(in_tensor(b, 0, &x));
    FH_CHECK(need_rank4(b, x));
    const Const *st, *en, *ax = in_const(b, 3), *sp = in_const(b, 4);
    FH_CHECK(need_const(b, 1, &st, "starts"));
    FH_CHECK(need_const(b, 2, &en, "ends"));
    if (st->n != 1 || en->n != 1 || (ax && (ax->n != 1 || norm_axis((int64_t)cval(ax, 0), 4) != 1)) || (!ax) ||
        (sp && (sp->n != 1 || cval(sp, 0) != 1)))
        NODE_FAIL(b, FH_ERR_USAGE, "a slice of activations on the channel axis 1 with step 1 is supported, nothing else");
    return slice_to(b, x, (int64_t)cval(st, 0), (int64_t)fmin(cval(en, 0), 1e9), cur(b)->output[0]);
}

static int op_split(Bld *b)
{
    FH_CHECK(check_attrs(b, (const char *[]){ "axis", "split", NULL }));
    const Onnx__NodeProto *n = cur(b);
    Val *x;
    FH_CHECK(in_tensor(b, 0, &x));
    FH_CHECK(need_rank4(b, x));
    if (norm_axis(attr_i(n, "axis", 0), 4) != 1) NODE_FAIL(b, FH_ERR_USAGE, "attribute axis: only the channel axis 1 is supported");
    const int c = b->m->tensors[x->t].shape.c, parts = (int)n->n_output;
    const int64_t *sizes = NULL;
    int n_sizes = attr_ints(n, "split", &sizes);
    const Const *sc = in_const(b, 1);
    int64_t start = 0;
    for (int k = 0; k < parts; k++) {
        int64_t len = sc ? (int64_t)cval(sc, k < sc->n ? k : 0) : n_sizes ? sizes[k < n_sizes ? k : 0] : c / parts;
        if ((sc && sc->n != parts) || (n_sizes && n_sizes != parts) || (!sc && !n_sizes && c % parts))
            NODE_FAIL(b, FH_ERR_USAGE, "split sizes do not fit %d channels in %d parts", c, parts);
        FH_CHECK(slice_to(b, x, start, start + len, n->output[k]));
        start += len;
    }
    return FH_OK;
}

/* Pad, constant mode with value 0, on H and W only: kept for the Conv or AveragePool that reads it */
static int op_pad(Bld *b)
{
    FH_CHECK(check_attrs(b, (const char *[]){ "mode", "pads", "value", NULL }));
    const Onnx__NodeProto *n = cur(b);
    const Onnx__AttributeProto *mode = attr(n, "mode");
    if (mode && mode->has_s && !(mode->s.len == 8 && !memcmp(mode->s.data, "constant", 8)))
        NODE_FAIL(b, FH_ERR_USAGE, "attribute mode = %.*s is not supported (constant is)", (int)mode->s.len, (const char *)mode->s.data);
    Val *x;
    FH_CHECK(in_tensor(b, 0, &x));
    FH_CHECK(need_rank4(b, x));
    int64_t p[8] = { 0 };
    const int64_t *pa;
    int c = attr_ints(n, "pads", &pa);
    const Const *pc = in_const(b, 1), *vc = in_const(b, 2);
    if (n->n_input > 1 && *n->input[1] && !pc) NODE_FAIL(b, FH_ERR_USAGE, "pads must be a constant");
    if (pc) c = (int)pc->n;
    if (c != 8) NODE_FAIL(b, FH_ERR_USAGE, "pads of %d values: 8 (N C H W begins, then ends) are supported", c);
    for (int k = 0; k < 8; k++) p[k] = pc ? (int64_t)cval(pc, k) : pa[k];
    double value = vc ? cval(vc, 0) : attr_f(n, "value", 0.0f);
    if (value != 0.0) NODE_FAIL(b, FH_ERR_USAGE, "a pad value of %g is not supported (0 is)", value);
    if (p[0] || p[1] || p[4] || p[5] || p[2] < 0 || p[3] < 0 || p[6] < 0 || p[7] < 0)
        NODE_FAIL(b, FH_ERR_USAGE, "pads on the batch or channel axes, or negative pads, are not supported");
    Val *v = put_tensor(b, n->output[0], x->t, 4);
    if (!v) FH_FAIL(FH_ERR_IO, "out of memory");
    v->layer = -1; /* an alias: an activation after it must not fuse into the layer that others read */
    v->pad[0] = (int)p[2], v->pad[1] = (int)p[3], v->pad[2] = (int)p[6], v->pad[3] = (int)p[7];
    return FH_OK;
}

static int op_transpose(Bld *b)
{
    FH_CHECK(check_attrs(b, (const char *[]){ "perm", NULL }));
    Val *x = in_val(b, 0);
    const int64_t *p;
    int c = attr_ints(cur(b), "perm", &p);
    if (!x || x->kind != V_SHUF_SPLIT || c != 5 || p[0] != 0 || p[1] != 2 || p[2] != 1 || p[3] != 3 || p[4] != 4)
        NODE_FAIL(b, FH_ERR_USAGE, "Transpose is supported only inside the channel-shuffle pattern (Reshape to "
                  "N x g x C/g x H x W, Transpose perm [0, 2, 1, 3, 4], Reshape back)");
    Val *v = put(b, cur(b)->output[0], V_SHUF_SWAPPED);
    if (!v) FH_FAIL(FH_ERR_IO, "out of memory");
    v->t = x->t;
    v->groups = x->groups;
    return FH_OK;
}

static int op_add(Bld *b)
{
    Val *x = in_val(b, 0), *y = in_val(b, 1);
    if (x && y && x->kind == V_CONST && y->kind != V_CONST) {
        Val *s = x;
        x = y;
        y = s;
    }
    if (x && y && (x->kind == V_GN_SCALED || x->kind == V_GN_BACK) && y->kind == V_CONST &&
        per_channel(&y->c, b->m->tensors[x->t].shape.c) && !y->c.is_int)
        return make_groupnorm(b, x, &y->c, cur(b)->output[0]);
    Val *a, *c;
    FH_CHECK(in_tensor(b, 0, &a));
    FH_CHECK(in_tensor(b, 1, &c));
    if (a->rank != c->rank) NODE_FAIL(b, FH_ERR_USAGE, "inputs of different ranks are not supported");
    if (b->m->tensors[a->t].size < b->m->tensors[c->t].size) { /* the broadcast operand (C x 1 x 1) second */
        Val *t = a;
        a = c;
        c = t;
    }
    int t = nn_add(b->m, a->t, c->t, NN_ACT_NONE);
    if (t < 0) return b->m->status;
    if (!put_tensor(b, cur(b)->output[0], t, a->rank)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

/* a value that ends a GroupNorm pattern early (no Mul or Add after it) becomes its layer when something reads it */
static int finish_pattern(Bld *b, Val *v)
{
    if (v->kind == V_GN_BACK || v->kind == V_GN_SCALED) {
        Val p = *v;
        v->kind = V_NONE;
        v->name = "";
        return make_groupnorm(b, &p, NULL, p.name);
    }
    return FH_OK;
}

/* the classifier: Gemm (alpha, beta, transB) or MatMul (+ an Add of a bias right after) */
static int op_linear(Bld *b, int gemm)
{
    const Onnx__NodeProto *n = cur(b);
    if (gemm) FH_CHECK(check_attrs(b, (const char *[]){ "alpha", "beta", "transA", "transB", NULL }));
    else FH_CHECK(check_attrs(b, (const char *[]){ NULL }));
    Val *x;
    const Const *w, *bias = NULL;
    FH_CHECK(in_tensor(b, 0, &x));
    FH_CHECK(need_const(b, 1, &w, "weight"));
    if (x->rank != 2) NODE_FAIL(b, FH_ERR_USAGE, "an input of rank %d is not supported (N x F only: Flatten first)", x->rank);
    if (w->ndim != 2) NODE_FAIL(b, FH_ERR_USAGE, "weight must be 2-D");
    if (gemm && attr_i(n, "transA", 0)) NODE_FAIL(b, FH_ERR_USAGE, "attribute transA = 1 is not supported");
    const int trans = gemm && attr_i(n, "transB", 0);
    const float alpha = gemm ? attr_f(n, "alpha", 1.0f) : 1.0f, beta = gemm ? attr_f(n, "beta", 1.0f) : 1.0f;
    const int64_t in = trans ? w->dims[1] : w->dims[0], out = trans ? w->dims[0] : w->dims[1];
    if (in != b->m->tensors[x->t].size)
        NODE_FAIL(b, FH_ERR_USAGE, "weight takes %lld inputs, the input has %lld", (long long)in,
                  (long long)b->m->tensors[x->t].size);
    const char *result = n->output[0];
    if (gemm && n->n_input > 2 && *n->input[2]) FH_CHECK(need_const(b, 2, &bias, "C"));
    if (!gemm) { /* MatMul then Add(bias): one layer */
        int r = next_reader(b, result);
        if (r >= 0 && consumers(b, result, b->node) == 1 && !strcmp(b->g->node[r]->op_type, "Add")) {
            const Onnx__NodeProto *add = b->g->node[r];
            const char *other = !strcmp(add->input[0], result) ? add->input[1] : add->input[0];
            Val *bv = find(b, other);
            if (bv && bv->kind == V_CONST && !bv->c.is_int && bv->c.n == out) {
                bias = &bv->c;
                b->absorbed[r] = 1;
                result = add->output[0];
            }
        }
    }
    if (bias && bias->n != out)
        NODE_FAIL(b, FH_ERR_USAGE, "bias of %lld values for %lld outputs (only a per-output bias is supported)",
                  (long long)bias->n, (long long)out);
    b->features = x->t;
    int xt = x->t;
    const int last = consumers(b, result, b->node) == 1 && b->g->n_output && !strcmp(b->g->output[0]->name, result) &&
                     consumers(b, result, b->node) == 1 && next_reader(b, result) < 0;
    if (last && b->proj_dim > 0) { /* a projection head (MOON) before the classifier, fresh weights for both */
        const int f = (int)b->m->tensors[xt].size;
        xt = nn_linear(b->m, xt, f, 1, NN_ACT_RELU);
        xt = nn_linear(b->m, xt, b->proj_dim, 1, NN_ACT_NONE);
        b->features = xt;
        int t = nn_linear(b->m, xt, (int)out, 1, NN_ACT_NONE);
        if (t < 0) return b->m->status;
        if (!put_tensor(b, result, t, 2)) FH_FAIL(FH_ERR_IO, "out of memory");
        return FH_OK;
    }
    int t = nn_linear(b->m, xt, (int)out, bias != NULL, NN_ACT_NONE);
    if (t < 0) return b->m->status;
    int li = b->m->n_layers - 1;
    FH_CHECK(record_weight(b, li, ONNX_W, w, trans ? 0 : (int)in, alpha));
    if (bias) FH_CHECK(record_weight(b, li, ONNX_B, bias, 0, beta));
    if (!put_tensor(b, result, t, 2)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

static int op_dropout(Bld *b)
{
    FH_CHECK(check_attrs(b, (const char *[]){ "ratio", "seed", NULL }));
    const Onnx__NodeProto *n = cur(b);
    Val *x;
    FH_CHECK(in_tensor(b, 0, &x));
    float p = attr_f(n, "ratio", 0.5f);
    const Const *r = in_const(b, 1), *tm = in_const(b, 2);
    if (n->n_input > 1 && *n->input[1] && !r) NODE_FAIL(b, FH_ERR_USAGE, "ratio must be a constant");
    if (r) p = (float)cval(r, 0);
    if (n->n_output > 1 && *n->output[1] && consumers(b, n->output[1], b->node))
        NODE_FAIL(b, FH_ERR_USAGE, "output mask is read by the graph, which is not supported");
    (void)tm; /* training_mode: fedhet's own training flag decides, as for batch norm */
    int t = nn_dropout(b->m, x->t, p);
    if (t < 0) return b->m->status;
    if (!put_tensor(b, n->output[0], t, x->rank)) FH_FAIL(FH_ERR_IO, "out of memory");
    return FH_OK;
}

static int op_clip(Bld *b)
{
    FH_CHECK(check_attrs(b, (const char *[]){ "min", "max", NULL }));
    const Onnx__NodeProto *n = cur(b);
    double lo = attr_f(n, "min", -INFINITY), hi = attr_f(n, "max", INFINITY);
    const Const *cl = in_const(b, 1), *ch = in_const(b, 2);
    if ((n->n_input > 1 && *n->input[1] && !cl) || (n->n_input > 2 && *n->input[2] && !ch))
        NODE_FAIL(b, FH_ERR_USAGE, "min and max must be constants");
    if (cl) lo = cval(cl, 0);
    if (ch) hi = cval(ch, 0);
    if (lo == 0.0 && hi == 6.0) return act_node(b, NN_ACT_RELU6);
    if (lo == 0.0 && isinf(hi) && hi > 0) return act_node(b, NN_ACT_RELU);
    if (!(lo <= hi)) NODE_FAIL(b, FH_ERR_USAGE, "bounds [%g, %g] are not supported (min above max)", lo, hi);
    return act_node_ex(b, (NnActSpec){ NN_ACT_CLIP, (float)lo, (float)hi }, n->output[0]);
}

static int op_identity(Bld *b)
{
    Val *x;
    FH_CHECK(in_tensor(b, 0, &x));
    Val *v = put_tensor(b, cur(b)->output[0], x->t, x->rank);
    if (!v) FH_FAIL(FH_ERR_IO, "out of memory");
    v->layer = -1; /* an alias (see op_pad) */
    return FH_OK;
}

static int do_node(Bld *b)
{
    const Onnx__NodeProto *n = cur(b);
    const char *op = n->op_type;
    if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx"))
        NODE_FAIL(b, FH_ERR_USAGE, "domain %s is not supported (only ONNX's default domain is)", n->domain);
    if (!strcmp(op, "If") || !strcmp(op, "Loop") || !strcmp(op, "Scan"))
        NODE_FAIL(b, FH_ERR_USAGE, "control flow is not supported: export a graph without data-dependent branches "
                  "or loops");
    /* a pattern value read by anything other than the pattern's next step becomes its group-norm layer */
    for (size_t k = 0; k < n->n_input; k++) {
        Val *v = find(b, n->input[k]);
        if (v && (v->kind == V_GN_BACK || v->kind == V_GN_SCALED) && strcmp(op, "Mul") && strcmp(op, "Add"))
            FH_CHECK(finish_pattern(b, v));
    }
    int done;
    FH_CHECK(fold(b, &done));
    if (done) return FH_OK;
    if (!strcmp(op, "Conv")) return op_conv(b);
    if (!strcmp(op, "BatchNormalization")) return op_batchnorm(b);
    if (!strcmp(op, "Relu")) {
        FH_CHECK(check_attrs(b, (const char *[]){ NULL }));
        return act_node(b, NN_ACT_RELU);
    }
    if (!strcmp(op, "Clip")) return op_clip(b);
    if (!strcmp(op, "LeakyRelu")) {
        FH_CHECK(check_attrs(b, (const char *[]){ "alpha", NULL }));
        return act_node_ex(b, (NnActSpec){ NN_ACT_LEAKY_RELU, attr_f(n, "alpha", 0.01f), 0 }, n->output[0]);
    }
    if (!strcmp(op, "HardSigmoid")) {
        FH_CHECK(check_attrs(b, (const char *[]){ "alpha", "beta", NULL }));
        return act_node_ex(b, (NnActSpec){ NN_ACT_HARDSIGMOID, attr_f(n, "alpha", 0.2f), attr_f(n, "beta", 0.5f) },
                           n->output[0]);
    }
    if (!strcmp(op, "HardSwish") || !strcmp(op, "Tanh")) {
        FH_CHECK(check_attrs(b, (const char *[]){ NULL }));
        return act_node_ex(b, (NnActSpec){ op[0] == 'H' ? NN_ACT_HARDSWISH : NN_ACT_TANH, 0, 0 }, n->output[0]);
    }
    if (!strcmp(op, "Sigmoid")) return op_sigmoid(b);
    if (!strcmp(op, "Concat")) return op_concat(b);
    if (!strcmp(op, "Slice")) return op_slice(b);
    if (!strcmp(op, "Split")) return op_split(b);
    if (!strcmp(op, "Transpose")) return op_transpose(b);
    if (!strcmp(op, "Pad")) return op_pad(b);
    if (!strcmp(op, "MaxPool")) return op_pool(b, 1);
    if (!strcmp(op, "AveragePool")) return op_pool(b, 0);
    if (!strcmp(op, "GlobalAveragePool")) return op_gap(b, 0);
    if (!strcmp(op, "ReduceMean")) return op_gap(b, 1);
    if (!strcmp(op, "Flatten")) return op_flatten(b);
    if (!strcmp(op, "Reshape")) return op_reshape(b);
    if (!strcmp(op, "InstanceNormalization")) return op_instnorm(b);
    if (!strcmp(op, "Mul")) return op_mul(b);
    if (!strcmp(op, "Add")) return op_add(b);
    if (!strcmp(op, "Gemm")) return op_linear(b, 1);
    if (!strcmp(op, "MatMul")) return op_linear(b, 0);
    if (!strcmp(op, "Dropout")) return op_dropout(b);
    if (!strcmp(op, "Identity")) return op_identity(b);
    for (size_t k = 0; k < sizeof supported / sizeof supported[0]; k++)
        if (!strcmp(supported[k], op))
            NODE_FAIL(b, FH_ERR_USAGE, "this use of %s is not supported (on activations; it folds on constants only)", op);
    NODE_FAIL(b, FH_ERR_USAGE, "op type %s is not supported (supported: %s)", op, onnx_supported_ops());
}

static int build_graph(Bld *b, int *features, int *logits)
{
    OnnxNet *net = b->net;
    NnModel *m = b->m;
    const Onnx__GraphProto *g = b->g;
    for (int k = 0; k < net->n_weights; k++)
        if (net->weights[k].owned) free((void *)net->weights[k].src);
    net->n_weights = 0;
    if (!(b->init_used = malloc((g->n_initializer + 1) * sizeof *b->init_used)) ||
        !(b->absorbed = calloc(g->n_node + 1, 1)))
        FH_FAIL(FH_ERR_IO, "out of memory");
    for (size_t k = 0; k < g->n_initializer; k++) {
        b->init_used[k] = -1;
        Val *v = put(b, g->initializer[k]->name, V_CONST);
        if (!v) FH_FAIL(FH_ERR_IO, "out of memory");
        v->c = net->inits[k];
    }
    if (g->n_sparse_initializer) FH_FAIL(FH_ERR_USAGE, "%s: sparse initializers are not supported", net->path);
    const Onnx__ValueInfoProto *in = data_input(net);
    if (!in) FH_FAIL(FH_ERR_USAGE, "%s: the graph has no input that is not an initializer", net->path);
    for (size_t k = 0; k < g->n_input; k++)
        if (g->input[k] != in && !find(b, g->input[k]->name))
            FH_FAIL(FH_ERR_USAGE, "%s: graph input '%s' is not an initializer: one data input is supported (the "
                    "first, '%s')", net->path, g->input[k]->name, in->name);
    int64_t d[8];
    int rank = info_dims(in, d, 8);
    if (in->type && in->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && in->type->tensor_type->has_elem_type &&
        in->type->tensor_type->elem_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
        FH_FAIL(FH_ERR_USAGE, "%s: input '%s' has element type %d: only float32 inputs are supported", net->path, in->name,
                in->type->tensor_type->elem_type);
    if (rank < 2 || rank > 4)
        FH_FAIL(FH_ERR_USAGE, "%s: input '%s' has %d dimensions: N x C x H x W images (or N x F vectors, or N x C x L "
                "for element-wise layers) are supported", net->path, in->name, rank);
    const NnShape s = m->tensors[m->input].shape;
    const int64_t want[4] = { -1, s.c, s.h, s.w };
    if (rank == 3 && s.w != 1)
        FH_FAIL(FH_ERR_USAGE, "%s: input '%s' is N x C x L but the data has %dx%dx%d", net->path, in->name, s.c, s.h, s.w);
    for (int k = 1; k < rank; k++)
        if (d[k] > 0 && d[k] != (rank == 2 ? (int64_t)s.c * s.h * s.w : want[k]))
            FH_FAIL(FH_ERR_USAGE, "%s: input '%s' is fixed at %s %lld in the file but the data has %dx%dx%d (export the "
                    "model for the data's shape, or with dynamic_axes)", net->path, in->name,
                    k == 1 ? "channels" : k == 2 ? "height" : "width", (long long)d[k], s.c, s.h, s.w);
    if (!put_tensor(b, in->name, m->input, rank)) FH_FAIL(FH_ERR_IO, "out of memory");
    b->features = -1;
    for (b->node = 0; b->node < (int)g->n_node; b->node++) {
        if (b->absorbed[b->node]) continue;
        const int layers = m->n_layers;
        int status = do_node(b);
        if (status == FH_OK && m->status != FH_OK) status = m->status;
        if (status != FH_OK) {
            if (m->n_layers > layers && m->status != FH_OK) { /* the engine refused the layer: say which node */
                char why[512];
                const char *msg = fh_error_message();
                snprintf(why, sizeof why, "%.*s", (int)strcspn(msg, "\n"), msg);
                return fh_error_raise(status, __FILE__, __LINE__, "%s: node '%s' (%s): not supported by the engine's "
                                      "layer: %s", net->path, node_name(b, cur(b)), cur(b)->op_type, why);
            }
            return status;
        }
        if (net->features_node) {
            const Onnx__NodeProto *n = cur(b);
            const char *hit = !strcmp(net->features_node, node_name(b, n)) ? n->output[0] : NULL;
            for (size_t k = 0; k < n->n_output && !hit; k++)
                if (!strcmp(net->features_node, n->output[k])) hit = n->output[k];
            if (hit) {
                Val *v = find(b, hit);
                if (!v || v->kind != V_TENSOR)
                    FH_FAIL(FH_ERR_USAGE, "%s: model.features = %s names no activation tensor", net->path, net->features_node);
                b->features_named = 1;
                b->features = v->t;
            }
        }
    }
    if (g->n_output != 1)
        FH_FAIL(FH_ERR_USAGE, "%s: the graph has %zu outputs: one (the logits) is supported", net->path, g->n_output);
    Val *out = find(b, g->output[0]->name);
    if (out && (out->kind == V_GN_BACK || out->kind == V_GN_SCALED)) {
        FH_CHECK(finish_pattern(b, out));
        out = find(b, g->output[0]->name);
    }
    if (!out || out->kind != V_TENSOR)
        FH_FAIL(FH_ERR_USAGE, "%s: output '%s' is %s", net->path, g->output[0]->name,
                out ? "a constant" : "computed by no node");
    if (net->features_node && !b->features_named)
        FH_FAIL(FH_ERR_USAGE, "%s: model.features = %s: no node or output of that name", net->path, net->features_node);
    if (!m->n_layers) FH_FAIL(FH_ERR_USAGE, "%s: the graph has no layer (its output is its input): not supported", net->path);
    if (b->features < 0) b->features = m->layers[m->n_layers - 1].in; /* no classifier layer: the last layer's input */
    *features = b->features;
    if (m->tensors[out->t].size != b->classes)
        FH_FAIL(FH_ERR_USAGE, "%s: the graph's output '%s' has %lld values per sample but the data has %d classes "
                "(export the model with num_classes=%d)", net->path, g->output[0]->name,
                (long long)m->tensors[out->t].size, b->classes, b->classes);
    *logits = out->t;
    return FH_OK;
}

static int build_cb(void *ctx, NnModel *m, int classes, int proj_dim, int *features)
{
    Bld b;
    memset(&b, 0, sizeof b);
    b.net = ctx;
    b.m = m;
    b.g = b.net->model->graph;
    b.classes = classes;
    b.proj_dim = proj_dim;
    int t = -1;
    int status = build_graph(&b, features, &t);
    if (status != FH_OK) { /* nn_zoo_build returns the model's status: the message is already raised */
        if (m->status == FH_OK) m->status = status;
        t = -1;
    }
    for (int k = 0; k < b.n_arena; k++) free(b.arena[k]);
    free(b.arena);
    free(b.vals);
    free(b.init_used);
    free(b.absorbed);
    return t;
}

NnZooOptions onnx_zoo_options(OnnxNet *net, const NnZooOptions *base)
{
    NnZooOptions o = base ? *base : (NnZooOptions){ 0 };
    o.build = build_cb;
    o.build_ctx = net;
    return o;
}

int onnx_net_build(OnnxNet *net, NnModel *m, NnShape shape, int classes, int max_batch, const NnZooOptions *base)
{
    const NnZooOptions o = onnx_zoo_options(net, base);
    return nn_zoo_build(m, "onnx", shape, classes, max_batch, &o);
}

int onnx_net_copy_weights(OnnxNet *net, const NnModel *m, float *state)
{
    for (int k = 0; k < net->n_weights; k++) {
        const OnnxWeight *w = &net->weights[k];
        if (w->layer >= m->n_layers) FH_FAIL(FH_ERR_USAGE, "%s: the model does not come from this graph", net->path);
        const NnLayer *l = &m->layers[w->layer];
        const int64_t off = w->role == ONNX_W ? l->w_off : w->role == ONNX_B ? l->b_off : w->role == ONNX_RM ? l->rm_off
                                                                                                            : l->rv_off;
        if (off < 0) FH_FAIL(FH_ERR_USAGE, "%s: layer %s has no such parameter", net->path, l->name);
        float *dst = state + off;
        if (w->transpose_rows > 0) { /* [in, out] -> the engine's [out, in] */
            const int64_t rows = w->transpose_rows, cols = w->count / rows;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = w->src[r * cols + c] * w->scale;
        } else if (w->scale != 1.0f) {
            for (int64_t j = 0; j < w->count; j++) dst[j] = w->src[j] * w->scale;
        } else memcpy(dst, w->src, (size_t)w->count * sizeof *dst);
    }
    return FH_OK;
}
