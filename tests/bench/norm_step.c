/* Batch norm with a fused activation, forward (training statistics) and backward, on the channel-blocked layout
 * the onednn backend keeps between layers: fedhet's kernels (src/nn/kernels_act_pool_norm.c) against oneDNN's
 * batch-normalization primitive (scale and shift; a ReLU fused with dnnl_fuse_norm_relu, its mask in a
 * workspace), on the same tensors, one thread. The question it answers: whether moving batch norm to oneDNN
 * would pay. The primitive alone is timed, and as fedhet would have to run it: its diff_src written to a
 * staging buffer and added into dx (fedhet's backward passes accumulate, a tensor read by a residual branch
 * too), and a ReLU6 (mobilenetv2), which oneDNN's batch norm cannot fuse, as separate passes after the
 * forward and before the backward.
 * Shapes: resnet8's first stage, a mobilenetv2 expansion, resnet18's last stage (batch 32).
 * Then max pooling, forward (training) + backward, on the same layout: fedhet's kernel against oneDNN's
 * pooling primitive (its winners in a workspace), alone and with its diff_src added into dx; shapes:
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
                                        stats + s->c, s->n, s->c, s->h * s->w, act, 16);
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

/* ms of the primitive alone (*bare) and as fedhet would run it (returned) */
static double onednn_ms(const Shape *s, NnAct act, int reps, double *bare)
{
    const size_t n = (size_t)s->n * s->c * s->h * s->w;
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    CHECK_DNNL(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK_DNNL(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
    const dnnl_dims_t dims = {s->n, s->c, s->h, s->w}, cdim = {s->c};
    dnnl_memory_desc_t data, chan;
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&data, 4, dims, dnnl_f32, dnnl_nChw16c));
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&chan, 1, cdim, dnnl_f32, dnnl_x));
    const unsigned flags = dnnl_use_scale | dnnl_use_shift | (act == NN_ACT_RELU ? dnnl_fuse_norm_relu : 0);
    dnnl_batch_normalization_desc_t fd, bd;
    dnnl_primitive_desc_t fpd, bpd;
    dnnl_primitive_t fwd, bwd;
    CHECK_DNNL(dnnl_batch_normalization_forward_desc_init(&fd, dnnl_forward_training, &data, 1e-5f, flags));
    CHECK_DNNL(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
    CHECK_DNNL(dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &data, &data, 1e-5f, flags));
    CHECK_DNNL(dnnl_primitive_desc_create(&bpd, &bd, NULL, eng, fpd));
    CHECK_DNNL(dnnl_primitive_create(&fwd, fpd));
    CHECK_DNNL(dnnl_primitive_create(&bwd, bpd));
    const dnnl_memory_desc_t *ws_md = dnnl_primitive_desc_query_md(fpd, dnnl_query_workspace_md, 0);
    const dnnl_memory_desc_t no_ws = {0};
    dnnl_memory_t x = mem(eng, &data, 1), y = mem(eng, &data, 2), dy = mem(eng, &data, 3), dx = mem(eng, &data, 5);
    dnnl_memory_t scale = mem(eng, &chan, 6), shift = mem(eng, &chan, 7), mean = mem(eng, &chan, 8),
                  var = mem(eng, &chan, 9), dscale = mem(eng, &chan, 10), dshift = mem(eng, &chan, 11);
    dnnl_memory_t ws = mem(eng, ws_md ? ws_md : &no_ws, 12);
    float *staged = NULL, *acc = filled(n, 13), *ydata = NULL, *dydata = NULL;
    CHECK_DNNL(dnnl_memory_get_data_handle(dx, (void **)&staged));
    CHECK_DNNL(dnnl_memory_get_data_handle(y, (void **)&ydata));
    CHECK_DNNL(dnnl_memory_get_data_handle(dy, (void **)&dydata));
    dnnl_exec_arg_t fargs[] = {{DNNL_ARG_SRC, x},     {DNNL_ARG_DST, y},          {DNNL_ARG_SCALE, scale},
                               {DNNL_ARG_SHIFT, shift}, {DNNL_ARG_MEAN, mean},     {DNNL_ARG_VARIANCE, var},
                               {DNNL_ARG_WORKSPACE, ws}};
    dnnl_exec_arg_t bargs[] = {{DNNL_ARG_SRC, x},          {DNNL_ARG_DIFF_DST, dy},     {DNNL_ARG_SCALE, scale},
                               {DNNL_ARG_SHIFT, shift},      {DNNL_ARG_MEAN, mean},       {DNNL_ARG_VARIANCE, var},
                               {DNNL_ARG_DIFF_SRC, dx},      {DNNL_ARG_DIFF_SCALE, dscale},
                               {DNNL_ARG_DIFF_SHIFT, dshift}, {DNNL_ARG_WORKSPACE, ws}};
    /* the workspace (the fused ReLU's mask) is the last argument of each */
    const int n_fargs = (int)(sizeof fargs / sizeof fargs[0]) - !ws_md;
    const int n_bargs = (int)(sizeof bargs / sizeof bargs[0]) - !ws_md;
    double best = 1e30, best_bare = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = fh_time_now();
        CHECK_DNNL(dnnl_primitive_execute(fwd, stream, n_fargs, fargs));
        CHECK_DNNL(dnnl_primitive_execute(bwd, stream, n_bargs, bargs));
        CHECK_DNNL(dnnl_stream_wait(stream));
        double t = fh_time_now() - t0;
        if (t < best_bare) best_bare = t;
        t0 = fh_time_now();
        CHECK_DNNL(dnnl_primitive_execute(fwd, stream, n_fargs, fargs));
        if (act != NN_ACT_RELU) nn_act_forward(ydata, (int64_t)n, act);
        if (act != NN_ACT_RELU) nn_act_backward(dydata, ydata, (int64_t)n, act);
        CHECK_DNNL(dnnl_primitive_execute(bwd, stream, n_bargs, bargs));
        CHECK_DNNL(dnnl_stream_wait(stream));
#pragma omp simd
        for (size_t i = 0; i < n; i++) acc[i] += staged[i];
        t = fh_time_now() - t0;
        if (t < best) best = t;
    }
    fh_free((void **)&acc);
    *bare = best_bare * 1e3;
    dnnl_memory_t all[] = {x, y, dy, dx, scale, shift, mean, var, dscale, dshift, ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dnnl_memory_destroy(all[i]);
    dnnl_primitive_destroy(fwd);
    dnnl_primitive_destroy(bwd);
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_desc_destroy(bpd);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    return best * 1e3;
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
        nn_maxpool_backward(dx, dy, argmax, p->n * p->c / 16, (int64_t)p->h * p->w * 16, (int64_t)ho * wo * 16);
        const double t = fh_time_now() - t0;
        if (t < best) best = t;
    }
    float *all[] = {x, y, dy, dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fh_free((void **)&all[i]);
    fh_free((void **)&argmax);
    return best * 1e3;
}

/* ms of the primitives alone (*bare) and with diff_src added into dx as fedhet's backward does (returned) */
static double onednn_pool_ms(const PoolShape *p, int reps, double *bare)
{
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    CHECK_DNNL(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK_DNNL(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
    const int ho = pool_out(p->h, p), wo = pool_out(p->w, p);
    const size_t n = (size_t)p->n * p->c * p->h * p->w;
    const dnnl_dims_t in_dims = {p->n, p->c, p->h, p->w}, out_dims = {p->n, p->c, ho, wo};
    const dnnl_dims_t strides = {p->stride, p->stride}, kernel = {p->k, p->k}, pad = {p->pad, p->pad};
    dnnl_memory_desc_t src, dst;
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&src, 4, in_dims, dnnl_f32, dnnl_nChw16c));
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&dst, 4, out_dims, dnnl_f32, dnnl_nChw16c));
    dnnl_pooling_desc_t fd, bd;
    dnnl_primitive_desc_t fpd, bpd;
    dnnl_primitive_t fwd, bwd;
    CHECK_DNNL(dnnl_pooling_forward_desc_init(&fd, dnnl_forward_training, dnnl_pooling_max, &src, &dst, strides, kernel,
                                              pad, pad));
    CHECK_DNNL(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
    CHECK_DNNL(dnnl_pooling_backward_desc_init(&bd, dnnl_pooling_max, &src, &dst, strides, kernel, pad, pad));
    CHECK_DNNL(dnnl_primitive_desc_create(&bpd, &bd, NULL, eng, fpd));
    CHECK_DNNL(dnnl_primitive_create(&fwd, fpd));
    CHECK_DNNL(dnnl_primitive_create(&bwd, bpd));
    const dnnl_memory_desc_t *ws_md = dnnl_primitive_desc_query_md(fpd, dnnl_query_workspace_md, 0);
    dnnl_memory_t x = mem(eng, &src, 1), y = mem(eng, &dst, 2), dy = mem(eng, &dst, 3), dx = mem(eng, &src, 4);
    dnnl_memory_t ws = mem(eng, ws_md, 5);
    dnnl_exec_arg_t fargs[] = {{DNNL_ARG_SRC, x}, {DNNL_ARG_DST, y}, {DNNL_ARG_WORKSPACE, ws}};
    dnnl_exec_arg_t bargs[] = {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_SRC, dx}, {DNNL_ARG_WORKSPACE, ws}};
    float *staged = NULL, *acc = filled(n, 6);
    CHECK_DNNL(dnnl_memory_get_data_handle(dx, (void **)&staged));
    double best = 1e30, best_bare = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = fh_time_now();
        CHECK_DNNL(dnnl_primitive_execute(fwd, stream, 3, fargs));
        CHECK_DNNL(dnnl_primitive_execute(bwd, stream, 3, bargs));
        CHECK_DNNL(dnnl_stream_wait(stream));
        double t = fh_time_now() - t0;
        if (t < best_bare) best_bare = t;
        t0 = fh_time_now();
        CHECK_DNNL(dnnl_primitive_execute(fwd, stream, 3, fargs));
        CHECK_DNNL(dnnl_primitive_execute(bwd, stream, 3, bargs));
        CHECK_DNNL(dnnl_stream_wait(stream));
#pragma omp simd
        for (size_t i = 0; i < n; i++) acc[i] += staged[i];
        t = fh_time_now() - t0;
        if (t < best) best = t;
    }
    fh_free((void **)&acc);
    dnnl_memory_t all[] = {x, y, dy, dx, ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dnnl_memory_destroy(all[i]);
    dnnl_primitive_destroy(fwd);
    dnnl_primitive_destroy(bwd);
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_desc_destroy(bpd);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    *bare = best_bare * 1e3;
    return best * 1e3;
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
    printf("ratio: oneDNN's primitive / fedhet's kernels; as fedhet: with the accumulation into dx and, for\n"
           "ReLU6, the activation's own passes, / fedhet's kernels\n");
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
