/* Engine model -> ONNX inference graph (opset 13). One node per layer in layer order (a fused activation as a
 * Relu or Clip node after it), parameters as initializers named by the state's views ("conv1.weight"), so
 * that importing the file builds the same layers in the same order: the same state layout, the same bits. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"
#include "fedhet/onnx.h"
#include "onnx.pb-c.h"
#include "version.h"

typedef struct {
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
    if (e->n_own == e->cap_own) {
        int cap = e->cap_own ? 2 * e->cap_own : 256;
        void **grown = realloc(e->own, (size_t)cap * sizeof *grown);
        if (!grown) {
            e->oom = 1;
            return NULL;
        }
        e->own = grown;
        e->cap_own = cap;
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
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 64;
        void **grown = realloc(*arr, (size_t)c * sizeof *grown);
        if (!grown) {
            e->oom = 1;
            return 0;
        }
        *arr = grown;
        *cap = c;
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
    default:
        FH_FAIL(FH_ERR_USAGE, "layer %s: its activation has no ONNX export", l->name);
    }
    return !n || e->oom ? FH_ERR_IO : FH_OK;
}

static int export_layer(Ex *e, const NnModel *m, const float *state, int li)
{
    const NnLayer *l = &m->layers[li];
    char in[32], in2[32], out[40], pre[96];
    tname(m, l->in, in, sizeof in);
    tname(m, l->out, out, sizeof out);
    snprintf(pre, sizeof pre, "%s_%s", out, l->name);
    const char *y = l->act != NN_ACT_NONE ? pre : out; /* a fused activation follows as its own node */
    Onnx__NodeProto *n = NULL;
    switch (l->type) {
    case NN_OP_LINEAR: {
        const char *b = param(e, m, state, li, "bias");
        const char *ins[3] = { in, param(e, m, state, li, "weight"), b };
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
        char nm[96], a[112], b2[112], c[112], d[112];
        const int64_t split[3] = { 0, l->groups, -1 }, back[4] = { -1, s.c, s.h, s.w }, cdims[3] = { s.c, 1, 1 };
        float *ones = calloc((size_t)l->groups, sizeof *ones), *zeros = calloc((size_t)l->groups, sizeof *zeros);
        if (!ones || !zeros) {
            free(ones);
            free(zeros);
            e->oom = 1;
            return FH_ERR_IO;
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
        if (!ins || !names) return FH_ERR_IO;
        for (int k = 0; k < l->n_ins; k++) {
            tname(m, l->ins[k], names[k], sizeof names[k]);
            ins[k] = names[k];
        }
        n = ex_node(e, "Concat", l->name, l->n_ins, ins, y);
        attr_int(e, n, "axis", 1);
        break;
    }
    case NN_OP_SLICE: {
        char nm[96];
        snprintf(nm, sizeof nm, "%s.starts", l->name);
        const char *st = ex_init_ints(e, nm, 1, (int64_t[]){ l->start });
        snprintf(nm, sizeof nm, "%s.ends", l->name);
        const char *en = ex_init_ints(e, nm, 1, (int64_t[]){ l->end });
        snprintf(nm, sizeof nm, "%s.axes", l->name);
        const char *ax = ex_init_ints(e, nm, 1, (int64_t[]){ 1 });
        n = ex_node(e, "Slice", l->name, 4, (const char *[]){ in, st, en, ax }, y);
        break;
    }
    case NN_OP_SHUFFLE: { /* Reshape to N x g x C/g x H x W, swap the two channel axes, Reshape back */
        const NnShape s = m->tensors[l->in].shape;
        char nm[96], a[112], c[112];
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
    default:
        FH_FAIL(FH_ERR_USAGE, "layer %s: its type has no ONNX export", l->name);
    }
    if (!n || e->oom) FH_FAIL(FH_ERR_IO, "out of memory exporting layer %s", l->name);
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
    return e->oom ? FH_ERR_IO : FH_OK;
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
        opset.version = 13;
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
        model.ir_version = 7;
        model.n_opset_import = 1;
        model.opset_import = opsets;
        model.producer_name = "fedhet";
        model.producer_version = FEDHET_VERSION;
        model.graph = &g;
        if (!in || !out || e.oom) status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "out of memory exporting");
        else {
            len = onnx__model_proto__get_packed_size(&model);
            buf = malloc(len ? len : 1);
            if (!buf) status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: out of memory (%zu bytes)", path, len);
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
