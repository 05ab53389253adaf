/* Tensors of any rank at import: what vision transformers, ConvNeXt and MLP-Mixer export. Every activation keeps its
 * ONNX shape (Od), the batch's axis symbolic; the engine tensor's dims are that shape with the batch as a dim of its
 * own (the batch axis split where PyTorch's attention merges it with the heads). Each op maps its ONNX axes to those
 * dims and calls the engine's layers on tensors of any rank (fedhet/nn.h); an initializer read as an operand (a class
 * token, a position embedding, a layer scale) becomes a trainable parameter tensor, one per initializer.
 *
 * Recognised as one layer: LayerNormalization's opset-13 decomposition (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
 * Div, then Mul and Add of its affine part), GELU (Div by sqrt 2, Erf, Add 1, Mul, Mul by 0.5; and its tanh form),
 * and stochastic depth as docs/onnx.md has it exported (ConstantOfShape N x 1 x ..., RandomUniformLike, Less, Cast,
 * Mul, Div). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import_internal.h"

/* ============================== shapes ============================== */

/* the engine dims of the batch axis's split: values before the batch (bouter) and after it */
static int64_t after_batch(const Od *od) { return od->d[od->bax] / od->bouter; }

NnDims imp_od_dims(const Od *od)
{
    NnDims d;
    memset(&d, 0, sizeof d);
    d.batch = -1;
    for (int k = 0; k < od->rank && d.ndim < NN_MAX_DIMS; k++) {
        if (k != od->bax) {
            d.d[d.ndim++] = (int)od->d[k];
            continue;
        }
        if (od->bouter > 1) d.d[d.ndim++] = (int)od->bouter;
        if (d.ndim == NN_MAX_DIMS) break;
        d.batch = d.ndim;
        d.d[d.ndim++] = 1;
        if (after_batch(od) > 1 && d.ndim < NN_MAX_DIMS) d.d[d.ndim++] = (int)after_batch(od);
    }
    if (d.ndim == 0) d.d[d.ndim++] = 1; /* a scalar */
    return d;
}

/* the first engine dim of ONNX axis k, and how many it spans */
static int od_first(const Od *od, int k, int *count)
{
    const int extra = od->bax >= 0 ? (od->bouter > 1) + (after_batch(od) > 1) : 0;
    if (count) *count = k == od->bax ? 1 + extra : 1;
    return k + (od->bax >= 0 && k > od->bax ? extra : 0);
}

static int od_fits(Bld *b, const Od *od)
{
    if (od->rank > 8 || imp_od_dims(od).ndim > NN_MAX_DIMS || (od->rank > 6 && od->bax >= 0))
        NODE_FAIL(b, FH_ERR_USAGE, "a tensor of rank %d is more than the engine's %d dims", od->rank, NN_MAX_DIMS);
    for (int k = 0; k < od->rank; k++)
        if (od->d[k] < 1 || od->d[k] > (1LL << 30)) NODE_FAIL(b, FH_ERR_USAGE, "a dimension of %lld is not supported",
                                                              (long long)od->d[k]);
    return FH_OK;
}

static int dims_equal(const NnDims *a, const NnDims *c)
{
    if (a->ndim != c->ndim || a->batch != c->batch) return 0;
    for (int k = 0; k < a->ndim; k++)
        if (a->d[k] != c->d[k]) return 0;
    return 1;
}

/* a view of tensor t with dims d (nothing when it has them) */
static int view_as(Bld *b, int t, const NnDims *d, int *out)
{
    if (dims_equal(&b->m->tensors[t].dims, d)) {
        *out = t;
        return FH_OK;
    }
    *out = nn_reshape(b->m, t, d);
    return *out < 0 ? b->m->status : FH_OK;
}

int imp_as_engine(Bld *b, Val *x)
{
    FH_CHECK(od_fits(b, &x->od));
    const NnDims want = imp_od_dims(&x->od);
    int t;
    FH_CHECK(view_as(b, x->t, &want, &t));
    if (t != x->t) {
        x->t = t;
        x->layer = -1;
    }
    return FH_OK;
}

/* "[65, 4N, 48]" for messages: the batch's axis as its multiple of N */
static const char *od_text(const Od *od, char *buf, size_t size)
{
    size_t o = (size_t)snprintf(buf, size, "[");
    for (int k = 0; k < od->rank && o < size; k++) {
        const char *sep = k ? ", " : "";
        if (k != od->bax) o += (size_t)snprintf(buf + o, size - o, "%s%lld", sep, (long long)od->d[k]);
        else if (od->d[k] == 1) o += (size_t)snprintf(buf + o, size - o, "%sN", sep);
        else o += (size_t)snprintf(buf + o, size - o, "%s%lldN", sep, (long long)od->d[k]);
    }
    if (o < size) snprintf(buf + o, size - o, "]");
    return buf;
}

static Val *new_val(Bld *b) { return imp_alloc(b, sizeof(Val)); }

/* ============================== operands ============================== */

/* a float constant as a tensor: an initializer is a trainable parameter (one per initializer, however many nodes read
 * it), anything else a constant */
static int const_tensor(Bld *b, const Const *c, Val **out)
{
    if (c->is_int) NODE_FAIL(b, FH_ERR_USAGE, "an integer tensor is read as data, which is not supported");
    Val *v = new_val(b);
    NEED_MEM(v);
    v->kind = V_TENSOR;
    v->name = "";
    v->layer = -1;
    v->od.rank = c->ndim;
    v->od.bax = -1;
    v->od.bouter = 1;
    for (int k = 0; k < c->ndim; k++) v->od.d[k] = c->dims[k];
    FH_CHECK(od_fits(b, &v->od));
    const NnDims d = imp_od_dims(&v->od);
    if (c->init >= 0) {
        InitUse *u = &b->init_used[c->init];
        if (u->layer >= 0)
            NODE_FAIL(b, FH_ERR_USAGE, "initializer '%s' is the weights of layer %s and is read as a tensor here: one "
                      "initializer in both uses is not supported", b->g->initializer[c->init]->name,
                      b->m->layers[u->layer].name);
        if (u->tensor < 0) {
            const int t = nn_param(b->m, &d);
            if (t < 0) return b->m->status;
            FH_CHECK(imp_record_weight(b, b->m->n_layers - 1, ONNX_W, c, 0, 1.0f));
            u->layer = -1; /* a tensor, not a layer's weight */
            u->tensor = t;
        }
        FH_CHECK(view_as(b, u->tensor, &d, &v->t));
    } else {
        v->t = nn_constant(b->m, &d, c->f);
        if (v->t < 0) return b->m->status;
    }
    *out = v;
    return FH_OK;
}

int imp_in_operand(Bld *b, int k, Val **v)
{
    Val *x = imp_in_val(b, k);
    if (x && x->kind == V_CONST) return const_tensor(b, &x->c, v);
    FH_CHECK(imp_in_tensor(b, k, v));
    return imp_as_engine(b, *v);
}

/* ============================== broadcasting ============================== */

/* numpy's broadcast of the shapes of n operands, the batch's axis kept (one place, one multiple) */
static int bcast_od(Bld *b, Val *const *ops, int n, Od *out)
{
    char s1[96], s2[96];
    memset(out, 0, sizeof *out);
    out->bax = -1;
    out->bouter = 1;
    for (int k = 0; k < n; k++)
        if (ops[k]->od.rank > out->rank) out->rank = ops[k]->od.rank;
    for (int d = 0; d < out->rank; d++) out->d[d] = 1;
    for (int k = 0; k < n; k++) {
        const Od *o = &ops[k]->od;
        const int shift = out->rank - o->rank;
        for (int d = 0; d < o->rank; d++) {
            const int at = d + shift, is_batch = d == o->bax;
            if (is_batch) {
                if (out->bax >= 0 && (out->bax != at || out->d[at] != o->d[d] || out->bouter != o->bouter))
                    NODE_FAIL(b, FH_ERR_USAGE, "%s and %s hold the batch differently, which is not supported",
                              od_text(&ops[0]->od, s1, sizeof s1), od_text(o, s2, sizeof s2));
                if (out->bax < 0 && out->d[at] != 1)
                    NODE_FAIL(b, FH_ERR_USAGE, "%s against the batch axis %d: a constant of fixed size along the batch "
                              "is not supported (the batch is symbolic)", od_text(o, s2, sizeof s2), at);
                out->bax = at;
                out->bouter = o->bouter;
                out->d[at] = o->d[d];
            } else if (o->d[d] != 1) {
                if (at == out->bax || (out->d[at] != 1 && out->d[at] != o->d[d]))
                    NODE_FAIL(b, FH_ERR_USAGE, "shapes %s and %s do not broadcast%s", od_text(&ops[0]->od, s1, sizeof s1),
                              od_text(o, s2, sizeof s2), at == out->bax ? ": a constant of fixed size along the batch is "
                                                                            "not supported (the batch is symbolic)" : "");
                out->d[at] = o->d[d];
            }
        }
    }
    return od_fits(b, out);
}

/* x's tensor viewed with the engine dims of `target` (x broadcasts to it: right-aligned, its dims equal or 1): the
 * same rank, a dim of 1 wherever x is broadcast, the batch where target's is */
static int align_to(Bld *b, const Val *x, const Od *target, int *t)
{
    const NnDims td = imp_od_dims(target);
    NnDims d;
    memset(&d, 0, sizeof d);
    d.ndim = td.ndim;
    d.batch = x->od.bax >= 0 ? td.batch : -1;
    for (int k = 0; k < d.ndim; k++) d.d[k] = 1;
    const int shift = target->rank - x->od.rank;
    for (int k = 0; k < x->od.rank; k++) {
        int count;
        const int at = od_first(target, k + shift, &count);
        if (k == x->od.bax) {
            if (target->bouter > 1) d.d[at] = (int)target->bouter;
            if (after_batch(target) > 1) d.d[at + count - 1] = (int)after_batch(target);
        } else {
            d.d[at + count - 1] = (int)x->od.d[k];
        }
    }
    if (td.ndim == 1 && d.ndim == 1 && x->od.rank == 0) d.d[0] = 1;
    return view_as(b, x->t, &d, t);
}

/* ============================== patterns ============================== */

static int is_scalar(const Val *v, double want, double tol)
{
    return v && v->kind == V_CONST && !v->c.is_int && v->c.n == 1 && fabs(imp_cval(&v->c, 0) - want) <= tol;
}

/* the node reading `name` as its input `slot` (-1: any) and nothing else reads it: its index, -1 */
static int sole(const Bld *b, const char *name, const char *op)
{
    return imp_sole_reader(b, name, op);
}

/* the other input of a two-input node than `name` */
static const char *other_input(const Onnx__NodeProto *n, const char *name)
{
    return n->n_input == 2 ? (!strcmp(n->input[0], name) ? n->input[1] : n->input[0]) : "";
}

/* GELU as PyTorch exports it: Div(x, sqrt 2) or Mul(x, 1 / sqrt 2), Erf, Add 1, Mul by x, Mul by 0.5. Returns the
 * last node, -1 when the current node does not start it. */
static int match_gelu(Bld *b, const char **x_name)
{
    const Onnx__NodeProto *n = imp_cur(b);
    if (n->n_input != 2) return -1;
    Val *c = imp_in_val(b, 1);
    const int div = !strcmp(n->op_type, "Div");
    if (!(div ? is_scalar(c, 1.4142135, 1e-6) : is_scalar(c, 0.70710678, 1e-7))) return -1;
    const char *x = n->input[0];
    int e = sole(b, n->output[0], "Erf");
    if (e < 0) return -1;
    int a = sole(b, b->g->node[e]->output[0], "Add");
    if (a < 0 || !is_scalar(imp_find(b, other_input(b->g->node[a], b->g->node[e]->output[0])), 1.0, 0)) return -1;
    int m = sole(b, b->g->node[a]->output[0], "Mul");
    if (m < 0 || strcmp(other_input(b->g->node[m], b->g->node[a]->output[0]), x)) return -1;
    int h = sole(b, b->g->node[m]->output[0], "Mul");
    if (h < 0 || !is_scalar(imp_find(b, other_input(b->g->node[h], b->g->node[m]->output[0])), 0.5, 0)) return -1;
    b->absorbed[e] = b->absorbed[a] = b->absorbed[m] = b->absorbed[h] = 1;
    *x_name = x;
    return h;
}

/* GELU's tanh form as PyTorch exports it: Pow(x, 3) ... Tanh ... : matched from its Mul by 0.5 (x * 0.5 first) is
 * not attempted; PyTorch 1.13 writes x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) as
 * Mul(x, 0.5), Pow(x, 3), Mul(., 0.044715), Add(x, .), Mul(., sqrt(2 / pi)), Tanh, Add(., 1), Mul */
static int match_gelu_tanh(Bld *b)
{
    const Onnx__NodeProto *n = imp_cur(b);
    if (strcmp(n->op_type, "Mul") || n->n_input != 2) return -1;
    Val *c = imp_in_val(b, 1);
    if (!is_scalar(c, 0.5, 0)) return -1;
    const char *x = n->input[0];
    /* the cube's branch: the node after this one that takes Pow(x, 3) */
    int pw = -1;
    for (size_t k = (size_t)b->node + 1; k < b->g->n_node && pw < 0; k++) {
        const Onnx__NodeProto *q = b->g->node[k];
        if (!strcmp(q->op_type, "Pow") && q->n_input == 2 && !strcmp(q->input[0], x) &&
            is_scalar(imp_find(b, q->input[1]), 3.0, 0))
            pw = (int)k;
    }
    if (pw < 0) return -1;
    int m1 = sole(b, b->g->node[pw]->output[0], "Mul");
    if (m1 < 0 || !is_scalar(imp_find(b, other_input(b->g->node[m1], b->g->node[pw]->output[0])), 0.044715, 1e-7))
        return -1;
    int ad = sole(b, b->g->node[m1]->output[0], "Add");
    if (ad < 0 || strcmp(other_input(b->g->node[ad], b->g->node[m1]->output[0]), x)) return -1;
    int m2 = sole(b, b->g->node[ad]->output[0], "Mul");
    if (m2 < 0 || !is_scalar(imp_find(b, other_input(b->g->node[m2], b->g->node[ad]->output[0])), 0.7978845608, 1e-6))
        return -1;
    int th = sole(b, b->g->node[m2]->output[0], "Tanh");
    if (th < 0) return -1;
    int a1 = sole(b, b->g->node[th]->output[0], "Add");
    if (a1 < 0 || !is_scalar(imp_find(b, other_input(b->g->node[a1], b->g->node[th]->output[0])), 1.0, 0)) return -1;
    int mo = sole(b, b->g->node[a1]->output[0], "Mul");
    if (mo < 0 || strcmp(other_input(b->g->node[mo], b->g->node[a1]->output[0]), n->output[0]) ||
        imp_consumers(b, n->output[0], b->node) != 1)
        return -1;
    b->absorbed[pw] = b->absorbed[m1] = b->absorbed[ad] = b->absorbed[m2] = b->absorbed[th] = b->absorbed[a1] =
        b->absorbed[mo] = 1;
    return mo;
}

/* a constant of `size` values over the last axis (an affine part's weight or bias) */
static int per_feature(const Val *v, int64_t size)
{
    if (!v || v->kind != V_CONST || v->c.is_int || v->c.n != size) return 0;
    return v->c.ndim >= 1 && v->c.dims[v->c.ndim - 1] == size;
}

/* LayerNormalization's opset-13 decomposition, from its first ReduceMean over the last axes: the layer, and the
 * nodes it takes marked absorbed. 0 in *done when the nodes are something else. */
static int match_layernorm(Bld *b, int *done)
{
    const Onnx__NodeProto *n = imp_cur(b);
    Val *x = imp_in_val(b, 0);
    const int64_t *axes;
    const int n_axes = imp_attr_ints(n, "axes", &axes);
    *done = 0;
    if (!x || x->kind != V_TENSOR || !n_axes || !imp_attr_i(n, "keepdims", 1)) return FH_OK;
    const int rank = x->od.rank;
    int first = rank;
    for (int k = 0; k < n_axes; k++) {
        const int64_t a = imp_norm_axis(axes[k], rank);
        if (a < 0 || a >= rank) return FH_OK;
        if (a < first) first = (int)a;
    }
    if (rank - first != n_axes || (x->od.bax >= first)) return FH_OK; /* the trailing axes, no batch among them */
    int64_t size = 1;
    for (int k = first; k < rank; k++) size *= x->od.d[k];
    const Onnx__GraphProto *g = b->g;
    const char *xn = n->input[0], *mean = n->output[0];
    int sub = sole(b, mean, "Sub");
    if (sub < 0 || strcmp(g->node[sub]->input[0], xn) || strcmp(g->node[sub]->input[1], mean)) return FH_OK;
    const char *d = g->node[sub]->output[0];
    int pw = -1, dv = -1;
    for (size_t k = (size_t)sub + 1; k < g->n_node; k++)
        for (size_t j = 0; j < g->node[k]->n_input; j++)
            if (!strcmp(g->node[k]->input[j], d)) {
                if (!strcmp(g->node[k]->op_type, "Pow") && j == 0 && pw < 0) pw = (int)k;
                else if (!strcmp(g->node[k]->op_type, "Div") && j == 0 && dv < 0) dv = (int)k;
                else return FH_OK;
            }
    if (pw < 0 || dv < 0 || !is_scalar(imp_find(b, g->node[pw]->input[1]), 2.0, 0)) return FH_OK;
    int rm = sole(b, g->node[pw]->output[0], "ReduceMean");
    if (rm < 0) return FH_OK;
    const int64_t *axes2;
    if (imp_attr_ints(g->node[rm], "axes", &axes2) != n_axes || !imp_attr_i(g->node[rm], "keepdims", 1)) return FH_OK;
    for (int k = 0; k < n_axes; k++)
        if (imp_norm_axis(axes2[k], rank) != imp_norm_axis(axes[k], rank)) return FH_OK;
    int ad = sole(b, g->node[rm]->output[0], "Add");
    if (ad < 0) return FH_OK;
    Val *eps = imp_find(b, other_input(g->node[ad], g->node[rm]->output[0]));
    if (!eps || eps->kind != V_CONST || eps->c.is_int || eps->c.n != 1 || !(imp_cval(&eps->c, 0) > 0)) return FH_OK;
    int sq = sole(b, g->node[ad]->output[0], "Sqrt");
    if (sq < 0 || sole(b, g->node[sq]->output[0], "Div") != dv || strcmp(g->node[dv]->input[1], g->node[sq]->output[0]))
        return FH_OK;
    /* the affine part: Mul by a weight, Add of a bias, either may be missing */
    const char *out = g->node[dv]->output[0];
    const Const *w = NULL, *bias = NULL;
    int mu = sole(b, out, "Mul");
    if (mu >= 0 && per_feature(imp_find(b, other_input(g->node[mu], out)), size)) {
        w = &imp_find(b, other_input(g->node[mu], out))->c;
        b->absorbed[mu] = 1;
        out = g->node[mu]->output[0];
    }
    int bi = sole(b, out, "Add");
    if (bi >= 0 && per_feature(imp_find(b, other_input(g->node[bi], out)), size)) {
        bias = &imp_find(b, other_input(g->node[bi], out))->c;
        b->absorbed[bi] = 1;
        out = g->node[bi]->output[0];
    }
    b->absorbed[sub] = b->absorbed[pw] = b->absorbed[rm] = b->absorbed[ad] = b->absorbed[sq] = b->absorbed[dv] = 1;
    *done = 1;
    FH_CHECK(imp_as_engine(b, x));
    int t = nn_layernorm(b->m, x->t, n_axes, (float)imp_cval(&eps->c, 0), 1);
    if (t < 0) return b->m->status;
    const int li = b->m->n_layers - 1;
    Const one, zero;
    if (!w) {
        FH_CHECK(imp_const_new(b, &one, 1, &size, 0));
        for (int64_t k = 0; k < size; k++) one.f[k] = 1.0f;
    }
    if (!bias) FH_CHECK(imp_const_new(b, &zero, 1, &size, 0));
    FH_CHECK(imp_record_weight(b, li, ONNX_W, w ? w : &one, 0, 1.0f));
    FH_CHECK(imp_record_weight(b, li, ONNX_B, bias ? bias : &zero, 0, 1.0f));
    NEED_MEM(imp_put_nd(b, out, t, &x->od));
    return FH_OK;
}

/* ============================== ops ============================== */

/* a view of x under ONNX shape od (the same values, the batch in place) */
static int reshape_to(Bld *b, Val *x, const Od *od, const char *name)
{
    FH_CHECK(imp_as_engine(b, x));
    FH_CHECK(od_fits(b, od));
    const NnDims d = imp_od_dims(od);
    int t;
    FH_CHECK(view_as(b, x->t, &d, &t));
    if (t == x->t) {
        Val y = *x;
        y.od = *od;
        return imp_put_alias(b, name, &y);
    }
    NEED_MEM(imp_put_nd(b, name, t, od));
    return FH_OK;
}

int imp_op_reshape(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "allowzero", NULL }));
    const Onnx__NodeProto *n = imp_cur(b);
    Val *x;
    const Const *s;
    char t1[96];
    FH_CHECK(imp_in_tensor(b, 0, &x));
    FH_CHECK(imp_need_const(b, 1, &s, "shape"));
    if (!s->is_int || s->ndim != 1 || s->n > 8) NODE_FAIL(b, FH_ERR_USAGE, "shape must be a 1-D int64 constant");
    const int allowzero = (int)imp_attr_i(n, "allowzero", 0);
    Od od = { (int)s->n, { 0 }, -1, 1 };
    int infer = -1;
    int64_t known = 1; /* the product of the fixed dims, the batch's multiple included */
    for (int k = 0; k < od.rank; k++) {
        int64_t v = s->i[k], mult = s->ib ? s->ib[k] : 0;
        if (v == 0 && !mult && !allowzero) { /* copy the input's dim */
            if (k >= x->od.rank) NODE_FAIL(b, FH_ERR_USAGE, "shape entry %d is 0 but the input has rank %d", k, x->od.rank);
            v = x->od.d[k];
            if (k == x->od.bax) mult = v, v = 0;
        }
        if (mult) {
            if (v || mult < 1 || od.bax >= 0)
                NODE_FAIL(b, FH_ERR_USAGE, "shape entry %d depends on the batch size in a way that is not supported (a "
                          "multiple of it is)", k);
            od.bax = k;
            od.d[k] = mult;
            known *= mult;
        } else if (v == -1) {
            if (infer >= 0) NODE_FAIL(b, FH_ERR_USAGE, "shape has two entries of -1");
            infer = k;
        } else if (v < 1) {
            NODE_FAIL(b, FH_ERR_USAGE, "shape entry %d is %lld", k, (long long)v);
        } else {
            od.d[k] = v;
            known *= v;
        }
    }
    int64_t per_sample = 1; /* the input's values per sample (all of them without a batch) */
    for (int k = 0; k < x->od.rank; k++) per_sample *= x->od.d[k];
    if (infer >= 0) {
        if (od.bax >= 0 || x->od.bax < 0) { /* a number */
            if (known < 1 || per_sample % known) NODE_FAIL(b, FH_ERR_USAGE, "-1 cannot complete this shape");
            od.d[infer] = per_sample / known;
            known *= od.d[infer];
        } else { /* the batch's axis: its multiple */
            if (per_sample % known)
                NODE_FAIL(b, FH_ERR_USAGE, "-1 would stand for a fraction of the batch, which is not supported");
            od.bax = infer;
            od.d[infer] = per_sample / known;
            known *= od.d[infer];
        }
    }
    if ((od.bax >= 0) != (x->od.bax >= 0))
        NODE_FAIL(b, FH_ERR_USAGE, "a reshape of %s to a shape that %s the batch size is not supported: export with a "
                  "dynamic batch (dynamic_axes={'input': {0: 'batch'}}) so that shapes follow it",
                  od_text(&x->od, t1, sizeof t1), od.bax >= 0 ? "depends on" : "fixes, instead of following,");
    if (known != per_sample)
        NODE_FAIL(b, FH_ERR_USAGE, "%s has %lld values per sample, the new shape %lld", od_text(&x->od, t1, sizeof t1),
                  (long long)per_sample, (long long)known);
    if (od.bax >= 0) { /* the values before the batch stay before it */
        int64_t before = x->od.bouter, before_new = 1;
        for (int k = 0; k < x->od.bax; k++) before *= x->od.d[k];
        for (int k = 0; k < od.bax; k++) before_new *= od.d[k];
        if (before % before_new || od.d[od.bax] % (before / before_new))
            NODE_FAIL(b, FH_ERR_USAGE, "a reshape of %s that moves the batch among the values of a sample is not "
                      "supported", od_text(&x->od, t1, sizeof t1));
        od.bouter = before / before_new;
    }
    return reshape_to(b, x, &od, n->output[0]);
}

int imp_op_flatten(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "axis", NULL }));
    Val *x;
    FH_CHECK(imp_in_tensor(b, 0, &x));
    const int64_t axis = imp_norm_axis(imp_attr_i(imp_cur(b), "axis", 1), x->od.rank);
    if (axis < 0 || axis > x->od.rank) NODE_FAIL(b, FH_ERR_USAGE, "axis %lld is out of range", (long long)axis);
    if (axis == 1 && x->od.bax == 0 && x->od.d[0] == 1 && x->od.bouter == 1) {
        FH_CHECK(imp_as_engine(b, x));
        return imp_flatten_to(b, x, imp_cur(b)->output[0]);
    }
    Od od = { 2, { 1, 1 }, -1, 1 };
    for (int k = 0; k < x->od.rank; k++) od.d[k >= axis] *= x->od.d[k];
    if (x->od.bax >= 0) {
        const int side = x->od.bax >= axis;
        od.bax = side;
        od.bouter = x->od.bouter;
        for (int k = side ? (int)axis : 0; k < x->od.bax; k++) od.bouter *= x->od.d[k];
    }
    return reshape_to(b, x, &od, imp_cur(b)->output[0]);
}

int imp_op_squeeze(Bld *b, int unsqueeze)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "axes", NULL }));
    Val *x;
    FH_CHECK(imp_in_tensor(b, 0, &x));
    const int64_t *axes = NULL;
    int n_axes = imp_attr_ints(imp_cur(b), "axes", &axes);
    const Const *ac = imp_in_const(b, 1);
    if (ac && ac->is_int) {
        axes = ac->i;
        n_axes = (int)ac->n;
    }
    Od od = x->od;
    const int rank = unsqueeze ? x->od.rank + n_axes : x->od.rank;
    if (rank > 8) NODE_FAIL(b, FH_ERR_USAGE, "too many dimensions");
    int mark[8] = { 0 };
    for (int k = 0; k < n_axes; k++) {
        const int64_t a = imp_norm_axis(axes[k], rank);
        if (a < 0 || a >= rank) NODE_FAIL(b, FH_ERR_USAGE, "axis %lld is out of range", (long long)axes[k]);
        mark[a] = 1;
    }
    od.rank = 0;
    od.bax = -1;
    for (int k = 0, s = 0; k < (unsqueeze ? rank : x->od.rank); k++) {
        if (unsqueeze && mark[k]) {
            od.d[od.rank++] = 1;
            continue;
        }
        const int src = unsqueeze ? s++ : k;
        const int drop = !unsqueeze && (n_axes ? mark[k] : x->od.d[k] == 1 && k != x->od.bax);
        if (drop && (src == x->od.bax || x->od.d[src] != 1))
            NODE_FAIL(b, FH_ERR_USAGE, "axis %d is not of size 1, or holds the batch, whose squeeze is not supported", k);
        if (drop) continue;
        if (src == x->od.bax) od.bax = od.rank;
        od.d[od.rank++] = x->od.d[src];
    }
    return reshape_to(b, x, &od, imp_cur(b)->output[0]);
}

int imp_op_transpose(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "perm", NULL }));
    Val *x;
    FH_CHECK(imp_in_tensor(b, 0, &x));
    FH_CHECK(imp_as_engine(b, x));
    const int64_t *p;
    int np = imp_attr_ints(imp_cur(b), "perm", &p);
    const int rank = x->od.rank;
    int64_t perm[8];
    if (np && np != rank) NODE_FAIL(b, FH_ERR_USAGE, "perm has %d entries for an input of rank %d", np, rank);
    unsigned seen = 0;
    for (int k = 0; k < rank; k++) {
        perm[k] = np ? p[k] : rank - 1 - k;
        if (perm[k] < 0 || perm[k] >= rank || (seen >> perm[k]) & 1u)
            NODE_FAIL(b, FH_ERR_USAGE, "perm is not a permutation of %d axes", rank);
        seen |= 1u << perm[k];
    }
    Od od = x->od;
    int lperm[NN_MAX_DIMS], nl = 0, identity = 1;
    for (int k = 0; k < rank; k++) {
        od.d[k] = x->od.d[perm[k]];
        if (perm[k] == x->od.bax) od.bax = k;
        int count;
        const int first = od_first(&x->od, (int)perm[k], &count);
        for (int j = 0; j < count; j++, nl++) {
            lperm[nl] = first + j;
            identity &= lperm[nl] == nl;
        }
    }
    if (identity) { /* the same order of values: a view */
        Val y = *x;
        y.od = od;
        return imp_put_alias(b, imp_cur(b)->output[0], &y);
    }
    int t = nn_transpose(b->m, x->t, lperm);
    if (t < 0) return b->m->status;
    NEED_MEM(imp_put_nd(b, imp_cur(b)->output[0], t, &od));
    return FH_OK;
}

int imp_op_matmul(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ NULL }));
    Val *a, *c;
    FH_CHECK(imp_in_operand(b, 0, &a));
    FH_CHECK(imp_in_operand(b, 1, &c));
    const int ra = a->od.rank, rc = c->od.rank;
    if (ra < 2 || rc < 2) NODE_FAIL(b, FH_ERR_USAGE, "a MatMul of a 1-D operand is not supported (Unsqueeze it first)");
    if (a->od.bax >= ra - 2 || c->od.bax >= rc - 2)
        NODE_FAIL(b, FH_ERR_USAGE, "the batch is in the rows or columns of a product of two activations, which is not "
                  "supported");
    if (a->od.d[ra - 1] != c->od.d[rc - 2])
        NODE_FAIL(b, FH_ERR_USAGE, "inner sizes %lld and %lld differ", (long long)a->od.d[ra - 1],
                  (long long)c->od.d[rc - 2]);
    /* the leading axes broadcast; each operand viewed with them, its own last two after */
    Val la = *a, lc = *c;
    la.od.rank -= 2;
    lc.od.rank -= 2;
    if (la.od.bax >= la.od.rank) la.od.bax = -1;
    if (lc.od.bax >= lc.od.rank) lc.od.bax = -1;
    Od lead;
    FH_CHECK(bcast_od(b, (Val *[]){ &la, &lc }, 2, &lead));
    Od ta = lead, tc = lead, out = lead;
    ta.rank = tc.rank = out.rank = lead.rank + 2;
    ta.d[lead.rank] = a->od.d[ra - 2], ta.d[lead.rank + 1] = a->od.d[ra - 1];
    tc.d[lead.rank] = c->od.d[rc - 2], tc.d[lead.rank + 1] = c->od.d[rc - 1];
    out.d[lead.rank] = a->od.d[ra - 2], out.d[lead.rank + 1] = c->od.d[rc - 1];
    FH_CHECK(od_fits(b, &out));
    int xa, xc;
    FH_CHECK(align_to(b, a, &ta, &xa));
    FH_CHECK(align_to(b, c, &tc, &xc));
    int t = nn_matmul(b->m, xa, xc, 0, 1.0f);
    if (t < 0) return b->m->status;
    NEED_MEM(imp_put_nd(b, imp_cur(b)->output[0], t, &out));
    return FH_OK;
}

/* x op scalar (either side) as the affine map a x + b: 0 in *done when it is not that */
static int scalar_affine(Bld *b, NnBinOp op, int *done)
{
    Val *x = imp_in_val(b, 0), *y = imp_in_val(b, 1);
    *done = 0;
    if (!x || !y) return FH_OK;
    const int left = x->kind == V_CONST; /* the scalar is the first operand */
    Val *c = left ? x : y, *v = left ? y : x;
    /* an initializer is a weight, trained: the general path makes it a parameter */
    if (c->kind != V_CONST || c->c.is_int || c->c.n != 1 || c->c.init >= 0 || v->kind != V_TENSOR ||
        c->c.ndim > v->od.rank)
        return FH_OK;
    const float k = (float)imp_cval(&c->c, 0);
    NnActSpec spec = { NN_ACT_AFFINE, 1.0f, 0.0f };
    switch (op) {
    case NN_BIN_ADD: spec.b = k; break;
    case NN_BIN_SUB: spec = left ? (NnActSpec){ NN_ACT_AFFINE, -1.0f, k } : (NnActSpec){ NN_ACT_AFFINE, 1.0f, -k }; break;
    case NN_BIN_MUL: spec.a = k; break;
    default:
        if (left) return FH_OK; /* k / x */
        spec.a = 1.0f / k;
        break;
    }
    *done = 1;
    Val *in;
    FH_CHECK(imp_in_tensor(b, left, &in));
    FH_CHECK(imp_as_engine(b, in));
    int t = nn_act_ex(b->m, in->t, spec);
    if (t < 0) return b->m->status;
    NEED_MEM(imp_put_nd(b, imp_cur(b)->output[0], t, &in->od));
    return FH_OK;
}

/* stochastic depth: Mul(x, mask) and a Div by the keep probability after it */
static int drop_path(Bld *b, int *done)
{
    Val *x = imp_in_val(b, 0), *k = imp_in_val(b, 1);
    *done = 0;
    if (x && x->kind == V_KEEP) {
        Val *s = x;
        x = k;
        k = s;
    }
    if (!x || !k || k->kind != V_KEEP || strcmp(imp_cur(b)->op_type, "Mul")) return FH_OK;
    *done = 1;
    if (x->kind != V_TENSOR || x->od.bax != 0 || x->od.d[0] != 1 || x->od.bouter != 1 || k->od.rank != x->od.rank)
        NODE_FAIL(b, FH_ERR_USAGE, "stochastic depth's mask must multiply a batch-first activation of its rank");
    const Onnx__NodeProto *n = imp_cur(b);
    const char *out = n->output[0];
    float scale = k->scale;
    const int dv = sole(b, out, "Div");
    if (dv >= 0 && !strcmp(b->g->node[dv]->input[0], out) &&
        is_scalar(imp_find(b, b->g->node[dv]->input[1]), 1.0 - k->p, 1e-6)) {
        scale /= (float)imp_cval(&imp_find(b, b->g->node[dv]->input[1])->c, 0);
        b->absorbed[dv] = 1;
        out = b->g->node[dv]->output[0];
    }
    FH_CHECK(imp_as_engine(b, x));
    int t = nn_drop_path(b->m, x->t, k->p, scale);
    if (t < 0) return b->m->status;
    NEED_MEM(imp_put_nd(b, out, t, &x->od));
    return FH_OK;
}

int imp_op_binary(Bld *b, NnBinOp op)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ NULL }));
    int done;
    if (op == NN_BIN_MUL) {
        FH_CHECK(drop_path(b, &done));
        if (done) return FH_OK;
    }
    if (op == NN_BIN_DIV || op == NN_BIN_MUL) {
        const char *x;
        const int last = match_gelu(b, &x);
        if (last >= 0) return imp_act_node_ex(b, (NnActSpec){ NN_ACT_GELU, 0, 0 }, b->g->node[last]->output[0]);
    }
    if (op == NN_BIN_MUL) {
        const int last = match_gelu_tanh(b);
        if (last >= 0) return imp_act_node_ex(b, (NnActSpec){ NN_ACT_GELU_TANH, 0, 0 }, b->g->node[last]->output[0]);
    }
    Val *k = imp_in_val(b, 1);
    if (op == NN_BIN_DIV && k && k->kind == V_KEEP) NODE_FAIL(b, FH_ERR_USAGE, "division by a random mask");
    FH_CHECK(scalar_affine(b, op, &done));
    if (done) return FH_OK;
    Val *x, *y;
    FH_CHECK(imp_in_operand(b, 0, &x));
    FH_CHECK(imp_in_operand(b, 1, &y));
    Od out;
    FH_CHECK(bcast_od(b, (Val *[]){ x, y }, 2, &out));
    int tx, ty;
    FH_CHECK(align_to(b, x, &out, &tx));
    FH_CHECK(align_to(b, y, &out, &ty));
    int t = nn_binary(b->m, op, tx, ty);
    if (t < 0) return b->m->status;
    NEED_MEM(imp_put_nd(b, imp_cur(b)->output[0], t, &out));
    return FH_OK;
}

/* the engine dim of ONNX axis `axis` of x, which must not hold the batch */
static int engine_axis(Bld *b, const Val *x, int64_t axis, int *out)
{
    if (axis < 0 || axis >= x->od.rank) NODE_FAIL(b, FH_ERR_USAGE, "axis %lld is out of range", (long long)axis);
    if (axis == x->od.bax) NODE_FAIL(b, FH_ERR_USAGE, "working along the batch axis %lld is not supported", (long long)axis);
    *out = od_first(&x->od, (int)axis, NULL);
    return FH_OK;
}

int imp_op_concat(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "axis", NULL }));
    const Onnx__NodeProto *n = imp_cur(b);
    Val **xs = imp_alloc(b, n->n_input * sizeof *xs);
    int *ins = imp_alloc(b, n->n_input * sizeof *ins);
    NEED_MEM(xs && ins);
    char t1[96], t2[96];
    for (size_t k = 0; k < n->n_input; k++) FH_CHECK(imp_in_operand(b, (int)k, &xs[k]));
    const Od *o0 = &xs[0]->od;
    const int64_t axis = imp_norm_axis(imp_attr_i(n, "axis", 0), o0->rank);
    int la;
    FH_CHECK(engine_axis(b, xs[0], axis, &la));
    Od od = *o0;
    od.d[axis] = 0;
    for (size_t k = 0; k < n->n_input; k++) {
        const Od *o = &xs[k]->od;
        int same = o->rank == o0->rank && o->bax == o0->bax && o->bouter == o0->bouter;
        for (int j = 0; j < o0->rank && same; j++) same = j == axis || o->d[j] == o0->d[j];
        if (!same)
            NODE_FAIL(b, FH_ERR_USAGE, "inputs %s and %s differ beyond axis %lld%s", od_text(o0, t1, sizeof t1),
                      od_text(o, t2, sizeof t2), (long long)axis,
                      o->bax != o0->bax ? ": a constant of fixed size along the batch is not supported (the batch is "
                                          "symbolic)" : "");
        od.d[axis] += o->d[axis];
        ins[k] = xs[k]->t;
    }
    if (n->n_input == 1) return imp_put_alias(b, n->output[0], xs[0]);
    int t = nn_concat_axis(b->m, ins, (int)n->n_input, la);
    if (t < 0) return b->m->status;
    NEED_MEM(imp_put_nd(b, n->output[0], t, &od));
    return FH_OK;
}

/* x along ONNX axis `axis` from start, `count` entries `step` apart: a slice (step 1) or a gather; *x updated */
static int take(Bld *b, Val *x, int64_t axis, int64_t start, int64_t count, int64_t step, Val *out)
{
    int la;
    FH_CHECK(engine_axis(b, x, axis, &la));
    int t;
    if (step == 1) {
        t = nn_slice_axis(b->m, x->t, la, (int)start, (int)(start + count));
    } else {
        int32_t *idx = imp_alloc(b, (size_t)count * sizeof *idx);
        NEED_MEM(idx);
        for (int64_t k = 0; k < count; k++) idx[k] = (int32_t)(start + k * step);
        t = nn_gather(b->m, x->t, la, idx, (int)count);
    }
    if (t < 0) return b->m->status;
    *out = *x;
    out->t = t;
    out->layer = -1;
    out->od.d[axis] = count;
    return FH_OK;
}

int imp_op_slice(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ NULL }));
    Val *x;
    FH_CHECK(imp_in_operand(b, 0, &x));
    const Const *st, *en, *ax = imp_in_const(b, 3), *sp = imp_in_const(b, 4);
    FH_CHECK(imp_need_const(b, 1, &st, "starts"));
    FH_CHECK(imp_need_const(b, 2, &en, "ends"));
    const Onnx__NodeProto *n = imp_cur(b);
    if ((n->n_input > 3 && *n->input[3] && !ax) || (n->n_input > 4 && *n->input[4] && !sp) || st->n != en->n ||
        (ax && ax->n != st->n) || (sp && sp->n != st->n))
        NODE_FAIL(b, FH_ERR_USAGE, "starts, ends, axes and steps must be constants of one length");
    Val cur = *x;
    for (int64_t k = 0; k < st->n; k++) {
        int64_t axis = ax ? imp_norm_axis(imp_cint(ax, k), x->od.rank) : k, s, e, step = 1;
        if (sp) FH_CHECK(imp_const_plain(b, sp, k, &step, "a slice's step"));
        if (axis < 0 || axis >= x->od.rank || step == 0) NODE_FAIL(b, FH_ERR_USAGE, "axis or step out of range");
        s = imp_cint(st, k);
        e = imp_cint(en, k); /* exact: PyTorch writes "to the end" as INT64_MAX */
        if (axis == x->od.bax) { /* only the whole batch */
            if (s == 0 && step == 1 && ((en->ib && en->ib[k] == x->od.d[axis] && e == 0) || e >= (1LL << 31)))
                continue;
            NODE_FAIL(b, FH_ERR_USAGE, "a slice of the batch axis is not supported");
        }
        if ((st->ib && st->ib[k]) || (en->ib && en->ib[k]))
            NODE_FAIL(b, FH_ERR_USAGE, "a slice bound depends on the batch size");
        const int64_t dim = cur.od.d[axis];
        int64_t count;
        imp_slice_range(dim, s, e, step, &s, &count);
        if (count <= 0) NODE_FAIL(b, FH_ERR_USAGE, "an empty slice (of axis %lld) is not supported", (long long)axis);
        if (count == dim && step == 1) continue;
        FH_CHECK(take(b, &cur, axis, s, count, step, &cur));
    }
    if (cur.t == x->t) return imp_put_alias(b, n->output[0], &cur);
    NEED_MEM(imp_put_nd(b, n->output[0], cur.t, &cur.od));
    return FH_OK;
}

int imp_op_split(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "axis", "split", NULL }));
    const Onnx__NodeProto *n = imp_cur(b);
    Val *x;
    FH_CHECK(imp_in_operand(b, 0, &x));
    const int64_t axis = imp_norm_axis(imp_attr_i(n, "axis", 0), x->od.rank);
    int la;
    FH_CHECK(engine_axis(b, x, axis, &la));
    const int64_t dim = x->od.d[axis];
    const int parts = (int)n->n_output;
    const int64_t *sizes = NULL;
    const int n_sizes = imp_attr_ints(n, "split", &sizes);
    const Const *sc = imp_in_const(b, 1);
    if ((sc && sc->n != parts) || (n_sizes && n_sizes != parts) || (!sc && !n_sizes && dim % parts))
        NODE_FAIL(b, FH_ERR_USAGE, "split sizes do not fit %lld entries in %d parts", (long long)dim, parts);
    int64_t start = 0;
    for (int k = 0; k < parts; k++) {
        const int64_t len = sc ? (int64_t)imp_cval(sc, k) : n_sizes ? sizes[k] : dim / parts;
        if (len < 1 || start + len > dim) NODE_FAIL(b, FH_ERR_USAGE, "split sizes exceed the axis's %lld", (long long)dim);
        Val part;
        FH_CHECK(take(b, x, axis, start, len, 1, &part));
        NEED_MEM(imp_put_nd(b, n->output[k], part.t, &part.od));
        start += len;
    }
    return FH_OK;
}

int imp_op_gather(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "axis", NULL }));
    const Onnx__NodeProto *n = imp_cur(b);
    Val *x;
    const Const *idx;
    FH_CHECK(imp_in_operand(b, 0, &x));
    FH_CHECK(imp_need_const(b, 1, &idx, "indices"));
    if (!idx->is_int) NODE_FAIL(b, FH_ERR_USAGE, "indices must be integers");
    const int64_t axis = imp_norm_axis(imp_attr_i(n, "axis", 0), x->od.rank);
    int la;
    FH_CHECK(engine_axis(b, x, axis, &la));
    const int64_t dim = x->od.d[axis];
    int32_t *list = imp_alloc(b, (size_t)(idx->n ? idx->n : 1) * sizeof *list);
    NEED_MEM(list);
    for (int64_t k = 0; k < idx->n; k++) {
        int64_t v;
        FH_CHECK(imp_const_plain(b, idx, k, &v, "an index"));
        if (v < 0) v += dim;
        if (v < 0 || v >= dim) NODE_FAIL(b, FH_ERR_USAGE, "index %lld is out of range", (long long)idx->i[k]);
        list[k] = (int32_t)v;
    }
    int t = nn_gather(b->m, x->t, la, list, (int)idx->n);
    if (t < 0) return b->m->status;
    Od mid = x->od, od;
    mid.d[axis] = idx->n;
    Val g = *x;
    g.t = t;
    g.layer = -1;
    g.od = mid;
    /* the indices' shape replaces the axis */
    od = x->od;
    od.rank = x->od.rank - 1 + idx->ndim;
    if (od.rank > 8) NODE_FAIL(b, FH_ERR_USAGE, "too many dimensions");
    for (int k = 0, o = 0; k < x->od.rank; k++) {
        if (k == axis) {
            for (int j = 0; j < idx->ndim; j++) od.d[o++] = idx->dims[j];
            continue;
        }
        if (k == x->od.bax) od.bax = o;
        od.d[o++] = x->od.d[k];
    }
    return reshape_to(b, &g, &od, n->output[0]);
}

int imp_pad_nd(Bld *b, Val *x, const int64_t *pads)
{
    Val cur = *x;
    for (int axis = 0; axis < x->od.rank; axis++) {
        const int64_t before = pads[axis], after = pads[x->od.rank + axis], dim = cur.od.d[axis];
        if (!before && !after) continue;
        if (axis == x->od.bax) NODE_FAIL(b, FH_ERR_USAGE, "a pad of the batch axis is not supported");
        int la;
        FH_CHECK(engine_axis(b, &cur, axis, &la));
        const int64_t count = before + dim + after;
        int32_t *idx = imp_alloc(b, (size_t)count * sizeof *idx);
        NEED_MEM(idx);
        for (int64_t k = 0; k < count; k++) idx[k] = k < before || k >= before + dim ? -1 : (int32_t)(k - before);
        const int t = nn_gather(b->m, cur.t, la, idx, (int)count);
        if (t < 0) return b->m->status;
        cur.t = t;
        cur.layer = -1;
        cur.od.d[axis] = count;
    }
    NEED_MEM(imp_put_nd(b, imp_cur(b)->output[0], cur.t, &cur.od));
    return FH_OK;
}

int imp_op_expand(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ NULL }));
    Val *x;
    const Const *s;
    FH_CHECK(imp_in_operand(b, 0, &x));
    FH_CHECK(imp_need_const(b, 1, &s, "shape"));
    if (!s->is_int || s->ndim != 1 || s->n > 8) NODE_FAIL(b, FH_ERR_USAGE, "shape must be a 1-D int64 constant");
    Val target;
    memset(&target, 0, sizeof target);
    target.od.rank = (int)s->n;
    target.od.bax = -1;
    target.od.bouter = 1;
    for (int k = 0; k < target.od.rank; k++) {
        const int64_t mult = s->ib ? s->ib[k] : 0;
        if (mult) {
            if (s->i[k] || target.od.bax >= 0) NODE_FAIL(b, FH_ERR_USAGE, "shape entry %d depends on the batch size in "
                                                        "a way that is not supported", k);
            target.od.bax = k;
            target.od.d[k] = mult;
            target.od.bouter = 1;
        } else {
            if (s->i[k] < 1) NODE_FAIL(b, FH_ERR_USAGE, "shape entry %d is %lld", k, (long long)s->i[k]);
            target.od.d[k] = s->i[k];
        }
    }
    if (target.od.bax >= 0 && x->od.bax >= 0) target.od.bouter = x->od.bouter;
    Od out;
    FH_CHECK(bcast_od(b, (Val *[]){ x, &target }, 2, &out));
    int tx;
    FH_CHECK(align_to(b, x, &out, &tx));
    const NnDims d = imp_od_dims(&out);
    int t;
    if (dims_equal(&b->m->tensors[tx].dims, &d)) t = tx;
    else if ((t = nn_expand(b->m, tx, &d)) < 0) return b->m->status;
    NEED_MEM(imp_put_nd(b, imp_cur(b)->output[0], t, &out));
    return FH_OK;
}

int imp_op_reduce_mean(Bld *b)
{
    int done;
    FH_CHECK(match_layernorm(b, &done));
    if (done) return FH_OK;
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "axes", "keepdims", NULL }));
    const Onnx__NodeProto *n = imp_cur(b);
    Val *x;
    FH_CHECK(imp_in_tensor(b, 0, &x));
    FH_CHECK(imp_as_engine(b, x));
    const int64_t *axes;
    int n_axes = imp_attr_ints(n, "axes", &axes);
    const Const *ac = imp_in_const(b, 1);
    if (ac && ac->is_int) {
        axes = ac->i;
        n_axes = (int)ac->n;
    }
    if (!n_axes) NODE_FAIL(b, FH_ERR_USAGE, "a mean over every axis (the batch's too) is not supported");
    unsigned mask = 0;
    Od od = x->od;
    int drop[8] = { 0 };
    for (int k = 0; k < n_axes; k++) {
        int la;
        const int64_t a = imp_norm_axis(axes[k], x->od.rank);
        FH_CHECK(engine_axis(b, x, a, &la));
        mask |= 1u << la;
        od.d[a] = 1;
        drop[a] = 1;
    }
    int t = nn_reduce_mean(b->m, x->t, mask);
    if (t < 0) return b->m->status;
    if (imp_attr_i(n, "keepdims", 1)) {
        NEED_MEM(imp_put_nd(b, n->output[0], t, &od));
        return FH_OK;
    }
    Val kept = *x;
    kept.t = t;
    kept.layer = -1;
    kept.od = od;
    Od squeezed = od;
    squeezed.rank = 0;
    for (int k = 0; k < od.rank; k++) {
        if (drop[k]) continue;
        if (k == od.bax) squeezed.bax = squeezed.rank;
        squeezed.d[squeezed.rank++] = od.d[k];
    }
    return reshape_to(b, &kept, &squeezed, n->output[0]);
}

int imp_op_softmax(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "axis", NULL }));
    Val *x;
    FH_CHECK(imp_in_tensor(b, 0, &x));
    FH_CHECK(imp_as_engine(b, x));
    const int64_t axis = imp_norm_axis(imp_attr_i(imp_cur(b), "axis", b->net->opset >= 13 ? -1 : 1), x->od.rank);
    if (b->net->opset < 13 && axis != x->od.rank - 1)
        NODE_FAIL(b, FH_ERR_USAGE, "Softmax before opset 13 normalises over every axis from %lld on: only the last "
                  "axis is supported (export with opset 13 or later)", (long long)axis);
    int la;
    FH_CHECK(engine_axis(b, x, axis, &la));
    int t = nn_softmax(b->m, x->t, la);
    if (t < 0) return b->m->status;
    NEED_MEM(imp_put_nd(b, imp_cur(b)->output[0], t, &x->od));
    return FH_OK;
}

int imp_op_layernorm(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "axis", "epsilon", "stash_type", NULL }));
    const Onnx__NodeProto *n = imp_cur(b);
    for (size_t k = 1; k < n->n_output; k++)
        if (*n->output[k] && imp_consumers(b, n->output[k], b->node))
            NODE_FAIL(b, FH_ERR_USAGE, "output %zu (the statistics) is read by the graph, which is not supported", k);
    Val *x;
    const Const *w, *bias = NULL;
    FH_CHECK(imp_in_tensor(b, 0, &x));
    FH_CHECK(imp_as_engine(b, x));
    FH_CHECK(imp_need_const(b, 1, &w, "scale"));
    if (n->n_input > 2 && *n->input[2]) FH_CHECK(imp_need_const(b, 2, &bias, "bias"));
    const int64_t axis = imp_norm_axis(imp_attr_i(n, "axis", -1), x->od.rank);
    if (axis < 0 || axis >= x->od.rank || x->od.bax >= axis)
        NODE_FAIL(b, FH_ERR_USAGE, "a layer norm over axes %lld.. that hold the batch is not supported", (long long)axis);
    int64_t size = 1;
    for (int k = (int)axis; k < x->od.rank; k++) size *= x->od.d[k];
    if (w->n != size || (bias && bias->n != size) || w->is_int || (bias && bias->is_int))
        NODE_FAIL(b, FH_ERR_USAGE, "scale and bias must hold the %lld values normalised over", (long long)size);
    int t = nn_layernorm(b->m, x->t, x->od.rank - (int)axis, imp_attr_f(n, "epsilon", 1e-5f), 1);
    if (t < 0) return b->m->status;
    const int li = b->m->n_layers - 1;
    Const zero;
    if (!bias) FH_CHECK(imp_const_new(b, &zero, 1, &size, 0));
    FH_CHECK(imp_record_weight(b, li, ONNX_W, w, 0, 1.0f));
    FH_CHECK(imp_record_weight(b, li, ONNX_B, bias ? bias : &zero, 0, 1.0f));
    NEED_MEM(imp_put_nd(b, n->output[0], t, &x->od));
    return FH_OK;
}

int imp_op_unary(Bld *b, NnAct act)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ NULL }));
    return imp_act_node_ex(b, (NnActSpec){ act, 0, 0 }, imp_cur(b)->output[0]);
}

int imp_op_pow(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ NULL }));
    Val *e = imp_in_val(b, 1);
    if (!e || e->kind != V_CONST || e->c.n != 1)
        NODE_FAIL(b, FH_ERR_USAGE, "only a power by a constant scalar exponent is supported");
    return imp_act_node_ex(b, (NnActSpec){ NN_ACT_POW, (float)imp_cval(&e->c, 0), 0 }, imp_cur(b)->output[0]);
}

/* ConstantOfShape of a shape that holds the batch: the start of stochastic depth's draw */
int imp_op_constant_of_shape(Bld *b)
{
    const Const *s;
    FH_CHECK(imp_need_const(b, 0, &s, "shape"));
    Val *v = imp_put(b, imp_cur(b)->output[0], V_FILL);
    NEED_MEM(v);
    v->od.rank = (int)s->n;
    v->od.bax = -1;
    v->od.bouter = 1;
    for (int k = 0; k < v->od.rank && k < 8; k++) {
        v->od.d[k] = s->ib && s->ib[k] ? s->ib[k] : s->i[k];
        if (s->ib && s->ib[k]) {
            if (s->i[k] || v->od.bax >= 0) NODE_FAIL(b, FH_ERR_USAGE, "a shape that depends on the batch in an "
                                                     "unsupported way");
            v->od.bax = k;
        }
    }
    return FH_OK;
}

int imp_op_random_like(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "dtype", "high", "low", "seed", NULL }));
    Val *x = imp_in_val(b, 0);
    const float lo = imp_attr_f(imp_cur(b), "low", 0.0f), hi = imp_attr_f(imp_cur(b), "high", 1.0f);
    int per_sample = x && (x->kind == V_FILL || x->kind == V_TENSOR) && x->od.bax == 0 && x->od.d[0] == 1;
    for (int k = 1; per_sample && k < x->od.rank; k++) per_sample = x->od.d[k] == 1;
    if (!per_sample || lo != 0.0f || hi != 1.0f)
        NODE_FAIL(b, FH_ERR_USAGE, "random numbers in the graph are supported only as stochastic depth's draw (one "
                  "uniform [0, 1) value per sample, N x 1 x ...: docs/onnx.md shows the export)");
    Val *v = imp_put(b, imp_cur(b)->output[0], V_RAND);
    NEED_MEM(v);
    v->od = x->od;
    return FH_OK;
}

/* Less(draw, keep): stochastic depth's mask */
int imp_op_less(Bld *b)
{
    Val *r = imp_in_val(b, 0), *k = imp_in_val(b, 1);
    if (!r || r->kind != V_RAND || !k || k->kind != V_CONST || k->c.n != 1 || !(imp_cval(&k->c, 0) > 0.0) ||
        imp_cval(&k->c, 0) > 1.0)
        NODE_FAIL(b, FH_ERR_USAGE, "Less is supported on constants, and as stochastic depth's mask (a draw below the "
                  "keep probability)");
    Val *v = imp_put(b, imp_cur(b)->output[0], V_KEEP);
    NEED_MEM(v);
    v->od = r->od;
    v->p = 1.0f - (float)imp_cval(&k->c, 0);
    v->scale = 1.0f;
    return FH_OK;
}

/* Identity, and a Cast of an activation or a mask to float */
int imp_op_identity(Bld *b)
{
    const Onnx__NodeProto *n = imp_cur(b);
    Val *x = imp_in_val(b, 0);
    if (!strcmp(n->op_type, "Cast")) {
        const int64_t to = imp_attr_i(n, "to", 1);
        if (to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 || to == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16)
            NODE_FAIL(b, FH_ERR_USAGE, "float16 is not supported (export in float32)");
        if (to != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && !(x && x->kind == V_KEEP))
            NODE_FAIL(b, FH_ERR_USAGE, "a cast of an activation to type %lld is not supported", (long long)to);
    }
    if (x && x->kind == V_KEEP) {
        Val *v = imp_put(b, n->output[0], V_KEEP);
        NEED_MEM(v);
        const char *name = v->name;
        *v = *x;
        v->name = name;
        return FH_OK;
    }
    FH_CHECK(imp_in_tensor(b, 0, &x));
    return imp_put_alias(b, n->output[0], x);
}
