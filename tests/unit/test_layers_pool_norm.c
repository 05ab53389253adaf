/* Pooling and normalisation (src/nn): finite-difference gradients (layer_check.h) of max-, average and
 * global average pooling and of batch and group norm (train and eval), batch-norm running statistics
 * (PyTorch's rule) and normalisation, group-norm normalisation, bad pooling shapes, and the same bits on 1
 * and 3 threads.
 * Run: make build/tests/test_layers_pool_norm && build/tests/test_layers_pool_norm [test_name] */
#include "test.h"

#include "layer_check.h"

/* ============================== layer gradient tests ============================== */

static void test_grad_maxpool(void)
{
    layer_case("maxpool_2x2s2", (NnShape){2, 6, 6}, (LayerArg){.op = NN_OP_MAXPOOL, .k = 2, .stride = 2});
    layer_case("maxpool_3x3s2p1", (NnShape){2, 7, 7}, (LayerArg){.op = NN_OP_MAXPOOL, .k = 3, .stride = 2, .pad = 1});
    layer_case("maxpool_3x3s1", (NnShape){2, 5, 6}, (LayerArg){.op = NN_OP_MAXPOOL, .k = 3, .stride = 1});
}

static void test_grad_avgpool(void)
{
    layer_case("avgpool_2x2s2", (NnShape){2, 6, 6}, (LayerArg){.op = NN_OP_AVGPOOL, .k = 2, .stride = 2});
    layer_case("avgpool_3x3s2p1", (NnShape){2, 7, 7}, (LayerArg){.op = NN_OP_AVGPOOL, .k = 3, .stride = 2, .pad = 1});
}

static void test_grad_gap(void) { layer_case("gap", (NnShape){3, 4, 5}, (LayerArg){.op = NN_OP_GAP}); }

static void test_grad_batchnorm(void)
{
    layer_case("bn_train", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_BATCHNORM, .x_scale = 2, .batch = 4});
    layer_case("bn_train_flat", (NnShape){5, 1, 1}, (LayerArg){.op = NN_OP_BATCHNORM, .batch = 6});
    layer_case("bn_eval", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_BATCHNORM, .eval = 1});
}

static void test_grad_groupnorm(void)
{
    layer_case("gn_groups1", (NnShape){4, 3, 3}, (LayerArg){.op = NN_OP_GROUPNORM, .groups = 1, .batch = 2});
    layer_case("gn_groups2", (NnShape){4, 3, 3}, (LayerArg){.op = NN_OP_GROUPNORM, .groups = 2, .batch = 2});
    layer_case("gn_groups_c", (NnShape){4, 3, 3}, (LayerArg){.op = NN_OP_GROUPNORM, .groups = 4, .batch = 2});
    layer_case("gn_eval", (NnShape){6, 2, 2}, (LayerArg){.op = NN_OP_GROUPNORM, .groups = 3, .eval = 1});
}

/* ============================== batch norm statistics ============================== */

static void test_batchnorm_running_stats(void)
{
    enum { B = 5, C = 3, HW = 16 };
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bn", (NnShape){C, 4, 4}, B));
    int bn = nn_batchnorm(&m, m.input, NN_ACT_NONE);
    int f = nn_flatten(&m, bn);
    CHECK_OK(nn_model_finalize(&m, f, f, C * HW));
    if (!m.finalized) {
        nn_model_free(&m);
        return;
    }
    nn_model_init_params(&m, SEED);
    const NnParamView *vm = nn_model_view(&m, "bn1.running_mean"), *vv = nn_model_view(&m, "bn1.running_var");
    const NnParamView *vg = nn_model_view(&m, "bn1.weight"), *vb = nn_model_view(&m, "bn1.bias");
    CHECK(vm && vv && vg && vb);
    if (!vm || !vv || !vg || !vb) {
        nn_model_free(&m);
        return;
    }
    CHECK(!vm->trainable && !vv->trainable && vm->offset >= m.n_params && vv->offset >= m.n_params);
    for (int c = 0; c < C; c++) { /* PyTorch's initial values, gamma = 1, beta = 0 */
        CHECK(m.state[vg->offset + c] == 1.0f && m.state[vb->offset + c] == 0.0f);
        CHECK(m.state[vm->offset + c] == 0.0f && m.state[vv->offset + c] == 1.0f);
    }
    float *rm = m.state + vm->offset, *rv = m.state + vv->offset;
    const float rm0[C] = {0.2f, -0.3f, 0.5f}, rv0[C] = {1.5f, 0.7f, 2.0f};
    memcpy(rm, rm0, sizeof rm0);
    memcpy(rv, rv0, sizeof rv0);

    FhRng rng = rng_for("bn_running", 0);
    float x[B * C * HW];
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < HW; i++)
                x[(b * C + c) * HW + i] = (float)(1.5 * (c + 1) * fh_rng_normal(&rng) + 2.0 * c - 1.0);
    CHECK_OK(nn_model_forward(&m, x, B));
    const float *y = nn_model_logits(&m);
    for (int c = 0; c < C; c++) {
        double s = 0.0, sy = 0.0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) {
                s += x[(b * C + c) * HW + i];
                sy += y[(b * C + c) * HW + i];
            }
        double n = B * HW, mean = s / n, ymean = sy / n, ss = 0.0, syy = 0.0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) {
                double d = x[(b * C + c) * HW + i] - mean, e = y[(b * C + c) * HW + i] - ymean;
                ss += d * d;
                syy += e * e;
            }
        double var_biased = ss / n, var_unbiased = ss / (n - 1);
        /* PyTorch: momentum 0.1, unbiased variance for the running estimate */
        CHECK_NEAR(rm[c], 0.9 * rm0[c] + 0.1 * mean, 1e-5 * (1.0 + fabs(mean)));
        CHECK_NEAR(rv[c], 0.9 * rv0[c] + 0.1 * var_unbiased, 1e-5 * (1.0 + var_unbiased));
        /* and the biased one to normalise: per-channel mean 0, variance var / (var + eps) ~ 1 */
        CHECK_NEAR(ymean, 0.0, 1e-5);
        CHECK_NEAR(syy / n, var_biased / (var_biased + 1e-5), 1e-4);
        CHECK_NEAR(syy / n, 1.0, 1e-3);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) {
                double want = (x[(b * C + c) * HW + i] - mean) / sqrt(var_biased + 1e-5);
                CHECK_NEAR(y[(b * C + c) * HW + i], want, 1e-4);
            }
    }

    /* bn_update_running = 0 (SAM's second pass): batch statistics, running stats frozen */
    float rm1[C], rv1[C];
    memcpy(rm1, rm, sizeof rm1);
    memcpy(rv1, rv, sizeof rv1);
    for (int i = 0; i < B * C * HW; i++) x[i] = 3.0f * x[i] + 0.5f;
    m.bn_update_running = 0;
    CHECK_OK(nn_model_forward(&m, x, B));
    CHECK(memcmp(rm1, rm, sizeof rm1) == 0 && memcmp(rv1, rv, sizeof rv1) == 0);
    for (int c = 0; c < C; c++) {
        double s = 0.0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) s += y[(b * C + c) * HW + i];
        CHECK_NEAR(s / (B * HW), 0.0, 1e-5);
    }
    m.bn_update_running = 1;

    /* eval: running statistics normalise, and stay put; gamma and beta apply */
    for (int c = 0; c < C; c++) {
        m.state[vg->offset + c] = 0.5f + (float)c;
        m.state[vb->offset + c] = 0.25f - (float)c;
    }
    nn_model_set_training(&m, 0);
    CHECK_OK(nn_model_forward(&m, x, 2));
    CHECK(memcmp(rm1, rm, sizeof rm1) == 0 && memcmp(rv1, rv, sizeof rv1) == 0);
    for (int b = 0; b < 2; b++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < HW; i++) {
                int j = (b * C + c) * HW + i;
                double want = (x[j] - rm[c]) / sqrt((double)rv[c] + 1e-5) * (0.5 + c) + (0.25 - c);
                CHECK_NEAR(y[j], want, 1e-4 * (1.0 + fabs(want)));
            }
    /* a second training step moves the running statistics on from where they are */
    nn_model_set_training(&m, 1);
    CHECK_OK(nn_model_forward(&m, x, B));
    for (int c = 0; c < C; c++) {
        double s = 0.0, ss = 0.0, n = B * HW;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) s += x[(b * C + c) * HW + i];
        double mean = s / n;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) ss += (x[(b * C + c) * HW + i] - mean) * (x[(b * C + c) * HW + i] - mean);
        CHECK_NEAR(rm[c], 0.9 * rm1[c] + 0.1 * mean, 1e-5 * (1.0 + fabs(mean)));
        CHECK_NEAR(rv[c], 0.9 * rv1[c] + 0.1 * ss / (n - 1), 1e-5 * (1.0 + ss / (n - 1)));
    }
    nn_model_free(&m);
}

/* a channel whose mean is large against its spread (1000 +- 0.1): no cancellation in the variance */
static void test_batchnorm_large_offset(void)
{
    enum { B = 4, C = 2, HW = 25 };
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bn_offset", (NnShape){C, 5, 5}, B));
    int f = nn_flatten(&m, nn_batchnorm(&m, m.input, NN_ACT_NONE));
    CHECK_OK(nn_model_finalize(&m, f, f, C * HW));
    if (!m.finalized) {
        nn_model_free(&m);
        return;
    }
    nn_model_init_params(&m, SEED);
    FhRng rng = rng_for("bn_offset", 0);
    float x[B * C * HW];
    for (int i = 0; i < B * C * HW; i++)
        x[i] = (float)((i / HW) % C == 0 ? 1000.0 + 0.1 * fh_rng_normal(&rng) : -3e4 + 2.0 * fh_rng_normal(&rng));
    CHECK_OK(nn_model_forward(&m, x, B));
    const float *y = nn_model_logits(&m);
    for (int c = 0; c < C; c++) {
        double s = 0.0, ss = 0.0, n = B * HW;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) s += x[(b * C + c) * HW + i];
        double mean = s / n;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) ss += (x[(b * C + c) * HW + i] - mean) * (x[(b * C + c) * HW + i] - mean);
        double inv = 1.0 / sqrt(ss / n + 1e-5);
        double err = 0.0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) {
                int j = (b * C + c) * HW + i;
                err = fmax(err, fabs(y[j] - (x[j] - mean) * inv));
            }
        CHECK_MSG(err <= 1e-2, "channel %d: max error %.3g of the normalised output", c, err);
    }
    nn_model_free(&m);
}

static void test_groupnorm_normalises(void)
{
    enum { B = 2, C = 6, HW = 9, G = 3 };
    NnModel m;
    CHECK_OK(nn_model_init(&m, "gn", (NnShape){C, 3, 3}, B));
    int gn = nn_groupnorm(&m, m.input, G, NN_ACT_NONE);
    int f = nn_flatten(&m, gn);
    CHECK_OK(nn_model_finalize(&m, f, f, C * HW));
    if (!m.finalized) {
        nn_model_free(&m);
        return;
    }
    nn_model_init_params(&m, SEED);
    CHECK(m.n_buffers == 0);
    FhRng rng = rng_for("gn_normalises", 0);
    float x[B * C * HW];
    for (int i = 0; i < B * C * HW; i++) x[i] = (float)(3.0 * fh_rng_normal(&rng) + 1.0 + (i % 7));
    CHECK_OK(nn_model_forward(&m, x, B));
    const float *y = nn_model_logits(&m);
    int n = C / G * HW;
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++) {
            const float *xg = x + (b * C + g * (C / G)) * HW, *yg = y + (b * C + g * (C / G)) * HW;
            double s = 0.0, ss = 0.0;
            for (int i = 0; i < n; i++) s += xg[i];
            double mean = s / n;
            for (int i = 0; i < n; i++) ss += (xg[i] - mean) * (xg[i] - mean);
            double inv = 1.0 / sqrt(ss / n + 1e-5);
            for (int i = 0; i < n; i++) CHECK_NEAR(yg[i], (xg[i] - mean) * inv, 1e-4);
        }
    nn_model_free(&m);
}

/* ============================== bad input ============================== */

static void test_bad_pool(void)
{
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 3, 3}, 2));
    CHECK(nn_maxpool(&m, m.input, 5, 1, 0) < 0);
    CHECK(m.status == FH_ERR_USAGE);
    CHECK_MSG_HAS("maxpool1");
    CHECK_MSG_HAS("2x3x3");
    nn_model_free(&m);
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 3, 3}, 2));
    CHECK(nn_avgpool(&m, m.input, 4, 2, 0) < 0);
    CHECK_MSG_HAS("avgpool1");
    CHECK_MSG_HAS("2x3x3");
    nn_model_free(&m);
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 8, 8}, 2));
    CHECK(nn_maxpool(&m, m.input, 3, 2, 2) < 0); /* pad above half the kernel */
    CHECK_MSG_HAS("maxpool1");
    CHECK_MSG_HAS("pad 2");
    nn_model_free(&m);
}

/* ============================== channel-blocked layouts ============================== */

/* Batch norm, group norm (2 groups of 16 channels), global average and max pooling on the blocked layouts of
 * the oneDNN backend (nChw8c, nChw16c: NnTensor.block) compute what they compute on NCHW: every output, saved
 * and running statistic and gradient (dy masked by the fused activation included) within 1e-5 of NCHW's
 * after a reorder; the sums run in another order, so the bits differ, except the max pool's, which are
 * NCHW's. 32 channels: two or four blocks, split over the threads like NCHW's. */
enum { LB = 3, LC = 32, LHW = 35, LN = LB * LC * LHW };

/* index of (sample b, channel c, position i of hw) in NCHW (block 0) or in a channel-blocked layout */
static int64_t at(int b, int c, int i, int hw, int block)
{
    if (!block) return ((int64_t)b * LC + c) * hw + i;
    return (((int64_t)b * (LC / block) + c / block) * hw + i) * block + c % block;
}

static void relayout(float *dst, int dst_block, const float *src, int src_block, int hw)
{
    for (int b = 0; b < LB; b++)
        for (int c = 0; c < LC; c++)
            for (int i = 0; i < hw; i++) dst[at(b, c, i, hw, dst_block)] = src[at(b, c, i, hw, src_block)];
}

/* NCHW to and from `block` (0: a copy) */
static void to_layout(float *dst, const float *src, int block) { relayout(dst, block, src, 0, LHW); }
static void from_layout(float *dst, const float *src, int block) { relayout(dst, 0, src, block, LHW); }

/* the max pool: a 3x3 window, stride 2, padded by 1, over the 5 x 7 planes (LHW) */
enum { MP_H = 5, MP_W = 7, MP_HO = 3, MP_WO = 4, MP_N = LB * LC * MP_HO * MP_WO };

/* y, dx, dy after the fused mask, dgamma, dbeta, mean, invstd and running statistics of one layout, in NCHW */
typedef struct {
    float y[LN], dx[LN], dy[LN], y_eval[LN], dx_eval[LN], pooled[LB * LC], dpool[LN];
    float dgamma[LC], dbeta[LC], mean[LC], invstd[LC], rm[LC], rv[LC], dgamma_eval[LC], dbeta_eval[LC];
    float gn_y[LN], gn_dx[LN], gn_dgamma[LC], gn_dbeta[LC], gn_stats[4 * LB];
    float mp_y[MP_N], mp_dx[LN];
} LayoutRun;

static void norm_in_layout(LayoutRun *o, int block, const float *x0, const float *dy0, const float *gamma,
                           const float *beta)
{
    float *x = falloc(LN), *dy = falloc(LN), *y = falloc(LN), *dx = falloc(LN);
    to_layout(x, x0, block);
    to_layout(dy, dy0, block);
    for (int c = 0; c < LC; c++) {
        o->rm[c] = 0.1f * (float)c;
        o->rv[c] = 1.0f + 0.05f * (float)c;
    }
    memset(o->dgamma, 0, sizeof o->dgamma);
    memset(o->dbeta, 0, sizeof o->dbeta);
    memset(o->dgamma_eval, 0, sizeof o->dgamma_eval);
    memset(o->dbeta_eval, 0, sizeof o->dbeta_eval);
    /* training with a fused ReLU; dy is masked in place, dx accumulates onto 1 */
    for (int64_t i = 0; i < LN; i++) dx[i] = 1.0f;
    nn_batchnorm_forward_train_act(y, o->mean, o->invstd, o->rm, o->rv, x, gamma, beta, LB, LC, LHW, 1e-5f, 0.1f,
                                   NN_ACT_RELU, block);
    nn_batchnorm_backward_train_act(dx, o->dgamma, o->dbeta, dy, y, x, gamma, o->mean, o->invstd, LB, LC, LHW,
                                    NN_ACT_RELU, block, 0);
    from_layout(o->y, y, block);
    from_layout(o->dx, dx, block);
    from_layout(o->dy, dy, block);
    /* eval (frozen statistics) with a fused ReLU6, and its backward */
    to_layout(dy, dy0, block);
    for (int64_t i = 0; i < LN; i++) dx[i] = 0.0f;
    nn_batchnorm_forward_eval_act(y, x, gamma, beta, o->rm, o->rv, LB, LC, LHW, 1e-5f, NN_ACT_RELU6, block);
    nn_batchnorm_backward_eval(dx, o->dgamma_eval, o->dbeta_eval, dy, x, gamma, o->rm, o->rv, LB, LC, LHW, 1e-5f,
                               block);
    from_layout(o->y_eval, y, block);
    from_layout(o->dx_eval, dx, block);
    /* group norm, 2 groups: its statistics are layout-free sums, its per-channel parts are not */
    for (int64_t i = 0; i < LN; i++) dx[i] = 0.5f;
    memset(o->gn_dgamma, 0, sizeof o->gn_dgamma);
    memset(o->gn_dbeta, 0, sizeof o->gn_dbeta);
    nn_groupnorm_forward(y, o->gn_stats, o->gn_stats + 2 * LB, x, gamma, beta, LB, LC, LHW, 2, 1e-5f, block);
    nn_groupnorm_backward(dx, o->gn_dgamma, o->gn_dbeta, dy, x, gamma, o->gn_stats, o->gn_stats + 2 * LB, LB, LC,
                          LHW, 2, block, 0);
    from_layout(o->gn_y, y, block);
    from_layout(o->gn_dx, dx, block);
    /* global average pooling: [LB, LC] out in every layout, its dy the first LB * LC values of dy0 */
    for (int64_t i = 0; i < LN; i++) dx[i] = 0.0f;
    if (block) {
        nn_gap_forward_blocked(o->pooled, x, LB, LC, LHW, block);
        nn_gap_backward_blocked(dx, dy0, LB, LC, LHW, block);
    } else {
        nn_gap_forward(o->pooled, x, LB * LC, LHW);
        nn_gap_backward(dx, dy0, LB * LC, LHW);
    }
    from_layout(o->dpool, dx, block);
    /* max pooling: its dy the first MP_N values of dy0 */
    float mp_y[MP_N], mp_dy[MP_N];
    int32_t argmax[MP_N];
    relayout(mp_dy, block, dy0, 0, MP_HO * MP_WO);
    for (int64_t i = 0; i < LN; i++) dx[i] = 0.0f;
    const int lanes = block ? block : 1;
    if (block) nn_maxpool_forward_blocked(mp_y, argmax, x, LB, LC, MP_H, MP_W, 3, 2, 1, MP_HO, MP_WO, block);
    else nn_maxpool_forward(mp_y, argmax, x, LB * LC, MP_H, MP_W, 3, 2, 1, MP_HO, MP_WO);
    nn_maxpool_backward(dx, mp_dy, argmax, LB * LC / lanes, (int64_t)LHW * lanes, (int64_t)MP_HO * MP_WO * lanes);
    relayout(o->mp_y, 0, mp_y, block, MP_HO * MP_WO);
    from_layout(o->mp_dx, dx, block);
    free(x);
    free(dy);
    free(y);
    free(dx);
}

static void test_norm_blocked_layouts(void)
{
    FhRng rng = rng_for("norm_blocked_layouts", 0);
    float *x = falloc(LN), *dy = falloc(LN), gamma[LC], beta[LC];
    fill_normal(&rng, x, LN, 2.0);
    for (int64_t i = 0; i < LN; i++) x[i] += 3.0f; /* an offset, as after a conv */
    fill_normal(&rng, dy, LN, 1.0);
    fill_uniform(&rng, gamma, LC, 0.5, 1.5);
    fill_uniform(&rng, beta, LC, -0.5, 0.5);
    LayoutRun *plain = calloc(1, sizeof *plain), *blocked = calloc(1, sizeof *blocked);
    if (!plain || !blocked) abort();
    norm_in_layout(plain, 0, x, dy, gamma, beta);
    for (int block = 8; block <= 16; block += 8)
        for (int threads = 1; threads <= 2; threads++) {
            nn_set_threads(threads);
            norm_in_layout(blocked, block, x, dy, gamma, beta);
            nn_set_threads(1);
            char label[48];
            snprintf(label, sizeof label, "block %d, %d thread(s)", block, threads);
            const struct { const char *what; const float *a, *ref; int64_t n; } out[] = {
                {"y", blocked->y, plain->y, LN},
                {"dx", blocked->dx, plain->dx, LN},
                {"masked dy", blocked->dy, plain->dy, LN},
                {"dgamma", blocked->dgamma, plain->dgamma, LC},
                {"dbeta", blocked->dbeta, plain->dbeta, LC},
                {"mean", blocked->mean, plain->mean, LC},
                {"invstd", blocked->invstd, plain->invstd, LC},
                {"running mean", blocked->rm, plain->rm, LC},
                {"running var", blocked->rv, plain->rv, LC},
                {"eval y", blocked->y_eval, plain->y_eval, LN},
                {"eval dx", blocked->dx_eval, plain->dx_eval, LN},
                {"eval dgamma", blocked->dgamma_eval, plain->dgamma_eval, LC},
                {"eval dbeta", blocked->dbeta_eval, plain->dbeta_eval, LC},
                {"gap", blocked->pooled, plain->pooled, LB * LC},
                {"group norm y", blocked->gn_y, plain->gn_y, LN},
                {"group norm dx", blocked->gn_dx, plain->gn_dx, LN},
                {"group norm dgamma", blocked->gn_dgamma, plain->gn_dgamma, LC},
                {"group norm dbeta", blocked->gn_dbeta, plain->gn_dbeta, LC},
                {"group norm statistics", blocked->gn_stats, plain->gn_stats, 4 * LB},
                {"gap dx", blocked->dpool, plain->dpool, LN},
            };
            for (size_t k = 0; k < sizeof out / sizeof out[0]; k++)
                check_close(label, out[k].what, out[k].a, out[k].ref, out[k].n, 1e-5);
            /* a max is exact: the same winners, the same bits */
            CHECK_MSG(memcmp(blocked->mp_y, plain->mp_y, sizeof plain->mp_y) == 0, "%s: max pool y", label);
            CHECK_MSG(memcmp(blocked->mp_dx, plain->mp_dx, sizeof plain->mp_dx) == 0, "%s: max pool dx", label);
        }
    free(plain);
    free(blocked);
    free(x);
    free(dy);
}

/* Max pools whose windows tile the input (2x2 and 3x3 of stride k over 6 x 6 planes), ties (small integers),
 * a NaN and -0 gradients included: the blocked forward has NCHW's winners and bits, and the blocked layouts'
 * dense backward gives the scatter's bits on 1 and 2 threads, written (whatever dx held) or added. */
enum { TP_H = 6, TP_HW = TP_H * TP_H, TP_N = LB * LC * TP_HW };

static void tiled_pool_in_layout(float *y_nchw, float *dx_nchw, float *dx_added_nchw, int block, int k,
                                 const float *x0, const float *dy0, const float *dx0)
{
    const int ho = TP_H / k, out_hw = ho * ho, lanes = block ? block : 1, runs = LB * LC / lanes;
    float *x = falloc(TP_N), *y = falloc(TP_N), *dy = falloc(TP_N), *scattered = falloc(TP_N), *dx = falloc(TP_N);
    int32_t *argmax = calloc(TP_N, sizeof *argmax);
    if (!argmax) abort();
    relayout(x, block, x0, 0, TP_HW);
    relayout(dy, block, dy0, 0, out_hw);
    if (block) nn_maxpool_forward_blocked(y, argmax, x, LB, LC, TP_H, TP_H, k, k, 0, ho, ho, block);
    else nn_maxpool_forward(y, argmax, x, LB * LC, TP_H, TP_H, k, k, 0, ho, ho);
    relayout(y_nchw, 0, y, block, out_hw);
    CHECK(nn_maxpool_tiles(TP_H, TP_H, k, k, 0));
    for (int added = 0; added <= 1; added++) {
        relayout(scattered, block, dx0, 0, TP_HW);
        if (!added) memset(scattered, 0, sizeof(float) * TP_N);
        nn_maxpool_backward(scattered, dy, argmax, runs, (int64_t)TP_HW * lanes, (int64_t)out_hw * lanes);
        relayout(dx, block, dx0, 0, TP_HW);
        if (!added) for (int64_t i = 0; i < TP_N; i++) dx[i] = 7.0f; /* ignored */
        if (block) nn_maxpool_backward_tiled(dx, dy, argmax, runs, TP_H, TP_H, k, block, !added);
        else memcpy(dx, scattered, sizeof(float) * TP_N); /* NCHW keeps the scatter */
        CHECK_MSG(memcmp(dx, scattered, sizeof(float) * TP_N) == 0, "block %d, %dx%d, %s: tiled dx is the scatter's",
                  block, k, k, added ? "added" : "written");
        relayout(added ? dx_added_nchw : dx_nchw, 0, dx, block, TP_HW);
    }
    free(x);
    free(y);
    free(dy);
    free(scattered);
    free(dx);
    free(argmax);
}

static void test_maxpool_tiled(void)
{
    FhRng rng = rng_for("maxpool_tiled", 0);
    float *x = falloc(TP_N), *dy = falloc(TP_N), *dx0 = falloc(TP_N);
    fill_uniform(&rng, x, TP_N, 0.0, 3.0);
    for (int64_t i = 0; i < TP_N; i++) x[i] = floorf(x[i]); /* ties in most windows */
    x[5] = NAN;
    fill_normal(&rng, dy, TP_N, 1.0);
    fill_normal(&rng, dx0, TP_N, 1.0);
    dy[0] = dy[7] = -0.0f;
    dx0[3] = -0.0f;
    float *ref[3], *got[3];
    for (int i = 0; i < 3; i++) {
        ref[i] = falloc(TP_N);
        got[i] = falloc(TP_N);
    }
    for (int k = 2; k <= 3; k++) {
        tiled_pool_in_layout(ref[0], ref[1], ref[2], 0, k, x, dy, dx0);
        for (int block = 8; block <= 16; block += 8)
            for (int threads = 1; threads <= 2; threads++) {
                nn_set_threads(threads);
                tiled_pool_in_layout(got[0], got[1], got[2], block, k, x, dy, dx0);
                nn_set_threads(1);
                const int64_t out_n = (int64_t)LB * LC * (TP_H / k) * (TP_H / k);
                CHECK_MSG(memcmp(got[0], ref[0], sizeof(float) * out_n) == 0, "block %d, %dx%d: y", block, k, k);
                for (int i = 1; i < 3; i++)
                    CHECK_MSG(memcmp(got[i], ref[i], sizeof(float) * TP_N) == 0, "block %d, %d threads, %dx%d: dx",
                              block, threads, k, k);
            }
    }
    CHECK(!nn_maxpool_tiles(7, 6, 2, 2, 0) && !nn_maxpool_tiles(6, 6, 3, 2, 1) && !nn_maxpool_tiles(6, 6, 2, 1, 0));
    for (int i = 0; i < 3; i++) {
        free(ref[i]);
        free(got[i]);
    }
    free(x);
    free(dy);
    free(dx0);
}

/* ============================== threads ============================== */

/* The kernels split over train.threads (kernels.h, NN_PAR_MIN) on tensors large enough to split: every
 * output, saved statistic, running statistic and parameter gradient has the same bits on 1 and 3 threads. */
enum { TB = 4, TC = 16, TH = 32, TW = 32, THW = TH * TW, TN = TB * TC * THW, TO = TN / 4, T_RESULT = 16 * TN };

static void kernels_on_threads(int threads, float *res, int32_t *argmax)
{
    nn_set_threads(threads);
    FhRng rng = rng_for("threads_same_bits", 0);
    float *x = falloc(TN), *dy = falloc(TN), gamma[TC], beta[TC], stats[4 * TC];
    fill_normal(&rng, x, TN, 2.0);
    fill_normal(&rng, dy, TN, 1.0);
    fill_uniform(&rng, gamma, TC, 0.5, 1.5);
    fill_uniform(&rng, beta, TC, -0.5, 0.5);
    fill_uniform(&rng, stats, 4 * TC, 0.5, 1.5);
    const int planes = TB * TC;
    float *r = res, *y;
    memcpy(y = r, x, sizeof(float) * TN);
    nn_act_forward(y, TN, NN_ACT_RELU6);
    r += TN;
    memcpy(r, dy, sizeof(float) * TN);
    nn_act_backward(r, y, TN, NN_ACT_RELU6);
    r += TN;
    nn_maxpool_forward(r, argmax, x, planes, TH, TW, 2, 2, 0, TH / 2, TW / 2);
    nn_maxpool_backward(r + TO, dy, argmax, planes, TH * TW, (TH / 2) * (TW / 2));
    r += TO + TN;
    nn_maxpool_forward(r, argmax + TO, x, planes, TH, TW, 3, 2, 1, TH / 2, TW / 2);
    nn_avgpool_forward(r + TO, x, planes, TH, TW, 3, 2, 1, TH / 2, TW / 2);
    nn_avgpool_backward(r + 2 * TO, dy, planes, TH, TW, 3, 2, 1, TH / 2, TW / 2);
    r += 2 * TO + TN;
    nn_gap_forward(r, x, planes, THW);
    nn_gap_backward(r + planes, dy, planes, THW);
    r += planes + TN;
    /* batch norm, training with a fused ReLU (its running statistics in stats), then eval */
    float *bn_dy = fdup(dy, TN);
    nn_batchnorm_forward_train_act(r, r + TN, r + TN + TC, stats, stats + TC, x, gamma, beta, TB, TC, THW, 1e-5f,
                                   0.1f, NN_ACT_RELU, 0);
    nn_batchnorm_backward_train_act(r + TN + 2 * TC, r + 2 * TN + 2 * TC, r + 2 * TN + 3 * TC, bn_dy, r, x, gamma,
                                    r + TN, r + TN + TC, TB, TC, THW, NN_ACT_RELU, 0, 0);
    r += 2 * TN + 4 * TC;
    nn_batchnorm_forward_eval_act(r, x, gamma, beta, stats, stats + TC, TB, TC, THW, 1e-5f, NN_ACT_RELU6, 0);
    nn_batchnorm_backward_eval(r + TN, r + 2 * TN, r + 2 * TN + TC, dy, x, gamma, stats, stats + TC, TB, TC, THW, 1e-5f, 0);
    r += 2 * TN + 2 * TC;
    /* group norm, 2 groups */
    nn_groupnorm_forward(r, r + TN, r + TN + 2 * TB, x, gamma, beta, TB, TC, THW, 2, 1e-5f, 0);
    nn_groupnorm_backward(r + TN + 4 * TB, r + 2 * TN + 4 * TB, r + 2 * TN + 4 * TB + TC, dy, x, gamma, r + TN,
                          r + TN + 2 * TB, TB, TC, THW, 2, 0, 0);
    r += 2 * TN + 4 * TB + 2 * TC;
    memcpy(r, stats, sizeof stats);
    r += 4 * TC;
    CHECK(r - res <= T_RESULT);
    free(x);
    free(dy);
    free(bn_dy);
    nn_set_threads(1);
}

static void test_threads_same_bits(void)
{
    float *one = falloc(T_RESULT), *three = falloc(T_RESULT);
    int32_t *argmax_one = calloc(2 * TO, sizeof(int32_t)), *argmax_three = calloc(2 * TO, sizeof(int32_t));
    kernels_on_threads(1, one, argmax_one);
    kernels_on_threads(3, three, argmax_three);
    CHECK(memcmp(one, three, sizeof(float) * T_RESULT) == 0);
    CHECK(memcmp(argmax_one, argmax_three, sizeof(int32_t) * 2 * TO) == 0);
    free(one);
    free(three);
    free(argmax_one);
    free(argmax_three);
}

/* ============================== main ============================== */

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    layer_tests_init();

    RUN(test_grad_maxpool);
    RUN(test_grad_avgpool);
    RUN(test_grad_gap);
    RUN(test_grad_batchnorm);
    RUN(test_grad_groupnorm);
    RUN(test_batchnorm_running_stats);
    RUN(test_batchnorm_large_offset);
    RUN(test_groupnorm_normalises);
    RUN(test_bad_pool);
    RUN(test_norm_blocked_layouts);
    RUN(test_maxpool_tiled);
    RUN(test_threads_same_bits);
    return test_summary();
}
