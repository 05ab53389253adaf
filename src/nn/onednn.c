/* Conv layers on oneDNN (train.backend = onednn): forward, backward-data and backward-weights primitives,
 * grouped and depthwise convs included, with the contract of the BLAS kernels (kernels_blas.c) and tested
 * against the same naive _ref loops (tests/unit/test_onednn.c). Batch norm and max pooling in training mode
 * too, at the end of the file.
 *
 * Layouts. Every primitive is created with format `any`, so that oneDNN picks the layout it runs fastest in
 * (blocked nChw16c and OIhw16i16o with AVX-512, nChw8c with AVX2): held to plain NCHW it falls back to its
 * own im2col + gemm, no faster than OpenBLAS. The engine hands a conv its activations in their tensors'
 * layouts: blocked (nn_onednn_block) between the layers that take it, NCHW elsewhere (model.c,
 * plan_layouts); weights are OIHW (the flat state vector). Reorders move a tensor between the engine's
 * layout and the primitive's where they differ; those that write a gradient carry a sum post-op, so that
 * gradients accumulate (+=) as the engine promises, whatever layout the primitive wrote (the weights'
 * gradient after a zero fill is written without it: the sum reads the zeros too, 18 % of that reorder's time
 * for a 512x512 3x3 conv; and a conv that is the first to reach its input's gradient writes it in place, with
 * no zero fill before). Keeping the weights blocked between steps would save their reorders but not fit
 * the flat state vector that methods work on.
 *
 * Algorithm: Winograd for the 3x3 stride-1 convs where it pays (winograd_pays below), direct for the others.
 *
 * Memory: what allocates, and when.
 *  - nn_onednn_conv_create (at finalize): the primitives for the largest batch, their memory objects, and
 *    the shared buffers below grown to what they need.
 *  - The first forward at another batch size (a client's last partial batch, an evaluation remainder):
 *    that size's primitives (all three, so that backward never creates anything), in a per-layer cache of
 *    CONV_BATCHES entries. When it is full, the least recently used entry other than the largest batch's is
 *    replaced; oneDNN's primitive cache keeps the generated code, so a size that comes back is not compiled
 *    again.
 *  - No buffer else. Scratchpads are user-managed (dnnl_scratchpad_mode_user) in one buffer and the staging
 *    buffers of the reorders are shared by all layers of a model (its layers run one after another), each
 *    sized for the largest need of the entries created so far: after warm-up a step allocates no buffer
 *    (test_onednn counts). What remains is inside dnnl_primitive_execute, which builds its argument map on
 *    the heap: about 50 allocations of at most 152 bytes a conv layer and step, and libgomp's team (about
 *    1.5 KiB) for each parallel region of a Winograd kernel, all freed within the call, that no C API call
 *    avoids.
 *
 * Threads: a primitive keeps the OpenMP thread count of its creation (nn_set_threads before building).
 * Bits: the same run to run for one CPU, thread count and batch size; not the blas backend's bits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "fedhet/core.h"
#include "kernels.h"

/* batch sizes a conv keeps primitives for at once: the largest, a client's last batch, evaluation remainders */
#define CONV_BATCHES 8

/* Staging buffers shared by the layers of a model. Forward uses SRC, WEIGHTS, DST; backward-weights SRC and
 * DIFF_DST, backward-data DIFF_DST (or DST when it wants another layout than backward-weights), WEIGHTS and
 * DIFF_SRC. */
enum { STAGE_SRC, STAGE_DST, STAGE_DIFF_DST, STAGE_DIFF_SRC, STAGE_WEIGHTS, STAGE_DIFF_WEIGHTS, STAGE_DIFF_BIAS,
       STAGE_SCRATCHPAD, N_STAGES };

enum { FWD, BWD_DATA, BWD_WEIGHTS, N_PRIMS };
static const char *const prim_names[N_PRIMS] = { "forward", "backward-data", "backward-weights" };

struct NnOnednn {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_attr_t attr;     /* user-managed scratchpad */
    dnnl_primitive_attr_t attr_sum; /* the same and a sum post-op: reorders that accumulate into their output */
    void *stage[N_STAGES];
    size_t stage_bytes[N_STAGES];
    size_t ws_bytes;         /* the workspaces of the batch norm and max pool entries */
    uint64_t clock;          /* counts forwards: the cache's recency */
    dnnl_status_t status;    /* first failure of the current call */
};

typedef struct {
    dnnl_primitive_t p;
    dnnl_memory_t scratchpad; /* NULL: it needs none */
} Prim;

/* One tensor argument of a primitive. */
typedef struct {
    dnnl_memory_t user;  /* the engine's tensor (NCHW, OIHW or the bias), its data set at every call */
    dnnl_memory_t inner; /* the primitive's copy in stage buffer `stage`; NULL: the primitive uses `user` */
    Prim reorder;        /* input: user -> inner; output: inner -> user, adding to it when accumulated */
    Prim set;            /* an accumulated output onto a user tensor of zeros: inner -> user without the sum,
                          * which spares the read of the user's tensor (the weights' gradient after a zero fill) */
    int stage;
    int ready;           /* input: inner already holds the data (backward-data's dy, reordered for backward-weights) */
    int user_layout;     /* accumulated output: the primitive writes the user's layout, so that onto zeros it can
                          * write the user's tensor itself (a conv's dx when the conv is the first to reach it) */
    int direct;          /* output: the current call writes `user` (set by arg_out) */
} Arg;

/* The first member of a per-batch entry (ConvEntry, LayerEntry): which batch it serves and when it last did. */
typedef struct {
    int batch;     /* 0: an empty slot */
    uint64_t used; /* NnOnednn.clock at its last forward */
} EntryKey;

typedef struct {
    EntryKey key;
    dnnl_primitive_desc_t pd[N_PRIMS];
    Prim prim[N_PRIMS];
    Arg src, weights, bias, dst;                              /* forward */
    Arg bd_diff_src, bd_weights, bd_diff_dst;                 /* backward data */
    Arg bw_src, bw_diff_weights, bw_diff_bias, bw_diff_dst;   /* backward weights */
} ConvEntry;

struct NnOnednnConv {
    NnOnednn *ctx;
    NnConvShape shape; /* batch: the largest */
    int bias;
    int x_block, y_block; /* the layouts of the engine's input and output tensors (NnTensor.block) */
    char name[320]; /* the model's name and the layer's, for messages */
    ConvEntry entry[CONV_BATCHES]; /* entry[0]: the largest batch, created first and never replaced */
};

/* ============================== context ============================== */

static int stage_reserve(NnOnednn *ctx, int stage, size_t bytes)
{
    if (bytes <= ctx->stage_bytes[stage]) return FH_OK;
    fh_free(&ctx->stage[stage]);
    ctx->stage_bytes[stage] = 0;
    FH_CHECK(fh_alloc_aligned(&ctx->stage[stage], bytes, "oneDNN staging buffer"));
    ctx->stage_bytes[stage] = bytes;
    return FH_OK;
}

int nn_onednn_create(NnOnednn **out)
{
    NnOnednn *ctx = NULL;
    FH_CHECK(fh_calloc(&ctx, 1, sizeof *ctx, "oneDNN context"));
    *out = ctx;
    dnnl_post_ops_t sum = NULL;
    dnnl_status_t st = dnnl_engine_create(&ctx->engine, dnnl_cpu, 0);
    if (st == dnnl_success) st = dnnl_stream_create(&ctx->stream, ctx->engine, dnnl_stream_default_flags);
    if (st == dnnl_success) st = dnnl_primitive_attr_create(&ctx->attr);
    if (st == dnnl_success) st = dnnl_primitive_attr_set_scratchpad_mode(ctx->attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success) st = dnnl_primitive_attr_clone(&ctx->attr_sum, ctx->attr);
    if (st == dnnl_success) st = dnnl_post_ops_create(&sum);
    if (st == dnnl_success) st = dnnl_post_ops_append_sum(sum, 1.0f);
    if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(ctx->attr_sum, sum);
    if (sum) dnnl_post_ops_destroy(sum);
    if (st != dnnl_success) {
        nn_onednn_free(out);
        FH_FAIL(FH_ERR_IO, "oneDNN: cannot set up the CPU engine (%s)", dnnl_status2str(st));
    }
    return FH_OK;
}

void nn_onednn_free(NnOnednn **pctx)
{
    NnOnednn *ctx = *pctx;
    if (!ctx) return;
    if (ctx->attr_sum) dnnl_primitive_attr_destroy(ctx->attr_sum);
    if (ctx->attr) dnnl_primitive_attr_destroy(ctx->attr);
    if (ctx->stream) dnnl_stream_destroy(ctx->stream);
    if (ctx->engine) dnnl_engine_destroy(ctx->engine);
    for (int i = 0; i < N_STAGES; i++) fh_free(&ctx->stage[i]);
    fh_free(pctx);
}

size_t nn_onednn_bytes(const NnOnednn *ctx)
{
    size_t bytes = ctx ? ctx->ws_bytes : 0;
    for (int i = 0; ctx && i < N_STAGES; i++) bytes += ctx->stage_bytes[i];
    return bytes;
}

int nn_onednn_block(void)
{
    /* the effective ISA honours DNNL_MAX_CPU_ISA, as the primitives do */
    return (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core ? 16 : 8;
}

/* ============================== building an entry ============================== */

static void track(NnOnednn *ctx, dnnl_status_t st)
{
    if (ctx->status == dnnl_success) ctx->status = st;
}

/* the primitive of pd, and a scratchpad memory object when it needs one */
static dnnl_status_t prim_create(NnOnednn *ctx, Prim *p, const_dnnl_primitive_desc_t pd)
{
    dnnl_status_t st = dnnl_primitive_create(&p->p, pd);
    const dnnl_memory_desc_t *md = st == dnnl_success ? dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0) : NULL;
    const size_t bytes = md ? dnnl_memory_desc_get_size(md) : 0;
    if (bytes == 0) return st;
    if (stage_reserve(ctx, STAGE_SCRATCHPAD, bytes) != FH_OK) return dnnl_out_of_memory;
    return dnnl_memory_create(&p->scratchpad, md, ctx->engine, DNNL_MEMORY_NONE);
}

static void prim_free(Prim *p)
{
    if (p->p) dnnl_primitive_destroy(p->p);
    if (p->scratchpad) dnnl_memory_destroy(p->scratchpad);
    memset(p, 0, sizeof *p);
}

static dnnl_status_t reorder_create(NnOnednn *ctx, Prim *p, const dnnl_memory_desc_t *from,
                                    const dnnl_memory_desc_t *to, int accumulate)
{
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, from, ctx->engine, to, ctx->engine,
                                                          accumulate ? ctx->attr_sum : ctx->attr);
    if (st == dnnl_success) st = prim_create(ctx, p, pd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return st;
}

/* An input the primitive reads in layout `want`: a reorder from the user's layout when they differ. */
static dnnl_status_t arg_input(NnOnednn *ctx, Arg *a, const dnnl_memory_desc_t *user, const dnnl_memory_desc_t *want,
                               int stage)
{
    dnnl_status_t st = dnnl_memory_create(&a->user, user, ctx->engine, DNNL_MEMORY_NONE);
    if (st != dnnl_success || dnnl_memory_desc_equal(user, want)) return st;
    a->stage = stage;
    if (stage_reserve(ctx, stage, dnnl_memory_desc_get_size(want)) != FH_OK) return dnnl_out_of_memory;
    st = dnnl_memory_create(&a->inner, want, ctx->engine, DNNL_MEMORY_NONE);
    return st == dnnl_success ? reorder_create(ctx, &a->reorder, user, want, 0) : st;
}

/* An output the primitive writes in layout `got`. accumulate: added to the user's tensor, so it goes through a
 * stage buffer even when the layouts agree. */
static dnnl_status_t arg_output(NnOnednn *ctx, Arg *a, const dnnl_memory_desc_t *user, const dnnl_memory_desc_t *got,
                                int stage, int accumulate)
{
    dnnl_status_t st = dnnl_memory_create(&a->user, user, ctx->engine, DNNL_MEMORY_NONE);
    if (st != dnnl_success || (!accumulate && dnnl_memory_desc_equal(user, got))) return st;
    a->stage = stage;
    if (stage_reserve(ctx, stage, dnnl_memory_desc_get_size(got)) != FH_OK) return dnnl_out_of_memory;
    a->user_layout = accumulate && dnnl_memory_desc_equal(user, got);
    st = dnnl_memory_create(&a->inner, got, ctx->engine, DNNL_MEMORY_NONE);
    if (st == dnnl_success) st = reorder_create(ctx, &a->reorder, got, user, accumulate);
    return st == dnnl_success && accumulate ? reorder_create(ctx, &a->set, got, user, 0) : st;
}

static void arg_free(Arg *a)
{
    if (a->user) dnnl_memory_destroy(a->user);
    if (a->inner) dnnl_memory_destroy(a->inner);
    prim_free(&a->reorder);
    prim_free(&a->set);
    memset(a, 0, sizeof *a);
}

static void entry_free(ConvEntry *e)
{
    Arg *args[] = { &e->src, &e->weights, &e->bias, &e->dst, &e->bd_diff_src, &e->bd_weights, &e->bd_diff_dst,
                    &e->bw_src, &e->bw_diff_weights, &e->bw_diff_bias, &e->bw_diff_dst };
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) arg_free(args[i]);
    for (int i = 0; i < N_PRIMS; i++) {
        prim_free(&e->prim[i]);
        if (e->pd[i]) dnnl_primitive_desc_destroy(e->pd[i]);
    }
    memset(e, 0, sizeof *e);
}

/* index 1 of the weights queries is the bias */
static const dnnl_memory_desc_t *md_of(const ConvEntry *e, int prim, dnnl_query_t what, int index)
{
    return dnnl_primitive_desc_query_md(e->pd[prim], what, index);
}

/* Winograd F(4x4, 3x3) computes a 3x3 stride-1 convolution with 2.25x fewer multiplications than the direct
 * algorithm; on AVX-512 it made a training step of resnet8 and resnet18 1.7x faster. It loses where its 4x4
 * output tiles are mostly padding (outputs under 4x4: resnet18_gn's last stages ran 2-8x slower) or where a few
 * input channels leave its vectors empty (a first layer). oneDNN has it for AVX-512 only: elsewhere, or for a
 * pass it cannot build, the direct algorithm runs. Its rounding is not the direct algorithm's (both within
 * CONV_RTOL of the reference, tests/unit/conv_check.h). */
static int winograd_pays(const NnConvShape *s)
{
    return s->kh == 3 && s->kw == 3 && s->stride_h == 1 && s->stride_w == 1 && s->dil_h == 1 && s->dil_w == 1 &&
           s->groups == 1 && s->cin >= 16 && s->cout >= 16 && s->ho >= 4 && s->wo >= 4;
}

/* oneDNN checks ho = (h + pad_t + pad_b - dil_h (kh - 1) - 1) / stride_h + 1 with the same floor as the engine;
 * its dilations count the gaps (dil - 1). Undilated convs take the undilated calls, as before dilations. */
static dnnl_status_t conv_desc_init(dnnl_convolution_desc_t *d, int pass, dnnl_alg_kind_t alg,
                                    const dnnl_memory_desc_t *x, const dnnl_memory_desc_t *w,
                                    const dnnl_memory_desc_t *b, const dnnl_memory_desc_t *y, const NnConvShape *s)
{
    const dnnl_dims_t strides = { s->stride_h, s->stride_w }, pad_l = { s->pad_t, s->pad_l },
                      pad_r = { s->pad_b, s->pad_r }, dil = { s->dil_h - 1, s->dil_w - 1 };
    const int dilated = s->dil_h > 1 || s->dil_w > 1;
    switch (pass) {
    case FWD:
        return dilated ? dnnl_dilated_convolution_forward_desc_init(d, dnnl_forward_training, alg, x, w, b, y, strides,
                                                                     dil, pad_l, pad_r)
                       : dnnl_convolution_forward_desc_init(d, dnnl_forward_training, alg, x, w, b, y, strides, pad_l,
                                                            pad_r);
    case BWD_DATA:
        return dilated ? dnnl_dilated_convolution_backward_data_desc_init(d, alg, x, w, y, strides, dil, pad_l, pad_r)
                       : dnnl_convolution_backward_data_desc_init(d, alg, x, w, y, strides, pad_l, pad_r);
    default:
        return dilated ? dnnl_dilated_convolution_backward_weights_desc_init(d, alg, x, w, b, y, strides, dil, pad_l,
                                                                              pad_r)
                       : dnnl_convolution_backward_weights_desc_init(d, alg, x, w, b, y, strides, pad_l, pad_r);
    }
}

static dnnl_format_tag_t activation_tag(int block)
{
    return block == 16 ? dnnl_nChw16c : block == 8 ? dnnl_nChw8c : dnnl_nchw;
}

static int entry_create(NnOnednnConv *c, ConvEntry *e, int batch)
{
    NnOnednn *ctx = c->ctx;
    const NnConvShape *s = &c->shape;
    const int g = s->groups;
    dnnl_memory_desc_t x, y, w, b, x_any, y_any, w_any;
    const dnnl_dims_t xd = { batch, s->cin, s->h, s->w }, yd = { batch, s->cout, s->ho, s->wo }, bd = { s->cout };
    /* OIHW with groups is goihw: each group's output channels are consecutive */
    const dnnl_dims_t wd1 = { s->cout, s->cin, s->kh, s->kw }, wdg = { g, s->cout / g, s->cin / g, s->kh, s->kw };
    const int wn = g > 1 ? 5 : 4;
    const dnnl_dim_t *wd = g > 1 ? wdg : wd1;
    int failed = -1; /* the primitive oneDNN could not create */
    memset(e, 0, sizeof *e);
    e->key.batch = batch;
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(&x, 4, xd, dnnl_f32, activation_tag(c->x_block));
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&y, 4, yd, dnnl_f32, activation_tag(c->y_block));
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&w, wn, wd, dnnl_f32, g > 1 ? dnnl_goihw : dnnl_oihw);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&b, 1, bd, dnnl_f32, dnnl_x);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&x_any, 4, xd, dnnl_f32, dnnl_format_tag_any);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&y_any, 4, yd, dnnl_f32, dnnl_format_tag_any);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&w_any, wn, wd, dnnl_f32, dnnl_format_tag_any);
    const dnnl_alg_kind_t algs[] = { dnnl_convolution_winograd, dnnl_convolution_direct };
    for (int i = 0; i < N_PRIMS && st == dnnl_success; i++) {
        /* the backward passes take the forward's as a hint, so that they agree on layouts where they can */
        const_dnnl_primitive_desc_t hint = i == FWD ? NULL : e->pd[FWD];
        st = dnnl_unimplemented;
        for (int a = winograd_pays(s) ? 0 : 1; a < 2 && st != dnnl_success; a++) {
            dnnl_convolution_desc_t desc;
            st = conv_desc_init(&desc, i, algs[a], &x_any, &w_any, c->bias ? &b : NULL, &y_any, s);
            if (st == dnnl_success) st = dnnl_primitive_desc_create(&e->pd[i], &desc, ctx->attr, ctx->engine, hint);
        }
        if (st == dnnl_success) st = prim_create(ctx, &e->prim[i], e->pd[i]);
        if (st != dnnl_success) failed = i;
    }
    if (st == dnnl_success) st = arg_input(ctx, &e->src, &x, md_of(e, FWD, dnnl_query_src_md, 0), STAGE_SRC);
    if (st == dnnl_success) st = arg_input(ctx, &e->weights, &w, md_of(e, FWD, dnnl_query_weights_md, 0), STAGE_WEIGHTS);
    if (st == dnnl_success && c->bias)
        st = arg_input(ctx, &e->bias, &b, md_of(e, FWD, dnnl_query_weights_md, 1), STAGE_DIFF_BIAS);
    if (st == dnnl_success) st = arg_output(ctx, &e->dst, &y, md_of(e, FWD, dnnl_query_dst_md, 0), STAGE_DST, 0);
    if (st == dnnl_success)
        st = arg_input(ctx, &e->bw_src, &x, md_of(e, BWD_WEIGHTS, dnnl_query_src_md, 0), STAGE_SRC);
    if (st == dnnl_success)
        st = arg_input(ctx, &e->bw_diff_dst, &y, md_of(e, BWD_WEIGHTS, dnnl_query_diff_dst_md, 0), STAGE_DIFF_DST);
    if (st == dnnl_success)
        st = arg_output(ctx, &e->bw_diff_weights, &w, md_of(e, BWD_WEIGHTS, dnnl_query_diff_weights_md, 0),
                        STAGE_DIFF_WEIGHTS, 1);
    if (st == dnnl_success && c->bias)
        st = arg_output(ctx, &e->bw_diff_bias, &b, md_of(e, BWD_WEIGHTS, dnnl_query_diff_weights_md, 1),
                        STAGE_DIFF_BIAS, 1);
    if (st == dnnl_success) {
        /* dy in backward-data's layout: the copy made for backward-weights when that layout is the same */
        const dnnl_memory_desc_t *want = md_of(e, BWD_DATA, dnnl_query_diff_dst_md, 0);
        const int same = e->bw_diff_dst.inner && dnnl_memory_desc_equal(want, md_of(e, BWD_WEIGHTS, dnnl_query_diff_dst_md, 0));
        st = arg_input(ctx, &e->bd_diff_dst, &y, want, same ? STAGE_DIFF_DST : STAGE_DST);
        e->bd_diff_dst.ready = same;
    }
    if (st == dnnl_success)
        st = arg_input(ctx, &e->bd_weights, &w, md_of(e, BWD_DATA, dnnl_query_weights_md, 0), STAGE_WEIGHTS);
    if (st == dnnl_success)
        st = arg_output(ctx, &e->bd_diff_src, &x, md_of(e, BWD_DATA, dnnl_query_diff_src_md, 0), STAGE_DIFF_SRC, 1);
    if (st == dnnl_success) return FH_OK;
    entry_free(e);
    FH_FAIL(st == dnnl_out_of_memory ? FH_ERR_MEMORY : FH_ERR_USAGE,
            "%s: oneDNN cannot %s the convolution %s of a %dx%dx%dx%d input to %d channels (kernel %dx%d, stride "
            "%dx%d, pads %d %d %d %d, dilation %dx%d, groups %d%s): %s; train.backend = blas runs it", c->name,
            failed >= 0 ? "create" : "set up", failed >= 0 ? prim_names[failed] : "arguments", batch, s->cin, s->h,
            s->w, s->cout, s->kh, s->kw, s->stride_h, s->stride_w, s->pad_t, s->pad_l, s->pad_b, s->pad_r, s->dil_h,
            s->dil_w, s->groups, c->bias ? ", bias" : "", dnnl_status2str(st));
}

int nn_onednn_conv_create(NnOnednnConv **out, NnOnednn *ctx, const NnConvShape *s, int bias, int x_block,
                          int y_block, const char *name)
{
    NnOnednnConv *c = NULL;
    FH_CHECK(fh_calloc(&c, 1, sizeof *c, "oneDNN convolution"));
    c->ctx = ctx;
    c->shape = nn_conv_shape_full(s);
    c->bias = bias;
    c->x_block = x_block;
    c->y_block = y_block;
    snprintf(c->name, sizeof c->name, "%s", name);
    *out = c;
    const int status = entry_create(c, &c->entry[0], s->batch);
    if (status != FH_OK) nn_onednn_conv_free(out);
    return status;
}

void nn_onednn_conv_free(NnOnednnConv **pc)
{
    if (!*pc) return;
    for (int i = 0; i < CONV_BATCHES; i++)
        if ((*pc)->entry[i].key.batch) entry_free(&(*pc)->entry[i]);
    fh_free(pc);
}

const char *nn_onednn_conv_impl(const NnOnednnConv *c, int which)
{
    const char *name = NULL;
    if (!c || which < 0 || which >= N_PRIMS || !c->entry[0].pd[which] ||
        dnnl_primitive_desc_query(c->entry[0].pd[which], dnnl_query_impl_info_str, 0, &name) != dnnl_success)
        return "";
    return name;
}

/* Among n entries of `stride` bytes, each beginning with its EntryKey, the one for `batch` (*found = 1), or the slot
 * to create it in: an empty one, else the least recently used other than the first (the largest batch's). */
static void *entry_slot(void *entries, size_t stride, int n, int batch, int *found)
{
    EntryKey *victim = NULL;
    for (int i = 0; i < n; i++) {
        EntryKey *e = (EntryKey *)((char *)entries + (size_t)i * stride);
        if (e->batch == batch) {
            *found = 1;
            return e;
        }
        if (i > 0 && (!victim || (victim->batch && (!e->batch || e->used < victim->used)))) victim = e;
    }
    *found = 0;
    return victim;
}

/* The entry for `batch`, created on its first use (see the file's comment for what that allocates). */
static int entry_for(NnOnednnConv *c, int batch, ConvEntry **out)
{
    int found = 0;
    ConvEntry *e = entry_slot(c->entry, sizeof c->entry[0], CONV_BATCHES, batch, &found);
    if (!found) {
        if (e->key.batch) entry_free(e);
        FH_CHECK(entry_create(c, e, batch));
    }
    *out = e;
    return FH_OK;
}

/* ============================== running ============================== */

static void set_data(NnOnednn *ctx, dnnl_memory_t mem, const void *data)
{
    track(ctx, dnnl_memory_set_data_handle(mem, (void *)data));
}

static void prim_run(NnOnednn *ctx, const Prim *p, int n_args, dnnl_exec_arg_t *args)
{
    if (p->scratchpad) {
        set_data(ctx, p->scratchpad, ctx->stage[STAGE_SCRATCHPAD]);
        args[n_args++] = (dnnl_exec_arg_t){ DNNL_ARG_SCRATCHPAD, p->scratchpad };
    }
    track(ctx, dnnl_primitive_execute(p->p, ctx->stream, n_args, args));
}

/* the memory a primitive reads input `data` from, reordered first when the layouts differ */
static dnnl_memory_t arg_in(NnOnednn *ctx, Arg *a, const float *data)
{
    set_data(ctx, a->user, data);
    if (!a->inner) return a->user;
    set_data(ctx, a->inner, ctx->stage[a->stage]);
    if (!a->ready) {
        dnnl_exec_arg_t args[3] = { { DNNL_ARG_FROM, a->user }, { DNNL_ARG_TO, a->inner } };
        prim_run(ctx, &a->reorder, 2, args);
    }
    return a->inner;
}

/* The memory a primitive writes output `data` to; arg_out_done then moves it to data. onto_zeros: nothing has
 * reached data yet (it holds zeros, or anything: it is not read), so an accumulated output is written instead
 * of added (the same values: x + 0 = x), straight into data when the layouts agree. */
static dnnl_memory_t arg_out(NnOnednn *ctx, Arg *a, float *data, int onto_zeros)
{
    set_data(ctx, a->user, data);
    a->direct = !a->inner || (onto_zeros && a->user_layout);
    if (a->direct) return a->user;
    set_data(ctx, a->inner, ctx->stage[a->stage]);
    return a->inner;
}

static void arg_out_done(NnOnednn *ctx, Arg *a, int onto_zeros)
{
    if (a->direct) return;
    dnnl_exec_arg_t args[3] = { { DNNL_ARG_FROM, a->inner }, { DNNL_ARG_TO, a->user } };
    prim_run(ctx, onto_zeros && a->set.p ? &a->set : &a->reorder, 2, args);
}

static int64_t conv_out_floats(const NnConvShape *s, int batch) { return (int64_t)batch * s->cout * s->ho * s->wo; }

int nn_onednn_conv_forward(NnOnednnConv *c, float *y, const float *x, const float *w, const float *b, int batch, NnAct act)
{
    NnOnednn *ctx = c->ctx;
    ConvEntry *e = NULL;
    FH_CHECK(entry_for(c, batch, &e));
    e->key.used = ++ctx->clock;
    ctx->status = dnnl_success;
    dnnl_exec_arg_t args[5];
    int n = 0;
    args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_SRC, arg_in(ctx, &e->src, x) };
    args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_WEIGHTS, arg_in(ctx, &e->weights, w) };
    if (c->bias) args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_BIAS, arg_in(ctx, &e->bias, b) };
    args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_DST, arg_out(ctx, &e->dst, y, 0) };
    prim_run(ctx, &e->prim[FWD], n, args);
    arg_out_done(ctx, &e->dst, 0);
    track(ctx, dnnl_stream_wait(ctx->stream));
    if (ctx->status != dnnl_success)
        FH_FAIL(FH_ERR_IO, "%s: oneDNN convolution forward at batch %d failed: %s", c->name, batch,
                dnnl_status2str(ctx->status));
    /* the activation as a pass of its own rather than a post-op: a pattern replay (NN_PATTERN_REPLAY) runs the
     * same primitive without it and gets the same pre-activations */
    nn_act_forward(y, conv_out_floats(&c->shape, batch), act);
    return FH_OK;
}

void nn_onednn_conv_backward(NnOnednnConv *c, float *dx, float *dw, float *db, float *dy, const float *y,
                             const float *x, const float *w, int batch, NnAct act, int dw_zero, int dx_zero)
{
    NnOnednn *ctx = c->ctx;
    ConvEntry *e = NULL;
    for (int i = 0; i < CONV_BATCHES && !e; i++)
        if (c->entry[i].key.batch == batch) e = &c->entry[i];
    if (!e) {
        /* the forward at this batch made it, and entries are replaced only by forwards at other batches */
        fh_log_error("%s: oneDNN convolution backward at batch %d without its forward", c->name, batch);
        abort();
    }
    nn_act_backward(dy, y, conv_out_floats(&c->shape, batch), act);
    ctx->status = dnnl_success;
    dnnl_exec_arg_t args[6];
    int n = 0;
    if (dw) { /* NULL: the caller computes the weights' gradient itself */
        args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_SRC, arg_in(ctx, &e->bw_src, x) };
        args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_DIFF_DST, arg_in(ctx, &e->bw_diff_dst, dy) };
        args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_DIFF_WEIGHTS, arg_out(ctx, &e->bw_diff_weights, dw, dw_zero) };
        if (c->bias) args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_DIFF_BIAS, arg_out(ctx, &e->bw_diff_bias, db, dw_zero) };
        prim_run(ctx, &e->prim[BWD_WEIGHTS], n, args);
        arg_out_done(ctx, &e->bw_diff_weights, dw_zero);
        if (c->bias) arg_out_done(ctx, &e->bw_diff_bias, dw_zero);
    }
    if (dx) {
        n = 0;
        args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_DIFF_DST, arg_in(ctx, &e->bd_diff_dst, dy) };
        args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_WEIGHTS, arg_in(ctx, &e->bd_weights, w) };
        args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_DIFF_SRC, arg_out(ctx, &e->bd_diff_src, dx, dx_zero) };
        prim_run(ctx, &e->prim[BWD_DATA], n, args);
        arg_out_done(ctx, &e->bd_diff_src, dx_zero);
    }
    track(ctx, dnnl_stream_wait(ctx->stream));
    if (ctx->status != dnnl_success) {
        /* executing primitives that were created fine does not fail on a CPU (the scratchpad is ours) */
        fh_log_error("%s: oneDNN convolution backward at batch %d failed: %s", c->name, batch,
                     dnnl_status2str(ctx->status));
        abort();
    }
}

/* ============================== batch norm and max pooling ============================== */

/* A batch norm or a max pool in training mode: the forward (batch statistics; the pool's winners) and the
 * backward, on the tensors' own layout (these primitives take the layout they are given: no reorders), one entry
 * per batch size as for convs. A ReLU after a batch norm is fused (dnnl_fuse_norm_relu keeps its mask in the
 * workspace); other activations, the running statistics and evaluation stay fedhet's (model.c), and so does
 * everything under an activation pattern (the Hessian's replay reads fedhet's winners). Gradients of the scale,
 * the shift and the input accumulate as a conv's do: written when nothing has reached them yet, else added by a
 * reorder with a sum post-op. */

enum { LAYER_BN, LAYER_MAXPOOL };
enum { LAYER_FWD, LAYER_BWD, LAYER_PASSES };

typedef struct {
    EntryKey key;
    dnnl_primitive_desc_t pd[LAYER_PASSES];
    Prim prim[LAYER_PASSES];
    dnnl_memory_t x, y, dy, scale, shift, mean, var, ws; /* the engine's tensors, data set at every call; NULL:
                                                          * not an argument of this layer */
    Arg dx, dscale, dshift;                              /* accumulated outputs (dscale, dshift: batch norm) */
    void *ws_data;                                       /* the forward's record for the backward */
    size_t ws_bytes;
} LayerEntry;

struct NnOnednnLayer {
    NnOnednn *ctx;
    int kind;
    int c, h, w, ho, wo, block;
    int k, stride, pad; /* max pool */
    float eps;          /* batch norm */
    int fuse_relu;      /* batch norm */
    char name[320];
    LayerEntry entry[CONV_BATCHES]; /* entry[0]: the largest batch, as for convs */
};

static void layer_entry_free(NnOnednn *ctx, LayerEntry *e)
{
    dnnl_memory_t mems[] = { e->x, e->y, e->dy, e->scale, e->shift, e->mean, e->var, e->ws };
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    arg_free(&e->dx);
    arg_free(&e->dscale);
    arg_free(&e->dshift);
    for (int i = 0; i < LAYER_PASSES; i++) {
        prim_free(&e->prim[i]);
        if (e->pd[i]) dnnl_primitive_desc_destroy(e->pd[i]);
    }
    ctx->ws_bytes -= e->ws_bytes;
    fh_free(&e->ws_data);
    memset(e, 0, sizeof *e);
}

static dnnl_status_t layer_desc_init(const NnOnednnLayer *l, int pass, dnnl_batch_normalization_desc_t *bn,
                                     dnnl_pooling_desc_t *pool, const dnnl_memory_desc_t *x,
                                     const dnnl_memory_desc_t *y)
{
    if (l->kind == LAYER_BN) {
        const unsigned flags = dnnl_use_scale | dnnl_use_shift | (l->fuse_relu ? dnnl_fuse_norm_relu : 0);
        return pass == LAYER_FWD ? dnnl_batch_normalization_forward_desc_init(bn, dnnl_forward_training, x, l->eps, flags)
                                 : dnnl_batch_normalization_backward_desc_init(bn, dnnl_backward, x, x, l->eps, flags);
    }
    /* symmetric padding, the output size by the engine's floor as for convs */
    const dnnl_dims_t strides = { l->stride, l->stride }, kernel = { l->k, l->k }, pad = { l->pad, l->pad };
    return pass == LAYER_FWD ? dnnl_pooling_forward_desc_init(pool, dnnl_forward_training, dnnl_pooling_max, x, y,
                                                              strides, kernel, pad, pad)
                             : dnnl_pooling_backward_desc_init(pool, dnnl_pooling_max, x, y, strides, kernel, pad, pad);
}

static dnnl_status_t layer_memory(NnOnednn *ctx, dnnl_memory_t *m, const dnnl_memory_desc_t *md)
{
    return dnnl_memory_create(m, md, ctx->engine, DNNL_MEMORY_NONE);
}

static int layer_entry_create(NnOnednnLayer *l, LayerEntry *e, int batch)
{
    NnOnednn *ctx = l->ctx;
    const int bn = l->kind == LAYER_BN;
    dnnl_memory_desc_t x, y, chan;
    const dnnl_dims_t xd = { batch, l->c, l->h, l->w }, yd = { batch, l->c, l->ho, l->wo }, cd = { l->c };
    int failed = -1;
    memset(e, 0, sizeof *e);
    e->key.batch = batch;
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(&x, 4, xd, dnnl_f32, activation_tag(l->block));
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&y, 4, yd, dnnl_f32, activation_tag(l->block));
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&chan, 1, cd, dnnl_f32, dnnl_x);
    for (int i = 0; i < LAYER_PASSES && st == dnnl_success; i++) {
        dnnl_batch_normalization_desc_t bn_desc;
        dnnl_pooling_desc_t pool_desc;
        st = layer_desc_init(l, i, &bn_desc, &pool_desc, &x, &y);
        const_dnnl_op_desc_t desc = bn ? (const_dnnl_op_desc_t)&bn_desc : (const_dnnl_op_desc_t)&pool_desc;
        if (st == dnnl_success)
            st = dnnl_primitive_desc_create(&e->pd[i], desc, ctx->attr, ctx->engine, i == LAYER_FWD ? NULL : e->pd[0]);
        if (st == dnnl_success) st = prim_create(ctx, &e->prim[i], e->pd[i]);
        if (st != dnnl_success) failed = i;
    }
    const dnnl_memory_desc_t *ws = st == dnnl_success ? dnnl_primitive_desc_query_md(e->pd[LAYER_FWD],
                                                                                     dnnl_query_workspace_md, 0) : NULL;
    const size_t ws_bytes = ws ? dnnl_memory_desc_get_size(ws) : 0;
    if (ws_bytes && fh_alloc_aligned(&e->ws_data, ws_bytes, "oneDNN workspace") != FH_OK) {
        st = dnnl_out_of_memory;
    } else if (ws_bytes) {
        e->ws_bytes = ws_bytes; /* counted once it exists: layer_entry_free takes it back */
        ctx->ws_bytes += ws_bytes;
        st = layer_memory(ctx, &e->ws, ws);
    }
    if (st == dnnl_success) st = layer_memory(ctx, &e->x, &x);
    if (st == dnnl_success) st = layer_memory(ctx, &e->y, bn ? &x : &y);
    if (st == dnnl_success) st = layer_memory(ctx, &e->dy, bn ? &x : &y);
    if (st == dnnl_success) st = arg_output(ctx, &e->dx, &x, &x, STAGE_DIFF_SRC, 1);
    if (bn) {
        dnnl_memory_t *chans[] = { &e->scale, &e->shift, &e->mean, &e->var };
        for (size_t i = 0; i < sizeof chans / sizeof chans[0] && st == dnnl_success; i++)
            st = layer_memory(ctx, chans[i], &chan);
        if (st == dnnl_success) st = arg_output(ctx, &e->dscale, &chan, &chan, STAGE_DIFF_WEIGHTS, 1);
        if (st == dnnl_success) st = arg_output(ctx, &e->dshift, &chan, &chan, STAGE_DIFF_BIAS, 1);
    }
    if (st == dnnl_success) return FH_OK;
    layer_entry_free(ctx, e);
    if (bn)
        FH_FAIL(st == dnnl_out_of_memory ? FH_ERR_MEMORY : FH_ERR_USAGE,
                "%s: oneDNN cannot %s the batch norm %s of a %dx%dx%dx%d input%s: %s; train.backend = blas runs it",
                l->name, failed >= 0 ? "create" : "set up", failed >= 0 ? (failed ? "backward" : "forward") : "arguments",
                batch, l->c, l->h, l->w, l->fuse_relu ? " (ReLU fused)" : "", dnnl_status2str(st));
    FH_FAIL(st == dnnl_out_of_memory ? FH_ERR_MEMORY : FH_ERR_USAGE,
            "%s: oneDNN cannot %s the max pool %s of a %dx%dx%dx%d input (window %d, stride %d, pad %d): %s; "
            "train.backend = blas runs it", l->name, failed >= 0 ? "create" : "set up",
            failed >= 0 ? (failed ? "backward" : "forward") : "arguments", batch, l->c, l->h, l->w, l->k, l->stride,
            l->pad, dnnl_status2str(st));
}

static int layer_create(NnOnednnLayer **out, NnOnednnLayer *proto, int batch)
{
    NnOnednnLayer *l = NULL;
    FH_CHECK(fh_calloc(&l, 1, sizeof *l, "oneDNN layer"));
    *l = *proto;
    *out = l;
    const int status = layer_entry_create(l, &l->entry[0], batch);
    if (status != FH_OK) nn_onednn_layer_free(out);
    return status;
}

int nn_onednn_bn_create(NnOnednnLayer **out, NnOnednn *ctx, int batch, int c, int h, int w, int block, float eps,
                        NnAct act, const char *name)
{
    NnOnednnLayer l = { .ctx = ctx, .kind = LAYER_BN, .c = c, .h = h, .w = w, .ho = h, .wo = w, .block = block,
                        .eps = eps, .fuse_relu = act == NN_ACT_RELU };
    snprintf(l.name, sizeof l.name, "%s", name);
    return layer_create(out, &l, batch);
}

int nn_onednn_maxpool_create(NnOnednnLayer **out, NnOnednn *ctx, int batch, int c, int h, int w, int block, int k,
                             int stride, int pad, int ho, int wo, const char *name)
{
    NnOnednnLayer l = { .ctx = ctx, .kind = LAYER_MAXPOOL, .c = c, .h = h, .w = w, .ho = ho, .wo = wo,
                        .block = block, .k = k, .stride = stride, .pad = pad };
    snprintf(l.name, sizeof l.name, "%s", name);
    return layer_create(out, &l, batch);
}

void nn_onednn_layer_free(NnOnednnLayer **pl)
{
    if (!*pl) return;
    for (int i = 0; i < CONV_BATCHES; i++)
        if ((*pl)->entry[i].key.batch) layer_entry_free((*pl)->ctx, &(*pl)->entry[i]);
    fh_free(pl);
}

const char *nn_onednn_layer_impl(const NnOnednnLayer *l, int backward)
{
    const char *name = NULL;
    const_dnnl_primitive_desc_t pd = l ? l->entry[0].pd[backward ? LAYER_BWD : LAYER_FWD] : NULL;
    if (!pd || dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success) return "";
    return name;
}

/* the forward's entry for `batch`, created on its first use; status cleared for the call */
static int layer_forward_entry(NnOnednnLayer *l, int batch, LayerEntry **out)
{
    int found = 0;
    LayerEntry *e = entry_slot(l->entry, sizeof l->entry[0], CONV_BATCHES, batch, &found);
    if (!found) {
        if (e->key.batch) layer_entry_free(l->ctx, e);
        FH_CHECK(layer_entry_create(l, e, batch));
    }
    e->key.used = ++l->ctx->clock;
    l->ctx->status = dnnl_success;
    *out = e;
    return FH_OK;
}

/* the backward's entry: the one its forward used (entries are replaced only by forwards at other batches) */
static LayerEntry *layer_backward_entry(NnOnednnLayer *l, int batch)
{
    for (int i = 0; i < CONV_BATCHES; i++)
        if (l->entry[i].key.batch == batch) {
            l->ctx->status = dnnl_success;
            return &l->entry[i];
        }
    fh_log_error("%s: oneDNN backward at batch %d without its forward", l->name, batch);
    abort();
}

static int layer_forward_done(NnOnednnLayer *l, int batch)
{
    track(l->ctx, dnnl_stream_wait(l->ctx->stream));
    if (l->ctx->status != dnnl_success)
        FH_FAIL(FH_ERR_IO, "%s: oneDNN %s forward at batch %d failed: %s", l->name,
                l->kind == LAYER_BN ? "batch norm" : "max pool", batch, dnnl_status2str(l->ctx->status));
    return FH_OK;
}

static void layer_backward_done(NnOnednnLayer *l, int batch)
{
    track(l->ctx, dnnl_stream_wait(l->ctx->stream));
    if (l->ctx->status == dnnl_success) return;
    /* as for convs: primitives that were created fine do not fail on a CPU */
    fh_log_error("%s: oneDNN backward at batch %d failed: %s", l->name, batch, dnnl_status2str(l->ctx->status));
    abort();
}

/* binds the memory objects of a batch norm call; returns the argument count */
static int bn_bind(NnOnednn *ctx, LayerEntry *e, dnnl_exec_arg_t *args, const float *x, const float *gamma,
                   const float *beta, const float *mean, const float *var)
{
    int n = 0;
    set_data(ctx, e->x, x);
    set_data(ctx, e->scale, gamma);
    set_data(ctx, e->shift, beta);
    set_data(ctx, e->mean, mean);
    set_data(ctx, e->var, var);
    args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_SRC, e->x };
    args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_SCALE, e->scale };
    args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_SHIFT, e->shift };
    args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_MEAN, e->mean };
    args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_VARIANCE, e->var };
    if (e->ws) {
        set_data(ctx, e->ws, e->ws_data);
        args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_WORKSPACE, e->ws };
    }
    return n;
}

int nn_onednn_bn_forward(NnOnednnLayer *l, float *y, float *mean, float *var, const float *x, const float *gamma,
                         const float *beta, int batch)
{
    LayerEntry *e = NULL;
    FH_CHECK(layer_forward_entry(l, batch, &e));
    dnnl_exec_arg_t args[9];
    int n = bn_bind(l->ctx, e, args, x, gamma, beta, mean, var);
    set_data(l->ctx, e->y, y);
    args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_DST, e->y };
    prim_run(l->ctx, &e->prim[LAYER_FWD], n, args);
    return layer_forward_done(l, batch);
}

void nn_onednn_bn_backward(NnOnednnLayer *l, float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                           const float *gamma, const float *beta, const float *mean, const float *var, int batch,
                           int dgrad_zero, int dx_zero)
{
    NnOnednn *ctx = l->ctx;
    LayerEntry *e = layer_backward_entry(l, batch);
    dnnl_exec_arg_t args[12];
    int n = bn_bind(ctx, e, args, x, gamma, beta, mean, var);
    set_data(ctx, e->dy, dy);
    args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_DIFF_DST, e->dy };
    /* no dx wanted (the model's input): the primitive writes it to the stage buffer all the same */
    args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_DIFF_SRC, arg_out(ctx, &e->dx, dx, dx && dx_zero) };
    args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_DIFF_SCALE, arg_out(ctx, &e->dscale, dgamma, dgrad_zero) };
    args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_DIFF_SHIFT, arg_out(ctx, &e->dshift, dbeta, dgrad_zero) };
    prim_run(ctx, &e->prim[LAYER_BWD], n, args);
    if (dx) arg_out_done(ctx, &e->dx, dx_zero);
    arg_out_done(ctx, &e->dscale, dgrad_zero);
    arg_out_done(ctx, &e->dshift, dgrad_zero);
    layer_backward_done(l, batch);
}

int nn_onednn_maxpool_forward(NnOnednnLayer *l, float *y, const float *x, int batch)
{
    LayerEntry *e = NULL;
    FH_CHECK(layer_forward_entry(l, batch, &e));
    NnOnednn *ctx = l->ctx;
    set_data(ctx, e->x, x);
    set_data(ctx, e->y, y);
    set_data(ctx, e->ws, e->ws_data);
    dnnl_exec_arg_t args[4] = { { DNNL_ARG_SRC, e->x }, { DNNL_ARG_DST, e->y }, { DNNL_ARG_WORKSPACE, e->ws } };
    prim_run(ctx, &e->prim[LAYER_FWD], 3, args);
    return layer_forward_done(l, batch);
}

void nn_onednn_maxpool_backward(NnOnednnLayer *l, float *dx, const float *dy, int batch, int dx_zero)
{
    NnOnednn *ctx = l->ctx;
    LayerEntry *e = layer_backward_entry(l, batch);
    set_data(ctx, e->dy, dy);
    set_data(ctx, e->ws, e->ws_data);
    dnnl_exec_arg_t args[4] = { { DNNL_ARG_DIFF_DST, e->dy }, { DNNL_ARG_DIFF_SRC, arg_out(ctx, &e->dx, dx, dx_zero) },
                                { DNNL_ARG_WORKSPACE, e->ws } };
    prim_run(ctx, &e->prim[LAYER_BWD], 3, args);
    arg_out_done(ctx, &e->dx, dx_zero);
    layer_backward_done(l, batch);
}
