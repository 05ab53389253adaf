/* The layers on tensors of any rank (src/nn/layers_nd.c, kernels_nd.c): what transformers need. Every layer by finite
 * differences (layer_check.h) in small graphs that move the batch where PyTorch's attention moves it; the kernels
 * against naive loops in double (transpose, batched products, layer norm, softmax, broadcasting arithmetic, means,
 * gathers); the new activations (GELU in both forms, erf, sqrt, exp, pow, the affine map) against their definitions;
 * tied parameters; the same bits on 1 and 3 threads and with every instruction set kernels_isa.c has a copy for;
 * bad dims refused with messages.
 * Run: make build/tests/test_layers_nd && build/tests/test_layers_nd [test_name] */
#include "test.h"

#include "layer_check.h"

/* [N, C, H, W] input viewed as tokens: [N, T = C, E = H * W] */
static int tokens(NnModel *m, int x)
{
    const NnShape s = m->tensors[x].shape;
    const NnDims d = {3, 0, {1, s.c, s.h * s.w}};
    return nn_reshape(m, x, &d);
}

/* ============================== graphs for finite differences ============================== */

/* the batch moved to the middle and back, a reshape with it there, a linear layer on rows in either place */
static int build_batch_moves(NnModel *m, int x, const void *arg)
{
    int t = tokens(m, x);                       /* [N, T, E] */
    t = nn_linear_rows(m, t, 6, 1, NN_ACT_NONE); /* [N, T, 6] */
    t = nn_transpose(m, t, (int[]){1, 0, 2});    /* [T, N, 6] */
    t = nn_linear_rows(m, t, 4, 1, NN_ACT_NONE); /* rows with the batch in the middle */
    const NnDims split = {4, 1, {m->tensors[t].dims.d[0], 1, 2, 2}};
    t = nn_reshape(m, t, &split);                   /* [T, N, 2, 2] */
    t = nn_transpose(m, t, (int[]){1, 2, 0, 3});    /* [N, 2, T, 2] */
    return nn_linear_rows(m, t, 3, 0, NN_ACT_NONE); /* [N, 2, T, 3] */
}

/* self-attention as torchvision exports it: a qkv projection, heads split, softmax(q k^T / sqrt d) v, heads merged */
static int build_attention(NnModel *m, int x, const void *arg)
{
    const int *trans = arg;
    int t = tokens(m, x); /* [N, T, E] */
    const int T = m->tensors[t].dims.d[1], H = 2, D = 3;
    int qkv = nn_linear_rows(m, t, 3 * H * D, 1, NN_ACT_NONE);
    int q = nn_slice_axis(m, qkv, 2, 0, H * D), k = nn_slice_axis(m, qkv, 2, H * D, 2 * H * D),
        v = nn_slice_axis(m, qkv, 2, 2 * H * D, 3 * H * D);
    const NnDims heads = {4, 0, {1, T, H, D}};
    q = nn_transpose(m, nn_reshape(m, q, &heads), (int[]){0, 2, 1, 3}); /* [N, H, T, D] */
    k = nn_transpose(m, nn_reshape(m, k, &heads), (int[]){0, 2, 1, 3});
    v = nn_transpose(m, nn_reshape(m, v, &heads), (int[]){0, 2, 1, 3});
    q = nn_act_ex(m, q, (NnActSpec){NN_ACT_AFFINE, 0.57735f, 0.0f});
    int s = *trans ? nn_matmul(m, q, k, 1, 1.0f)
                   : nn_matmul(m, q, nn_transpose(m, k, (int[]){0, 1, 3, 2}), 0, 1.0f); /* [N, H, T, T] */
    s = nn_softmax(m, s, 3);
    int o = nn_matmul(m, s, v, 0, 1.0f);   /* [N, H, T, D] */
    o = nn_transpose(m, o, (int[]){0, 2, 1, 3});
    const NnDims merged = {3, 0, {1, T, H * D}};
    return nn_linear_rows(m, nn_reshape(m, o, &merged), 4, 1, NN_ACT_NONE);
}

/* a class token expanded over the batch and concatenated, a position embedding added, layer norm, a mean over
 * tokens, a gather of rows (one twice, and zero rows before and after: a pad), a slice */
static int build_tokens(NnModel *m, int x, const void *arg)
{
    int t = tokens(m, x);
    const int T = m->tensors[t].dims.d[1], E = m->tensors[t].dims.d[2];
    const NnDims tok = {3, -1, {1, 1, E}}, pos = {3, -1, {1, T + 1, E}}, cls = {3, 0, {1, 1, E}};
    int c = nn_expand(m, nn_param(m, &tok), &cls);
    int h = nn_concat_axis(m, (int[]){c, t}, 2, 1);
    h = nn_binary(m, NN_BIN_ADD, h, nn_param(m, &pos));
    h = nn_layernorm(m, h, 1, 1e-5f, 1);
    int g = nn_gather(m, h, 1, (int32_t[]){-1, 0, 2, 2, 1, -1}, 6); /* [N, 6, E]: row 2 twice, zeros */
    int s = nn_slice_axis(m, h, 2, 1, E - 1);               /* [N, T + 1, E - 2] */
    int mean = nn_reduce_mean(m, s, 1u << 1);               /* [N, 1, E - 2] */
    int lin = nn_linear_rows(m, g, E - 2, 1, NN_ACT_NONE);  /* [N, 6, E - 2] */
    return nn_binary(m, NN_BIN_MUL, lin, mean);             /* broadcast over the 6 rows */
}

/* arithmetic with broadcasting: a parameter per channel, a constant, sub and div (the divisor kept from 0) */
static int build_arith(NnModel *m, int x, const void *arg)
{
    const NnShape s = m->tensors[x].shape;
    const NnDims per_c = {4, -1, {1, s.c, 1, 1}}, row = {4, -1, {1, 1, 1, s.w}};
    float values[64];
    for (int i = 0; i < s.w && i < 64; i++) values[i] = 0.5f + 0.25f * (float)i;
    int a = nn_binary(m, NN_BIN_MUL, x, nn_param(m, &per_c));
    int b = nn_binary(m, NN_BIN_SUB, nn_constant(m, &row, values), a);
    int den = nn_act_ex(m, nn_act_ex(m, x, (NnActSpec){NN_ACT_POW, 2.0f, 0}), (NnActSpec){NN_ACT_AFFINE, 1.0f, 1.5f});
    int q = nn_binary(m, NN_BIN_DIV, b, den);
    return nn_binary(m, NN_BIN_ADD, q, nn_linear_rows(m, x, s.w, 1, NN_ACT_NONE));
}

/* layer norm over the last two dims plus a softmax along a middle dim, times a parameter (a batched product) */
static int build_norm_softmax(NnModel *m, int x, const void *arg)
{
    int h = nn_binary(m, NN_BIN_ADD, nn_layernorm(m, x, 2, 1e-5f, 1), nn_softmax(m, x, 2));
    const NnShape s = m->tensors[x].shape;
    const NnDims w = {4, -1, {1, 1, s.w, 3}};
    return nn_matmul(m, h, nn_param(m, &w), 0, 0.5f); /* [N, C, H, 3]: the parameter broadcast */
}

/* two linear layers on rows with one weight (tied), the second after a nonlinearity */
static int build_tied(NnModel *m, int x, const void *arg)
{
    int t = tokens(m, x);
    const int E = m->tensors[t].dims.d[2];
    int a = nn_linear_rows(m, t, E, 1, NN_ACT_NONE);
    const int first = m->n_layers - 1;
    int h = nn_act_ex(m, a, (NnActSpec){NN_ACT_GELU, 0, 0});
    int b = nn_linear_rows(m, h, E, 1, NN_ACT_NONE);
    if (nn_tie_param(m, m->n_layers - 1, NN_ROLE_WEIGHT, first) != FH_OK) return -1;
    return b;
}

static int build_drop_path(NnModel *m, int x, const void *arg)
{
    int h = nn_conv2d(m, x, 3, 3, 1, 1, 1, 1, NN_ACT_NONE);
    return nn_binary(m, NN_BIN_ADD, x, nn_drop_path(m, h, 0.4f, 1.0f / 0.6f));
}

static const NnActSpec nd_acts[] = {
    {NN_ACT_GELU, 0, 0}, {NN_ACT_GELU_TANH, 0, 0}, {NN_ACT_ERF, 0, 0}, {NN_ACT_EXP, 0, 0},
    {NN_ACT_POW, 3.0f, 0}, {NN_ACT_AFFINE, -0.75f, 0.5f},
};
#define N_ND_ACTS (sizeof nd_acts / sizeof nd_acts[0])

/* an activation after a linear layer on rows (the gradient reaches parameters); sqrt of x^2 + 1 */
static int build_act(NnModel *m, int x, const void *arg)
{
    const NnActSpec *s = arg;
    int h = nn_linear_rows(m, x, m->tensors[x].shape.w, 1, NN_ACT_NONE);
    if (!s) {
        h = nn_act_ex(m, h, (NnActSpec){NN_ACT_POW, 2.0f, 0});
        h = nn_act_ex(m, h, (NnActSpec){NN_ACT_AFFINE, 1.0f, 1.0f});
        return nn_act_ex(m, h, (NnActSpec){NN_ACT_SQRT, 0, 0});
    }
    return nn_act_ex(m, h, *s);
}

static void test_grad_graphs(void)
{
    static const int no = 0, yes = 1;
    const GradCase cases[] = {
        {.label = "batch_moves", .in = {3, 2, 3}, .batch = 2, .build = build_batch_moves, .training = 1},
        {.label = "attention", .in = {5, 2, 2}, .batch = 2, .build = build_attention, .arg = &no, .training = 1},
        {.label = "attention_trans_b", .in = {5, 2, 2}, .batch = 2, .build = build_attention, .arg = &yes,
         .training = 1},
        {.label = "tokens", .in = {4, 2, 3}, .batch = 3, .build = build_tokens, .training = 1},
        {.label = "arith", .in = {3, 2, 4}, .batch = 2, .build = build_arith, .training = 1},
        {.label = "norm_softmax", .in = {2, 3, 4}, .batch = 2, .build = build_norm_softmax, .training = 1},
        {.label = "tied", .in = {3, 2, 2}, .batch = 2, .build = build_tied, .training = 1},
        {.label = "drop_path", .in = {3, 4, 4}, .batch = 4, .build = build_drop_path, .training = 1},
        {.label = "drop_path_eval", .in = {3, 4, 4}, .batch = 4, .build = build_drop_path, .training = 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) grad_check(&cases[i]);
    for (size_t i = 0; i <= N_ND_ACTS; i++) {
        char label[32];
        snprintf(label, sizeof label, "act_nd_%zu", i);
        GradCase c = {.label = label, .in = {2, 3, 4}, .batch = 2, .build = build_act,
                      .arg = i < N_ND_ACTS ? &nd_acts[i] : NULL, .training = 1};
        grad_check(&c);
    }
}

/* ============================== kernels against naive loops ============================== */

static void test_transpose_matches_ref(void)
{
    const int64_t n[4] = {3, 4, 5, 6};
    const int perms[][4] = {{0, 1, 3, 2}, {2, 0, 3, 1}, {1, 0, 2, 3}, {3, 2, 1, 0}, {0, 2, 1, 3}};
    const int64_t total = 3 * 4 * 5 * 6;
    float *x = falloc(total), *y = falloc(total), *back = falloc(total);
    FhRng rng = rng_for("transpose", 0);
    fill_normal(&rng, x, total, 1.0);
    for (size_t p = 0; p < sizeof perms / sizeof perms[0]; p++) {
        const int *pm = perms[p];
        nn_transpose_run(y, x, 4, n, pm, 0);
        int bad = 0;
        int64_t ny[4];
        for (int k = 0; k < 4; k++) ny[k] = n[pm[k]];
        for (int64_t i = 0; i < total && !bad; i++) { /* y[i0, i1, i2, i3] = x at the input index they name */
            int64_t idx[4], rem = i, xi[4], off = 0;
            for (int k = 3; k >= 0; k--) idx[k] = rem % ny[k], rem /= ny[k];
            for (int k = 0; k < 4; k++) xi[pm[k]] = idx[k];
            for (int k = 0; k < 4; k++) off = off * n[k] + xi[k];
            bad = y[i] != x[off];
        }
        CHECK_MSG(!bad, "perm %d %d %d %d: a value moved to the wrong place", pm[0], pm[1], pm[2], pm[3]);
        int inv[4];
        for (int k = 0; k < 4; k++) inv[pm[k]] = k;
        memset(back, 0, sizeof(float) * total);
        nn_transpose_run(back, y, 4, ny, inv, 1); /* the backward: add back through the inverse */
        CHECK_MSG(memcmp(back, x, sizeof(float) * total) == 0, "perm %d: the inverse does not restore x", (int)p);
    }
    FREE_ALL(x, y, back);
}

static void test_matmul_matches_ref(void)
{
    /* [2, 3, M, K] x [1, 3, K, N] (the first dim broadcast), each operand stored either way round (a with trans_a, b
     * with trans_b) and rows padded apart (lda, ldb, ldy beyond the row), as products read through strides */
    const int M = 5, K = 4, N = 6;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int dn = 0; dn < 2; dn++) {
                const int lda = (ta ? M : K) + ta + dn, ldb = (tb ? K : N) + 2 * tb, ldy = N + ta;
                const int ma = (ta ? K : M) * lda, kb = (tb ? N : K) * ldb, my = M * ldy;
                NnMatmulShape s = {.m = M, .k = K, .n_cols = N, .trans_a = ta, .trans_b = tb, .nd = 2, .onednn = dn,
                                   .alpha = 0.5f, .lda = lda, .ldb = ldb, .ldy = ldy, .count = 6, .n = {2, 3},
                                   .sa = {3 * ma, ma}, .sb = {0, kb}, .sy = {3 * my, my}};
                float *a = falloc(6 * ma), *b = falloc(3 * kb), *y = falloc(6 * my), *dy = falloc(6 * my);
                float *da = falloc(6 * ma), *db = falloc(3 * kb);
                FhRng rng = rng_for("matmul", (uint32_t)(4 * ta + 2 * tb + dn));
                fill_normal(&rng, a, 6 * ma, 1.0);
                fill_normal(&rng, b, 3 * kb, 1.0);
                fill_normal(&rng, dy, 6 * my, 1.0);
                nn_matmul_forward(y, a, b, &s);
                nn_matmul_backward(da, db, dy, a, b, &s);
#define A_AT(p, r, k) (p)[ta ? (k) * lda + (r) : (r) * lda + (k)]
#define B_AT(p, k, c) (p)[tb ? (c) * ldb + (k) : (k) * ldb + (c)]
                double err = 0, gerr_a = 0, gerr_b = 0;
                for (int i0 = 0; i0 < 2; i0++)
                    for (int i1 = 0; i1 < 3; i1++) {
                        const float *A = a + (i0 * 3 + i1) * ma, *B = b + i1 * kb, *Y = y + (i0 * 3 + i1) * my,
                                    *G = dy + (i0 * 3 + i1) * my;
                        for (int r = 0; r < M; r++)
                            for (int c = 0; c < N; c++) {
                                double v = 0;
                                for (int k = 0; k < K; k++) v += (double)A_AT(A, r, k) * B_AT(B, k, c);
                                err = fmax(err, fabs(0.5 * v - Y[r * ldy + c]));
                            }
                        for (int r = 0; r < M; r++) /* dA = alpha dY B^T */
                            for (int k = 0; k < K; k++) {
                                double v = 0;
                                for (int c = 0; c < N; c++) v += (double)G[r * ldy + c] * B_AT(B, k, c);
                                gerr_a = fmax(gerr_a, fabs(0.5 * v - A_AT(da + (i0 * 3 + i1) * ma, r, k)));
                            }
                    }
                for (int i1 = 0; i1 < 3; i1++) /* dB summed over the broadcast first dim */
                    for (int k = 0; k < K; k++)
                        for (int c = 0; c < N; c++) {
                            double v = 0;
                            for (int i0 = 0; i0 < 2; i0++)
                                for (int r = 0; r < M; r++)
                                    v += (double)A_AT(a + (i0 * 3 + i1) * ma, r, k) * dy[(i0 * 3 + i1) * my + r * ldy + c];
                            gerr_b = fmax(gerr_b, fabs(0.5 * v - B_AT(db + i1 * kb, k, c)));
                        }
#undef A_AT
#undef B_AT
                CHECK_MSG(err < 1e-5 && gerr_a < 1e-5 && gerr_b < 1e-5,
                          "trans_a %d trans_b %d onednn %d: forward %g, da %g, db %g", ta, tb, dn, err, gerr_a, gerr_b);
                FREE_ALL(a, b, y, dy, da, db);
            }
}

/* a linear layer over many rows (batch x tokens) adds its bias and sums its bias gradient in blocks of rows: the
 * bits of one gemm over all rows followed by a pass over them, on both gemm backends */
static void test_linear_row_blocks(void)
{
    const int rows = 1000, n_in = 8, n_out = 600; /* blocks of 208 rows */
    for (int dn = 0; dn < 2; dn++) {
        FhRng rng = rng_for("linear_rows", (uint32_t)dn);
        float *x = falloc(rows * n_in), *w = falloc(n_out * n_in), *b = falloc(n_out), *dy = falloc(rows * n_out);
        float *y = falloc(rows * n_out), *y_ref = falloc(rows * n_out), *dx = falloc(rows * n_in);
        float *dx_ref = falloc(rows * n_in), *dw = falloc(n_out * n_in), *dw_ref = falloc(n_out * n_in);
        float *db = falloc(n_out), *db_ref = falloc(n_out);
        fill_normal(&rng, x, rows * n_in, 1.0);
        fill_normal(&rng, w, n_out * n_in, 1.0);
        fill_normal(&rng, b, n_out, 1.0);
        fill_normal(&rng, dy, rows * n_out, 1.0);
        nn_linear_forward_ex(y, x, w, b, rows, n_in, n_out, dn);
        nn_linear_backward_ex(dx, dw, db, dy, x, w, rows, n_in, n_out, dn);
        nn_gemm(dn, 0, 1, rows, n_out, n_in, 1.0f, x, n_in, w, n_in, 0.0f, y_ref, n_out);
        nn_isa_rows_add_bias(y_ref, b, rows, n_out);
        nn_gemm(dn, 1, 0, n_out, n_in, rows, 1.0f, dy, n_out, x, n_in, 1.0f, dw_ref, n_in);
        nn_isa_rows_sum(db_ref, dy, rows, n_out);
        nn_gemm(dn, 0, 0, rows, n_in, n_out, 1.0f, dy, n_out, w, n_in, 1.0f, dx_ref, n_in);
        CHECK_MSG(memcmp(y, y_ref, sizeof(float) * (size_t)(rows * n_out)) == 0 &&
                      memcmp(db, db_ref, sizeof(float) * (size_t)n_out) == 0 &&
                      memcmp(dw, dw_ref, sizeof(float) * (size_t)(n_out * n_in)) == 0,
                  "onednn %d: the blocked pass changed y, db or dw", dn);
        double err = 0, top = 0; /* dx against double: its gemms run per block */
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < n_in; i++) {
                double v = 0;
                for (int o = 0; o < n_out; o++) v += (double)dy[r * n_out + o] * w[o * n_in + i];
                err = fmax(err, fabs(v - dx[r * n_in + i]));
                top = fmax(top, fabs(v));
            }
        CHECK_MSG(err < 1e-5 * top, "onednn %d: dx off by %g of %g", dn, err, top);
        FREE_ALL(x, w, b, dy, y, y_ref, dx, dx_ref, dw, dw_ref, db, db_ref);
    }
}

/* the largest difference of a from b, relative to b's largest value */
static double max_rel_diff(const float *a, const float *b, int64_t n)
{
    return max_diff(a, b, n) / fmax(max_abs(b, n), 1e-30);
}

/* attention's head split (slices of one projection, reshapes, transposes), its scale and its head merge are folded
 * into the strides of the two batched products: the same logits and gradients as with every copy run (to float
 * rounding: the scale moves into the product), at batch sizes 1 and 3, with less activation memory */
static void test_attention_folds(void)
{
    for (int trans = 0; trans < 2; trans++) {
        NnModel ms[2];
        int ok = 1, folded[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            CHECK_OK(nn_model_init(&ms[k], "attention", (NnShape){5, 2, 2}, 3));
            ms[k].no_product_folding = k;
            int out = build_attention(&ms[k], ms[k].input, &trans);
            int logits = out >= 0 ? nn_flatten(&ms[k], out) : -1;
            ok &= logits >= 0 && nn_model_finalize(&ms[k], logits, logits, (int)ms[k].tensors[logits].size) == FH_OK;
            CHECK(ok);
            if (!ok) break;
            nn_model_init_params(&ms[k], SEED);
            for (int i = 0; i < ms[k].n_layers; i++) folded[k] += ms[k].layers[i].folded;
        }
        if (ok) {
            /* 3 slices, 3 reshapes, 3 transposes, the scale and the merging transpose; k's own transpose (trans 0) */
            CHECK_MSG(folded[0] == 11 + !trans && folded[1] == 0, "trans %d: %d and %d layers folded", trans, folded[0],
                      folded[1]);
            CHECK(nn_model_activation_bytes(&ms[0], 3) < nn_model_activation_bytes(&ms[1], 3));
            const int classes = ms[0].classes;
            for (int batch = 1; batch <= 3; batch += 2) {
                FhRng rng = rng_for("attention_folds", (uint32_t)(2 * trans + batch));
                float *x = falloc(batch * 20), *dl = falloc(batch * classes);
                fill_normal(&rng, x, batch * 20, 1.0);
                fill_normal(&rng, dl, batch * classes, 1.0);
                for (int k = 0; k < 2; k++) {
                    ms[k].need_input_grad = 1;
                    nn_model_zero_grad(&ms[k]);
                    CHECK_OK(nn_model_forward(&ms[k], x, batch));
                    nn_model_backward(&ms[k], dl, NULL);
                }
                const double e_logits = max_rel_diff(nn_model_logits(&ms[0]), nn_model_logits(&ms[1]), batch * classes);
                const double e_grad = max_rel_diff(ms[0].grad, ms[1].grad, ms[0].n_params);
                const double e_input = max_rel_diff(ms[0].tensors[ms[0].input].grad, ms[1].tensors[ms[1].input].grad,
                                                    batch * 20);
                CHECK_MSG(e_logits < 1e-5 && e_grad < 1e-5 && e_input < 1e-5,
                          "trans %d batch %d: logits %g, parameter gradient %g, input gradient %g", trans, batch,
                          e_logits, e_grad, e_input);
                FREE_ALL(x, dl);
            }
        }
        nn_model_free(&ms[0]);
        nn_model_free(&ms[1]);
    }
}

/* the largest difference of y from the softmax of x in double, along the middle axis of [outer, len, inner] */
static double softmax_error(const float *x, const float *y, int outer, int len, int inner)
{
    double err = 0;
    for (int o = 0; o < outer; o++)
        for (int j = 0; j < inner; j++) {
            const float *xr = x + (int64_t)o * len * inner + j, *yr = y + (int64_t)o * len * inner + j;
            double sum = 0, mx = -1e30;
            for (int i = 0; i < len; i++) mx = fmax(mx, xr[i * inner]);
            for (int i = 0; i < len; i++) sum += exp(xr[i * inner] - mx);
            for (int i = 0; i < len; i++) err = fmax(err, fabs(exp(xr[i * inner] - mx) / sum - yr[i * inner]));
        }
    return err;
}

static void test_layernorm_softmax_match_ref(void)
{
    const int64_t rows = 7, d = 197; /* 12 blocks of 16 lanes and a tail */
    float *x = falloc(rows * d), *y = falloc(rows * d), *w = falloc(d), *b = falloc(d), *mean = falloc(rows),
          *inv = falloc(rows);
    FhRng rng = rng_for("ln", 0);
    fill_normal(&rng, x, rows * d, 2.0);
    for (int64_t i = 0; i < rows * d; i++) x[i] += 5.0f; /* a mean far from 0 */
    fill_normal(&rng, w, d, 1.0);
    fill_normal(&rng, b, d, 1.0);
    nn_layernorm_forward(y, mean, inv, x, w, b, rows, d, 1e-5f);
    double err = 0;
    for (int64_t r = 0; r < rows; r++) {
        double mu = 0, var = 0;
        for (int64_t i = 0; i < d; i++) mu += x[r * d + i];
        mu /= (double)d;
        for (int64_t i = 0; i < d; i++) var += (x[r * d + i] - mu) * (x[r * d + i] - mu);
        var /= (double)d;
        for (int64_t i = 0; i < d; i++)
            err = fmax(err, fabs((x[r * d + i] - mu) / sqrt(var + 1e-5) * w[i] + b[i] - y[r * d + i]));
    }
    CHECK_MSG(err < 2e-5, "layer norm: largest difference from double %g", err);
    /* softmax along the middle of [2, 5, 3] and along the last of [4, 7] and of [2, 65] */
    float xs[130], ys[130];
    fill_normal(&rng, xs, 130, 3.0);
    nn_softmax_forward(ys, xs, 2, 5, 3);
    err = softmax_error(xs, ys, 2, 5, 3);
    nn_softmax_forward(ys, xs, 4, 7, 1);
    err = fmax(err, softmax_error(xs, ys, 4, 7, 1));
    nn_softmax_forward(ys, xs, 2, 65, 1);
    err = fmax(err, softmax_error(xs, ys, 2, 65, 1));
    CHECK_MSG(err < 1e-6, "softmax: largest difference from double %g", err);
    FREE_ALL(x, y, w, b, mean, inv);
}

/* the activations against their definitions in double, on a range that covers their tails */
static void test_acts_match_ref(void)
{
    enum { N = 4000 };
    float *x = falloc(N), *y = falloc(N), *yr = falloc(N), *dy = falloc(N), *dx = falloc(N), *dxr = falloc(N);
    const NnActSpec sq = {NN_ACT_SQRT, 0, 0};
    for (size_t i = 0; i <= N_ND_ACTS; i++) {
        const NnActSpec s = i < N_ND_ACTS ? nd_acts[i] : sq;
        char label[48];
        snprintf(label, sizeof label, "act %d", (int)s.act);
        FhRng rng = rng_for(label, 0);
        fill_uniform(&rng, x, N, s.act == NN_ACT_SQRT ? 0.01 : -12.0, s.act == NN_ACT_EXP ? 8.0 : 12.0);
        fill_normal(&rng, dy, N, 1.0);
        nn_act_ex_forward(y, NULL, x, N, s, NULL);
        nn_act_ex_forward_ref(yr, x, N, s);
        memset(dx, 0, sizeof(float) * N);
        memset(dxr, 0, sizeof(float) * N);
        nn_act_ex_backward(dx, dy, x, N, s, NULL);
        nn_act_ex_backward_ref(dxr, dy, x, N, s);
        /* a few float roundings of each value, above a floor of 1e-7 (GELU's negative tail, a zero crossing) */
        double worst = 0, worst_d = 0;
        for (int j = 0; j < N; j++) {
            worst = fmax(worst, fabs(y[j] - yr[j]) / (3e-6 * fabs(yr[j]) + 1e-7));
            worst_d = fmax(worst_d, fabs(dx[j] - dxr[j]) / (3e-6 * fabs(dxr[j]) + 1e-7));
        }
        CHECK_MSG(worst <= 1.0, "%s: forward error %g x the tolerance", label, worst);
        CHECK_MSG(worst_d <= 1.0, "%s: backward error %g x the tolerance", label, worst_d);
        int subnormal = 0;
        for (int j = 0; j < N; j++) subnormal += y[j] != 0.0f && fabsf(y[j]) < 1.17549435e-38f;
        CHECK_MSG(!subnormal, "%s: %d subnormal outputs", label, subnormal);
    }
    FREE_ALL(x, y, yr, dy, dx, dxr);
}

/* the kernels split over threads give the bits of one */
static void test_threads_same_bits(void)
{
    const int64_t rows = 2048, d = 64, n = rows * d;
    float *x = falloc(n), *y1 = falloc(n), *y3 = falloc(n), *m = falloc(rows), *v = falloc(rows), *b = falloc(n);
    FhRng rng = rng_for("threads_nd", 0);
    fill_normal(&rng, x, n, 1.0);
    fill_normal(&rng, b, n, 1.0);
    for (int run = 0; run < 2; run++) {
        nn_set_threads(run ? 3 : 1);
        float *y = run ? y3 : y1;
        nn_layernorm_forward(y, m, v, x, NULL, NULL, rows, d, 1e-5f);
        nn_softmax_forward(y, y, rows, d, 1);
        nn_act_ex_forward(y, NULL, y, n, (NnActSpec){NN_ACT_GELU, 0, 0}, NULL);
        NnNdLoop L;
        const int64_t dims[1] = {n};
        nn_nd_loop_init(&L, 1, dims, 2, (const int64_t *const[]){dims, dims});
        nn_binary_forward(y, y, b, &L, NN_BIN_DIV);
    }
    nn_set_threads(1);
    CHECK_MSG(memcmp(y1, y3, sizeof(float) * (size_t)n) == 0, "1 and 3 threads differ");
    FREE_ALL(x, y1, y3, m, v, b);
}

/* kernels_isa.c's copies for AVX-512 and AVX2 give the baseline's bits (what this CPU has of them) */
static void test_isa_same_bits(void)
{
    const int64_t rows = 37, d = 193, n = rows * d; /* d: 12 blocks of 16 lanes and a tail */
    enum { OUTS = 12 };
    float *x = falloc(n), *dy = falloc(n), *w = falloc(d), *b = falloc(d), *out[NN_ISA_AVX512 + 1][OUTS];
    FhRng rng = rng_for("isa_bits", 0);
    fill_normal(&rng, x, n, 3.0);
    fill_normal(&rng, dy, n, 1.0);
    fill_normal(&rng, w, d, 1.0);
    fill_normal(&rng, b, d, 1.0);
    const NnActSpec acts[] = {
        {NN_ACT_GELU, 0, 0},  {NN_ACT_GELU_TANH, 0, 0}, {NN_ACT_EXP, 0, 0},           {NN_ACT_AFFINE, -0.75f, 0.5f},
        {NN_ACT_CLIP, -1, 2}, {NN_ACT_HARDSWISH, 0, 0}, {NN_ACT_LEAKY_RELU, 0.1f, 0},
    };
    const int best = nn_isa_set(NN_ISA_AVX512);
    for (int level = NN_ISA_BASE; level <= best; level++) {
        CHECK(nn_isa_set(level) == level);
        float **o = out[level];
        for (int k = 0; k < OUTS; k++) o[k] = falloc(k == 4 || k == 5 ? rows : k == 6 || k == 7 ? d : n);
        memset(o[1], 0, sizeof(float) * (size_t)n);
        for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) { /* the acts in turn, summed into o[0], o[1] */
            nn_act_ex_forward(o[2], NULL, x, n, acts[a], NULL);
            nn_act_ex_backward(o[1], dy, x, n, acts[a], NULL);
            for (int64_t i = 0; i < n; i++) o[0][i] = a ? o[0][i] + o[2][i] : o[2][i];
        }
        nn_layernorm_forward(o[3], o[4], o[5], x, w, b, rows, d, 1e-5f);
        memset(o[2], 0, sizeof(float) * (size_t)n);
        memset(o[6], 0, sizeof(float) * (size_t)d);
        memset(o[7], 0, sizeof(float) * (size_t)d);
        nn_layernorm_backward(o[2], o[6], o[7], dy, x, w, o[4], o[5], rows, d);
        nn_softmax_forward(o[8], x, rows, d, 1);
        memset(o[9], 0, sizeof(float) * (size_t)n);
        nn_softmax_backward(o[9], dy, o[8], rows, d, 1);
        memcpy(o[10], x, sizeof(float) * (size_t)n);
        nn_isa_rows_add_bias(o[10], b, rows, d);
        memset(o[11], 0, sizeof(float) * (size_t)n);
        nn_isa_rows_sum(o[11], dy, rows, d);
        nn_isa_rows_sum(o[11] + d, x, rows, d);
        if (level == NN_ISA_BASE) continue;
        for (int k = 0; k < OUTS; k++) {
            const int64_t len = k == 4 || k == 5 ? rows : k == 6 || k == 7 ? d : n;
            CHECK_MSG(memcmp(o[k], out[NN_ISA_BASE][k], sizeof(float) * (size_t)len) == 0,
                      "%s: output %d differs from the baseline's", nn_isa_name(level), k);
        }
    }
    nn_isa_set(best);
    for (int level = NN_ISA_BASE; level <= best; level++)
        for (int k = 0; k < OUTS; k++) free(out[level][k]);
    FREE_ALL(x, dy, w, b);
}

/* ============================== building ============================== */

static void test_tied_state(void)
{
    NnModel m;
    const GradCase c = {.label = "tied_state", .in = {3, 2, 2}, .batch = 2, .build = build_tied};
    CHECK_OK(build_case(&m, &c));
    /* two linear layers of 4 x 4 weights and 4 biases each: one weight */
    CHECK_MSG(m.n_params == 4 * 4 + 4 + 4, "%lld parameters", (long long)m.n_params);
    const NnLayer *a = NULL, *b = NULL;
    for (int i = 0; i < m.n_layers; i++)
        if (m.layers[i].type == NN_OP_LINEAR) {
            if (a) b = &m.layers[i];
            else a = &m.layers[i];
        }
    CHECK(a && b && a->w_off == b->w_off && a->b_off != b->b_off && a->tied && b->tied);
    nn_model_free(&m);
}

static void test_bad_dims(void)
{
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 3, 4}, 2));
    const NnDims moved = {4, 1, {2, 1, 3, 4}};
    CHECK(nn_reshape(&m, m.input, &moved) < 0);
    CHECK_MSG_HAS("the batch would move");
    nn_model_free(&m);
    fh_error_clear();
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 3, 4}, 2));
    CHECK(nn_transpose(&m, m.input, (int[]){0, 1, 1, 2}) < 0);
    CHECK_MSG_HAS("not one of");
    nn_model_free(&m);
    fh_error_clear();
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 3, 4}, 2));
    CHECK(nn_matmul(&m, m.input, m.input, 0, 1.0f) < 0); /* [.., 3, 4] x [.., 3, 4] */
    CHECK_MSG_HAS("inner sizes must agree");
    nn_model_free(&m);
    fh_error_clear();
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 3, 4}, 2));
    const NnDims wrong = {4, -1, {1, 5, 1, 1}};
    CHECK(nn_binary(&m, NN_BIN_ADD, m.input, nn_param(&m, &wrong)) < 0);
    CHECK_MSG_HAS("do not broadcast");
    nn_model_free(&m);
    fh_error_clear();
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 3, 4}, 2));
    int t = nn_transpose(&m, m.input, (int[]){1, 0, 2, 3});
    CHECK(t >= 0 && nn_conv2d(&m, t, 2, 1, 1, 0, 1, 1, NN_ACT_NONE) < 0); /* the NCHW layers want the batch first */
    CHECK_MSG_HAS("batch-first");
    nn_model_free(&m);
    fh_error_clear();
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 3, 4}, 2));
    t = nn_transpose(&m, m.input, (int[]){1, 0, 2, 3});
    CHECK(nn_softmax(&m, t, 1) < 0); /* along the batch */
    nn_model_free(&m);
    fh_error_clear();
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 3, 4}, 2));
    CHECK(nn_gather(&m, m.input, 1, (int32_t[]){0, -2}, 2) < 0); /* -1 is a zero entry, -2 nothing */
    CHECK_MSG_HAS("outside");
    nn_model_free(&m);
    fh_error_clear();
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    layer_tests_init();

    RUN(test_grad_graphs);
    RUN(test_transpose_matches_ref);
    RUN(test_matmul_matches_ref);
    RUN(test_attention_folds);
    RUN(test_linear_row_blocks);
    RUN(test_layernorm_softmax_match_ref);
    RUN(test_acts_match_ref);
    RUN(test_threads_same_bits);
    RUN(test_isa_same_bits);
    RUN(test_tied_state);
    RUN(test_bad_dims);
    return test_summary();
}
