/* ONNX graph -> engine model. The graph is walked once in node order (ONNX requires a topological order): a value
 * is a constant (initializers, Constant and everything computed from constants alone, folded here), an engine
 * tensor (per sample C x H x W; a 2-D value N x F is F x 1 x 1) or a step of the GroupNorm pattern PyTorch
 * exports (Reshape to N x G x -1, InstanceNormalization, Reshape back, Mul, Add), which becomes one group-norm
 * layer. A Relu or Clip(0, 6) whose input is read by nothing else fuses into the layer before it, as the zoo
 * builds its models, so that a zoo model exported and imported is the same model, bit for bit.
 *
 * Everything this cannot represent exactly is refused, naming the node, its op type and attribute: a silent
 * change of semantics is worse than an error. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/buf.h"
#include "import_internal.h"

static const char *supported[] = {
    "Add", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Constant", "ConstantOfShape", "Conv", "Div",
    "Dropout", "Equal", "Erf", "Exp", "Expand", "Flatten", "Gather", "Gemm", "GlobalAveragePool", "Greater",
    "HardSigmoid", "HardSwish", "Identity", "InstanceNormalization", "LayerNormalization", "LeakyRelu", "Less", "MatMul",
    "MaxPool", "Mod", "Mul", "Not", "Pad", "Pow", "RandomUniformLike", "Range", "ReduceMean", "Relu", "Reshape", "Shape",
    "Sigmoid", "Slice", "Softmax", "Split", "Sqrt", "Squeeze", "Sub", "Tanh", "Transpose", "Unsqueeze", "Where",
};

const char *onnx_supported_ops(void)
{
    static char text[1024];
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

void *imp_alloc(Bld *b, size_t bytes)
{
    if (fh_grow(&b->arena, &b->cap_arena, b->n_arena + 1, sizeof *b->arena, "the import's allocations") != FH_OK)
        return NULL;
    void *p = calloc(1, bytes ? bytes : 1);
    if (p) b->arena[b->n_arena++] = p;
    return p;
}

const char *imp_node_name(const Bld *b, const Onnx__NodeProto *n)
{
    if (n->name && *n->name) return n->name;
    return n->n_output && n->output[0] ? n->output[0] : "?";
}

/* ---- tensor decoding ---- */

int imp_decode_tensor(const Onnx__TensorProto *t, Const *c, const char *path, const char *what)
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
        if (!c->f) FH_FAIL(FH_ERR_MEMORY, "%s: out of memory decoding tensor %s", path, what);
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
        if (!c->i) FH_FAIL(FH_ERR_MEMORY, "%s: out of memory decoding tensor %s", path, what);
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
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
        FH_FAIL(FH_ERR_USAGE, "%s: tensor %s is float16: float16 (and bfloat16) weights are not supported (export the "
                "model in float32: model.float() before torch.onnx.export)", path, what);
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
        FH_FAIL(FH_ERR_MEMORY, "%s: out of memory", name);
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
        if (!net->inits) status = fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "%s: out of memory", net->path);
    }
    for (size_t k = 0; status == FH_OK && k < (g ? g->n_initializer : 0); k++) {
        status = imp_decode_tensor(g->initializer[k], &net->inits[k], net->path, g->initializer[k]->name);
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

/* a fixed dimension as an int: beyond INT_MAX it reads INT_MAX, which every size check refuses (a cast would wrap
 * 2^32 + 3 to 3) */
static int dim_as_int(int64_t d) { return d > INT_MAX ? INT_MAX : (int)d; }

int onnx_net_input_shape(const OnnxNet *net, NnShape *shape)
{
    int64_t d[8];
    int n = info_dims(data_input(net), d, 8);
    if (n == 4 && d[1] > 0 && d[2] > 0 && d[3] > 0) {
        *shape = (NnShape){ dim_as_int(d[1]), dim_as_int(d[2]), dim_as_int(d[3]) };
        return 1;
    }
    if (n == 3 && d[1] > 0 && d[2] > 0) { /* N x C x L: L on the height axis */
        *shape = (NnShape){ dim_as_int(d[1]), dim_as_int(d[2]), 1 };
        return 1;
    }
    if (n == 2 && d[1] > 0) {
        *shape = (NnShape){ dim_as_int(d[1]), 1, 1 };
        return 1;
    }
    return 0;
}

int onnx_net_classes(const OnnxNet *net)
{
    const Onnx__GraphProto *g = net->model->graph;
    int64_t d[8];
    int n = g->n_output ? info_dims(g->output[0], d, 8) : -1;
    return n == 2 && d[1] > 0 && d[1] <= (1LL << 30) ? (int)d[1] : 0;
}

/* ---- values ---- */

Val *imp_find(Bld *b, const char *name)
{
    if (!name || !*name) return NULL;
    for (int k = b->n_vals - 1; k >= 0; k--)
        if (!strcmp(b->vals[k]->name, name)) return b->vals[k];
    return NULL;
}

/* every value is an allocation of its own, so that pointers to values stay valid while others are added */
Val *imp_put(Bld *b, const char *name, int kind)
{
    if (fh_grow(&b->vals, &b->cap_vals, b->n_vals + 1, sizeof *b->vals, "the import's values") != FH_OK) return NULL;
    Val *v = imp_alloc(b, sizeof *v);
    if (!v) return NULL;
    b->vals[b->n_vals++] = v;
    v->name = name;
    v->kind = kind;
    v->layer = -1;
    v->t = -1;
    v->c.init = -1;
    return v;
}

Val *imp_put_nd(Bld *b, const char *name, int t, const Od *od)
{
    Val *v = imp_put(b, name, V_TENSOR);
    if (v) {
        v->t = t;
        v->od = *od;
        v->layer = b->m->n_layers > 0 && b->m->layers[b->m->n_layers - 1].out == t ? b->m->n_layers - 1 : -1;
    }
    return v;
}

Val *imp_put_tensor(Bld *b, const char *name, int t, int rank)
{
    const NnShape s = b->m->tensors[t].shape;
    Od od = { rank, { 1, s.c, s.h, s.w }, 0, 1 };
    if (rank == 3) od.d[2] = (int64_t)s.h * s.w;
    if (rank == 2) od.d[1] = b->m->tensors[t].size;
    return imp_put_nd(b, name, t, &od);
}

int imp_put_alias(Bld *b, const char *name, const Val *x)
{
    Val *v = imp_put(b, name, V_TENSOR);
    NEED_MEM(v);
    const char *keep = v->name;
    *v = *x;
    v->name = keep;
    v->layer = -1; /* an activation after it must not fuse into the layer that others read */
    return FH_OK;
}

/* readers of value `name` among the nodes after `from` and the graph's outputs */
int imp_consumers(const Bld *b, const char *name, int from)
{
    int n = 0;
    for (size_t k = (size_t)from + 1; k < b->g->n_node; k++)
        for (size_t j = 0; j < b->g->node[k]->n_input; j++) n += !strcmp(b->g->node[k]->input[j], name);
    for (size_t k = 0; k < b->g->n_output; k++) n += !strcmp(b->g->output[k]->name, name);
    return n;
}

const Onnx__AttributeProto *imp_attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t k = 0; k < n->n_attribute; k++)
        if (!strcmp(n->attribute[k]->name, name)) return n->attribute[k];
    return NULL;
}

int64_t imp_attr_i(const Onnx__NodeProto *n, const char *name, int64_t dflt)
{
    const Onnx__AttributeProto *a = imp_attr(n, name);
    return a && a->has_i ? a->i : dflt;
}

float imp_attr_f(const Onnx__NodeProto *n, const char *name, float dflt)
{
    const Onnx__AttributeProto *a = imp_attr(n, name);
    return a && a->has_f ? a->f : dflt;
}

/* ints attribute: count (0 when absent) */
int imp_attr_ints(const Onnx__NodeProto *n, const char *name, const int64_t **v)
{
    const Onnx__AttributeProto *a = imp_attr(n, name);
    *v = a ? a->ints : NULL;
    return a ? (int)a->n_ints : 0;
}

/* every attribute of the node must be among `known` (a NULL-terminated list): else refused by name */
int imp_check_attrs(Bld *b, const char *const *known)
{
    const Onnx__NodeProto *n = imp_cur(b);
    for (size_t k = 0; k < n->n_attribute; k++)
        for (size_t j = 0; j < k; j++)
            if (!strcmp(n->attribute[k]->name, n->attribute[j]->name))
                NODE_FAIL(b, FH_ERR_USAGE, "attribute %s is given twice", n->attribute[k]->name);
    for (size_t k = 0; k < n->n_attribute; k++) {
        int ok = 0;
        for (int j = 0; known[j] && !ok; j++) ok = !strcmp(known[j], n->attribute[k]->name);
        if (!ok) NODE_FAIL(b, FH_ERR_USAGE, "attribute %s is not supported", n->attribute[k]->name);
    }
    return FH_OK;
}

Val *imp_in_val(Bld *b, int k)
{
    const Onnx__NodeProto *n = imp_cur(b);
    return k < (int)n->n_input ? imp_find(b, n->input[k]) : NULL;
}

/* the node's k-th input as a constant, or NULL (absent or not constant) */
const Const *imp_in_const(Bld *b, int k)
{
    Val *v = imp_in_val(b, k);
    return v && v->kind == V_CONST ? &v->c : NULL;
}

int imp_in_tensor(Bld *b, int k, Val **v)
{
    *v = imp_in_val(b, k);
    const Onnx__NodeProto *n = imp_cur(b);
    if (!*v) {
        if (k >= (int)n->n_input) NODE_FAIL(b, FH_ERR_USAGE, "input %d is missing", k);
        NODE_FAIL(b, FH_ERR_USAGE, "input '%s' is not produced by any node before it", n->input[k]);
    }
    if ((*v)->kind != V_TENSOR)
        NODE_FAIL(b, FH_ERR_USAGE, "input '%s' must be an activation tensor of the network here (it is %s)",
                  n->input[k], (*v)->kind == V_CONST                              ? "a constant"
                               : (*v)->kind >= V_FILL                             ? "a random draw of stochastic depth, "
                                                                                    "read outside its pattern"
                                                                                  : "part of a GroupNorm pattern read "
                                                                                    "elsewhere");
    const int *p = (*v)->pad;
    if ((p[0] | p[1] | p[2] | p[3]) && strcmp(n->op_type, "Conv") && strcmp(n->op_type, "AveragePool"))
        NODE_FAIL(b, FH_ERR_USAGE, "input '%s' comes from a Pad: a Pad followed by %s is not supported (by Conv or "
                  "AveragePool is)", n->input[k], n->op_type);
    return FH_OK;
}

/* the node's k-th input must be a constant (weights): FH_OK with *c set */
int imp_need_const(Bld *b, int k, const Const **c, const char *what)
{
    *c = imp_in_const(b, k);
    if (!*c) {
        const Onnx__NodeProto *n = imp_cur(b);
        NODE_FAIL(b, FH_ERR_USAGE, "%s '%s' must be an initializer or fold to a constant at import (weights computed "
                  "by the graph are not supported)", what, k < (int)n->n_input ? n->input[k] : "(missing)");
    }
    return FH_OK;
}

int imp_record_weight(Bld *b, int layer, int role, const Const *c, int transpose_rows, float scale)
{
    OnnxNet *net = b->net;
    if (c->init >= 0) {
        InitUse *u = &b->init_used[c->init];
        if (u->tensor >= 0)
            NODE_FAIL(b, FH_ERR_USAGE, "initializer '%s' is read as a tensor elsewhere and as the weights of a layer "
                      "here: one initializer in both uses is not supported", b->g->initializer[c->init]->name);
        if (u->layer >= 0 && u->layer != layer) { /* tied: one parameter */
            static const NnParamRole roles[] = { NN_ROLE_WEIGHT, NN_ROLE_BIAS, NN_ROLE_RUNNING_MEAN, NN_ROLE_RUNNING_VAR };
            const NnLayer *first = &b->m->layers[u->layer];
            if (u->role != role || u->transpose_rows != transpose_rows || u->scale != scale || role > ONNX_B ||
                first->type != b->m->layers[layer].type)
                NODE_FAIL(b, FH_ERR_USAGE, "initializer '%s' is already the %s of layer %s, read differently there "
                          "(another role, orientation or scale): such shared weights are not supported",
                          b->g->initializer[c->init]->name, u->role == ONNX_W ? "weight" : "bias", first->name);
            if (nn_tie_param(b->m, layer, roles[role], u->layer) != FH_OK) return b->m->status;
            return FH_OK;
        }
        *u = (InitUse){ layer, role, transpose_rows, scale, -1 };
    }
    FH_CHECK(fh_grow(&net->weights, &net->cap_weights, net->n_weights + 1, sizeof *net->weights, "the ONNX weights"));
    /* constants made at import live as long as the build; the map keeps the initializers' own floats, or a copy */
    const float *src = c->f;
    if (c->init < 0) {
        float *copy = malloc((size_t)c->n * sizeof *copy);
        if (!copy) FH_FAIL(FH_ERR_MEMORY, "out of memory");
        memcpy(copy, c->f, (size_t)c->n * sizeof *copy);
        src = copy;
    }
    net->weights[net->n_weights++] = (OnnxWeight){ layer, role, src, c->n, transpose_rows, scale, c->init < 0 };
    if (c->init >= 0) { /* the view remembers the initializer: tools/fedhet-torch pairs tensors by it */
        const NnLayer *l = &b->m->layers[layer];
        const int64_t off = role == ONNX_W ? l->w_off : role == ONNX_B ? l->b_off : role == ONNX_RM ? l->rm_off : l->rv_off;
        for (int v = 0; v < b->m->n_views; v++)
            if (b->m->views[v].layer == layer && b->m->views[v].offset == off &&
                (role >= ONNX_RM) == !b->m->views[v].trainable)
                snprintf(b->m->views[v].source, sizeof b->m->views[v].source, "%s", b->g->initializer[c->init]->name);
    }
    return FH_OK;
}

/* ---- activations ---- */

static int imp_layer_takes_act(const NnLayer *l)
{
    return l->act == NN_ACT_NONE && (l->type == NN_OP_LINEAR || l->type == NN_OP_CONV2D ||
                                     l->type == NN_OP_BATCHNORM || l->type == NN_OP_GROUPNORM || l->type == NN_OP_ADD);
}

int imp_is_features_name(const Bld *b, const char *value)
{
    const char *f = b->net->features_node;
    return f && !strcmp(f, value);
}

int imp_act_node_ex(Bld *b, NnActSpec spec, const char *out)
{
    Val *x;
    FH_CHECK(imp_in_tensor(b, 0, &x));
    int t = nn_act_ex(b->m, x->t, spec);
    if (t < 0) return b->m->status;
    NEED_MEM(imp_put_nd(b, out, t, &x->od));
    return FH_OK;
}

int imp_act_node(Bld *b, NnAct act)
{
    Val *x;
    FH_CHECK(imp_in_tensor(b, 0, &x));
    NnModel *m = b->m;
    if (x->layer >= 0 && imp_layer_takes_act(&m->layers[x->layer]) && m->layers[x->layer].out == x->t &&
        imp_consumers(b, x->name, b->node - 1) == 1 && !imp_is_features_name(b, x->name) && b->features != x->t) {
        m->layers[x->layer].act = act;
        return imp_put_alias(b, imp_cur(b)->output[0], x);
    }
    int t = nn_act(m, x->t, act);
    if (t < 0) return m->status;
    NEED_MEM(imp_put_nd(b, imp_cur(b)->output[0], t, &x->od));
    return FH_OK;
}

int imp_sole_reader(const Bld *b, const char *name, const char *op)
{
    const int r = imp_next_reader(b, name);
    if (r < 0 || imp_consumers(b, name, b->node) != 1 || imp_is_features_name(b, name)) return -1;
    return !op || !strcmp(b->g->node[r]->op_type, op) ? r : -1;
}

int imp_next_reader(const Bld *b, const char *name)
{
    for (size_t k = (size_t)b->node + 1; k < b->g->n_node; k++)
        for (size_t j = 0; j < b->g->node[k]->n_input; j++)
            if (!strcmp(b->g->node[k]->input[j], name)) return (int)k;
    return -1;
}

/* ops refused by what they would need, not by name */
static const struct {
    const char *op, *capability;
} missing[] = {
    { "Resize", "Resize (upsampling)" }, { "Upsample", "Upsample (upsampling)" },
    { "ConvTranspose", "transposed convolution (ConvTranspose)" }, { "LSTM", "recurrent layers (LSTM)" },
    { "GRU", "recurrent layers (GRU)" }, { "RNN", "recurrent layers (RNN)" },
    { "Einsum", "Einsum (export the product as MatMul)" }, { "TopK", "data-dependent selection (TopK)" },
    { "ArgMax", "data-dependent selection (ArgMax)" }, { "ArgMin", "data-dependent selection (ArgMin)" },
    { "NonZero", "data-dependent shapes (NonZero)" }, { "NonMaxSuppression", "data-dependent shapes (NonMaxSuppression)" },
    { "ScatterND", "writing at computed indices (ScatterND) on activations" },
    { "ScatterElements", "writing at computed indices (ScatterElements)" },
    { "GatherND", "indexing by computed indices (GatherND)" },
    { "GatherElements", "indexing by computed indices (GatherElements)" },
    { "Where", "data-dependent selection (Where) on activations" }, { "Equal", "comparisons (Equal) of activations" },
    { "DepthToSpace", "pixel shuffle (DepthToSpace)" }, { "SpaceToDepth", "pixel unshuffle (SpaceToDepth)" },
    { "Tile", "Tile (repeating a tensor) on activations" }, { "CumSum", "cumulative sums (CumSum)" },
    { "LpNormalization", "normalisation by a norm (LpNormalization)" },
    { "ReduceL2", "norms (ReduceL2)" }, { "ReduceSum", "sums over axes (ReduceSum)" },
    { "ReduceMax", "maxima over axes (ReduceMax)" }, { "MaxRoiPool", "region pooling (MaxRoiPool)" },
    { "RoiAlign", "region pooling (RoiAlign)" }, { "QuantizeLinear", "quantised graphs (QuantizeLinear)" },
    { "DequantizeLinear", "quantised graphs (DequantizeLinear)" }, { "Attention", "the fused Attention op of other "
                                                                                   "domains (export MultiheadAttention "
                                                                                   "as its ops)" },
};

static int do_node(Bld *b)
{
    const Onnx__NodeProto *n = imp_cur(b);
    const char *op = n->op_type;
    if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx"))
        NODE_FAIL(b, FH_ERR_USAGE, "domain %s is not supported (only ONNX's default domain is)", n->domain);
    if (!strcmp(op, "If") || !strcmp(op, "Loop") || !strcmp(op, "Scan"))
        NODE_FAIL(b, FH_ERR_USAGE, "control flow is not supported: export a graph without data-dependent branches "
                  "or loops");
    /* a pattern value read by anything other than the pattern's next step becomes its group-norm layer */
    for (size_t k = 0; k < n->n_input; k++) {
        Val *v = imp_find(b, n->input[k]);
        if (v && (v->kind == V_GN_BACK || v->kind == V_GN_SCALED) && strcmp(op, "Mul") && strcmp(op, "Add"))
            FH_CHECK(imp_finish_pattern(b, v));
    }
    int done;
    FH_CHECK(imp_fold(b, &done));
    if (done) return FH_OK;
#define NCHW_FIRST(form)                                                                                      \
    do {                                                                                                      \
        FH_CHECK(form(b, &done));                                                                            \
        if (done) return FH_OK;                                                                               \
    } while (0)
    if (!strcmp(op, "Conv")) return imp_op_conv(b);
    if (!strcmp(op, "BatchNormalization")) return imp_op_batchnorm(b);
    if (!strcmp(op, "Relu")) {
        FH_CHECK(imp_check_attrs(b, (const char *[]){ NULL }));
        return imp_act_node(b, NN_ACT_RELU);
    }
    if (!strcmp(op, "Clip")) return imp_op_clip(b);
    if (!strcmp(op, "LeakyRelu")) {
        FH_CHECK(imp_check_attrs(b, (const char *[]){ "alpha", NULL }));
        return imp_act_node_ex(b, (NnActSpec){ NN_ACT_LEAKY_RELU, imp_attr_f(n, "alpha", 0.01f), 0 }, n->output[0]);
    }
    if (!strcmp(op, "HardSigmoid")) {
        FH_CHECK(imp_check_attrs(b, (const char *[]){ "alpha", "beta", NULL }));
        return imp_act_node_ex(b, (NnActSpec){ NN_ACT_HARDSIGMOID, imp_attr_f(n, "alpha", 0.2f), imp_attr_f(n, "beta", 0.5f) },
                           n->output[0]);
    }
    if (!strcmp(op, "HardSwish") || !strcmp(op, "Tanh")) {
        FH_CHECK(imp_check_attrs(b, (const char *[]){ NULL }));
        return imp_act_node_ex(b, (NnActSpec){ op[0] == 'H' ? NN_ACT_HARDSWISH : NN_ACT_TANH, 0, 0 }, n->output[0]);
    }
    if (!strcmp(op, "Sigmoid")) return imp_op_sigmoid(b);
    if (!strcmp(op, "Erf")) return imp_op_unary(b, NN_ACT_ERF);
    if (!strcmp(op, "Sqrt")) return imp_op_unary(b, NN_ACT_SQRT);
    if (!strcmp(op, "Exp")) return imp_op_unary(b, NN_ACT_EXP);
    if (!strcmp(op, "Pow")) return imp_op_pow(b);
    if (!strcmp(op, "Concat")) {
        NCHW_FIRST(imp_nchw_concat);
        return imp_op_concat(b);
    }
    if (!strcmp(op, "Slice")) {
        NCHW_FIRST(imp_nchw_slice);
        return imp_op_slice(b);
    }
    if (!strcmp(op, "Split")) {
        NCHW_FIRST(imp_nchw_split);
        return imp_op_split(b);
    }
    if (!strcmp(op, "Transpose")) {
        NCHW_FIRST(imp_nchw_transpose);
        return imp_op_transpose(b);
    }
    if (!strcmp(op, "Pad")) return imp_op_pad(b);
    if (!strcmp(op, "MaxPool")) return imp_op_pool(b, 1);
    if (!strcmp(op, "AveragePool")) return imp_op_pool(b, 0);
    if (!strcmp(op, "GlobalAveragePool") || !strcmp(op, "ReduceMean")) {
        NCHW_FIRST(imp_nchw_gap);
        if (op[0] == 'G') NODE_FAIL(b, FH_ERR_USAGE, "GlobalAveragePool of a value that is not N x C x H x W");
        return imp_op_reduce_mean(b);
    }
    if (!strcmp(op, "Flatten")) return imp_op_flatten(b);
    if (!strcmp(op, "Reshape")) {
        NCHW_FIRST(imp_nchw_reshape);
        return imp_op_reshape(b);
    }
    if (!strcmp(op, "Squeeze") || !strcmp(op, "Unsqueeze")) return imp_op_squeeze(b, op[0] == 'U');
    if (!strcmp(op, "InstanceNormalization")) return imp_op_instnorm(b);
    if (!strcmp(op, "LayerNormalization")) return imp_op_layernorm(b);
    if (!strcmp(op, "Softmax")) return imp_op_softmax(b);
    if (!strcmp(op, "Mul") || !strcmp(op, "Add")) {
        NCHW_FIRST(imp_nchw_binary);
        return imp_op_binary(b, op[0] == 'M' ? NN_BIN_MUL : NN_BIN_ADD);
    }
    if (!strcmp(op, "Sub")) return imp_op_binary(b, NN_BIN_SUB);
    if (!strcmp(op, "Div")) return imp_op_binary(b, NN_BIN_DIV);
    if (!strcmp(op, "Gemm")) return imp_op_linear(b, 1);
    if (!strcmp(op, "MatMul")) {
        const Val *w = imp_in_val(b, 1), *x = imp_in_val(b, 0);
        if (w && w->kind == V_CONST && x && x->kind == V_TENSOR && w->c.ndim == 2) return imp_op_linear(b, 0);
        return imp_op_matmul(b);
    }
    if (!strcmp(op, "Gather")) return imp_op_gather(b);
    if (!strcmp(op, "Expand")) return imp_op_expand(b);
    if (!strcmp(op, "ConstantOfShape")) return imp_op_constant_of_shape(b);
    if (!strcmp(op, "RandomUniformLike")) return imp_op_random_like(b);
    if (!strcmp(op, "Less")) return imp_op_less(b);
    if (!strcmp(op, "Dropout")) return imp_op_dropout(b);
    if (!strcmp(op, "Identity") || !strcmp(op, "Cast")) return imp_op_identity(b);
#undef NCHW_FIRST
    for (size_t k = 0; k < sizeof missing / sizeof missing[0]; k++)
        if (!strcmp(missing[k].op, op)) NODE_FAIL(b, FH_ERR_USAGE, "%s is not supported", missing[k].capability);
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
        FH_FAIL(FH_ERR_MEMORY, "out of memory");
    for (size_t k = 0; k < g->n_initializer; k++) {
        b->init_used[k] = (InitUse){ -1, 0, 0, 1.0f, -1 };
        Val *v = imp_put(b, g->initializer[k]->name, V_CONST);
        if (!v) FH_FAIL(FH_ERR_MEMORY, "out of memory");
        v->c = net->inits[k];
    }
    if (g->n_sparse_initializer) FH_FAIL(FH_ERR_USAGE, "%s: sparse initializers are not supported", net->path);
    const Onnx__ValueInfoProto *in = data_input(net);
    if (!in) FH_FAIL(FH_ERR_USAGE, "%s: the graph has no input that is not an initializer", net->path);
    for (size_t k = 0; k < g->n_input; k++)
        if (g->input[k] != in && !imp_find(b, g->input[k]->name))
            FH_FAIL(FH_ERR_USAGE, "%s: graph input '%s' is not an initializer: one data input is supported (the "
                    "first, '%s')", net->path, g->input[k]->name, in->name);
    int64_t d[8];
    int rank = info_dims(in, d, 8);
    const Onnx__TensorShapeProto *ish = rank > 0 ? in->type->tensor_type->shape : NULL;
    for (int k = 0; ish && k < rank && k < 8; k++)
        if (ish->dim[k]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && ish->dim[k]->dim_value < 1)
            FH_FAIL(FH_ERR_USAGE, "%s: input '%s' has dimension %d fixed at %lld: a size must be positive (or symbolic, "
                    "dynamic_axes)", net->path, in->name, k, (long long)ish->dim[k]->dim_value);
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
    if (!imp_put_tensor(b, in->name, m->input, rank)) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    b->features = -1;
    /* Constant nodes first: patterns look ahead at the constants of later nodes (GELU's 1 and 0.5) */
    for (b->node = 0; b->node < (int)g->n_node; b->node++) {
        if (strcmp(imp_cur(b)->op_type, "Constant")) continue;
        int done;
        FH_CHECK(imp_fold(b, &done));
        b->absorbed[b->node] = 1;
    }
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
                                      "layer: %s", net->path, imp_node_name(b, imp_cur(b)), imp_cur(b)->op_type, why);
            }
            return status;
        }
        if (net->features_node) {
            const Onnx__NodeProto *n = imp_cur(b);
            const char *hit = !strcmp(net->features_node, imp_node_name(b, n)) ? n->output[0] : NULL;
            for (size_t k = 0; k < n->n_output && !hit; k++)
                if (!strcmp(net->features_node, n->output[k])) hit = n->output[k];
            if (hit) {
                Val *v = imp_find(b, hit);
                if (!v || v->kind != V_TENSOR)
                    FH_FAIL(FH_ERR_USAGE, "%s: model.features = %s names no activation tensor", net->path, net->features_node);
                b->features_named = 1;
                b->features = v->t;
            }
        }
    }
    if (g->n_output != 1)
        FH_FAIL(FH_ERR_USAGE, "%s: the graph has %zu outputs: one (the logits) is supported", net->path, g->n_output);
    Val *out = imp_find(b, g->output[0]->name);
    if (out && (out->kind == V_GN_BACK || out->kind == V_GN_SCALED)) {
        FH_CHECK(imp_finish_pattern(b, out));
        out = imp_find(b, g->output[0]->name);
    }
    if (!out || out->kind != V_TENSOR)
        FH_FAIL(FH_ERR_USAGE, "%s: output '%s' is %s", net->path, g->output[0]->name,
                out ? "a constant" : "computed by no node");
    if (out->od.bax != 0 || out->od.d[0] != 1 || out->od.bouter != 1)
        FH_FAIL(FH_ERR_USAGE, "%s: output '%s' must be N x classes (batch first)", net->path, g->output[0]->name);
    FH_CHECK(imp_as_engine(b, out));
    if (net->features_node && !b->features_named)
        FH_FAIL(FH_ERR_USAGE, "%s: model.features = %s: no node or output of that name", net->path, net->features_node);
    if (!m->n_layers) FH_FAIL(FH_ERR_USAGE, "%s: the graph has no layer (its output is its input): not supported", net->path);
    if (b->features < 0) b->features = m->layers[m->n_layers - 1].in; /* no classifier layer: the last layer's input */
    if (m->tensors[b->features].dims.batch != 0)
        FH_FAIL(FH_ERR_USAGE, "%s: the features tensor (the input of the last Gemm / MatMul) is not batch-first: name "
                "another with [model] features", net->path);
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
