/* The layers on tensors of any rank (NnDims): what vision transformers, ConvNeXt and MLP-Mixer add to the NCHW
 * layers of model.c. Builders check the dims and record the layer; forward and backward turn the logical dims
 * into run-time ones (the batch's filled in) and call kernels_nd.c. Backward passes accumulate. */
#include <stdlib.h>
#include <string.h>

#include "fedhet/rng.h"
#include "kernels.h"
#include "model_internal.h"

/* ============================== building ============================== */

static int dims_ok(const NnDims *d)
{
    if (d->ndim < 1 || d->ndim > NN_MAX_DIMS || d->batch < -1 || d->batch >= d->ndim) return 0;
    for (int k = 0; k < d->ndim; k++)
        if (d->d[k] < 1 || (k == d->batch && d->d[k] != 1)) return 0;
    return nn_dims_size(d) <= (int64_t)1 << 31;
}

static const NnDims *tdims(const NnModel *m, int t) { return &m->tensors[t].dims; }

/* "[a x N x b]" for messages, N at the batch */
static const char *dims_text(const NnDims *d, char *buf, size_t size)
{
    size_t o = 0;
    buf[0] = 0;
    for (int k = 0; k < d->ndim && o < size; k++) {
        if (k == d->batch) o += (size_t)snprintf(buf + o, size - o, "%sN", k ? "x" : "");
        else o += (size_t)snprintf(buf + o, size - o, "%s%d", k ? "x" : "", d->d[k]);
    }
    return buf;
}

static int check_tensor(NnModel *m, const NnLayer *l, int t)
{
    if (t < 0 || t >= m->n_tensors) return nn_build_fail(m, "%s: input tensor %d does not exist", l->name, t);
    return 0;
}

int nn_reshape(NnModel *m, int in, const NnDims *dims)
{
    NnLayer *l = nn_add_layer(m, NN_OP_RESHAPE, in, NN_ACT_NONE);
    if (!l) return -1;
    const NnDims *d = tdims(m, in);
    char a[96], b[96];
    if (!dims_ok(dims) || nn_dims_size(dims) != nn_dims_size(d) || (dims->batch < 0) != (d->batch < 0))
        return nn_build_fail(m, "%s: %s cannot be viewed as %s (the values per sample and the batch must stay)",
                             l->name, dims_text(d, a, sizeof a), dims_text(dims, b, sizeof b));
    /* the values before the batch stay before it: the same floats at the same places for every batch size */
    int64_t before = 1, before_new = 1;
    for (int k = 0; k < d->batch; k++) before *= d->d[k];
    for (int k = 0; k < dims->batch; k++) before_new *= dims->d[k];
    if (before != before_new)
        return nn_build_fail(m, "%s: %s cannot be viewed as %s: the batch would move among the values", l->name,
                             dims_text(d, a, sizeof a), dims_text(dims, b, sizeof b));
    return l->out = nn_add_tensor(m, dims, in);
}

int nn_transpose(NnModel *m, int in, const int *perm)
{
    NnLayer *l = nn_add_layer(m, NN_OP_TRANSPOSE, in, NN_ACT_NONE);
    if (!l) return -1;
    const NnDims *d = tdims(m, in);
    NnDims out = *d;
    unsigned seen = 0;
    for (int k = 0; k < d->ndim; k++) {
        if (perm[k] < 0 || perm[k] >= d->ndim || (seen >> perm[k]) & 1u)
            return nn_build_fail(m, "%s: the permutation is not one of the input's %d dims", l->name, d->ndim);
        seen |= 1u << perm[k];
        out.d[k] = d->d[perm[k]];
        l->perm[k] = perm[k];
        if (perm[k] == d->batch) out.batch = k;
    }
    return l->out = nn_add_tensor(m, &out, -1);
}

int nn_linear_rows(NnModel *m, int in, int n_out, int bias, NnAct act)
{
    NnLayer *l = nn_add_layer(m, NN_OP_LINEAR, in, act);
    if (!l) return -1;
    int li = (int)(l - m->layers);
    const NnDims *d = tdims(m, in);
    const int n_in = d->d[d->ndim - 1];
    if (d->batch < 0 || d->batch == d->ndim - 1)
        return nn_build_fail(m, "%s: its input needs a batch before its last dim", l->name);
    if (n_out < 1) return nn_build_fail(m, "%s: output size %d must be positive", l->name, n_out);
    if (act != NN_ACT_NONE && act != NN_ACT_RELU && act != NN_ACT_RELU6)
        return nn_build_fail(m, "%s: a linear layer fuses no activation but ReLU and ReLU6", l->name);
    l->cin = n_in;
    l->cout = n_out;
    l->rows = (int)(m->tensors[in].size / n_in);
    l->per_row = 1;
    l->w_off = nn_add_view(m, li, "weight", NN_ROLE_WEIGHT, 2, (int[]){n_out, n_in});
    if (bias) l->b_off = nn_add_view(m, li, "bias", NN_ROLE_BIAS, 1, (int[]){n_out});
    l->flops = 2LL * l->rows * n_in * n_out;
    NnDims out = *d;
    out.d[out.ndim - 1] = n_out;
    return l->out = nn_add_tensor(m, &out, -1);
}

int nn_matmul(NnModel *m, int a, int b, int trans_b, float alpha)
{
    NnLayer *l = nn_add_layer(m, NN_OP_MATMUL, a, NN_ACT_NONE);
    if (!l || check_tensor(m, l, b)) return -1;
    const NnDims *da = tdims(m, a), *db = tdims(m, b);
    char sa[96], sb[96];
    const int nd = da->ndim;
    if (nd < 2 || db->ndim != nd)
        return nn_build_fail(m, "%s: %s and %s: both must have the same rank, at least 2", l->name,
                             dims_text(da, sa, sizeof sa), dims_text(db, sb, sizeof sb));
    const int M = da->d[nd - 2], K = da->d[nd - 1], Kb = db->d[nd - (trans_b ? 1 : 2)], N = db->d[nd - (trans_b ? 2 : 1)];
    if (da->batch >= nd - 2 || db->batch >= nd - 2 || K != Kb)
        return nn_build_fail(m, "%s: %s times %s%s: the inner sizes must agree and the batch be a leading dim", l->name,
                             dims_text(da, sa, sizeof sa), dims_text(db, sb, sizeof sb), trans_b ? " transposed" : "");
    NnDims out = *da;
    out.batch = da->batch >= 0 ? da->batch : db->batch;
    int64_t lead = 1;
    for (int k = 0; k < nd - 2; k++) {
        const int x = da->d[k], y = db->d[k];
        const int a_here = k == da->batch, b_here = k == db->batch;
        if ((x != y && x != 1 && y != 1) || (da->batch >= 0 && db->batch >= 0 && a_here != b_here) ||
            (a_here && y != 1) || (b_here && x != 1))
            return nn_build_fail(m, "%s: the leading dims of %s and %s do not broadcast", l->name,
                                 dims_text(da, sa, sizeof sa), dims_text(db, sb, sizeof sb));
        out.d[k] = x > y ? x : y;
        lead *= out.d[k];
    }
    out.d[nd - 2] = M;
    out.d[nd - 1] = N;
    l->in2 = b;
    l->trans_b = (unsigned char)!!trans_b;
    l->alpha = alpha;
    l->flops = 2 * lead * M * K * N;
    return l->out = nn_add_tensor(m, &out, -1);
}

int nn_layernorm(NnModel *m, int in, int n_dims, float eps, int affine)
{
    NnLayer *l = nn_add_layer(m, NN_OP_LAYERNORM, in, NN_ACT_NONE);
    if (!l) return -1;
    int li = (int)(l - m->layers);
    const NnDims *d = tdims(m, in);
    if (n_dims < 1 || n_dims > d->ndim || d->batch >= d->ndim - n_dims)
        return nn_build_fail(m, "%s: the last %d dims of a rank-%d input must not hold the batch", l->name, n_dims,
                             d->ndim);
    if (!(eps > 0.0f)) return nn_build_fail(m, "%s: epsilon %g must be positive", l->name, (double)eps);
    int64_t size = 1;
    for (int k = d->ndim - n_dims; k < d->ndim; k++) size *= d->d[k];
    if (size > 1 << 28) return nn_build_fail(m, "%s: %lld values per row is too many", l->name, (long long)size);
    l->cin = l->cout = (int)size;
    l->eps = eps;
    if (affine) {
        l->w_off = nn_add_view(m, li, "weight", NN_ROLE_NORM_WEIGHT, 1, (int[]){(int)size});
        l->b_off = nn_add_view(m, li, "bias", NN_ROLE_NORM_BIAS, 1, (int[]){(int)size});
    }
    l->flops = 8 * m->tensors[in].size;
    return l->out = nn_add_tensor(m, d, -1);
}

int nn_softmax(NnModel *m, int in, int axis)
{
    NnLayer *l = nn_add_layer(m, NN_OP_SOFTMAX, in, NN_ACT_NONE);
    if (!l) return -1;
    const NnDims *d = tdims(m, in);
    if (axis < 0 || axis >= d->ndim || axis == d->batch)
        return nn_build_fail(m, "%s: axis %d is not a dim of the rank-%d input other than the batch's", l->name, axis,
                             d->ndim);
    l->axis = axis;
    l->flops = 5 * m->tensors[in].size;
    return l->out = nn_add_tensor(m, d, -1);
}

/* the dims a and b broadcast to (the same rank; each dim equal or 1; a batch at one place) */
static int broadcast_dims(NnModel *m, const NnLayer *l, const NnDims *da, const NnDims *db, NnDims *out)
{
    char sa[96], sb[96];
    int ok = da->ndim == db->ndim && (da->batch < 0 || db->batch < 0 || da->batch == db->batch);
    *out = *da;
    out->batch = da->batch >= 0 ? da->batch : db->batch;
    for (int k = 0; ok && k < da->ndim; k++) {
        const int x = da->d[k], y = db->d[k];
        ok = x == y || x == 1 || y == 1;
        if (k == out->batch) ok &= x == 1 && y == 1;
        out->d[k] = x > y ? x : y;
    }
    if (!ok)
        nn_build_fail(m, "%s: %s and %s do not broadcast (the same rank, each dim equal or 1)", l->name,
                      dims_text(da, sa, sizeof sa), dims_text(db, sb, sizeof sb));
    return ok;
}

int nn_binary(NnModel *m, NnBinOp op, int a, int b)
{
    NnLayer *l = nn_add_layer(m, NN_OP_BINARY, a, NN_ACT_NONE);
    if (!l || check_tensor(m, l, b)) return -1;
    if (op < NN_BIN_ADD || op > NN_BIN_DIV) return nn_build_fail(m, "%s: unknown operation %d", l->name, (int)op);
    NnDims out;
    if (!broadcast_dims(m, l, tdims(m, a), tdims(m, b), &out)) return -1;
    l->in2 = b;
    l->bin_op = op;
    return l->out = nn_add_tensor(m, &out, -1);
}

/* a tensor's view in the state: at most 4 dims kept, the leading ones merged */
static int64_t tensor_view(NnModel *m, int li, const NnDims *d)
{
    int dims[4], nd = d->ndim < 4 ? d->ndim : 4;
    for (int k = 0; k < nd; k++) dims[k] = d->d[d->ndim - nd + k];
    for (int k = 0; k < d->ndim - nd; k++) dims[0] *= d->d[k];
    return nn_add_view(m, li, "weight", NN_ROLE_TENSOR, nd, dims);
}

int nn_param(NnModel *m, const NnDims *dims)
{
    NnLayer *l = nn_add_layer(m, NN_OP_PARAM, m->input, NN_ACT_NONE);
    if (!l) return -1;
    if (!dims_ok(dims) || dims->batch != -1)
        return nn_build_fail(m, "%s: a parameter tensor needs valid dims without a batch", l->name);
    l->w_off = tensor_view(m, (int)(l - m->layers), dims);
    return l->out = nn_add_tensor(m, dims, -1);
}

int nn_constant(NnModel *m, const NnDims *dims, const float *values)
{
    NnLayer *l = nn_add_layer(m, NN_OP_CONST, m->input, NN_ACT_NONE);
    if (!l) return -1;
    if (!dims_ok(dims) || dims->batch != -1)
        return nn_build_fail(m, "%s: a constant tensor needs valid dims without a batch", l->name);
    const int64_t n = nn_dims_size(dims);
    if (fh_calloc(&l->values, (size_t)n, sizeof(float), "constant tensor")) {
        m->status = FH_ERR_MEMORY;
        return -1;
    }
    memcpy(l->values, values, sizeof(float) * (size_t)n);
    return l->out = nn_add_tensor(m, dims, -1);
}

int nn_expand(NnModel *m, int in, const NnDims *dims)
{
    NnLayer *l = nn_add_layer(m, NN_OP_EXPAND, in, NN_ACT_NONE);
    if (!l) return -1;
    const NnDims *d = tdims(m, in);
    char a[96], b[96];
    int ok = dims_ok(dims) && d->ndim == dims->ndim && (d->batch < 0 || d->batch == dims->batch);
    for (int k = 0; ok && k < d->ndim; k++) ok = d->d[k] == dims->d[k] || d->d[k] == 1;
    if (!ok)
        return nn_build_fail(m, "%s: %s does not broadcast to %s", l->name, dims_text(d, a, sizeof a),
                             dims_text(dims, b, sizeof b));
    return l->out = nn_add_tensor(m, dims, -1);
}

int nn_reduce_mean(NnModel *m, int in, unsigned mask)
{
    NnLayer *l = nn_add_layer(m, NN_OP_REDUCE_MEAN, in, NN_ACT_NONE);
    if (!l) return -1;
    const NnDims *d = tdims(m, in);
    if (!mask || mask >> d->ndim || (d->batch >= 0 && (mask >> d->batch) & 1u))
        return nn_build_fail(m, "%s: the dims averaged must be dims of the rank-%d input other than the batch's",
                             l->name, d->ndim);
    NnDims out = *d;
    for (int k = 0; k < d->ndim; k++)
        if ((mask >> k) & 1u) out.d[k] = 1;
    l->reduce_mask = mask;
    l->flops = m->tensors[in].size;
    return l->out = nn_add_tensor(m, &out, -1);
}

int nn_gather(NnModel *m, int in, int axis, const int32_t *index, int n)
{
    NnLayer *l = nn_add_layer(m, NN_OP_GATHER, in, NN_ACT_NONE);
    if (!l) return -1;
    const NnDims *d = tdims(m, in);
    if (axis < 0 || axis >= d->ndim || axis == d->batch || n < 1)
        return nn_build_fail(m, "%s: axis %d is not a dim of the rank-%d input other than the batch's", l->name, axis,
                             d->ndim);
    for (int k = 0; k < n; k++)
        if (index[k] < -1 || index[k] >= d->d[axis])
            return nn_build_fail(m, "%s: index %d is outside the %d entries of dim %d", l->name, index[k], d->d[axis],
                                 axis);
    if (fh_calloc(&l->index, (size_t)n, sizeof *l->index, "gather indices")) {
        m->status = FH_ERR_MEMORY;
        return -1;
    }
    memcpy(l->index, index, sizeof *index * (size_t)n);
    l->n_index = n;
    l->axis = axis;
    NnDims out = *d;
    out.d[axis] = n;
    return l->out = nn_add_tensor(m, &out, -1);
}

int nn_drop_path(NnModel *m, int in, float p, float scale)
{
    NnLayer *l = nn_add_layer(m, NN_OP_DROP_PATH, in, NN_ACT_NONE);
    if (!l) return -1;
    if (tdims(m, in)->batch != 0) return nn_build_fail(m, "%s: its input must be batch-first", l->name);
    if (!(p >= 0.0f && p < 1.0f) || !(scale > 0.0f))
        return nn_build_fail(m, "%s: probability %g must be in [0, 1) and scale %g positive", l->name, (double)p,
                             (double)scale);
    l->p = p;
    l->alpha = scale;
    return l->out = nn_add_tensor(m, tdims(m, in), -1);
}

/* ============================== finalising ============================== */

int nn_nd_is_op(NnOpType type) { return type >= NN_OP_RESHAPE && type <= NN_OP_DROP_PATH; }

int nn_nd_reads(const NnModel *m, const NnLayer *l, int k)
{
    switch (l->type) {
    case NN_OP_MATMUL: return k >= 0;
    case NN_OP_LAYERNORM: return k == 0;
    case NN_OP_SOFTMAX: return k < 0;
    case NN_OP_BINARY: return k >= 0 && (l->bin_op == NN_BIN_MUL || l->bin_op == NN_BIN_DIV);
    default: return 0;
    }
}

int nn_nd_finalize_layer(NnModel *m, NnLayer *l)
{
    const size_t B = (size_t)m->max_batch;
    switch (l->type) {
    case NN_OP_LAYERNORM: {
        const size_t rows = (size_t)(nn_tensor_floats(m, l->in, m->max_batch) / l->cin);
        FH_CHECK(fh_calloc(&l->save_mean, rows, sizeof(float), "layer-norm statistics"));
        FH_CHECK(fh_calloc(&l->save_invstd, rows, sizeof(float), "layer-norm statistics"));
        break;
    }
    case NN_OP_DROP_PATH: FH_CHECK(fh_calloc(&l->mask, B, 1, "drop-path mask")); break;
    case NN_OP_CONST:
        memcpy(m->tensors[l->out].data, l->values, sizeof(float) * (size_t)m->tensors[l->out].size);
        break;
    default: break;
    }
    return FH_OK;
}

/* ============================== running ============================== */

static void split_at(const NnModel *m, int t, int axis, int batch, int64_t *outer, int64_t *len, int64_t *inner)
{
    int64_t n[NN_MAX_DIMS];
    const NnDims *d = tdims(m, t);
    nn_dims_at(d, batch, n);
    *outer = *inner = 1;
    for (int k = 0; k < d->ndim; k++) {
        if (k < axis) *outer *= n[k];
        if (k > axis) *inner *= n[k];
    }
    *len = n[axis];
}

/* a loop over tensor `over` with up to two operands */
static void loop_over(const NnModel *m, NnNdLoop *L, int over, int op0, int op1, int batch)
{
    int64_t ny[NN_MAX_DIMS], na[NN_MAX_DIMS], nb[NN_MAX_DIMS];
    const int nd = tdims(m, over)->ndim;
    nn_dims_at(tdims(m, over), batch, ny);
    nn_dims_at(tdims(m, op0), batch, na);
    if (op1 >= 0) nn_dims_at(tdims(m, op1), batch, nb);
    const int64_t *ops[2] = { na, nb };
    nn_nd_loop_init(L, nd, ny, op1 >= 0 ? 2 : 1, ops);
}

/* ============================== products through strides ============================== */

/* A tensor as strided floats of its root buffer: element (i0, i1, ...) at off + sum i_k s[k], times scale. */
typedef struct {
    int nd;
    int64_t n[NN_MAX_DIMS], s[NN_MAX_DIMS], off;
    float scale;
} NdView;

static void view_dense(const NnModel *m, int t, int batch, NdView *v)
{
    v->nd = tdims(m, t)->ndim;
    nn_dims_at(tdims(m, t), batch, v->n);
    int64_t s = 1;
    for (int k = v->nd - 1; k >= 0; k--) {
        v->s[k] = s;
        s *= v->n[k];
    }
    v->off = 0;
    v->scale = 1.0f;
}

/* v viewed with dims n[0..nd) (the same values in the same order): 0 when its strides cannot express that. Runs of
 * dims with equal products are matched; the old dims of a run must lie evenly in memory to be split anew. */
static int view_reshape(NdView *v, int nd, const int64_t *n)
{
    int64_t on[NN_MAX_DIMS], os[NN_MAX_DIMS], s[NN_MAX_DIMS];
    int ond = 0;
    for (int k = 0; k < v->nd; k++) /* dims of 1 carry no stride */
        if (v->n[k] != 1) {
            on[ond] = v->n[k];
            os[ond++] = v->s[k];
        }
    int oi = 0, ni = 0;
    while (ni < nd && n[ni] == 1) s[ni++] = 0;
    while (oi < ond && ni < nd) {
        int oj = oi + 1, nj = ni + 1;
        int64_t op = on[oi], np = n[ni];
        while (op != np) {
            if (np < op) {
                if (nj >= nd) return 0;
                np *= n[nj++];
            } else {
                if (oj >= ond) return 0;
                op *= on[oj++];
            }
        }
        for (int k = oi; k < oj - 1; k++)
            if (os[k] != on[k + 1] * os[k + 1]) return 0;
        s[nj - 1] = os[oj - 1];
        for (int k = nj - 1; k > ni; k--) s[k - 1] = n[k] == 1 ? s[k] : s[k] * n[k];
        oi = oj;
        ni = nj;
        while (ni < nd && n[ni] == 1) s[ni++] = 0;
    }
    if (oi != ond || ni != nd) return 0;
    v->nd = nd;
    memcpy(v->n, n, sizeof(int64_t) * (size_t)nd);
    memcpy(v->s, s, sizeof(int64_t) * (size_t)nd);
    return 1;
}

/* tensor t as strides of the buffer it is read from: through the folded layers that make it; 0: not expressible */
static int view_of(const NnModel *m, int t, int batch, NdView *v)
{
    const int p = m->tensors[t].folded_from;
    if (p < 0) {
        view_dense(m, t, batch, v);
        return 1;
    }
    const NnLayer *l = &m->layers[p];
    if (!view_of(m, l->in, batch, v)) return 0;
    switch (l->type) {
    case NN_OP_RESHAPE: {
        int64_t n[NN_MAX_DIMS];
        nn_dims_at(tdims(m, l->out), batch, n);
        return view_reshape(v, tdims(m, l->out)->ndim, n);
    }
    case NN_OP_TRANSPOSE: {
        const NdView in = *v;
        for (int k = 0; k < in.nd; k++) {
            v->n[k] = in.n[l->perm[k]];
            v->s[k] = in.s[l->perm[k]];
        }
        return 1;
    }
    case NN_OP_SLICE:
        v->off += l->start * v->s[l->axis];
        v->n[l->axis] = l->end - l->start;
        return 1;
    case NN_OP_ACT: v->scale *= l->act_a; return 1;
    default: return 0;
    }
}

/* a matrix of rows x cols at strides (sr, sc) as a gemm operand: stored as is (trans 0) or transposed, ld apart */
static int mat_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, int *trans, int64_t *ld)
{
    if ((cols == 1 || sc == 1) && (rows == 1 || sr >= cols)) {
        *trans = 0;
        *ld = rows == 1 ? cols : sr;
    } else if ((rows == 1 || sr == 1) && (cols == 1 || sc >= rows)) {
        *trans = 1;
        *ld = cols == 1 ? rows : sc;
    } else {
        return 0;
    }
    return *ld <= INT32_MAX;
}

/* the products of layer l at this batch, and where its operands and output start in their buffers: 0 when the
 * folded layers around it cannot be read through strides */
static int matmul_shape(const NnModel *m, const NnLayer *l, int batch, NnMatmulShape *s, int64_t off[3])
{
    NdView va, vb, vy;
    if (!view_of(m, l->in, batch, &va) || !view_of(m, l->in2, batch, &vb)) return 0;
    if (l->y_via >= 0) { /* y's dims k are the transpose output's dims perm^-1 (k) */
        const NnLayer *t = &m->layers[l->y_via];
        NdView dense;
        view_dense(m, t->out, batch, &dense);
        vy = dense;
        for (int k = 0; k < dense.nd; k++) {
            vy.n[t->perm[k]] = dense.n[k];
            vy.s[t->perm[k]] = dense.s[k];
        }
    } else {
        view_dense(m, l->out, batch, &vy);
    }
    const int nd = vy.nd;
    int b_stored_t, y_t;
    s->m = (int)va.n[nd - 2];
    s->k = (int)va.n[nd - 1];
    s->n_cols = (int)vy.n[nd - 1];
    if (!mat_layout(va.n[nd - 2], va.n[nd - 1], va.s[nd - 2], va.s[nd - 1], &s->trans_a, &s->lda) ||
        !mat_layout(vb.n[nd - 2], vb.n[nd - 1], vb.s[nd - 2], vb.s[nd - 1], &b_stored_t, &s->ldb) ||
        !mat_layout(vy.n[nd - 2], vy.n[nd - 1], vy.s[nd - 2], vy.s[nd - 1], &y_t, &s->ldy) || y_t)
        return 0;
    s->trans_b = l->trans_b ^ b_stored_t;
    s->alpha = l->alpha * va.scale * vb.scale;
    s->onednn = m->onednn != NULL;
    s->nd = nd - 2;
    s->count = 1;
    for (int k = 0; k < nd - 2; k++) {
        s->n[k] = vy.n[k];
        s->sa[k] = va.n[k] == 1 ? 0 : va.s[k];
        s->sb[k] = vb.n[k] == 1 ? 0 : vb.s[k];
        s->sy[k] = vy.s[k];
        s->count *= vy.n[k];
    }
    off[0] = va.off;
    off[1] = vb.off;
    off[2] = vy.off;
    return 1;
}

/* A layer that only moves floats for one batched product (a transpose, a slice or a reshape of what it multiplies,
 * a scale by a constant; a transpose of its output) costs a pass over memory and a buffer: the product can read and
 * write through strides instead (attention's heads split from one projection and merged again). Such layers are
 * folded when the tensors between them have no other reader and every batch size gives strides a gemm takes. */
static int foldable_link(const NnModel *m, const NnLayer *l)
{
    if (l->folded) return 0;
    switch (l->type) {
    case NN_OP_RESHAPE:
    case NN_OP_TRANSPOSE:
    case NN_OP_SLICE: return 1;
    case NN_OP_ACT: return l->act == NN_ACT_AFFINE && l->act_b == 0.0f && m->tensors[l->in].block == 0;
    default: return 0;
    }
}

/* where a folded chain may start: buffers in plain row-major order whatever the backend */
static int plain_root(const NnModel *m, int producer)
{
    if (producer < 0) return 0;
    switch (m->layers[producer].type) {
    case NN_OP_LINEAR:
    case NN_OP_MATMUL:
    case NN_OP_SOFTMAX:
    case NN_OP_LAYERNORM:
    case NN_OP_BINARY: return !m->layers[producer].folded;
    default: return 0;
    }
}

static int fold_valid(const NnModel *m, const NnLayer *l)
{
    const int batches[3] = { 1, 2, m->max_batch };
    for (int k = 0; k < 3; k++) {
        NnMatmulShape s;
        int64_t off[3];
        if (!matmul_shape(m, l, batches[k], &s, off)) return 0;
    }
    return 1;
}

/* an input-side link: its output read through the strides of its input's buffer */
static void fold_mark(NnModel *m, int layer, int on)
{
    NnLayer *l = &m->layers[layer];
    l->folded = (unsigned char)on;
    m->tensors[l->out].folded_from = on ? layer : -1;
    if (l->type != NN_OP_RESHAPE) m->tensors[l->out].alias_of = on ? l->in : -1;
}

/* product l writes straight into the output of the transpose `via` that reads it */
static void fold_output(NnModel *m, NnLayer *l, int via, int on)
{
    NnLayer *t = &m->layers[via];
    l->y_via = on ? via : -1;
    t->folded = (unsigned char)on;
    m->tensors[l->out].alias_of = on ? t->out : -1;
}

void nn_nd_fold_products(NnModel *m)
{
    if (m->no_product_folding) return;
    const int n_t = m->n_tensors;
    /* per tensor: how many layer inputs read it, the last layer that does, the layer that writes it */
    int *readers = calloc((size_t)n_t, sizeof *readers), *reader = malloc(sizeof(int) * (size_t)n_t);
    int *producer = malloc(sizeof(int) * (size_t)n_t);
    if (!readers || !reader || !producer) goto done; /* folding is an optimisation: without memory, none */
    for (int t = 0; t < n_t; t++) producer[t] = -1;
    for (int i = 0; i < m->n_layers; i++) {
        const NnLayer *l = &m->layers[i];
        for (int k = 0; k < nn_layer_inputs(l); k++) {
            readers[nn_layer_input(l, k)]++;
            reader[nn_layer_input(l, k)] = i;
        }
        producer[l->out] = i;
    }
    for (int i = 0; i < m->n_layers; i++) {
        NnLayer *l = &m->layers[i];
        if (l->type != NN_OP_MATMUL) continue;
        for (int side = 0; side < 2; side++) {
            int chain[16], n = 0, t = side ? l->in2 : l->in, copies = 0;
            while (n < 16 && producer[t] >= 0 && readers[t] == 1 && t != m->logits && t != m->features &&
                   foldable_link(m, &m->layers[producer[t]])) {
                copies += m->layers[producer[t]].type != NN_OP_RESHAPE;
                chain[n++] = producer[t];
                t = m->layers[producer[t]].in;
            }
            if (!copies || !plain_root(m, producer[t])) continue;
            for (int k = 0; k < n; k++) fold_mark(m, chain[k], 1);
            if (!fold_valid(m, l))
                for (int k = 0; k < n; k++) fold_mark(m, chain[k], 0);
        }
        const int y = l->out;
        if (readers[y] != 1 || y == m->logits || y == m->features) continue;
        const NnLayer *r = &m->layers[reader[y]];
        if (r->type != NN_OP_TRANSPOSE || r->folded) continue;
        fold_output(m, l, reader[y], 1);
        if (!fold_valid(m, l)) fold_output(m, l, reader[y], 0);
    }
done:
    free(readers);
    free(reader);
    free(producer);
}

static void drop_path_mask(NnModel *m, NnLayer *l, int batch)
{
    int ordinal = 0;
    for (NnLayer *o = m->layers; o < l; o++) ordinal += o->type == NN_OP_DROP_PATH;
    FhRng rng;
    fh_rng_init(&rng, m->dropout_seed, FH_RNG_DROP_PATH, m->dropout_ctr[0], m->dropout_ctr[1],
                m->dropout_ctr[2] * 256u + (uint32_t)ordinal);
    for (int n = 0; n < batch; n++) l->mask[n] = fh_rng_uniform_f(&rng) >= l->p;
}

void nn_nd_forward(NnModel *m, NnLayer *l, int batch)
{
    const float *x = nn_tdata(m, l->in);
    float *y = nn_tdata(m, l->out);
    switch (l->type) {
    case NN_OP_RESHAPE:
    case NN_OP_CONST: break;
    case NN_OP_TRANSPOSE: {
        int64_t n[NN_MAX_DIMS];
        nn_dims_at(tdims(m, l->in), batch, n);
        nn_transpose_run(y, x, tdims(m, l->in)->ndim, n, l->perm, 0);
        break;
    }
    case NN_OP_MATMUL: {
        NnMatmulShape s;
        int64_t off[3];
        matmul_shape(m, l, batch, &s, off); /* nn_nd_fold_products checked that it can */
        nn_matmul_forward(y + off[2], x + off[0], nn_tdata(m, l->in2) + off[1], &s);
        break;
    }
    case NN_OP_LAYERNORM: {
        const int64_t rows = nn_tensor_floats(m, l->in, batch) / l->cin;
        nn_layernorm_forward(y, l->save_mean, l->save_invstd, x, nn_param_at(m, l->w_off), nn_param_at(m, l->b_off),
                             rows, l->cin, l->eps);
        break;
    }
    case NN_OP_SOFTMAX: {
        int64_t outer, len, inner;
        split_at(m, l->in, l->axis, batch, &outer, &len, &inner);
        nn_softmax_forward(y, x, outer, len, inner);
        break;
    }
    case NN_OP_BINARY: {
        NnNdLoop L;
        loop_over(m, &L, l->out, l->in, l->in2, batch);
        nn_binary_forward(y, x, nn_tdata(m, l->in2), &L, l->bin_op);
        break;
    }
    case NN_OP_PARAM: memcpy(y, nn_param_at(m, l->w_off), sizeof(float) * (size_t)m->tensors[l->out].size); break;
    case NN_OP_EXPAND: {
        NnNdLoop L;
        loop_over(m, &L, l->out, l->in, -1, batch);
        nn_expand_forward(y, x, &L);
        break;
    }
    case NN_OP_REDUCE_MEAN: {
        NnNdLoop L;
        loop_over(m, &L, l->in, l->out, -1, batch);
        nn_reduce_mean_forward(y, x, &L, m->tensors[l->in].size / m->tensors[l->out].size,
                               nn_tensor_floats(m, l->out, batch));
        break;
    }
    case NN_OP_GATHER: {
        int64_t outer, len, inner;
        split_at(m, l->in, l->axis, batch, &outer, &len, &inner);
        nn_gather_forward(y, x, l->index, l->n_index, outer, len, inner);
        break;
    }
    case NN_OP_DROP_PATH: {
        const int64_t per = m->tensors[l->in].size;
        if (!m->training || l->p == 0.0f) {
            memcpy(y, x, sizeof(float) * (size_t)(batch * per));
            break;
        }
        drop_path_mask(m, l, batch);
        for (int n = 0; n < batch; n++) {
            const float keep = l->mask[n] ? l->alpha : 0.0f;
            for (int64_t i = 0; i < per; i++) y[n * per + i] = x[n * per + i] * keep;
        }
        break;
    }
    default: break;
    }
}

void nn_nd_backward(NnModel *m, NnLayer *l, int batch)
{
    const float *x = nn_tdata(m, l->in), *dy = nn_tgrad(m, l->out);
    float *dx = nn_is_input_tensor(m, l->in) && !m->need_input_grad ? NULL : nn_tgrad(m, l->in);
    float *dx2 = l->in2 < 0 || (nn_is_input_tensor(m, l->in2) && !m->need_input_grad) ? NULL : nn_tgrad(m, l->in2);
    switch (l->type) {
    case NN_OP_RESHAPE:
    case NN_OP_CONST: break;
    case NN_OP_TRANSPOSE: {
        if (!dx) break;
        int64_t n[NN_MAX_DIMS];
        int inv[NN_MAX_DIMS];
        const int nd = tdims(m, l->in)->ndim;
        nn_dims_at(tdims(m, l->out), batch, n);
        for (int k = 0; k < nd; k++) inv[l->perm[k]] = k;
        nn_transpose_run(dx, dy, nd, n, inv, 1);
        break;
    }
    case NN_OP_MATMUL: {
        NnMatmulShape s;
        int64_t off[3];
        matmul_shape(m, l, batch, &s, off);
        nn_matmul_backward(dx ? dx + off[0] : NULL, dx2 ? dx2 + off[1] : NULL, dy + off[2], x + off[0],
                           nn_tdata(m, l->in2) + off[1], &s);
        break;
    }
    case NN_OP_LAYERNORM: {
        const int64_t rows = nn_tensor_floats(m, l->in, batch) / l->cin;
        nn_layernorm_backward(dx, nn_pgrad_at(m, l->w_off), nn_pgrad_at(m, l->b_off), dy, x, nn_param_at(m, l->w_off),
                              l->save_mean, l->save_invstd, rows, l->cin);
        break;
    }
    case NN_OP_SOFTMAX: {
        if (!dx) break;
        int64_t outer, len, inner;
        split_at(m, l->in, l->axis, batch, &outer, &len, &inner);
        nn_softmax_backward(dx, dy, nn_tdata(m, l->out), outer, len, inner);
        break;
    }
    case NN_OP_BINARY: {
        NnNdLoop L;
        loop_over(m, &L, l->out, l->in, l->in2, batch);
        nn_binary_backward(dx, dx2, dy, x, nn_tdata(m, l->in2), &L, l->bin_op);
        break;
    }
    case NN_OP_PARAM: nn_vec_axpy(nn_pgrad_at(m, l->w_off), 1.0f, dy, m->tensors[l->out].size); break;
    case NN_OP_EXPAND: {
        if (!dx) break;
        NnNdLoop L;
        loop_over(m, &L, l->out, l->in, -1, batch);
        nn_expand_backward(dx, dy, &L);
        break;
    }
    case NN_OP_REDUCE_MEAN: {
        if (!dx) break;
        NnNdLoop L;
        loop_over(m, &L, l->in, l->out, -1, batch);
        nn_reduce_mean_backward(dx, dy, &L, m->tensors[l->in].size / m->tensors[l->out].size);
        break;
    }
    case NN_OP_GATHER: {
        if (!dx) break;
        int64_t outer, len, inner;
        split_at(m, l->in, l->axis, batch, &outer, &len, &inner);
        nn_gather_backward(dx, dy, l->index, l->n_index, outer, len, inner);
        break;
    }
    case NN_OP_DROP_PATH: {
        if (!dx) break;
        const int64_t per = m->tensors[l->in].size;
        if (!m->training || l->p == 0.0f) {
            nn_vec_axpy(dx, 1.0f, dy, batch * per);
            break;
        }
        for (int n = 0; n < batch; n++) {
            const float keep = l->mask[n] ? l->alpha : 0.0f;
            for (int64_t i = 0; i < per; i++) dx[n * per + i] += dy[n * per + i] * keep;
        }
        break;
    }
    default: break;
    }
}
