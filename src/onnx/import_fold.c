/* Constants at import: initializers, Constant nodes and everything computed from constants alone, folded here.
 * Shape arithmetic that reads the batch size (Shape of an activation) stays symbolic (Const.ib: an integer is
 * i + ib N), so that a graph exported with a dynamic batch imports once for every batch size; an expression the
 * batch size would decide (N * N, N compared with a number it could equal) is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import_internal.h"

int imp_const_new(Bld *b, Const *c, int ndim, const int64_t *dims, int is_int)
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
    if (is_int) c->i = imp_alloc(b, (size_t)c->n * sizeof *c->i);
    else c->f = imp_alloc(b, (size_t)c->n * sizeof *c->f);
    if (!(is_int ? (void *)c->i : (void *)c->f)) FH_FAIL(FH_ERR_MEMORY, "out of memory folding constants");
    return FH_OK;
}

/* the batch multiples of an integer constant, allocated (zeros) */
static int const_sym(Bld *b, Const *c)
{
    c->ib = imp_alloc(b, (size_t)(c->n ? c->n : 1) * sizeof *c->ib);
    if (!c->ib) FH_FAIL(FH_ERR_MEMORY, "out of memory folding constants");
    return FH_OK;
}

double imp_cval(const Const *c, int64_t k) { return c->is_int ? (double)c->i[k] : (double)c->f[k]; }
int64_t imp_cint(const Const *c, int64_t k) { return c->is_int ? c->i[k] : (int64_t)c->f[k]; }
static int64_t cb(const Const *c, int64_t k) { return c->ib ? c->ib[k] : 0; }

static int holds_batch(const Const *c)
{
    for (int64_t k = 0; c->ib && k < c->n; k++)
        if (c->ib[k]) return 1;
    return 0;
}

int imp_const_plain(Bld *b, const Const *c, int64_t k, int64_t *v, const char *what)
{
    if (cb(c, k)) NODE_FAIL(b, FH_ERR_USAGE, "%s depends on the batch size, which is not supported here", what);
    *v = c->is_int ? c->i[k] : (int64_t)c->f[k];
    return FH_OK;
}

int64_t imp_norm_axis(int64_t a, int ndim) { return a < 0 ? a + ndim : a; }

/* out's element k and the element of x it reads under numpy broadcasting */
static int64_t bcast_index(const Const *out, const Const *x, int64_t k)
{
    int64_t rem = k, ix = 0, sx = 1;
    for (int d = out->ndim - 1; d >= 0; d--) {
        const int64_t pos = rem % out->dims[d];
        rem /= out->dims[d];
        const int dx = d - (out->ndim - x->ndim);
        if (dx >= 0) {
            ix += (x->dims[dx] == 1 ? 0 : pos) * sx;
            sx *= x->dims[dx];
        }
    }
    return ix;
}

static int bcast_dims(Bld *b, const Const *const *in, int n_in, int *nd, int64_t *dims)
{
    *nd = 0;
    for (int k = 0; k < n_in; k++)
        if (in[k]->ndim > *nd) *nd = in[k]->ndim;
    for (int d = 0; d < *nd; d++) {
        dims[d] = 1;
        for (int k = 0; k < n_in; k++) {
            const int dk = d - (*nd - in[k]->ndim);
            const int64_t v = dk >= 0 ? in[k]->dims[dk] : 1;
            if (v != dims[d] && v != 1 && dims[d] != 1) NODE_FAIL(b, FH_ERR_USAGE, "constant shapes do not broadcast");
            if (v != 1) dims[d] = v;
        }
    }
    return FH_OK;
}

/* comparisons of x = xi + xb N and y = yi + yb N for every batch size N >= 1: 1 true, 0 false, -1 it depends */
static int sym_equal(int64_t xi, int64_t xb, int64_t yi, int64_t yb)
{
    if (xb == yb) return xi == yi;
    const int64_t num = yi - xi, den = xb - yb; /* equal exactly at N = num / den */
    return num % den == 0 && num / den >= 1 ? -1 : 0;
}

/* Element-wise arithmetic and comparisons on constants with numpy broadcasting */
static int fold_binary(Bld *b, const Const *x, const Const *y, const char *op, Const *out)
{
    int nd;
    int64_t dims[8];
    FH_CHECK(bcast_dims(b, (const Const *[]){ x, y }, 2, &nd, dims));
    const int cmp = !strcmp(op, "Equal") || !strcmp(op, "Less") || !strcmp(op, "Greater");
    const int is_int = cmp || (x->is_int && y->is_int);
    FH_CHECK(imp_const_new(b, out, nd, dims, is_int));
    if (x->ib || y->ib) FH_CHECK(const_sym(b, out));
    for (int64_t k = 0; k < out->n; k++) {
        const int64_t ix = bcast_index(out, x, k), iy = bcast_index(out, y, k);
        if (cmp) {
            const double p = imp_cval(x, ix), q = imp_cval(y, iy);
            int r;
            if (!strcmp(op, "Equal")) r = sym_equal((int64_t)p, cb(x, ix), (int64_t)q, cb(y, iy));
            else if (cb(x, ix) || cb(y, iy)) r = -1;
            else r = op[0] == 'L' ? p < q : p > q;
            if (r < 0) NODE_FAIL(b, FH_ERR_USAGE, "the graph's shape arithmetic compares the batch size with a number "
                                 "it could equal: the result would depend on the batch");
            out->i[k] = r;
            if (out->ib) out->ib[k] = 0;
        } else if (is_int) {
            const int64_t p = x->i[ix], q = y->i[iy], pb = cb(x, ix), qb = cb(y, iy);
            int64_t r, rb = 0;
            if (!strcmp(op, "Add")) r = p + q, rb = pb + qb;
            else if (!strcmp(op, "Sub")) r = p - q, rb = pb - qb;
            else if (!strcmp(op, "Mul")) {
                if (pb && qb) NODE_FAIL(b, FH_ERR_USAGE, "the graph's shape arithmetic multiplies the batch size by "
                                        "itself, which is not supported");
                r = p * q, rb = pb * q + qb * p;
            } else { /* Div, Mod: by a number */
                if (qb) NODE_FAIL(b, FH_ERR_USAGE, "the graph's shape arithmetic divides by the batch size, which is "
                                  "not supported");
                if (q == 0) NODE_FAIL(b, FH_ERR_USAGE, "integer division by zero in constants");
                if (op[0] == 'M') {
                    if (pb) NODE_FAIL(b, FH_ERR_USAGE, "the graph takes the batch size modulo a number");
                    r = ((p % q) + q) % q; /* ONNX Mod (fmod = 0): the divisor's sign */
                } else {
                    if (pb % q) NODE_FAIL(b, FH_ERR_USAGE, "the graph's shape arithmetic divides a multiple of the "
                                          "batch size unevenly");
                    r = p / q; /* ONNX integer Div truncates like C */
                    rb = pb / q;
                }
            }
            out->i[k] = r;
            if (out->ib) out->ib[k] = rb;
        } else {
            if (cb(x, ix) || cb(y, iy))
                NODE_FAIL(b, FH_ERR_USAGE, "the batch size is used as a float, which is not supported");
            const float p = (float)imp_cval(x, ix), q = (float)imp_cval(y, iy);
            out->f[k] = !strcmp(op, "Add")   ? p + q
                        : !strcmp(op, "Sub") ? p - q
                        : !strcmp(op, "Mul") ? p * q
                        : !strcmp(op, "Div") ? p / q
                        : !strcmp(op, "Pow") ? powf(p, q)
                                             : fmodf(p, q);
        }
    }
    return FH_OK;
}

static void copy_elem(Const *out, int64_t k, const Const *x, int64_t j)
{
    if (out->is_int) out->i[k] = x->is_int ? x->i[j] : (int64_t)x->f[j];
    else out->f[k] = (float)imp_cval(x, j);
    if (out->ib) out->ib[k] = cb(x, j);
}

/* a Constant node's value; its buffers become this build's */
static int fold_constant(Bld *b, const Onnx__NodeProto *n, Const *out)
{
    const Onnx__AttributeProto *a = n->n_attribute == 1 ? n->attribute[0] : NULL;
    if (!a) NODE_FAIL(b, FH_ERR_USAGE, "needs exactly one value attribute");
    if (!strcmp(a->name, "value") && a->t) {
        FH_CHECK(imp_decode_tensor(a->t, out, b->net->path, imp_node_name(b, n)));
        void *p = out->is_int ? (void *)out->i : (void *)out->f;
        void *q = imp_alloc(b, (size_t)(out->n ? out->n : 1) * (out->is_int ? 8 : 4));
        if (!q) {
            free(p);
            FH_FAIL(FH_ERR_MEMORY, "out of memory");
        }
        memcpy(q, p, (size_t)out->n * (out->is_int ? 8 : 4));
        free(p);
        if (out->is_int) out->i = q;
        else out->f = q;
    } else if (!strcmp(a->name, "value_float") || !strcmp(a->name, "value_int")) {
        FH_CHECK(imp_const_new(b, out, 0, NULL, a->name[6] == 'i'));
        if (out->is_int) out->i[0] = a->i;
        else out->f[0] = a->f;
    } else if (!strcmp(a->name, "value_ints") || !strcmp(a->name, "value_floats")) {
        int64_t len = a->name[6] == 'i' ? (int64_t)a->n_ints : (int64_t)a->n_floats;
        FH_CHECK(imp_const_new(b, out, 1, &len, a->name[6] == 'i'));
        for (int64_t k = 0; k < len; k++) {
            if (out->is_int) out->i[k] = a->ints[k];
            else out->f[k] = a->floats[k];
        }
    } else NODE_FAIL(b, FH_ERR_USAGE, "attribute %s is not supported", a->name);
    return FH_OK;
}

/* Shape: of an activation its ONNX shape, the batch's axis symbolic; start and end (opset 15) slice it */
static int fold_shape(Bld *b, const Onnx__NodeProto *n, const Val *x, Const *out)
{
    int64_t dims[8], mult[8];
    int rank;
    if (x->kind == V_CONST) {
        rank = x->c.ndim;
        for (int d = 0; d < rank; d++) dims[d] = x->c.dims[d], mult[d] = 0;
    } else {
        rank = x->od.rank;
        for (int d = 0; d < rank; d++) {
            dims[d] = d == x->od.bax ? 0 : x->od.d[d];
            mult[d] = d == x->od.bax ? x->od.d[d] : 0;
        }
    }
    int64_t start = imp_norm_axis(imp_attr_i(n, "start", 0), rank), end = imp_norm_axis(imp_attr_i(n, "end", rank), rank);
    start = start < 0 ? 0 : start > rank ? rank : start;
    end = end < start ? start : end > rank ? rank : end;
    int64_t len = end - start;
    FH_CHECK(imp_const_new(b, out, 1, &len, 1));
    FH_CHECK(const_sym(b, out));
    for (int64_t k = 0; k < len; k++) {
        out->i[k] = dims[start + k];
        out->ib[k] = mult[start + k];
    }
    return FH_OK;
}

/* the dims a constant shape names (plain numbers only) */
static int plain_shape(Bld *b, const Const *s, int64_t *dims, int *nd, const char *what)
{
    if (!s->is_int || s->ndim > 1 || s->n > 8) NODE_FAIL(b, FH_ERR_USAGE, "%s must be a 1-D int64 constant", what);
    *nd = (int)s->n;
    for (int k = 0; k < *nd; k++) FH_CHECK(imp_const_plain(b, s, k, &dims[k], what));
    return FH_OK;
}

static int fold_gather(Bld *b, const Onnx__NodeProto *n, const Const *x, const Const *idx, Const *out)
{
    const int64_t axis = imp_norm_axis(imp_attr_i(n, "axis", 0), x->ndim);
    if (axis < 0 || axis >= x->ndim) NODE_FAIL(b, FH_ERR_USAGE, "axis %lld is out of range", (long long)axis);
    int64_t dims[8];
    int nd = 0;
    for (int d = 0; d < axis; d++) dims[nd++] = x->dims[d];
    for (int d = 0; d < idx->ndim; d++) dims[nd++] = idx->dims[d];
    for (int d = (int)axis + 1; d < x->ndim; d++) dims[nd++] = x->dims[d];
    if (nd > 8) NODE_FAIL(b, FH_ERR_USAGE, "too many dimensions");
    FH_CHECK(imp_const_new(b, out, nd, dims, x->is_int));
    if (x->ib) FH_CHECK(const_sym(b, out));
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = (int)axis + 1; d < x->ndim; d++) inner *= x->dims[d];
    const int64_t len = x->dims[axis];
    for (int64_t o = 0, k = 0; o < outer; o++)
        for (int64_t j = 0; j < idx->n; j++) {
            int64_t at = 0;
            FH_CHECK(imp_const_plain(b, idx, j, &at, "an index"));
            if (at < 0) at += len;
            if (at < 0 || at >= len) NODE_FAIL(b, FH_ERR_USAGE, "index %lld is out of range", (long long)at);
            for (int64_t i = 0; i < inner; i++, k++) copy_elem(out, k, x, (o * len + at) * inner + i);
        }
    return FH_OK;
}

static int fold_transpose(Bld *b, const Onnx__NodeProto *n, const Const *x, Const *out)
{
    const int64_t *p;
    int np = imp_attr_ints(n, "perm", &p);
    int64_t perm[8], dims[8];
    for (int d = 0; d < x->ndim; d++) perm[d] = np ? p[d] : x->ndim - 1 - d;
    if (np && np != x->ndim) NODE_FAIL(b, FH_ERR_USAGE, "perm has %d entries for a rank-%d constant", np, x->ndim);
    for (int d = 0; d < x->ndim; d++) dims[d] = x->dims[perm[d]];
    FH_CHECK(imp_const_new(b, out, x->ndim, dims, x->is_int));
    if (x->ib) FH_CHECK(const_sym(b, out));
    int64_t xs[8], s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) xs[d] = s, s *= x->dims[d];
    for (int64_t k = 0; k < out->n; k++) {
        int64_t rem = k, j = 0;
        for (int d = x->ndim - 1; d >= 0; d--) {
            j += (rem % dims[d]) * xs[perm[d]];
            rem /= dims[d];
        }
        copy_elem(out, k, x, j);
    }
    return FH_OK;
}

/* Unsqueeze, Squeeze, Reshape, Flatten: the same values under other dims (an initializer's stay its: read as a
 * tensor, they are its trainable parameter) */
static int fold_dims(Bld *b, const Onnx__NodeProto *n, const char *op, const Const *x, Const *out)
{
    *out = *x;
    int64_t dims[8];
    int nd = 0;
    if (!strcmp(op, "Reshape")) {
        const Const *s = imp_in_const(b, 1);
        int64_t known = 1, free_axis = -1;
        if (!s->is_int || s->n > 8) NODE_FAIL(b, FH_ERR_USAGE, "shape must be a 1-D int64 constant of at most 8 values");
        nd = (int)s->n;
        for (int d = 0; d < nd; d++) {
            FH_CHECK(imp_const_plain(b, s, d, &dims[d], "the shape of a reshaped constant"));
            if (dims[d] == 0 && !imp_attr_i(n, "allowzero", 0)) dims[d] = x->dims[d];
            if (dims[d] == -1) free_axis = d;
            else known *= dims[d];
        }
        if (free_axis >= 0) dims[free_axis] = known ? x->n / known : 0;
    } else if (!strcmp(op, "Flatten")) {
        const int64_t axis = imp_norm_axis(imp_attr_i(n, "axis", 1), x->ndim);
        dims[0] = dims[1] = 1;
        for (int d = 0; d < x->ndim; d++) dims[d >= axis] *= x->dims[d];
        nd = 2;
    } else {
        const int64_t *axes = NULL;
        int n_axes = imp_attr_ints(n, "axes", &axes);
        const Const *ac = imp_in_const(b, 1);
        if (ac && ac->is_int) {
            axes = ac->i;
            n_axes = (int)ac->n;
        }
        if (op[0] == 'U') {
            nd = x->ndim + n_axes;
            if (nd > 8) NODE_FAIL(b, FH_ERR_USAGE, "too many dimensions");
            int mark[8] = { 0 };
            for (int k = 0; k < n_axes; k++) {
                const int64_t a = imp_norm_axis(axes[k], nd);
                if (a < 0 || a >= nd) NODE_FAIL(b, FH_ERR_USAGE, "axis %lld is out of range", (long long)axes[k]);
                mark[a] = 1;
            }
            for (int d = 0, s = 0; d < nd; d++) dims[d] = mark[d] ? 1 : x->dims[s++];
        } else {
            for (int d = 0; d < x->ndim; d++) {
                int drop = n_axes == 0 ? x->dims[d] == 1 : 0;
                for (int k = 0; k < n_axes; k++) drop |= imp_norm_axis(axes[k], x->ndim) == d;
                if (!drop) dims[nd++] = x->dims[d];
            }
        }
    }
    int64_t count = 1;
    for (int d = 0; d < nd; d++) count *= dims[d];
    if (count != x->n) NODE_FAIL(b, FH_ERR_USAGE, "%lld values cannot take %lld", (long long)x->n, (long long)count);
    out->ndim = nd;
    memcpy(out->dims, dims, sizeof(int64_t) * (size_t)nd);
    return FH_OK;
}

/* element k of a tensor of dims `dims` (rank nd) as its coordinates */
static void unravel(int64_t k, int nd, const int64_t *dims, int64_t *pos)
{
    for (int d = nd - 1; d >= 0; d--) {
        pos[d] = dims[d] ? k % dims[d] : 0;
        k = dims[d] ? k / dims[d] : 0;
    }
}

static int64_t ravel(int nd, const int64_t *dims, const int64_t *pos)
{
    int64_t k = 0;
    for (int d = 0; d < nd; d++) k = k * dims[d] + pos[d];
    return k;
}

static int fold_concat(Bld *b, const Onnx__NodeProto *n, Const *out)
{
    const Const *c0 = imp_in_const(b, 0);
    const int64_t axis = imp_norm_axis(imp_attr_i(n, "axis", 0), c0->ndim);
    if (axis < 0 || axis >= c0->ndim) NODE_FAIL(b, FH_ERR_USAGE, "axis %lld is out of range", (long long)axis);
    int64_t dims[8];
    memcpy(dims, c0->dims, sizeof dims);
    dims[axis] = 0;
    int is_int = 1, sym = 0;
    for (size_t k = 0; k < n->n_input; k++) {
        const Const *c = imp_in_const(b, (int)k);
        int same = c->ndim == c0->ndim;
        for (int d = 0; d < c0->ndim && same; d++) same = d == axis || c->dims[d] == c0->dims[d];
        if (!same) NODE_FAIL(b, FH_ERR_USAGE, "constant inputs differ beyond axis %lld", (long long)axis);
        dims[axis] += c->dims[axis];
        is_int &= c->is_int;
        sym |= c->ib != NULL;
    }
    FH_CHECK(imp_const_new(b, out, c0->ndim, dims, is_int));
    if (sym) FH_CHECK(const_sym(b, out));
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= dims[d];
    for (int d = (int)axis + 1; d < c0->ndim; d++) inner *= dims[d];
    for (int64_t o = 0, k = 0; o < outer; o++)
        for (size_t j = 0; j < n->n_input; j++) {
            const Const *c = imp_in_const(b, (int)j);
            const int64_t run = c->dims[axis] * inner;
            for (int64_t e = 0; e < run; e++, k++) copy_elem(out, k, c, o * run + e);
        }
    return FH_OK;
}

void imp_slice_range(int64_t dim, int64_t s, int64_t e, int64_t step, int64_t *start, int64_t *count)
{
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (step > 0) {
        s = s < 0 ? 0 : s > dim ? dim : s;
        e = e < 0 ? 0 : e > dim ? dim : e;
    } else {
        s = s < 0 ? -1 : s > dim - 1 ? dim - 1 : s;
        e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
    }
    const int64_t len = step > 0 ? (e - s + step - 1) / step : (s - e - step - 1) / -step;
    *start = s;
    *count = len > 0 ? len : 0;
}

/* Slice of a constant of any rank: any axes, negative and large steps (the bounds plain numbers) */
static int fold_slice(Bld *b, const Const *x, Const *out)
{
    const Const *st = imp_in_const(b, 1), *en = imp_in_const(b, 2), *ax = imp_in_const(b, 3), *sp = imp_in_const(b, 4);
    const Onnx__NodeProto *n = imp_cur(b);
    if ((n->n_input > 3 && *n->input[3] && !ax) || (n->n_input > 4 && *n->input[4] && !sp) || st->n != en->n ||
        (ax && ax->n != st->n) || (sp && sp->n != st->n) || x->ndim < 1)
        NODE_FAIL(b, FH_ERR_USAGE, "starts, ends, axes and steps must be constants of one length");
    int64_t start[8], step[8], dims[8];
    for (int d = 0; d < x->ndim; d++) start[d] = 0, step[d] = 1, dims[d] = x->dims[d];
    for (int64_t k = 0; k < st->n; k++) {
        int64_t axis = k, s = 0, e = 0, stp = 1;
        if (ax) FH_CHECK(imp_const_plain(b, ax, k, &axis, "a slice's axis"));
        axis = imp_norm_axis(axis, x->ndim);
        if (sp) FH_CHECK(imp_const_plain(b, sp, k, &stp, "a slice's step"));
        FH_CHECK(imp_const_plain(b, st, k, &s, "a slice's start"));
        FH_CHECK(imp_const_plain(b, en, k, &e, "a slice's end"));
        if (axis < 0 || axis >= x->ndim || stp == 0) NODE_FAIL(b, FH_ERR_USAGE, "axis or step out of range");
        imp_slice_range(x->dims[axis], s, e, stp, &start[axis], &dims[axis]);
        step[axis] = stp;
    }
    FH_CHECK(imp_const_new(b, out, x->ndim, dims, x->is_int));
    if (x->ib) FH_CHECK(const_sym(b, out));
    int64_t pos[8];
    for (int64_t k = 0; k < out->n; k++) {
        unravel(k, x->ndim, dims, pos);
        for (int d = 0; d < x->ndim; d++) pos[d] = start[d] + pos[d] * step[d];
        copy_elem(out, k, x, ravel(x->ndim, x->dims, pos));
    }
    return FH_OK;
}

/* ScatterND on constants (PyTorch's index assignment, x[a:b, c:d] = v, builds Swin's attention mask this way) */
static int fold_scatter_nd(Bld *b, const Onnx__NodeProto *n, const Const *x, const Const *idx, const Const *upd,
                           Const *out)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "reduction", NULL }));
    const Onnx__AttributeProto *red = imp_attr(n, "reduction");
    if (red && red->has_s && !(red->s.len == 4 && !memcmp(red->s.data, "none", 4)))
        NODE_FAIL(b, FH_ERR_USAGE, "a ScatterND reduction other than none is not supported");
    if (!idx->is_int || idx->ndim < 1) NODE_FAIL(b, FH_ERR_USAGE, "indices must be integers");
    const int depth = (int)idx->dims[idx->ndim - 1];
    if (depth < 1 || depth > x->ndim) NODE_FAIL(b, FH_ERR_USAGE, "indices of depth %d for rank-%d data", depth, x->ndim);
    int64_t slab = 1, points = idx->n / depth;
    for (int d = depth; d < x->ndim; d++) slab *= x->dims[d];
    if (upd->n != points * slab) NODE_FAIL(b, FH_ERR_USAGE, "updates of %lld values for %lld positions of %lld",
                                          (long long)upd->n, (long long)points, (long long)slab);
    FH_CHECK(imp_const_new(b, out, x->ndim, x->dims, x->is_int));
    if (x->ib || upd->ib) FH_CHECK(const_sym(b, out));
    for (int64_t k = 0; k < x->n; k++) copy_elem(out, k, x, k);
    for (int64_t p = 0; p < points; p++) {
        int64_t at = 0;
        for (int d = 0; d < depth; d++) {
            int64_t v = 0;
            FH_CHECK(imp_const_plain(b, idx, p * depth + d, &v, "an index"));
            if (v < 0) v += x->dims[d];
            if (v < 0 || v >= x->dims[d]) NODE_FAIL(b, FH_ERR_USAGE, "index %lld is out of range", (long long)v);
            at = at * x->dims[d] + v;
        }
        for (int64_t e = 0; e < slab; e++) copy_elem(out, at * slab + e, upd, p * slab + e);
    }
    return FH_OK;
}

/* Folds the current node when every input is a constant: *done 1 when done, 0 when the tensor ops decide */
int imp_fold(Bld *b, int *done)
{
    const Onnx__NodeProto *n = imp_cur(b);
    const char *op = n->op_type;
    *done = 0;
    Const out;
    memset(&out, 0, sizeof out);
    out.init = -1;
    if (!strcmp(op, "Constant")) {
        FH_CHECK(fold_constant(b, n, &out));
    } else if (!strcmp(op, "Shape")) {
        Val *x = imp_in_val(b, 0);
        if (!x || (x->kind != V_TENSOR && x->kind != V_CONST)) return FH_OK;
        if (n->n_attribute) FH_CHECK(imp_check_attrs(b, (const char *[]){ "start", "end", NULL }));
        FH_CHECK(fold_shape(b, n, x, &out));
    } else {
        for (size_t k = 0; k < n->n_input; k++)
            if (*n->input[k] && !imp_in_const(b, (int)k)) return FH_OK;
        if (!n->n_input) return FH_OK;
        const Const *x = imp_in_const(b, 0);
        if (!strcmp(op, "Identity") || !strcmp(op, "Cast")) {
            out = *x;
            out.init = -1;
            if (!strcmp(op, "Cast")) {
                const int64_t to = imp_attr_i(n, "to", 1);
                if (to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 || to == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16)
                    NODE_FAIL(b, FH_ERR_USAGE, "float16 is not supported (export in float32)");
                const int want_int = to != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT &&
                                     to != ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
                if (want_int != x->is_int) {
                    if (holds_batch(x))
                        NODE_FAIL(b, FH_ERR_USAGE, "the batch size is used as a float, which is not supported");
                    FH_CHECK(imp_const_new(b, &out, x->ndim, x->dims, want_int));
                    for (int64_t k = 0; k < x->n; k++) {
                        if (want_int) out.i[k] = (int64_t)x->f[k];
                        else out.f[k] = (float)x->i[k];
                    }
                }
            }
        } else if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div") ||
                   !strcmp(op, "Mod") || !strcmp(op, "Pow") || !strcmp(op, "Equal") || !strcmp(op, "Less") ||
                   !strcmp(op, "Greater")) {
            if (!strcmp(op, "Mod") && imp_attr_i(n, "fmod", 0) && x->is_int)
                NODE_FAIL(b, FH_ERR_USAGE, "attribute fmod = 1 on integers is not supported");
            FH_CHECK(fold_binary(b, x, imp_in_const(b, 1), op, &out));
        } else if (!strcmp(op, "Not")) {
            FH_CHECK(imp_const_new(b, &out, x->ndim, x->dims, 1));
            for (int64_t k = 0; k < x->n; k++) out.i[k] = !imp_cval(x, k);
        } else if (!strcmp(op, "Where")) {
            const Const *c = x, *p = imp_in_const(b, 1), *q = imp_in_const(b, 2);
            int nd;
            int64_t dims[8];
            FH_CHECK(bcast_dims(b, (const Const *[]){ c, p, q }, 3, &nd, dims));
            FH_CHECK(imp_const_new(b, &out, nd, dims, p->is_int && q->is_int));
            if (p->ib || q->ib) FH_CHECK(const_sym(b, &out));
            for (int64_t k = 0; k < out.n; k++) {
                const Const *pick = imp_cval(c, bcast_index(&out, c, k)) ? p : q;
                copy_elem(&out, k, pick, bcast_index(&out, pick, k));
            }
        } else if (!strcmp(op, "ConstantOfShape")) {
            int64_t dims[8];
            int nd;
            if (holds_batch(x)) return FH_OK; /* shaped by the batch: a tensor op's (stochastic depth) */
            FH_CHECK(plain_shape(b, x, dims, &nd, "the shape"));
            const Onnx__AttributeProto *a = imp_attr(n, "value");
            Const v;
            if (a && a->t) {
                FH_CHECK(imp_decode_tensor(a->t, &v, b->net->path, imp_node_name(b, n)));
                FH_CHECK(imp_const_new(b, &out, nd, dims, v.is_int));
                for (int64_t k = 0; k < out.n; k++) copy_elem(&out, k, &v, 0);
                free(v.f);
                free(v.i);
            } else {
                FH_CHECK(imp_const_new(b, &out, nd, dims, 0));
            }
        } else if (!strcmp(op, "Range")) {
            const Const *lim = imp_in_const(b, 1), *dl = imp_in_const(b, 2);
            int64_t s, e, d;
            FH_CHECK(imp_const_plain(b, x, 0, &s, "Range's start"));
            FH_CHECK(imp_const_plain(b, lim, 0, &e, "Range's limit"));
            FH_CHECK(imp_const_plain(b, dl, 0, &d, "Range's delta"));
            if (!x->is_int || d == 0) NODE_FAIL(b, FH_ERR_USAGE, "Range on integers with a delta other than 0 only");
            int64_t len = (e - s + d + (d > 0 ? -1 : 1)) / d;
            if (len < 0) len = 0;
            FH_CHECK(imp_const_new(b, &out, 1, &len, 1));
            for (int64_t k = 0; k < len; k++) out.i[k] = s + k * d;
        } else if (!strcmp(op, "Gather")) {
            /* a weight read through Gather stays trainable: the tensor op takes it */
            if (!x->is_int && x->init >= 0) return FH_OK;
            FH_CHECK(fold_gather(b, n, x, imp_in_const(b, 1), &out));
        } else if (!strcmp(op, "Transpose")) {
            FH_CHECK(fold_transpose(b, n, x, &out));
        } else if (!strcmp(op, "Unsqueeze") || !strcmp(op, "Squeeze") || !strcmp(op, "Reshape") ||
                   !strcmp(op, "Flatten")) {
            FH_CHECK(fold_dims(b, n, op, x, &out));
        } else if (!strcmp(op, "Concat")) {
            FH_CHECK(fold_concat(b, n, &out));
        } else if (!strcmp(op, "Slice")) {
            FH_CHECK(fold_slice(b, x, &out));
        } else if (!strcmp(op, "ScatterND")) {
            FH_CHECK(fold_scatter_nd(b, n, x, imp_in_const(b, 1), imp_in_const(b, 2), &out));
        } else if (!strcmp(op, "Expand")) {
            int64_t dims[8], shape[8];
            int nd;
            const Const *s = imp_in_const(b, 1);
            if (holds_batch(s)) return FH_OK; /* to the batch: the tensor op's */
            FH_CHECK(plain_shape(b, s, shape, &nd, "the shape"));
            Const target = { .ndim = nd };
            memcpy(target.dims, shape, sizeof(int64_t) * (size_t)nd);
            FH_CHECK(bcast_dims(b, (const Const *[]){ x, &target }, 2, &nd, dims));
            FH_CHECK(imp_const_new(b, &out, nd, dims, x->is_int));
            if (x->ib) FH_CHECK(const_sym(b, &out));
            for (int64_t k = 0; k < out.n; k++) copy_elem(&out, k, x, bcast_index(&out, x, k));
        } else return FH_OK; /* not foldable here: the tensor ops decide */
    }
    for (size_t k = 1; k < n->n_output; k++)
        if (*n->output[k] && imp_consumers(b, n->output[k], b->node))
            NODE_FAIL(b, FH_ERR_USAGE, "output %zu is read", k);
    Val *v = imp_put(b, n->output[0], V_CONST);
    NEED_MEM(v);
    v->c = out;
    *done = 1;
    return FH_OK;
}
