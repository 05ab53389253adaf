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

static void matmul_shape(const NnModel *m, const NnLayer *l, int batch, NnMatmulShape *s)
{
    int64_t na[NN_MAX_DIMS], nb[NN_MAX_DIMS], ny[NN_MAX_DIMS];
    const NnDims *dy = tdims(m, l->out);
    const int nd = dy->ndim;
    nn_dims_at(tdims(m, l->in), batch, na);
    nn_dims_at(tdims(m, l->in2), batch, nb);
    nn_dims_at(dy, batch, ny);
    s->m = (int)na[nd - 2];
    s->k = (int)na[nd - 1];
    s->n_cols = (int)ny[nd - 1];
    s->trans_b = l->trans_b;
    s->alpha = l->alpha;
    s->onednn = m->onednn != NULL;
    s->nd = nd - 2;
    int64_t ra = na[nd - 2] * na[nd - 1], rb = nb[nd - 2] * nb[nd - 1], ry = ny[nd - 2] * ny[nd - 1];
    s->count = 1;
    for (int k = nd - 3; k >= 0; k--) {
        s->n[k] = ny[k];
        s->sa[k] = na[k] == 1 ? 0 : ra;
        s->sb[k] = nb[k] == 1 ? 0 : rb;
        s->sy[k] = ry;
        ra *= na[k];
        rb *= nb[k];
        ry *= ny[k];
        s->count *= ny[k];
    }
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
        matmul_shape(m, l, batch, &s);
        nn_matmul_forward(y, x, nn_tdata(m, l->in2), &s);
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
        matmul_shape(m, l, batch, &s);
        nn_matmul_backward(dx, dx2, dy, x, nn_tdata(m, l->in2), &s);
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
