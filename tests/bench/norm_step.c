/* Batch norm with a fused activation, forward (training statistics) and backward, on the channel-blocked layout
 * the onednn backend keeps between layers: fedhet's kernels (src/nn/kernels_act_pool_norm.c) against oneDNN's
 * batch-normalization primitive (scale and shift; a ReLU fused with dnnl_fuse_norm_relu, its mask in a
 * workspace), on the same tensors, one thread. The question it answers: whether moving batch norm to oneDNN
 * would pay. Both as a model runs a layer that is the first to reach its input's gradient (every batch norm of
 * the zoo is: it reads a conv's output that nothing else reads), so dx is written, not added to. The primitive
 * is timed alone, and as fedhet would have to run it: a ReLU6 (mobilenetv2), which oneDNN's batch norm cannot
 * fuse, as separate passes after the forward and before the backward.
 * Shapes: resnet8's first stage, a mobilenetv2 expansion, resnet18's last stage (batch 32).
 * Then max pooling, forward (training) + backward, on the same layout: fedhet's kernels as a model runs a pool
 * that is the first layer to reach its input's gradient (both shapes here are): windows that tile the input
 * write dx in one dense pass, others zero it and scatter; against oneDNN's pooling primitive (its winners in a
 * workspace) writing dx; shapes:
 * resnet18_gn's stem (3x3, stride 2, padded) and smallcnn's first pool (2x2, stride 2), batch 64.
 * Prints one line per shape (and activation): ms per forward + backward, best of `reps` (default 20), and ratios.
 * Run: make bench-norm (or build/bench/norm_step [reps]). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "../../src/nn/kernels.h"
#include "fedhet/core.h"

#define CHECK_DNNL(call)                                                                      \
    do {                                                                                      \
        dnnl_status_t st_ = (call);                                                           \
        if (st_ != dnnl_success) {                                                            \
            fprintf(stderr, "norm_step: %s failed: %d\n", #call, (int)st_);                   \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

typedef struct {
    const char *what;
    int n, c, h, w;
} Shape;

static float *filled(size_t n, unsigned seed)
{
    float *p = NULL;
    if (fh_alloc_aligned((void **)&p, n * sizeof(float), "bench tensor") != FH_OK) exit(1);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u; /* a fixed LCG: timing does not depend on the values */
        p[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return p;
}

static double fedhet_ms(const Shape *s, NnAct act, int reps)
{
    const size_t n = (size_t)s->n * s->c * s->h * s->w;
    float *x = filled(n, 1), *y = filled(n, 2), *dy0 = filled(n, 3), *dy = filled(n, 4), *dx = filled(n, 5);
    float *gamma = filled((size_t)s->c, 6), *beta = filled((size_t)s->c, 7), *stats = filled(6 * (size_t)s->c, 8);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        memcpy(dy, dy0, n * sizeof(float)); /* backward masks dy in place */
        const double t0 = fh_time_now();
        nn_batchnorm_forward_train_act(y, stats, stats + s->c, stats + 2 * s->c, stats + 3 * s->c, x, gamma, beta,
                                       s->n, s->c, s->h * s->w, 1e-5f, 0.1f, act, 16);
        nn_batchnorm_backward_train_act(dx, stats + 4 * s->c, stats + 5 * s->c, dy, y, x, gamma, stats,
                                        stats + s->c, s->n, s->c, s->h * s->w, act, 16, 1);
        const double t = fh_time_now() - t0;
        if (t < best) best = t;
    }
    float *all[] = {x, y, dy0, dy, dx, gamma, beta, stats};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fh_free((void **)&all[i]);
    return best * 1e3;
}

static dnnl_memory_t mem(dnnl_engine_t eng, const dnnl_memory_desc_t *md, unsigned seed)
{
    dnnl_memory_t m;
    CHECK_DNNL(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
    void *p = NULL;
    CHECK_DNNL(dnnl_memory_get_data_handle(m, &p));
    float *src = filled(dnnl_memory_desc_get_size(md) / sizeof(float), seed);
    memcpy(p, src, dnnl_memory_desc_get_size(md));
    fh_free((void **)&src);
    return m;
}

/* A oneDNN forward-training primitive and its backward on one engine and stream, with their arguments. */
typedef struct {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    dnnl_primitive_desc_t fpd, bpd;
    dnnl_primitive_t fwd, bwd;
    dnnl_exec_arg_t *fargs, *bargs;
    int n_fargs, n_bargs;
} FwdBwd;

static void pair_open(FwdBwd *p)
{
    memset(p, 0, sizeof *p);
    CHECK_DNNL(dnnl_engine_create(&p->eng, dnnl_cpu, 0));
    CHECK_DNNL(dnnl_stream_create(&p->stream, p->eng, dnnl_stream_default_flags));
}

static void pair_make(FwdBwd *p, const_dnnl_op_desc_t fd, const_dnnl_op_desc_t bd)
{
    CHECK_DNNL(dnnl_primitive_desc_create(&p->fpd, fd, NULL, p->eng, NULL));
    CHECK_DNNL(dnnl_primitive_desc_create(&p->bpd, bd, NULL, p->eng, p->fpd));
    CHECK_DNNL(dnnl_primitive_create(&p->fwd, p->fpd));
    CHECK_DNNL(dnnl_primitive_create(&p->bwd, p->bpd));
}

/* Best ms over reps of forward + backward alone (*bare), and as fedhet would run them (returned): `between`
 * (may be NULL) after the forward. */
static double pair_time(const FwdBwd *p, int reps, void (*between)(const void *), const void *env, double *bare)
{
    double best = 1e30, best_bare = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = fh_time_now();
        CHECK_DNNL(dnnl_primitive_execute(p->fwd, p->stream, p->n_fargs, p->fargs));
        CHECK_DNNL(dnnl_primitive_execute(p->bwd, p->stream, p->n_bargs, p->bargs));
        CHECK_DNNL(dnnl_stream_wait(p->stream));
        double t = fh_time_now() - t0;
        if (t < best_bare) best_bare = t;
        t0 = fh_time_now();
        CHECK_DNNL(dnnl_primitive_execute(p->fwd, p->stream, p->n_fargs, p->fargs));
        if (between) between(env);
        CHECK_DNNL(dnnl_primitive_execute(p->bwd, p->stream, p->n_bargs, p->bargs));
        CHECK_DNNL(dnnl_stream_wait(p->stream));
        t = fh_time_now() - t0;
        if (t < best) best = t;
    }
    *bare = best_bare * 1e3;
    return best * 1e3;
}

static void pair_close(FwdBwd *p, dnnl_memory_t *mems, size_t n_mems)
{
    for (size_t i = 0; i < n_mems; i++) dnnl_memory_destroy(mems[i]);
    dnnl_primitive_destroy(p->fwd);
    dnnl_primitive_destroy(p->bwd);
    dnnl_primitive_desc_destroy(p->fpd);
    dnnl_primitive_desc_destroy(p->bpd);
    dnnl_stream_destroy(p->stream);
    dnnl_engine_destroy(p->eng);
}

/* an activation oneDNN's batch norm cannot fuse (ReLU6), as fedhet's own passes around the primitives */
typedef struct {
    float *y, *dy;
    int64_t n;
    NnAct act;
} ActPasses;

static void act_passes(const void *env)
{
    const ActPasses *a = env;
    nn_act_forward(a->y, a->n, a->act);
    nn_act_backward(a->dy, a->y, a->n, a->act);
}

/* ms of the primitive alone (*bare) and as fedhet would run it (returned) */
static double onednn_ms(const Shape *s, NnAct act, int reps, double *bare)
{
    const size_t n = (size_t)s->n * s->c * s->h * s->w;
    FwdBwd p;
    pair_open(&p);
    const dnnl_dims_t dims = {s->n, s->c, s->h, s->w}, cdim = {s->c};
    dnnl_memory_desc_t data, chan;
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&data, 4, dims, dnnl_f32, dnnl_nChw16c));
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&chan, 1, cdim, dnnl_f32, dnnl_x));
    const unsigned flags = dnnl_use_scale | dnnl_use_shift | (act == NN_ACT_RELU ? dnnl_fuse_norm_relu : 0);
    dnnl_batch_normalization_desc_t fd, bd;
    CHECK_DNNL(dnnl_batch_normalization_forward_desc_init(&fd, dnnl_forward_training, &data, 1e-5f, flags));
    CHECK_DNNL(dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &data, &data, 1e-5f, flags));
    pair_make(&p, &fd, &bd);
    const dnnl_memory_desc_t *ws_md = dnnl_primitive_desc_query_md(p.fpd, dnnl_query_workspace_md, 0);
    const dnnl_memory_desc_t no_ws = {0};
    dnnl_memory_t x = mem(p.eng, &data, 1), y = mem(p.eng, &data, 2), dy = mem(p.eng, &data, 3),
                  dx = mem(p.eng, &data, 5);
    dnnl_memory_t scale = mem(p.eng, &chan, 6), shift = mem(p.eng, &chan, 7), mean = mem(p.eng, &chan, 8),
                  var = mem(p.eng, &chan, 9), dscale = mem(p.eng, &chan, 10), dshift = mem(p.eng, &chan, 11);
    dnnl_memory_t ws = mem(p.eng, ws_md ? ws_md : &no_ws, 12);
    ActPasses passes = {NULL, NULL, (int64_t)n, act};
    CHECK_DNNL(dnnl_memory_get_data_handle(y, (void **)&passes.y));
    CHECK_DNNL(dnnl_memory_get_data_handle(dy, (void **)&passes.dy));
    dnnl_exec_arg_t fargs[] = {{DNNL_ARG_SRC, x},     {DNNL_ARG_DST, y},          {DNNL_ARG_SCALE, scale},
                               {DNNL_ARG_SHIFT, shift}, {DNNL_ARG_MEAN, mean},     {DNNL_ARG_VARIANCE, var},
                               {DNNL_ARG_WORKSPACE, ws}};
    dnnl_exec_arg_t bargs[] = {{DNNL_ARG_SRC, x},          {DNNL_ARG_DIFF_DST, dy},     {DNNL_ARG_SCALE, scale},
                               {DNNL_ARG_SHIFT, shift},      {DNNL_ARG_MEAN, mean},       {DNNL_ARG_VARIANCE, var},
                               {DNNL_ARG_DIFF_SRC, dx},      {DNNL_ARG_DIFF_SCALE, dscale},
                               {DNNL_ARG_DIFF_SHIFT, dshift}, {DNNL_ARG_WORKSPACE, ws}};
    /* the workspace (the fused ReLU's mask) is the last argument of each */
    p.fargs = fargs;
    p.bargs = bargs;
    p.n_fargs = (int)(sizeof fargs / sizeof fargs[0]) - !ws_md;
    p.n_bargs = (int)(sizeof bargs / sizeof bargs[0]) - !ws_md;
    const double ms = pair_time(&p, reps, act == NN_ACT_RELU ? NULL : act_passes, &passes, bare);
    dnnl_memory_t all[] = {x, y, dy, dx, scale, shift, mean, var, dscale, dshift, ws};
    pair_close(&p, all, sizeof all / sizeof all[0]);
    return ms;
}

typedef struct {
    const char *what;
    int n, c, h, w, k, stride, pad;
} PoolShape;

static int pool_out(int in, const PoolShape *p) { return (in + 2 * p->pad - p->k) / p->stride + 1; }

static double fedhet_pool_ms(const PoolShape *p, int reps)
{
    const int ho = pool_out(p->h, p), wo = pool_out(p->w, p);
    const size_t n = (size_t)p->n * p->c * p->h * p->w, no = (size_t)p->n * p->c * ho * wo;
    float *x = filled(n, 1), *y = filled(no, 2), *dy = filled(no, 3), *dx = filled(n, 4);
    int32_t *argmax = NULL;
    if (fh_alloc_aligned((void **)&argmax, no * sizeof(int32_t), "bench indices") != FH_OK) exit(1);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = fh_time_now();
        nn_maxpool_forward_blocked(y, argmax, x, p->n, p->c, p->h, p->w, p->k, p->stride, p->pad, ho, wo, 16);
        if (nn_maxpool_tiles(p->h, p->w, p->k, p->stride, p->pad))
            nn_maxpool_backward_tiled(dx, dy, argmax, p->n * p->c / 16, p->h, p->w, p->k, 16, 1);
        else {
            memset(dx, 0, n * sizeof(float));
            nn_maxpool_backward(dx, dy, argmax, p->n * p->c / 16, (int64_t)p->h * p->w * 16, (int64_t)ho * wo * 16);
        }
        const double t = fh_time_now() - t0;
        if (t < best) best = t;
    }
    float *all[] = {x, y, dy, dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fh_free((void **)&all[i]);
    fh_free((void **)&argmax);
    return best * 1e3;
}

/* ms of the primitives alone (*bare) and as fedhet would run them (returned: the same, nothing runs between) */
static double onednn_pool_ms(const PoolShape *ps, int reps, double *bare)
{
    FwdBwd p;
    pair_open(&p);
    const int ho = pool_out(ps->h, ps), wo = pool_out(ps->w, ps);
    const dnnl_dims_t in_dims = {ps->n, ps->c, ps->h, ps->w}, out_dims = {ps->n, ps->c, ho, wo};
    const dnnl_dims_t strides = {ps->stride, ps->stride}, kernel = {ps->k, ps->k}, pad = {ps->pad, ps->pad};
    dnnl_memory_desc_t src, dst;
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&src, 4, in_dims, dnnl_f32, dnnl_nChw16c));
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&dst, 4, out_dims, dnnl_f32, dnnl_nChw16c));
    dnnl_pooling_desc_t fd, bd;
    CHECK_DNNL(dnnl_pooling_forward_desc_init(&fd, dnnl_forward_training, dnnl_pooling_max, &src, &dst, strides, kernel,
                                              pad, pad));
    CHECK_DNNL(dnnl_pooling_backward_desc_init(&bd, dnnl_pooling_max, &src, &dst, strides, kernel, pad, pad));
    pair_make(&p, &fd, &bd);
    const dnnl_memory_desc_t *ws_md = dnnl_primitive_desc_query_md(p.fpd, dnnl_query_workspace_md, 0);
    dnnl_memory_t x = mem(p.eng, &src, 1), y = mem(p.eng, &dst, 2), dy = mem(p.eng, &dst, 3),
                  dx = mem(p.eng, &src, 4), ws = mem(p.eng, ws_md, 5);
    dnnl_exec_arg_t fargs[] = {{DNNL_ARG_SRC, x}, {DNNL_ARG_DST, y}, {DNNL_ARG_WORKSPACE, ws}};
    dnnl_exec_arg_t bargs[] = {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_SRC, dx}, {DNNL_ARG_WORKSPACE, ws}};
    p.fargs = fargs;
    p.bargs = bargs;
    p.n_fargs = p.n_bargs = 3;
    const double ms = pair_time(&p, reps, NULL, NULL, bare);
    dnnl_memory_t all[] = {x, y, dy, dx, ws};
    pair_close(&p, all, sizeof all / sizeof all[0]);
    return ms;
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (reps < 1) {
        fprintf(stderr, "usage: norm_step [reps >= 1]\n");
        return 2;
    }
    nn_set_threads(1);
    const Shape shapes[] = {{"resnet8 stage 1", 32, 128, 32, 32},
                            {"mobilenetv2 expansion", 32, 96, 16, 16},
                            {"resnet18 stage 4", 32, 512, 4, 4}};
    printf("batch norm + activation, forward (training) + backward, nChw16c, 1 thread, best of %d\n", reps);
    printf("%-24s %-16s %-6s %10s %12s %16s %8s %12s\n", "shape", "NxCxHxW", "act", "fedhet ms", "oneDNN ms",
           "as fedhet ms", "ratio", "as fedhet");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int a = 0; a < 2; a++) {
            const Shape *s = &shapes[i];
            const NnAct act = a ? NN_ACT_RELU6 : NN_ACT_RELU;
            double bare;
            const double f = fedhet_ms(s, act, reps), o = onednn_ms(s, act, reps, &bare);
            char dims[32];
            snprintf(dims, sizeof dims, "%dx%dx%dx%d", s->n, s->c, s->h, s->w);
            printf("%-24s %-16s %-6s %10.3f %12.3f %16.3f %8.2f %12.2f\n", s->what, dims, a ? "relu6" : "relu", f,
                   bare, o, bare / f, o / f);
        }
    printf("ratio: oneDNN's primitive / fedhet's kernels; as fedhet: with, for ReLU6, the activation's own\n"
           "passes, / fedhet's kernels\n");
    const PoolShape pools[] = {{"resnet18_gn stem pool", 64, 64, 16, 16, 3, 2, 1},
                               {"smallcnn first pool", 64, 32, 28, 28, 2, 2, 0}};
    printf("\nmax pooling, forward (training) + backward, nChw16c, 1 thread, best of %d\n", reps);
    printf("%-24s %-16s %-6s %10s %12s %16s %8s %12s\n", "shape", "NxCxHxW", "window", "fedhet ms", "oneDNN ms",
           "as fedhet ms", "ratio", "as fedhet");
    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++) {
        const PoolShape *p = &pools[i];
        double bare;
        const double f = fedhet_pool_ms(p, reps), o = onednn_pool_ms(p, reps, &bare);
        char dims[32], window[16];
        snprintf(dims, sizeof dims, "%dx%dx%dx%d", p->n, p->c, p->h, p->w);
        snprintf(window, sizeof window, "%dx%d/%d", p->k, p->k, p->stride);
        printf("%-24s %-16s %-6s %10.3f %12.3f %16.3f %8.2f %12.2f\n", p->what, dims, window, f, bare, o, bare / f,
               o / f);
    }
    return 0;
}
