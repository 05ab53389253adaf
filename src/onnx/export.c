/* Engine model -> ONNX inference graph (opset 13; 17 when it has a layer norm). One node per layer in layer order (a
 * fused activation as a Relu or Clip node after it; GELU and the affine map as the ops PyTorch writes for them),
 * parameters as initializers named by the state's views ("conv1.weight"), so that importing the file builds the same
 * layers in the same order: the same state layout, the same bits. A tensor of any rank is a value of its engine dims,
 * the batch's symbolic. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/buf.h"
#include "fedhet/core.h"
#include "fedhet/onnx.h"
#include "onnx.pb-c.h"
#include "version.h"

typedef struct {
    int batch_done; /* the batch-size value exists */
    int opset;
    void **own; /* everything allocated for the message, freed after packing */
    int n_own, cap_own;
    Onnx__NodeProto **nodes;
    int n_nodes, cap_nodes;
    Onnx__TensorProto **inits;
    int n_inits, cap_inits;
    int oom;
} Ex;

static void *ex_alloc(Ex *e, size_t bytes)
{
    if (e->oom) return NULL;
    if (fh_grow(&e->own, &e->cap_own, e->n_own + 1, sizeof *e->own, "the ONNX message") != FH_OK) {
        e->oom = 1;
        return NULL;
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) e->oom = 1;
    else e->own[e->n_own++] = p;
    return p;
}

static char *ex_str(Ex *e, const char *s)
{
    char *p = ex_alloc(e, strlen(s) + 1);
    if (p) strcpy(p, s);
    return p;
}

static int push(Ex *e, void ***arr, int *n, int *cap, void *item)
{
    if (!item) return 0;
    if (fh_grow(arr, cap, *n + 1, sizeof **arr, "the ONNX message") != FH_OK) {
        e->oom = 1;
        return 0;
    }
    (*arr)[(*n)++] = item;
    return 1;
}

/* a float initializer (data copied: the message must not point into the live state) */
static const char *ex_init(Ex *e, const char *name, const float *data, int ndim, const int64_t *dims)
{
    Onnx__TensorProto *t = ex_alloc(e, sizeof *t);
    if (!t) return NULL;
    onnx__tensor_proto__init(t);
    t->name = ex_str(e, name);
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->n_dims = (size_t)ndim;
    t->dims = ex_alloc(e, (size_t)(ndim ? ndim : 1) * sizeof *t->dims);
    int64_t n = 1;
    for (int d = 0; t->dims && d < ndim; d++) n *= t->dims[d] = dims[d];
    t->has_raw_data = 1;
    t->raw_data.len = (size_t)n * sizeof(float);
    t->raw_data.data = ex_alloc(e, t->raw_data.len);
    if (t->raw_data.data) memcpy(t->raw_data.data, data, t->raw_data.len);
    push(e, (void ***)&e->inits, &e->n_inits, &e->cap_inits, t);
    return t->name;
}

static const char *ex_init_ints(Ex *e, const char *name, int n, const int64_t *v)
{
    Onnx__TensorProto *t = ex_alloc(e, sizeof *t);
    if (!t) return NULL;
    onnx__tensor_proto__init(t);
    t->name = ex_str(e, name);
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    t->n_dims = 1;
    t->dims = ex_alloc(e, sizeof *t->dims);
    if (t->dims) t->dims[0] = n;
    t->n_int64_data = (size_t)n;
    t->int64_data = ex_alloc(e, (size_t)n * sizeof *t->int64_data);
    if (t->int64_data) memcpy(t->int64_data, v, (size_t)n * sizeof *v);
    push(e, (void ***)&e->inits, &e->n_inits, &e->cap_inits, t);
    return t->name;
}

static Onnx__NodeProto *ex_node(Ex *e, const char *op, const char *name, int n_in, const char *const *in, const char *out)
{
    Onnx__NodeProto *n = ex_alloc(e, sizeof *n);
    if (!n) return NULL;
    onnx__node_proto__init(n);
    n->op_type = ex_str(e, op);
    n->name = ex_str(e, name);
    n->n_input = (size_t)n_in;
    n->input = ex_alloc(e, (size_t)(n_in ? n_in : 1) * sizeof *n->input);
    for (int k = 0; n->input && k < n_in; k++) n->input[k] = ex_str(e, in[k]);
    n->n_output = 1;
    n->output = ex_alloc(e, sizeof *n->output);
    if (n->output) n->output[0] = ex_str(e, out);
    push(e, (void ***)&e->nodes, &e->n_nodes, &e->cap_nodes, n);
    return n;
}

/* a new attribute of node n, named and typed; NULL when out of memory (the export's error is sticky) */
static Onnx__AttributeProto *ex_attr(Ex *e, Onnx__NodeProto *n, const char *name, Onnx__AttributeProto__AttributeType type)
{
    if (!n) return NULL;
    Onnx__AttributeProto *a = ex_alloc(e, sizeof *a);
    Onnx__AttributeProto **grown = ex_alloc(e, (n->n_attribute + 1) * sizeof *grown);
    if (!a || !grown) return NULL;
    onnx__attribute_proto__init(a);
    a->name = ex_str(e, name);
    a->has_type = 1;
    a->type = type;
    if (n->n_attribute) memcpy(grown, n->attribute, n->n_attribute * sizeof *grown);
    grown[n->n_attribute++] = a;
    n->attribute = grown;
    return a;
}

static void attr_int(Ex *e, Onnx__NodeProto *n, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = ex_attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (!a) return;
    a->has_i = 1;
    a->i = v;
}

static void attr_float(Ex *e, Onnx__NodeProto *n, const char *name, float v)
{
    Onnx__AttributeProto *a = ex_attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (!a) return;
    a->has_f = 1;
    a->f = v;
}

static void attr_list(Ex *e, Onnx__NodeProto *n, const char *name, int count, const int64_t *v)
{
    Onnx__AttributeProto *a = ex_attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    if (!a) return;
    a->n_ints = (size_t)count;
    a->ints = ex_alloc(e, (size_t)count * sizeof *a->ints);
    for (int k = 0; a->ints && k < count; k++) a->ints[k] = v[k];
}

/* the geometry of a conv or pool layer */
static void attr_geometry(Ex *e, Onnx__NodeProto *n, const NnLayer *l)
{
    attr_list(e, n, "kernel_shape", 2, (int64_t[]){ l->kh, l->kw });
    attr_list(e, n, "strides", 2, (int64_t[]){ l->stride_h, l->stride_w });
    attr_list(e, n, "pads", 4, (int64_t[]){ l->pad_t, l->pad_l, l->pad_b, l->pad_r });
}

static const float *view_data(const NnModel *m, const float *state, int layer, const char *suffix, int64_t *dims,
                              int *ndim, const char **name)
{
    char want[64];
    snprintf(want, sizeof want, "%s.%s", m->layers[layer].name, suffix);
    const NnParamView *v = nn_model_view(m, want);
    if (!v) return NULL;
    *ndim = v->ndim;
    for (int d = 0; d < v->ndim; d++) dims[d] = v->dims[d];
    *name = v->name;
    return state + v->offset;
}

/* initializer of a layer's view, by suffix; NULL if the layer has none */
static const char *param(Ex *e, const NnModel *m, const float *state, int layer, const char *suffix)
{
    int64_t dims[4];
    int ndim;
    const char *name;
    const float *d = view_data(m, state, layer, suffix, dims, &ndim, &name);
    return d ? ex_init(e, name, d, ndim, dims) : NULL;
}

static void tname(const NnModel *m, int t, char *out, size_t size)
{
    if (t == m->input) snprintf(out, size, "input");
    else if (t == m->logits) snprintf(out, size, "logits");
    else snprintf(out, size, "t%d", t);
    for (int i = 0; i < m->n_layers; i++) /* a parameter tensor is its initializer */
        if (m->layers[i].type == NN_OP_PARAM && m->layers[i].out == t) {
            for (int v = 0; v < m->n_views; v++)
                if (m->views[v].layer == i) snprintf(out, size, "%s", m->views[v].name);
            return;
        }
}

/* an int64 initializer named after the layer: NAME.what */
static const char *ints_of(Ex *e, const NnLayer *l, const char *what, int n, const int64_t *v)
{
    char nm[96];
    snprintf(nm, sizeof nm, "%s.%s", l->name, what);
    return ex_init_ints(e, nm, n, v);
}

/* a float constant as a Constant node: an initializer would come back as a trainable parameter */
static const char *const_node(Ex *e, const char *name, const float *v, int ndim, const int64_t *dims)
{
    if (!ex_init(e, name, v, ndim, dims)) return NULL;
    Onnx__TensorProto *t = e->inits[--e->n_inits]; /* the tensor goes into the node's attribute */
    Onnx__NodeProto *n = ex_node(e, "Constant", name, 0, NULL, name);
    Onnx__AttributeProto *a = ex_attr(e, n, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    if (!a) return NULL;
    a->t = t;
    return n->output[0];
}

/* a scalar NAME.what */
static const char *scalar_of(Ex *e, const NnLayer *l, const char *what, float v)
{
    char nm[96];
    snprintf(nm, sizeof nm, "%s.%s", l->name, what);
    return const_node(e, nm, &v, 0, NULL);
}

/* the batch size as a 1-D value: Shape(input)[0:1], made once */
static const char *batch_value(Ex *e)
{
    if (!e->batch_done) {
        ex_node(e, "Shape", "input_shape", 1, (const char *[]){ "input" }, "input_shape");
        const char *ins[4] = { "input_shape", ex_init_ints(e, "batch_start", 1, (int64_t[]){ 0 }),
                               ex_init_ints(e, "batch_end", 1, (int64_t[]){ 1 }),
                               ex_init_ints(e, "batch_axis", 1, (int64_t[]){ 0 }) };
        ex_node(e, "Slice", "batch_size", 4, ins, "batch_size");
        e->batch_done = 1;
    }
    return "batch_size";
}

/* the dims of tensor t as a shape value: -1 at the batch for Reshape, or the batch size itself (Expand) */
static const char *shape_value(Ex *e, const NnModel *m, const NnLayer *l, int t, int exact_batch)
{
    const NnDims *d = &m->tensors[t].dims;
    int64_t v[NN_MAX_DIMS];
    for (int k = 0; k < d->ndim; k++) v[k] = k == d->batch ? -1 : d->d[k];
    if (!exact_batch || d->batch < 0) return ints_of(e, l, "shape", d->ndim, v);
    char nm[96], cat[112];
    const char *parts[3] = { NULL, batch_value(e), NULL };
    int n = 0;
    const char *ins[3];
    if (d->batch > 0) {
        snprintf(nm, sizeof nm, "%s.shape_before", l->name);
        parts[0] = ex_init_ints(e, nm, d->batch, v);
        ins[n++] = parts[0];
    }
    ins[n++] = parts[1];
    if (d->batch < d->ndim - 1) {
        snprintf(nm, sizeof nm, "%s.shape_after", l->name);
        parts[2] = ex_init_ints(e, nm, d->ndim - d->batch - 1, v + d->batch + 1);
        ins[n++] = parts[2];
    }
    snprintf(cat, sizeof cat, "%s_shape", l->name);
    Onnx__NodeProto *c = ex_node(e, "Concat", cat, n, ins, cat);
    attr_int(e, c, "axis", 0);
    return ex_str(e, cat);
}

/* a standalone activation beyond ReLU / ReLU6 */
static int export_act(Ex *e, const NnLayer *l, const char *in, const char *out)
{
    Onnx__NodeProto *n = NULL;
    char nm[96];
    switch (l->act) {
    case NN_ACT_LEAKY_RELU:
        n = ex_node(e, "LeakyRelu", l->name, 1, (const char *[]){ in }, out);
        attr_float(e, n, "alpha", l->act_a);
        break;
    case NN_ACT_CLIP: {
        char lo[64], hi[64];
        snprintf(lo, sizeof lo, "%s.clip_min", l->name);
        snprintf(hi, sizeof hi, "%s.clip_max", l->name);
        const char *ins[3] = { in, ex_init(e, lo, &l->act_a, 0, NULL), ex_init(e, hi, &l->act_b, 0, NULL) };
        n = ex_node(e, "Clip", l->name, 3, ins, out);
        break;
    }
    case NN_ACT_SIGMOID: n = ex_node(e, "Sigmoid", l->name, 1, (const char *[]){ in }, out); break;
    case NN_ACT_TANH: n = ex_node(e, "Tanh", l->name, 1, (const char *[]){ in }, out); break;
    case NN_ACT_HARDSWISH: n = ex_node(e, "HardSwish", l->name, 1, (const char *[]){ in }, out); break;
    case NN_ACT_HARDSIGMOID:
        n = ex_node(e, "HardSigmoid", l->name, 1, (const char *[]){ in }, out);
        attr_float(e, n, "alpha", l->act_a);
        attr_float(e, n, "beta", l->act_b);
        break;
    case NN_ACT_SILU: /* x * sigmoid(x), as PyTorch exports it */
        snprintf(nm, sizeof nm, "%s_sigmoid", out);
        ex_node(e, "Sigmoid", nm, 1, (const char *[]){ in }, nm);
        n = ex_node(e, "Mul", l->name, 2, (const char *[]){ in, nm }, out);
        break;
    case NN_ACT_GELU: { /* x (1 + erf(x / sqrt 2)) / 2 as PyTorch exports it (opsets before 20 have no Gelu) */
        char a[160], b[160], c[160], d[160];
        snprintf(a, sizeof a, "%s_div", out);
        snprintf(b, sizeof b, "%s_erf", out);
        snprintf(c, sizeof c, "%s_erf1", out);
        snprintf(d, sizeof d, "%s_half", out);
        ex_node(e, "Div", a, 2, (const char *[]){ in, scalar_of(e, l, "sqrt2", 1.41421354f) }, a);
        ex_node(e, "Erf", b, 1, (const char *[]){ a }, b);
        ex_node(e, "Add", c, 2, (const char *[]){ b, scalar_of(e, l, "one", 1.0f) }, c);
        ex_node(e, "Mul", d, 2, (const char *[]){ in, c }, d);
        n = ex_node(e, "Mul", l->name, 2, (const char *[]){ d, scalar_of(e, l, "half", 0.5f) }, out);
        break;
    }
    case NN_ACT_GELU_TANH: { /* PyTorch's: x / 2 (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
        char h[160], p[160], q[160], r[160], s2[160], t[160], u[160];
        snprintf(h, sizeof h, "%s_half", out);
        snprintf(p, sizeof p, "%s_cube", out);
        snprintf(q, sizeof q, "%s_cubek", out);
        snprintf(r, sizeof r, "%s_inner", out);
        snprintf(s2, sizeof s2, "%s_scaled", out);
        snprintf(t, sizeof t, "%s_tanh", out);
        snprintf(u, sizeof u, "%s_tanh1", out);
        ex_node(e, "Mul", h, 2, (const char *[]){ in, scalar_of(e, l, "half", 0.5f) }, h);
        ex_node(e, "Pow", p, 2, (const char *[]){ in, scalar_of(e, l, "three", 3.0f) }, p);
        ex_node(e, "Mul", q, 2, (const char *[]){ p, scalar_of(e, l, "k", 0.044715f) }, q);
        ex_node(e, "Add", r, 2, (const char *[]){ in, q }, r);
        ex_node(e, "Mul", s2, 2, (const char *[]){ r, scalar_of(e, l, "c", 0.797884583f) }, s2);
        ex_node(e, "Tanh", t, 1, (const char *[]){ s2 }, t);
        ex_node(e, "Add", u, 2, (const char *[]){ t, scalar_of(e, l, "one", 1.0f) }, u);
        n = ex_node(e, "Mul", l->name, 2, (const char *[]){ h, u }, out);
        break;
    }
    case NN_ACT_ERF: n = ex_node(e, "Erf", l->name, 1, (const char *[]){ in }, out); break;
    case NN_ACT_SQRT: n = ex_node(e, "Sqrt", l->name, 1, (const char *[]){ in }, out); break;
    case NN_ACT_EXP: n = ex_node(e, "Exp", l->name, 1, (const char *[]){ in }, out); break;
    case NN_ACT_POW: n = ex_node(e, "Pow", l->name, 2, (const char *[]){ in, scalar_of(e, l, "exponent", l->act_a) }, out); break;
    case NN_ACT_AFFINE: { /* a x + b: Mul, then Add (the importer's two affine layers compute the same bits) */
        const char *x = in;
        if (l->act_a != 1.0f || l->act_b == 0.0f) {
            snprintf(nm, sizeof nm, "%s_scaled", out);
            n = ex_node(e, "Mul", l->name, 2, (const char *[]){ in, scalar_of(e, l, "scale", l->act_a) },
                        l->act_b != 0.0f ? nm : out);
            x = nm;
        }
        if (l->act_b != 0.0f) {
            snprintf(nm, sizeof nm, "%s_shift", l->name);
            n = ex_node(e, "Add", nm, 2, (const char *[]){ x, scalar_of(e, l, "shift", l->act_b) }, out);
        }
        break;
    }
    default:
        FH_FAIL(FH_ERR_USAGE, "layer %s: its activation has no ONNX export", l->name);
    }
    return !n || e->oom ? FH_ERR_MEMORY : FH_OK;
}

static int export_layer(Ex *e, const NnModel *m, const float *state, int li)
{
    const NnLayer *l = &m->layers[li];
    char in[64], in2[64], out[64], pre[128];
    tname(m, l->in, in, sizeof in);
    tname(m, l->out, out, sizeof out);
    snprintf(pre, sizeof pre, "%s_%s", out, l->name);
    const char *y = l->act != NN_ACT_NONE ? pre : out; /* a fused activation follows as its own node */
    Onnx__NodeProto *n = NULL;
    switch (l->type) {
    case NN_OP_LINEAR: {
        if (l->per_row) { /* every row: MatMul by the weight as [in, out], then Add of the bias */
            int64_t dims[4];
            int nd;
            const char *wn;
            const float *w = view_data(m, state, li, "weight", dims, &nd, &wn);
            float *wt = malloc(sizeof *wt * (size_t)l->cin * (size_t)l->cout);
            if (!w || !wt) {
                free(wt);
                FH_FAIL(FH_ERR_MEMORY, "out of memory exporting layer %s", l->name);
            }
            for (int o = 0; o < l->cout; o++)
                for (int i = 0; i < l->cin; i++) wt[(int64_t)i * l->cout + o] = w[(int64_t)o * l->cin + i];
            const char *wi = ex_init(e, wn, wt, 2, (int64_t[]){ l->cin, l->cout });
            free(wt);
            const char *b = param(e, m, state, li, "bias");
            snprintf(pre, sizeof pre, "%s_%s_mm", out, l->name);
            n = ex_node(e, "MatMul", l->name, 2, (const char *[]){ in, wi }, b ? pre : y);
            if (b) {
                char an[64];
                snprintf(an, sizeof an, "%s_bias", l->name);
                n = ex_node(e, "Add", an, 2, (const char *[]){ pre, b }, y);
            }
            break;
        }
        const char *x = in;
        char flat[64];
        if (m->tensors[l->in].dims.ndim != 2) { /* Gemm takes N x F: a pooled N x C x 1 x 1 head is flattened */
            snprintf(flat, sizeof flat, "%s_flat", l->name);
            Onnx__NodeProto *f = ex_node(e, "Flatten", flat, 1, (const char *[]){ in }, flat);
            attr_int(e, f, "axis", 1);
            x = flat;
        }
        const char *b = param(e, m, state, li, "bias");
        const char *ins[3] = { x, param(e, m, state, li, "weight"), b };
        n = ex_node(e, "Gemm", l->name, b ? 3 : 2, ins, y);
        attr_int(e, n, "transB", 1);
        break;
    }
    case NN_OP_CONV2D: {
        const char *b = param(e, m, state, li, "bias");
        const char *ins[3] = { in, param(e, m, state, li, "weight"), b };
        n = ex_node(e, "Conv", l->name, b ? 3 : 2, ins, y);
        attr_geometry(e, n, l);
        attr_list(e, n, "dilations", 2, (int64_t[]){ l->dil_h, l->dil_w });
        attr_int(e, n, "group", l->groups);
        break;
    }
    case NN_OP_MAXPOOL:
    case NN_OP_AVGPOOL: {
        const char *ins[1] = { in };
        n = ex_node(e, l->type == NN_OP_MAXPOOL ? "MaxPool" : "AveragePool", l->name, 1, ins, y);
        attr_geometry(e, n, l);
        attr_int(e, n, "ceil_mode", l->ceil_mode);
        if (l->type == NN_OP_AVGPOOL) attr_int(e, n, "count_include_pad", l->count_include_pad);
        break;
    }
    case NN_OP_GAP: {
        const char *ins[1] = { in };
        n = ex_node(e, "GlobalAveragePool", l->name, 1, ins, y);
        break;
    }
    case NN_OP_BATCHNORM: {
        const char *ins[5] = { in, param(e, m, state, li, "weight"), param(e, m, state, li, "bias"),
                               param(e, m, state, li, "running_mean"), param(e, m, state, li, "running_var") };
        n = ex_node(e, "BatchNormalization", l->name, 5, ins, y);
        attr_float(e, n, "epsilon", l->eps);
        attr_float(e, n, "momentum", 1.0f - l->momentum);
        break;
    }
    case NN_OP_GROUPNORM: { /* PyTorch's pattern, which the importer reads back as one layer */
        const NnShape s = m->tensors[l->in].shape;
        char nm[96], a[160], b2[160], c[160], d[160];
        const int64_t split[3] = { 0, l->groups, -1 }, back[4] = { -1, s.c, s.h, s.w }, cdims[3] = { s.c, 1, 1 };
        float *ones = calloc((size_t)l->groups, sizeof *ones), *zeros = calloc((size_t)l->groups, sizeof *zeros);
        if (!ones || !zeros) {
            free(ones);
            free(zeros);
            e->oom = 1;
            return FH_ERR_MEMORY;
        }
        for (int k = 0; k < l->groups; k++) ones[k] = 1.0f;
        snprintf(nm, sizeof nm, "%s.split_shape", l->name);
        const char *sh1 = ex_init_ints(e, nm, 3, split);
        snprintf(nm, sizeof nm, "%s.back_shape", l->name);
        const char *sh2 = ex_init_ints(e, nm, 4, back);
        snprintf(nm, sizeof nm, "%s.group_scale", l->name);
        const char *gs = ex_init(e, nm, ones, 1, (int64_t[]){ l->groups });
        snprintf(nm, sizeof nm, "%s.group_bias", l->name);
        const char *gb = ex_init(e, nm, zeros, 1, (int64_t[]){ l->groups });
        free(ones);
        free(zeros);
        int64_t dims[4];
        int ndim;
        const char *wn = "", *bn = "";
        const float *wd = view_data(m, state, li, "weight", dims, &ndim, &wn);
        const float *bd = view_data(m, state, li, "bias", dims, &ndim, &bn);
        const char *w = ex_init(e, wn, wd, 3, cdims), *bb = ex_init(e, bn, bd, 3, cdims);
        snprintf(a, sizeof a, "%s_split", pre);
        snprintf(b2, sizeof b2, "%s_norm", pre);
        snprintf(c, sizeof c, "%s_back", pre);
        snprintf(d, sizeof d, "%s_scaled", pre);
        ex_node(e, "Reshape", a, 2, (const char *[]){ in, sh1 }, a);
        Onnx__NodeProto *inn = ex_node(e, "InstanceNormalization", b2, 3, (const char *[]){ a, gs, gb }, b2);
        attr_float(e, inn, "epsilon", l->eps);
        ex_node(e, "Reshape", c, 2, (const char *[]){ b2, sh2 }, c);
        ex_node(e, "Mul", d, 2, (const char *[]){ c, w }, d);
        n = ex_node(e, "Add", l->name, 2, (const char *[]){ d, bb }, y);
        break;
    }
    case NN_OP_ACT:
        if (l->act == NN_ACT_RELU || l->act == NN_ACT_RELU6) { /* only the activation node below */
            y = in;
            n = (Onnx__NodeProto *)1;
            break;
        }
        return export_act(e, l, in, out);
    case NN_OP_MUL: {
        tname(m, l->in2, in2, sizeof in2);
        n = ex_node(e, "Mul", l->name, 2, (const char *[]){ in, in2 }, y);
        break;
    }
    case NN_OP_CONCAT: {
        const char **ins = ex_alloc(e, (size_t)l->n_ins * sizeof *ins);
        char (*names)[32] = ex_alloc(e, (size_t)l->n_ins * sizeof *names);
        if (!ins || !names) return FH_ERR_MEMORY;
        for (int k = 0; k < l->n_ins; k++) {
            tname(m, l->ins[k], names[k], sizeof names[k]);
            ins[k] = names[k];
        }
        n = ex_node(e, "Concat", l->name, l->n_ins, ins, y);
        attr_int(e, n, "axis", l->axis);
        break;
    }
    case NN_OP_SLICE: {
        char nm[96];
        snprintf(nm, sizeof nm, "%s.starts", l->name);
        const char *st = ex_init_ints(e, nm, 1, (int64_t[]){ l->start });
        snprintf(nm, sizeof nm, "%s.ends", l->name);
        const char *en = ex_init_ints(e, nm, 1, (int64_t[]){ l->end });
        snprintf(nm, sizeof nm, "%s.axes", l->name);
        const char *ax = ex_init_ints(e, nm, 1, (int64_t[]){ l->axis });
        n = ex_node(e, "Slice", l->name, 4, (const char *[]){ in, st, en, ax }, y);
        break;
    }
    case NN_OP_SHUFFLE: { /* Reshape to N x g x C/g x H x W, swap the two channel axes, Reshape back */
        const NnShape s = m->tensors[l->in].shape;
        char nm[96], a[160], c[160];
        snprintf(nm, sizeof nm, "%s.split_shape", l->name);
        const char *sh1 = ex_init_ints(e, nm, 5, (int64_t[]){ 0, l->groups, s.c / l->groups, s.h, s.w });
        snprintf(nm, sizeof nm, "%s.back_shape", l->name);
        const char *sh2 = ex_init_ints(e, nm, 4, (int64_t[]){ -1, s.c, s.h, s.w });
        snprintf(a, sizeof a, "%s_split", pre);
        snprintf(c, sizeof c, "%s_swapped", pre);
        ex_node(e, "Reshape", a, 2, (const char *[]){ in, sh1 }, a);
        Onnx__NodeProto *tr = ex_node(e, "Transpose", c, 1, (const char *[]){ a }, c);
        attr_list(e, tr, "perm", 5, (int64_t[]){ 0, 2, 1, 3, 4 });
        n = ex_node(e, "Reshape", l->name, 2, (const char *[]){ c, sh2 }, y);
        break;
    }
    case NN_OP_DROPOUT: { /* an inference graph: dropout is the identity */
        const char *ins[1] = { in };
        n = ex_node(e, "Identity", l->name, 1, ins, y);
        break;
    }
    case NN_OP_ADD: {
        tname(m, l->in2, in2, sizeof in2);
        const char *ins[2] = { in, in2 };
        n = ex_node(e, "Add", l->name, 2, ins, y);
        break;
    }
    case NN_OP_FLATTEN: {
        const char *ins[1] = { in };
        n = ex_node(e, "Flatten", l->name, 1, ins, y);
        attr_int(e, n, "axis", 1);
        break;
    }
    case NN_OP_RESHAPE:
        n = ex_node(e, "Reshape", l->name, 2, (const char *[]){ in, shape_value(e, m, l, l->out, 0) }, y);
        break;
    case NN_OP_TRANSPOSE: {
        int64_t perm[NN_MAX_DIMS];
        for (int k = 0; k < m->tensors[l->out].dims.ndim; k++) perm[k] = l->perm[k];
        n = ex_node(e, "Transpose", l->name, 1, (const char *[]){ in }, y);
        attr_list(e, n, "perm", m->tensors[l->out].dims.ndim, perm);
        break;
    }
    case NN_OP_MATMUL: {
        tname(m, l->in2, in2, sizeof in2);
        const char *b = in2;
        char tb[64], sc[64];
        if (l->trans_b) {
            const int nd = m->tensors[l->in2].dims.ndim;
            int64_t perm[NN_MAX_DIMS];
            for (int k = 0; k < nd; k++) perm[k] = k < nd - 2 ? k : k == nd - 2 ? nd - 1 : nd - 2;
            snprintf(tb, sizeof tb, "%s_bt", l->name);
            Onnx__NodeProto *t = ex_node(e, "Transpose", tb, 1, (const char *[]){ in2 }, tb);
            attr_list(e, t, "perm", nd, perm);
            b = tb;
        }
        snprintf(sc, sizeof sc, "%s_product", l->name);
        n = ex_node(e, "MatMul", l->name, 2, (const char *[]){ in, b }, l->alpha != 1.0f ? sc : y);
        if (l->alpha != 1.0f) n = ex_node(e, "Mul", sc, 2, (const char *[]){ sc, scalar_of(e, l, "alpha", l->alpha) }, y);
        break;
    }
    case NN_OP_LAYERNORM: {
        const char *w = param(e, m, state, li, "weight"), *b = param(e, m, state, li, "bias");
        int n_dims = 0;
        for (int64_t sz = 1, k = m->tensors[l->in].dims.ndim - 1; sz < l->cin && k >= 0; k--, n_dims++)
            sz *= m->tensors[l->in].dims.d[k];
        if (!n_dims) n_dims = 1;
        n = ex_node(e, "LayerNormalization", l->name, w ? 3 : 1, (const char *[]){ in, w, b }, y);
        attr_int(e, n, "axis", -n_dims);
        attr_float(e, n, "epsilon", l->eps);
        break;
    }
    case NN_OP_SOFTMAX:
        n = ex_node(e, "Softmax", l->name, 1, (const char *[]){ in }, y);
        attr_int(e, n, "axis", l->axis);
        break;
    case NN_OP_BINARY: {
        static const char *ops[] = { "Add", "Sub", "Mul", "Div" };
        tname(m, l->in2, in2, sizeof in2);
        n = ex_node(e, ops[l->bin_op], l->name, 2, (const char *[]){ in, in2 }, y);
        break;
    }
    case NN_OP_PARAM: { /* an initializer, read by name (tname) */
        const NnDims *d = &m->tensors[l->out].dims;
        int64_t dims[NN_MAX_DIMS];
        for (int k = 0; k < d->ndim; k++) dims[k] = d->d[k];
        char nm[64];
        tname(m, l->out, nm, sizeof nm);
        if (!ex_init(e, nm, state + l->w_off, d->ndim, dims)) return FH_ERR_MEMORY;
        return e->oom ? FH_ERR_MEMORY : FH_OK;
    }
    case NN_OP_CONST: { /* a Constant node: an initializer would come back as a trainable parameter */
        const NnDims *d = &m->tensors[l->out].dims;
        int64_t dims[NN_MAX_DIMS];
        for (int k = 0; k < d->ndim; k++) dims[k] = d->d[k];
        const char *v = const_node(e, y, l->values, d->ndim, dims);
        if (!v || e->oom) return FH_ERR_MEMORY;
        return FH_OK;
    }
    case NN_OP_EXPAND:
        n = ex_node(e, "Expand", l->name, 2, (const char *[]){ in, shape_value(e, m, l, l->out, 1) }, y);
        break;
    case NN_OP_REDUCE_MEAN: {
        int64_t axes[NN_MAX_DIMS];
        int na = 0;
        for (int k = 0; k < m->tensors[l->in].dims.ndim; k++)
            if ((l->reduce_mask >> k) & 1u) axes[na++] = k;
        n = ex_node(e, "ReduceMean", l->name, 1, (const char *[]){ in }, y);
        attr_list(e, n, "axes", na, axes);
        attr_int(e, n, "keepdims", 1);
        break;
    }
    case NN_OP_GATHER: {
        /* zero entries (-1): Gather from the input padded with one zero entry at the end of the axis */
        const NnDims *d = &m->tensors[l->in].dims;
        int64_t *idx = ex_alloc(e, sizeof *idx * (size_t)l->n_index), pads[2 * NN_MAX_DIMS] = { 0 };
        if (!idx) return FH_ERR_MEMORY;
        int zeros = 0;
        for (int k = 0; k < l->n_index; k++) {
            zeros |= l->index[k] < 0;
            idx[k] = l->index[k] < 0 ? d->d[l->axis] : l->index[k];
        }
        char padded[80];
        snprintf(padded, sizeof padded, "%s_padded", l->name);
        if (zeros) {
            pads[d->ndim + l->axis] = 1;
            if (!ex_node(e, "Pad", padded, 2, (const char *[]){ in, ints_of(e, l, "pads", 2 * d->ndim, pads) }, padded))
                return FH_ERR_MEMORY;
        }
        n = ex_node(e, "Gather", l->name, 2,
                    (const char *[]){ zeros ? padded : in, ints_of(e, l, "indices", l->n_index, idx) }, y);
        attr_int(e, n, "axis", l->axis);
        break;
    }
    case NN_OP_DROP_PATH: /* an inference graph: stochastic depth is the identity */
        n = ex_node(e, "Identity", l->name, 1, (const char *[]){ in }, y);
        break;
    default:
        FH_FAIL(FH_ERR_USAGE, "layer %s: its type has no ONNX export", l->name);
    }
    if (!n || e->oom) FH_FAIL(FH_ERR_MEMORY, "out of memory exporting layer %s", l->name);
    char an[64];
    if (l->act == NN_ACT_RELU) {
        snprintf(an, sizeof an, "%s_relu", l->name);
        ex_node(e, "Relu", an, 1, (const char *[]){ y }, out);
    } else if (l->act == NN_ACT_RELU6) {
        char lo[64], hi[64];
        snprintf(lo, sizeof lo, "%s.clip_min", l->name);
        snprintf(hi, sizeof hi, "%s.clip_max", l->name);
        const float zero = 0.0f, six = 6.0f;
        const char *ins[3] = { y, ex_init(e, lo, &zero, 0, NULL), ex_init(e, hi, &six, 0, NULL) };
        snprintf(an, sizeof an, "%s_relu6", l->name);
        ex_node(e, "Clip", an, 3, ins, out);
    }
    return e->oom ? FH_ERR_MEMORY : FH_OK;
}

static Onnx__ValueInfoProto *value_info(Ex *e, const char *name, int ndim, const int64_t *dims)
{
    Onnx__ValueInfoProto *v = ex_alloc(e, sizeof *v);
    Onnx__TypeProto *tp = ex_alloc(e, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = ex_alloc(e, sizeof *tt);
    Onnx__TensorShapeProto *sh = ex_alloc(e, sizeof *sh);
    Onnx__TensorShapeProto__Dimension **dd = ex_alloc(e, (size_t)ndim * sizeof *dd);
    if (!v || !tp || !tt || !sh || !dd) return NULL;
    onnx__value_info_proto__init(v);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    for (int d = 0; d < ndim; d++) {
        dd[d] = ex_alloc(e, sizeof *dd[d]);
        if (!dd[d]) return NULL;
        onnx__tensor_shape_proto__dimension__init(dd[d]);
        if (dims[d] < 0) { /* the batch */
            dd[d]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dd[d]->dim_param = ex_str(e, "batch");
        } else {
            dd[d]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dd[d]->dim_value = dims[d];
        }
    }
    sh->n_dim = (size_t)ndim;
    sh->dim = dd;
    tt->has_elem_type = 1;
    tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    v->name = ex_str(e, name);
    v->type = tp;
    return v;
}

int onnx_export(const NnModel *m, const float *state, const char *path)
{
    Ex e;
    memset(&e, 0, sizeof e);
    e.opset = 13;
    for (int li = 0; li < m->n_layers; li++) /* LayerNormalization came with opset 17 */
        if (m->layers[li].type == NN_OP_LAYERNORM) e.opset = 17;
    int status = FH_OK;
    for (int li = 0; li < m->n_layers && status == FH_OK; li++) status = export_layer(&e, m, state, li);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (status == FH_OK) {
        const NnShape s = m->tensors[m->input].shape;
        Onnx__ValueInfoProto *in = value_info(&e, "input", 4, (int64_t[]){ -1, s.c, s.h, s.w });
        Onnx__ValueInfoProto *out = value_info(&e, "logits", 2, (int64_t[]){ -1, m->classes });
        Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
        Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
        Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
        Onnx__OperatorSetIdProto *opsets[1] = { &opset };
        opset.domain = "";
        opset.has_version = 1;
        opset.version = e.opset;
        g.name = ex_str(&e, m->arch);
        g.n_node = (size_t)e.n_nodes;
        g.node = e.nodes;
        g.n_initializer = (size_t)e.n_inits;
        g.initializer = e.inits;
        g.n_input = 1;
        g.input = &in;
        g.n_output = 1;
        g.output = &out;
        model.has_ir_version = 1;
        model.ir_version = e.opset >= 17 ? 8 : 7;
        model.n_opset_import = 1;
        model.opset_import = opsets;
        model.producer_name = "fedhet";
        model.producer_version = FEDHET_VERSION;
        model.graph = &g;
        if (!in || !out || e.oom) status = fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "out of memory exporting");
        else {
            len = onnx__model_proto__get_packed_size(&model);
            buf = malloc(len ? len : 1);
            if (!buf) status = fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "%s: out of memory (%zu bytes)", path, len);
            else onnx__model_proto__pack(&model, buf);
        }
    }
    for (int k = 0; k < e.n_own; k++) free(e.own[k]);
    free(e.own);
    free(e.nodes);
    free(e.inits);
    if (status == FH_OK) {
        FhAtomicFile f;
        status = fh_atomic_open(&f, path);
        if (status == FH_OK) {
            errno = 0;
            if (fwrite(buf, 1, len, f.f) != len) {
                const int err = errno; /* before the discard's own calls can change it */
                fh_atomic_discard(&f);
                status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: cannot write: %s", path,
                                        err ? strerror(err) : "write error");
            } else status = fh_atomic_commit(&f);
        }
    }
    free(buf);
    return status == FH_OK ? FH_OK : fh_error_trace(status, __FILE__, __LINE__, "onnx_export");
}
