/* Kernels of the layers on tensors of any rank (NnDims): broadcasting arithmetic, transposes, batched products,
 * layer norm, softmax, means, gathers. A tensor here is its dims at run time (the batch's filled in), row-major.
 * Every sum runs in one fixed order (a loop over rows split between threads writes its own rows only), so the bits
 * never depend on the thread count. */
#include <math.h>
#include <string.h>

#include "kernels.h"

/* ============================== broadcast loops ============================== */

/* y's dims, and for each of up to two operands its strides (0 along a dim it is broadcast on); dims of 1 dropped
 * and neighbours that are contiguous in every operand merged, so that most loops have one to three dims */
void nn_nd_loop_init(NnNdLoop *L, int nd, const int64_t *ny, int n_ops, const int64_t *const *nops)
{
    int64_t stride[NN_ND_OPS][NN_MAX_DIMS];
    for (int k = 0; k < n_ops; k++) {
        int64_t s = 1;
        for (int d = nd - 1; d >= 0; d--) {
            stride[k][d] = nops[k][d] == 1 && ny[d] != 1 ? 0 : s;
            s *= nops[k][d];
        }
    }
    int64_t ys = 1, ystride[NN_MAX_DIMS];
    for (int d = nd - 1; d >= 0; d--) {
        ystride[d] = ys;
        ys *= ny[d];
    }
    L->n_ops = n_ops;
    L->nd = 0;
    for (int d = 0; d < nd; d++) {
        if (ny[d] == 1) continue;
        const int j = L->nd - 1;
        int merge = j >= 0 && L->ys[j] == ystride[d] * ny[d];
        for (int k = 0; k < n_ops && merge; k++) merge = L->s[k][j] == stride[k][d] * ny[d];
        if (merge) { /* the dim continues the one before in every operand */
            L->n[j] *= ny[d];
            L->ys[j] = ystride[d];
            for (int k = 0; k < n_ops; k++) L->s[k][j] = stride[k][d];
            continue;
        }
        L->n[L->nd] = ny[d];
        L->ys[L->nd] = ystride[d];
        for (int k = 0; k < n_ops; k++) L->s[k][L->nd] = stride[k][d];
        L->nd++;
    }
    if (L->nd == 0) { /* a single value */
        L->nd = 1;
        L->n[0] = 1;
        L->ys[0] = 1;
        for (int k = 0; k < n_ops; k++) L->s[k][0] = 0;
    }
    L->total = ys;
}

/* calls body(offset of y, offsets of the operands, inner length) for every run of the innermost dim, in order */
#define ND_RUNS(L, ...)                                                                                        \
    do {                                                                                                       \
        int64_t idx_[NN_MAX_DIMS] = { 0 }, yo_ = 0, oo_[NN_ND_OPS] = { 0 };                                  \
        const int last_ = (L)->nd - 1;                                                                         \
        const int64_t inner_ = (L)->n[last_];                                                                  \
        for (;;) {                                                                                             \
            const int64_t yo = yo_, ao = oo_[0], bo = oo_[1];                                                  \
            (void)ao;                                                                                          \
            (void)bo;                                                                                          \
            __VA_ARGS__;                                                                                            \
            int d_ = last_ - 1;                                                                                \
            for (; d_ >= 0; d_--) {                                                                            \
                idx_[d_]++;                                                                                    \
                yo_ += (L)->ys[d_];                                                                            \
                for (int k_ = 0; k_ < (L)->n_ops; k_++) oo_[k_] += (L)->s[k_][d_];                             \
                if (idx_[d_] < (L)->n[d_]) break;                                                              \
                yo_ -= (L)->ys[d_] * (L)->n[d_];                                                               \
                for (int k_ = 0; k_ < (L)->n_ops; k_++) oo_[k_] -= (L)->s[k_][d_] * (L)->n[d_];                \
                idx_[d_] = 0;                                                                                  \
            }                                                                                                  \
            if (d_ < 0) break;                                                                                 \
        }                                                                                                      \
        (void)inner_;                                                                                          \
    } while (0)

static inline float bin_apply(NnBinOp op, float a, float b)
{
    switch (op) {
    case NN_BIN_ADD: return a + b;
    case NN_BIN_SUB: return a - b;
    case NN_BIN_MUL: return a * b;
    default: return a / b;
    }
}

void nn_binary_forward(float *y, const float *a, const float *b, const NnNdLoop *L, NnBinOp op)
{
    const int last = L->nd - 1;
    const int64_t sa = L->s[0][last], sb = L->s[1][last];
    if (L->nd == 1 && sa == 1 && sb == 1) { /* no broadcast: one flat loop, split over threads */
        const int64_t n = L->n[0];
        switch (op) {
        case NN_BIN_ADD: NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];); break;
        case NN_BIN_SUB: NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) y[i] = a[i] - b[i];); break;
        case NN_BIN_MUL: NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];); break;
        default: NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) y[i] = a[i] / b[i];); break;
        }
        return;
    }
    ND_RUNS(L, {
        float *yp = y + yo;
        const float *ap = a + ao, *bp = b + bo;
        if (sa == 1 && sb == 1)
            for (int64_t i = 0; i < inner_; i++) yp[i] = bin_apply(op, ap[i], bp[i]);
        else if (sa == 1)
            for (int64_t i = 0; i < inner_; i++) yp[i] = bin_apply(op, ap[i], bp[0]);
        else if (sb == 1)
            for (int64_t i = 0; i < inner_; i++) yp[i] = bin_apply(op, ap[0], bp[i]);
        else
            for (int64_t i = 0; i < inner_; i++) yp[i] = bin_apply(op, ap[i * sa], bp[i * sb]);
    });
}

void nn_binary_backward(float *da, float *db, const float *dy, const float *a, const float *b, const NnNdLoop *L,
                        NnBinOp op)
{
    const int last = L->nd - 1;
    const int64_t sa = L->s[0][last], sb = L->s[1][last];
    if (L->nd == 1 && sa == 1 && sb == 1) {
        const int64_t n = L->n[0];
        switch (op) {
        case NN_BIN_ADD:
        case NN_BIN_SUB: {
            const float sg = op == NN_BIN_SUB ? -1.0f : 1.0f;
            if (da) NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) da[i] += dy[i];);
            if (db) NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) db[i] += sg * dy[i];);
            break;
        }
        case NN_BIN_MUL:
            if (da) NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) da[i] += dy[i] * b[i];);
            if (db) NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) db[i] += dy[i] * a[i];);
            break;
        default:
            if (da) NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) da[i] += dy[i] / b[i];);
            if (db) NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) db[i] -= dy[i] * (a[i] / b[i]) / b[i];);
            break;
        }
        return;
    }
    /* broadcast: sums into the broadcast operand in y's order (one thread) */
    ND_RUNS(L, {
        const float *g = dy + yo, *ap = a + ao, *bp = b + bo;
        float *gap = da ? da + ao : NULL, *gbp = db ? db + bo : NULL;
        for (int64_t i = 0; i < inner_; i++) {
            const float av = ap[i * sa], bv = bp[i * sb];
            switch (op) {
            case NN_BIN_ADD:
                if (gap) gap[i * sa] += g[i];
                if (gbp) gbp[i * sb] += g[i];
                break;
            case NN_BIN_SUB:
                if (gap) gap[i * sa] += g[i];
                if (gbp) gbp[i * sb] -= g[i];
                break;
            case NN_BIN_MUL:
                if (gap) gap[i * sa] += g[i] * bv;
                if (gbp) gbp[i * sb] += g[i] * av;
                break;
            default:
                if (gap) gap[i * sa] += g[i] / bv;
                if (gbp) gbp[i * sb] -= g[i] * (av / bv) / bv;
                break;
            }
        }
    });
}

/* y = x broadcast (L over y and x); backward: dx += the sums of dy over the broadcast dims */
void nn_expand_forward(float *y, const float *x, const NnNdLoop *L)
{
    const int64_t sx = L->s[0][L->nd - 1];
    ND_RUNS(L, {
        float *yp = y + yo;
        const float *xp = x + ao;
        if (sx == 1) memcpy(yp, xp, sizeof(float) * (size_t)inner_);
        else
            for (int64_t i = 0; i < inner_; i++) yp[i] = xp[i * sx];
    });
}

void nn_expand_backward(float *dx, const float *dy, const NnNdLoop *L)
{
    const int64_t sx = L->s[0][L->nd - 1];
    ND_RUNS(L, {
        const float *g = dy + yo;
        float *gx = dx + ao;
        if (sx == 1)
            for (int64_t i = 0; i < inner_; i++) gx[i] += g[i];
        else if (sx == 0) {
            float s = 0.0f;
            for (int64_t i = 0; i < inner_; i++) s += g[i];
            gx[0] += s;
        } else
            for (int64_t i = 0; i < inner_; i++) gx[i * sx] += g[i];
    });
}

/* mean over the reduced dims: L runs over x (its operand 0 is y, stride 0 along the reduced dims), each output the
 * mean of `count` values; y holds y_n values */
void nn_reduce_mean_forward(float *y, const float *x, const NnNdLoop *L, int64_t count, int64_t y_n)
{
    const int64_t sy = L->s[0][L->nd - 1];
    memset(y, 0, sizeof(float) * (size_t)y_n);
    ND_RUNS(L, {
        const float *xp = x + yo; /* the loop's own offset is x's here */
        float *yp = y + ao;
        if (sy == 0) {
            float s = 0.0f;
            for (int64_t i = 0; i < inner_; i++) s += xp[i];
            yp[0] += s;
        } else
            for (int64_t i = 0; i < inner_; i++) yp[i * sy] += xp[i];
    });
    const float c = (float)count;
    for (int64_t i = 0; i < y_n; i++) y[i] /= c;
}

void nn_reduce_mean_backward(float *dx, const float *dy, const NnNdLoop *L, int64_t count)
{
    const int64_t sy = L->s[0][L->nd - 1];
    const float inv = 1.0f / (float)count;
    ND_RUNS(L, {
        float *gx = dx + yo;
        const float *g = dy + ao;
        for (int64_t i = 0; i < inner_; i++) gx[i] += g[i * sy] * inv;
    });
}

/* ============================== transpose ============================== */

/* y (dims n permuted by perm) = x (dims n); add: y += instead (the backward, with the inverse perm) */
void nn_transpose_run(float *y, const float *x, int nd, const int64_t *n, const int *perm, int add)
{
    int64_t xs[NN_MAX_DIMS], ny[NN_MAX_DIMS], sx[NN_MAX_DIMS];
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        xs[d] = s;
        s *= n[d];
    }
    for (int d = 0; d < nd; d++) {
        ny[d] = n[perm[d]];
        sx[d] = xs[perm[d]];
    }
    /* x read with strides sx in y's order: a loop whose operand 0 has those strides */
    NnNdLoop L;
    L.n_ops = 1;
    L.nd = 0;
    int64_t ystride[NN_MAX_DIMS], ys = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ystride[d] = ys;
        ys *= ny[d];
    }
    for (int d = 0; d < nd; d++) {
        if (ny[d] == 1) continue;
        const int j = L.nd - 1;
        if (j >= 0 && L.ys[j] == ystride[d] * ny[d] && L.s[0][j] == sx[d] * ny[d]) {
            L.n[j] *= ny[d];
            L.ys[j] = ystride[d];
            L.s[0][j] = sx[d];
            continue;
        }
        L.n[L.nd] = ny[d];
        L.ys[L.nd] = ystride[d];
        L.s[0][L.nd] = sx[d];
        L.nd++;
    }
    if (L.nd == 0) {
        L.nd = 1;
        L.n[0] = 1;
        L.ys[0] = L.s[0][0] = 1;
    }
    L.total = ys;
    const int last = L.nd - 1;
    const int64_t sl = L.s[0][last];
    if (L.nd >= 2 && sl != 1 && L.s[0][last - 1] == 1) { /* the last two dims swapped: in tiles, both sides in cache */
        const int64_t R = L.n[last - 1], C = L.n[last], ry = L.ys[last - 1], cx = sl;
        const int64_t outer_n = L.total / (R * C);
        NnNdLoop O = L; /* the dims before the last two */
        O.nd = L.nd - 2;
        const int64_t T = 16;
        for (int64_t o = 0; o < outer_n; o++) {
            int64_t yo = 0, xo = 0, rem = o;
            for (int d = O.nd - 1; d >= 0; d--) {
                const int64_t i = rem % O.n[d];
                rem /= O.n[d];
                yo += i * O.ys[d];
                xo += i * O.s[0][d];
            }
            for (int64_t r0 = 0; r0 < R; r0 += T)
                for (int64_t c0 = 0; c0 < C; c0 += T) {
                    const int64_t r1 = r0 + T < R ? r0 + T : R, c1 = c0 + T < C ? c0 + T : C;
                    for (int64_t r = r0; r < r1; r++) {
                        float *yp = y + yo + r * ry;
                        const float *xp = x + xo + r;
                        if (add)
                            for (int64_t c = c0; c < c1; c++) yp[c] += xp[c * cx];
                        else
                            for (int64_t c = c0; c < c1; c++) yp[c] = xp[c * cx];
                    }
                }
        }
        return;
    }
    ND_RUNS(&L, {
        float *yp = y + yo;
        const float *xp = x + ao;
        if (add) {
            if (sl == 1)
                for (int64_t i = 0; i < inner_; i++) yp[i] += xp[i];
            else
                for (int64_t i = 0; i < inner_; i++) yp[i] += xp[i * sl];
        } else if (sl == 1) {
            memcpy(yp, xp, sizeof(float) * (size_t)inner_);
        } else {
            for (int64_t i = 0; i < inner_; i++) yp[i] = xp[i * sl];
        }
    });
}

/* ============================== batched products ============================== */

/* one product of the batch: (a, b, y) offsets of the index `i` among `count` leading indices */
static void mm_offsets(const NnMatmulShape *s, int64_t i, int64_t *ao, int64_t *bo, int64_t *yo)
{
    int64_t rem = i;
    *ao = *bo = *yo = 0;
    for (int d = s->nd - 1; d >= 0; d--) {
        const int64_t k = rem % s->n[d];
        rem /= s->n[d];
        *ao += k * s->sa[d];
        *bo += k * s->sb[d];
        *yo += k * s->sy[d];
    }
}

void nn_matmul_forward(float *y, const float *a, const float *b, const NnMatmulShape *s)
{
    const int lda = (int)s->lda, ldb = (int)s->ldb, ldy = (int)s->ldy;
    for (int64_t i = 0; i < s->count; i++) {
        int64_t ao, bo, yo;
        mm_offsets(s, i, &ao, &bo, &yo);
        nn_gemm(s->onednn, s->trans_a, s->trans_b, s->m, s->n_cols, s->k, s->alpha, a + ao, lda, b + bo, ldb, 0.0f,
                y + yo, ldy);
    }
}

/* da += alpha dy op(b)^T, db += alpha op(a)^T dy, each in its own storage order (per product, summed where b or a is
 * broadcast); either may be NULL */
void nn_matmul_backward(float *da, float *db, const float *dy, const float *a, const float *b, const NnMatmulShape *s)
{
    const int M = s->m, K = s->k, N = s->n_cols, lda = (int)s->lda, ldb = (int)s->ldb, ldy = (int)s->ldy;
    const float al = s->alpha;
    for (int64_t i = 0; i < s->count; i++) {
        int64_t ao, bo, yo;
        mm_offsets(s, i, &ao, &bo, &yo);
        if (da && !s->trans_a) /* dA [M, K] = dY [M, N] op(B)^T */
            nn_gemm(s->onednn, 0, !s->trans_b, M, K, N, al, dy + yo, ldy, b + bo, ldb, 1.0f, da + ao, lda);
        else if (da) /* A stored [K, M]: dA = op(B) dY^T */
            nn_gemm(s->onednn, s->trans_b, 1, K, M, N, al, b + bo, ldb, dy + yo, ldy, 1.0f, da + ao, lda);
        if (db && !s->trans_b) /* dB [K, N] = op(A)^T dY */
            nn_gemm(s->onednn, !s->trans_a, 0, K, N, M, al, a + ao, lda, dy + yo, ldy, 1.0f, db + bo, ldb);
        else if (db) /* B stored [N, K]: dB = dY^T op(A) */
            nn_gemm(s->onednn, 1, s->trans_a, N, K, M, al, dy + yo, ldy, a + ao, lda, 1.0f, db + bo, ldb);
    }
}

/* ============================== layer norm ============================== */

/* rows of d values: y = (x - mean) invstd w + b (w, b may be NULL: 1 and 0); saves mean and invstd per row */
void nn_layernorm_forward(float *y, float *save_mean, float *save_invstd, const float *x, const float *w,
                          const float *b, int64_t rows, int64_t d, float eps)
{
    nn_isa_layernorm_forward(y, save_mean, save_invstd, x, w, b, rows, d, eps);
}

/* dx += invstd (g - mean(g) - xhat mean(g xhat)), g = dy w; dw += sum dy xhat, db += sum dy (w NULL: not affine) */
void nn_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                           const float *save_mean, const float *save_invstd, int64_t rows, int64_t d)
{
    if (dx) nn_isa_layernorm_backward_dx(dx, dy, x, w, save_mean, save_invstd, rows, d);
    if (dw) nn_isa_layernorm_backward_params(dw, db, dy, x, save_mean, save_invstd, rows, d);
}

/* ============================== softmax ============================== */

/* along the middle of [outer, len, inner] */
void nn_softmax_forward(float *y, const float *x, int64_t outer, int64_t len, int64_t inner)
{
    if (inner == 1) {
        nn_isa_softmax_rows_forward(y, x, outer, len);
        return;
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            const float *xr = x + o * len * inner + j;
            float *yr = y + o * len * inner + j;
            float mx = xr[0];
            for (int64_t i = 1; i < len; i++) mx = xr[i * inner] > mx ? xr[i * inner] : mx;
            float s = 0.0f;
            for (int64_t i = 0; i < len; i++) {
                yr[i * inner] = expf(xr[i * inner] - mx);
                s += yr[i * inner];
            }
            const float inv = 1.0f / s;
            for (int64_t i = 0; i < len; i++) yr[i * inner] *= inv;
        }
}

/* dx += y (dy - sum(dy y)) */
void nn_softmax_backward(float *dx, const float *dy, const float *y, int64_t outer, int64_t len, int64_t inner)
{
    if (inner == 1) {
        nn_isa_softmax_rows_backward(dx, dy, y, outer, len);
        return;
    }
    NN_PARALLEL_FOR(outer * len * inner, for (int64_t o = 0; o < outer; o++) {
        for (int64_t j = 0; j < inner; j++) {
            const int64_t base = o * len * inner + j;
            float s = 0.0f;
            for (int64_t i = 0; i < len; i++) s += dy[base + i * inner] * y[base + i * inner];
            for (int64_t i = 0; i < len; i++) dx[base + i * inner] += y[base + i * inner] * (dy[base + i * inner] - s);
        }
    });
}

/* ============================== gather ============================== */

/* y [outer, n, inner] = x [outer, len, inner] at index[0..n) along the middle, zeros where an index is -1 (a pad);
 * backward adds back */
void nn_gather_forward(float *y, const float *x, const int32_t *index, int n, int64_t outer, int64_t len,
                       int64_t inner)
{
    for (int64_t o = 0; o < outer; o++)
        for (int k = 0; k < n; k++) {
            float *row = y + (o * n + k) * inner;
            if (index[k] < 0) memset(row, 0, sizeof(float) * (size_t)inner);
            else memcpy(row, x + (o * len + index[k]) * inner, sizeof(float) * (size_t)inner);
        }
}

void nn_gather_backward(float *dx, const float *dy, const int32_t *index, int n, int64_t outer, int64_t len,
                        int64_t inner)
{
    for (int64_t o = 0; o < outer; o++)
        for (int k = 0; k < n; k++) {
            if (index[k] < 0) continue;
            float *g = dx + (o * len + index[k]) * inner;
            const float *h = dy + (o * n + k) * inner;
            for (int64_t i = 0; i < inner; i++) g[i] += h[i];
        }
}
