/* The layers of convolutional networks at import: Conv, BatchNormalization, pooling, PyTorch's GroupNorm and
 * channel-shuffle patterns, and the NCHW forms of Add, Mul, Concat, Slice, Reshape and Gemm / MatMul, which build
 * the same layers as the zoo (and so the same bits). Other forms of those ops go to import_nd.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import_internal.h"

/* kernel_shape, strides, pads and dilations of a conv or pool: kh, kw, strides, pads t l b r, dilations */
typedef struct {
    int kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
} Geometry;

static int geometry(Bld *b, int64_t kh, int64_t kw, Geometry *g)
{
    const Onnx__NodeProto *n = imp_cur(b);
    const int64_t *v;
    int c;
    const Onnx__AttributeProto *ap = imp_attr(n, "auto_pad");
    const char *pad = ap && ap->has_s ? (const char *)ap->s.data : "NOTSET";
    const int plen = ap && ap->has_s ? (int)ap->s.len : 6;
    if (!(plen == 6 && !strncmp(pad, "NOTSET", 6)) && !(plen == 5 && !strncmp(pad, "VALID", 5)))
        NODE_FAIL(b, FH_ERR_USAGE, "attribute auto_pad = %.*s is not supported (NOTSET and VALID are; export with "
                  "explicit pads)", plen, pad);
    if ((c = imp_attr_ints(n, "kernel_shape", &v)) && (c != 2 || v[0] != kh || v[1] != kw))
        NODE_FAIL(b, FH_ERR_USAGE, "attribute kernel_shape does not match the weights (2-D kernels only)");
    *g = (Geometry){ (int)kh, (int)kw, 1, 1, 0, 0, 0, 0, 1, 1 };
    if ((c = imp_attr_ints(n, "strides", &v))) {
        if (c != 2) NODE_FAIL(b, FH_ERR_USAGE, "attribute strides: 2 values are supported, not %d", c);
        g->sh = (int)v[0];
        g->sw = (int)v[1];
    }
    if ((c = imp_attr_ints(n, "pads", &v))) { /* ONNX: begins (top, left), then ends (bottom, right) */
        if (c != 4) NODE_FAIL(b, FH_ERR_USAGE, "attribute pads: 4 values are supported, not %d", c);
        g->pt = (int)v[0];
        g->pl = (int)v[1];
        g->pb = (int)v[2];
        g->pr = (int)v[3];
    }
    if ((c = imp_attr_ints(n, "dilations", &v))) {
        if (c != 2) NODE_FAIL(b, FH_ERR_USAGE, "attribute dilations: 2 values are supported, not %d", c);
        g->dh = (int)v[0];
        g->dw = (int)v[1];
    }
    return FH_OK;
}

/* a batch-first value of rank 4, N x C x H x W (its engine tensor made so) */
static int is_plain(const Val *x, int rank)
{
    return x->kind == V_TENSOR && x->od.rank == rank && x->od.bax == 0 && x->od.d[0] == 1 && x->od.bouter == 1;
}

int imp_need_rank4(Bld *b, Val *x)
{
    if (!is_plain(x, 4))
        NODE_FAIL(b, FH_ERR_USAGE, "input '%s' of rank %d is not supported (N x C x H x W only)", x->name, x->od.rank);
    return imp_as_engine(b, x);
}

int imp_op_conv(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", NULL }));
    Val *x;
    const Const *w, *bias = NULL;
    FH_CHECK(imp_in_tensor(b, 0, &x));
    FH_CHECK(imp_need_rank4(b, x));
    FH_CHECK(imp_need_const(b, 1, &w, "weight"));
    if (imp_cur(b)->n_input > 2 && *imp_cur(b)->input[2]) FH_CHECK(imp_need_const(b, 2, &bias, "bias"));
    if (w->ndim != 4) NODE_FAIL(b, FH_ERR_USAGE, "weight must be 4-D (2-D convolutions only)");
    Geometry g;
    FH_CHECK(geometry(b, w->dims[2], w->dims[3], &g));
    g.pt += x->pad[0], g.pl += x->pad[1], g.pb += x->pad[2], g.pr += x->pad[3];
    int groups = (int)imp_attr_i(imp_cur(b), "group", 1);
    const NnShape s = b->m->tensors[x->t].shape;
    if (groups < 1 || w->dims[1] * groups != s.c)
        NODE_FAIL(b, FH_ERR_USAGE, "weight %lldx%lldx%lldx%lld with group %d does not fit %d input channels",
                  (long long)w->dims[0], (long long)w->dims[1], (long long)w->dims[2], (long long)w->dims[3], groups, s.c);
    if (bias && bias->n != w->dims[0]) NODE_FAIL(b, FH_ERR_USAGE, "bias has %lld values for %lld output channels",
                                                 (long long)bias->n, (long long)w->dims[0]);
    const NnConvSpec spec = { g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.pb, g.pr, g.dh, g.dw, groups, bias != NULL };
    int t = nn_conv2d_ex(b->m, x->t, (int)w->dims[0], &spec, NN_ACT_NONE);
    if (t < 0) return b->m->status;
    int li = b->m->n_layers - 1;
    FH_CHECK(imp_record_weight(b, li, ONNX_W, w, 0, 1.0f));
    if (bias) FH_CHECK(imp_record_weight(b, li, ONNX_B, bias, 0, 1.0f));
    if (!imp_put_tensor(b, imp_cur(b)->output[0], t, 4)) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    return FH_OK;
}

int imp_op_batchnorm(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "epsilon", "momentum", "training_mode", "spatial", NULL }));
    const Onnx__NodeProto *n = imp_cur(b);
    if (imp_attr_i(n, "spatial", 1) != 1) NODE_FAIL(b, FH_ERR_USAGE, "attribute spatial = 0 is not supported");
    for (size_t k = 1; k < n->n_output; k++)
        if (*n->output[k] && imp_consumers(b, n->output[k], b->node))
            NODE_FAIL(b, FH_ERR_USAGE, "output %zu (the batch statistics) is read by the graph: fedhet keeps the running "
                      "statistics itself", k);
    Val *x;
    const Const *p[4];
    FH_CHECK(imp_in_tensor(b, 0, &x));
    FH_CHECK(imp_need_rank4(b, x));
    static const char *names[] = { "scale", "bias", "mean", "var" };
    const int c = b->m->tensors[x->t].shape.c;
    for (int k = 0; k < 4; k++) {
        FH_CHECK(imp_need_const(b, k + 1, &p[k], names[k]));
        if (p[k]->n != c) NODE_FAIL(b, FH_ERR_USAGE, "%s has %lld values for %d channels", names[k], (long long)p[k]->n, c);
    }
    int t = nn_batchnorm(b->m, x->t, NN_ACT_NONE);
    if (t < 0) return b->m->status;
    int li = b->m->n_layers - 1;
    NnLayer *l = &b->m->layers[li];
    l->eps = imp_attr_f(n, "epsilon", 1e-5f);
    /* ONNX: running = running * momentum + batch * (1 - momentum); the engine's is PyTorch's, the other way round.
     * 1 - 0.9f is 0.100000024, not PyTorch's 0.1f: a momentum that is a round decimal to 1e-6 is taken as that
     * decimal, so that PyTorch's 0.1 (and a fedhet export's) come back exactly */
    const double mom = 1.0 - (double)imp_attr_f(n, "momentum", 0.9f), round6 = nearbyint(mom * 1e4) / 1e4;
    l->momentum = (float)(fabs(mom - round6) < 1e-6 ? round6 : mom);
    static const int roles[] = { ONNX_W, ONNX_B, ONNX_RM, ONNX_RV };
    for (int k = 0; k < 4; k++) FH_CHECK(imp_record_weight(b, li, roles[k], p[k], 0, 1.0f));
    if (!imp_put_tensor(b, n->output[0], t, 4)) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    return FH_OK;
}

int imp_op_pool(Bld *b, int max)
{
    if (max) FH_CHECK(imp_check_attrs(b, (const char *[]){ "auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                                                      "storage_order", "strides", NULL }));
    else FH_CHECK(imp_check_attrs(b, (const char *[]){ "auto_pad", "ceil_mode", "count_include_pad", "kernel_shape",
                                                  "pads", "strides", NULL }));
    const Onnx__NodeProto *n = imp_cur(b);
    Val *x;
    FH_CHECK(imp_in_tensor(b, 0, &x));
    FH_CHECK(imp_need_rank4(b, x));
    const int64_t *ks;
    if (imp_attr_ints(n, "kernel_shape", &ks) != 2) NODE_FAIL(b, FH_ERR_USAGE, "attribute kernel_shape must name 2 sizes");
    Geometry g;
    FH_CHECK(geometry(b, ks[0], ks[1], &g));
    if (g.dh != 1 || g.dw != 1) NODE_FAIL(b, FH_ERR_USAGE, "attribute dilations = [%d, %d]: pools with dilation 1 only are "
                                          "supported", g.dh, g.dw);
    if (imp_attr_i(n, "storage_order", 0)) NODE_FAIL(b, FH_ERR_USAGE, "attribute storage_order = 1 is not supported");
    if (n->n_output > 1 && *n->output[1] && imp_consumers(b, n->output[1], b->node))
        NODE_FAIL(b, FH_ERR_USAGE, "output Indices is read by the graph, which is not supported");
    int include = (int)imp_attr_i(n, "count_include_pad", 0);
    if (x->pad[0] | x->pad[1] | x->pad[2] | x->pad[3]) { /* zeros padded before: they count in every window */
        if ((g.pt | g.pl | g.pb | g.pr) && !include)
            NODE_FAIL(b, FH_ERR_USAGE, "a Pad before an AveragePool with its own pads and count_include_pad = 0 is "
                      "not supported");
        g.pt += x->pad[0], g.pl += x->pad[1], g.pb += x->pad[2], g.pr += x->pad[3];
        include = 1;
    }
    const NnPoolSpec spec = { g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.pb, g.pr, (int)imp_attr_i(n, "ceil_mode", 0), include };
    int t = max ? nn_maxpool_ex(b->m, x->t, &spec) : nn_avgpool_ex(b->m, x->t, &spec);
    if (t < 0) return b->m->status;
    if (!imp_put_tensor(b, n->output[0], t, 4)) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    return FH_OK;
}

/* GlobalAveragePool, and ReduceMean over the spatial axes [2, 3] of N x C x H x W */
int imp_nchw_gap(Bld *b, int *done)
{
    const Onnx__NodeProto *n = imp_cur(b);
    const int reduce = !strcmp(n->op_type, "ReduceMean");
    Val *x = imp_in_val(b, 0);
    *done = 0;
    int rank = 4;
    if (reduce) {
        const int64_t *ax;
        int c = imp_attr_ints(n, "axes", &ax);
        if (!x || !is_plain(x, 4) || c != 2 || imp_norm_axis(ax[0], 4) + imp_norm_axis(ax[1], 4) != 5 ||
            imp_norm_axis(ax[0], 4) < 2 || imp_norm_axis(ax[1], 4) < 2)
            return FH_OK;
        FH_CHECK(imp_check_attrs(b, (const char *[]){ "axes", "keepdims", NULL }));
        if (!imp_attr_i(n, "keepdims", 1)) rank = 2;
    } else FH_CHECK(imp_check_attrs(b, (const char *[]){ NULL }));
    FH_CHECK(imp_in_tensor(b, 0, &x));
    FH_CHECK(imp_need_rank4(b, x));
    *done = 1;
    int t = nn_gap(b->m, x->t);
    if (t < 0) return b->m->status;
    NEED_MEM(imp_put_tensor(b, n->output[0], t, rank));
    return FH_OK;
}

/* N x -1 of a batch-first value */
int imp_flatten_to(Bld *b, Val *x, const char *out)
{
    if (x->od.rank == 2) return imp_put_alias(b, out, x);
    int t = nn_flatten(b->m, x->t);
    if (t < 0) return b->m->status;
    if (!imp_put_tensor(b, out, t, 2)) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    return FH_OK;
}


/* the patterns of PyTorch's GroupNorm and channel shuffle, and N x C x H x W to N x -1 */
int imp_nchw_reshape(Bld *b, int *done)
{
    const Onnx__NodeProto *n = imp_cur(b);
    Val *x = imp_in_val(b, 0);
    const Const *s = imp_in_const(b, 1);
    *done = 0;
    if (!x || !s || !s->is_int) return FH_OK;
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "allowzero", NULL }));
    *done = 1;
    if (is_plain(x, 4) && s->n == 3 && imp_sole_reader(b, n->output[0], "InstanceNormalization") >= 0) { /* GroupNorm: N x C x H x W -> N x G x -1 */
        FH_CHECK(imp_as_engine(b, x));
        const NnShape sh = b->m->tensors[x->t].shape;
        int64_t g = s->i[1];
        if (g < 1 || sh.c % g || (s->i[2] != -1 && s->i[2] * g != (int64_t)sh.c * sh.h * sh.w))
            NODE_FAIL(b, FH_ERR_USAGE, "a reshape to 3-D is read as the start of PyTorch's GroupNorm pattern, but %lld "
                      "groups do not divide %d channels", (long long)g, sh.c);
        Val *v = imp_put(b, n->output[0], V_GN_SPLIT);
        if (!v) FH_FAIL(FH_ERR_MEMORY, "out of memory");
        v->t = x->t;
        v->groups = (int)g;
        return FH_OK;
    }
    if (is_plain(x, 4) && s->n == 5 && imp_sole_reader(b, n->output[0], "Transpose") >= 0) { /* channel shuffle: N x g x C/g x H x W */
        FH_CHECK(imp_as_engine(b, x));
        const NnShape sh = b->m->tensors[x->t].shape;
        int64_t g = s->i[1];
        if (g < 1 || sh.c % g || (s->i[2] != -1 && s->i[2] * g != sh.c))
            NODE_FAIL(b, FH_ERR_USAGE, "a reshape to 5-D is read as the start of a channel shuffle, but %lld groups do "
                      "not divide %d channels", (long long)g, sh.c);
        Val *v = imp_put(b, n->output[0], V_SHUF_SPLIT);
        if (!v) FH_FAIL(FH_ERR_MEMORY, "out of memory");
        v->t = x->t;
        v->groups = (int)g;
        return FH_OK;
    }
    if (x && x->kind == V_SHUF_SWAPPED) {
        int t = nn_channel_shuffle(b->m, x->t, x->groups);
        if (t < 0) return b->m->status;
        if (!imp_put_tensor(b, n->output[0], t, 4)) FH_FAIL(FH_ERR_MEMORY, "out of memory");
        return FH_OK;
    }
    if (x && x->kind == V_GN_NORMED) { /* back to N x C x H x W */
        const NnShape sh = b->m->tensors[x->t].shape;
        if (s->n != 4 || (s->i[1] != sh.c && s->i[1] != 0) || (s->i[2] != sh.h && s->i[2] != 0 && s->i[2] != -1) ||
            (s->i[3] != sh.w && s->i[3] != 0 && s->i[3] != -1))
            NODE_FAIL(b, FH_ERR_USAGE, "the GroupNorm pattern must reshape back to its input's shape");
        Val *v = imp_put(b, n->output[0], V_GN_BACK);
        if (!v) FH_FAIL(FH_ERR_MEMORY, "out of memory");
        *v = *x;
        v->name = n->output[0];
        v->kind = V_GN_BACK;
        return FH_OK;
    }
    const int64_t size = x->kind == V_TENSOR ? b->m->tensors[x->t].size : 0;
    if (x->kind == V_TENSOR && x->od.rank >= 2 && x->od.bax == 0 && x->od.d[0] == 1 && x->od.bouter == 1 &&
        s->n == 2 && (s->i[1] == -1 || s->i[1] == size) && !(s->ib && s->ib[1])) {
        FH_CHECK(imp_as_engine(b, x));
        return imp_flatten_to(b, x, n->output[0]);
    }
    *done = 0; /* the general reshape's */
    return FH_OK;
}

int imp_op_instnorm(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "epsilon", NULL }));
    Val *x = imp_in_val(b, 0);
    if (!x || x->kind != V_GN_SPLIT)
        NODE_FAIL(b, FH_ERR_USAGE, "InstanceNormalization is supported inside PyTorch's GroupNorm pattern only (Reshape "
                  "to N x G x -1 before it)");
    const Const *sc, *bi;
    FH_CHECK(imp_need_const(b, 1, &sc, "scale"));
    FH_CHECK(imp_need_const(b, 2, &bi, "B"));
    for (int64_t k = 0; k < sc->n; k++)
        if (imp_cval(sc, k) != 1.0 || imp_cval(bi, k) != 0.0)
            NODE_FAIL(b, FH_ERR_USAGE, "the GroupNorm pattern's InstanceNormalization must have scale 1 and bias 0 (its "
                      "affine part follows as Mul and Add)");
    Val *v = imp_put(b, imp_cur(b)->output[0], V_GN_NORMED);
    if (!v) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    v->t = x->t;
    v->groups = x->groups;
    v->eps = imp_attr_f(imp_cur(b), "epsilon", 1e-5f);
    return FH_OK;
}

/* a constant of C values shaped C x 1 x 1 or 1 x C x 1 x 1 (a per-channel affine) */
static int per_channel(const Const *c, int channels)
{
    if (!c || c->n != channels) return 0;
    int ones = 0;
    for (int d = 0; d < c->ndim; d++) ones += c->dims[d] == 1;
    return c->ndim >= 3 && c->dims[c->ndim - 1] == 1 && c->dims[c->ndim - 2] == 1 && (channels == 1 || ones == c->ndim - 1);
}

/* the group-norm layer of a finished pattern: gamma and beta may be NULL (1 and 0) */
static int make_groupnorm(Bld *b, const Val *p, const Const *beta, const char *out)
{
    int t = nn_groupnorm(b->m, p->t, p->groups, NN_ACT_NONE);
    if (t < 0) return b->m->status;
    int li = b->m->n_layers - 1;
    b->m->layers[li].eps = p->eps;
    const int c = b->m->tensors[p->t].shape.c;
    Const one, zero;
    int64_t dims[1] = { c };
    if (!p->gamma) {
        FH_CHECK(imp_const_new(b, &one, 1, dims, 0));
        for (int k = 0; k < c; k++) one.f[k] = 1.0f;
    }
    if (!beta) FH_CHECK(imp_const_new(b, &zero, 1, dims, 0));
    FH_CHECK(imp_record_weight(b, li, ONNX_W, p->gamma ? p->gamma : &one, 0, 1.0f));
    FH_CHECK(imp_record_weight(b, li, ONNX_B, beta ? beta : &zero, 0, 1.0f));
    if (!imp_put_tensor(b, out, t, 4)) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    return FH_OK;
}

/* the first node after the current one that reads `name`, -1 */

/* Sigmoid: SiLU when its one reader is Mul(x, Sigmoid(x)), else a sigmoid layer */
int imp_op_sigmoid(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ NULL }));
    const Onnx__NodeProto *n = imp_cur(b);
    int r = imp_next_reader(b, n->output[0]);
    if (r >= 0 && imp_consumers(b, n->output[0], b->node) == 1 && !strcmp(b->g->node[r]->op_type, "Mul") &&
        b->g->node[r]->n_input == 2) {
        const Onnx__NodeProto *mul = b->g->node[r];
        const char *other = !strcmp(mul->input[0], n->output[0]) ? mul->input[1] : mul->input[0];
        if (!strcmp(other, n->input[0])) {
            b->absorbed[r] = 1;
            return imp_act_node_ex(b, (NnActSpec){ NN_ACT_SILU, 0, 0 }, mul->output[0]);
        }
    }
    return imp_act_node_ex(b, (NnActSpec){ NN_ACT_SIGMOID, 0, 0 }, n->output[0]);
}

/* along the channel axis 1 of N x C x H x W values */
int imp_nchw_concat(Bld *b, int *done)
{
    const Onnx__NodeProto *n = imp_cur(b);
    *done = 0;
    if (imp_attr_i(n, "axis", 0) != 1) return FH_OK;
    for (size_t k = 0; k < n->n_input; k++) {
        Val *x = imp_in_val(b, (int)k);
        if (!x || !is_plain(x, 4) || (x->pad[0] | x->pad[1] | x->pad[2] | x->pad[3])) return FH_OK;
    }
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "axis", NULL }));
    *done = 1;
    int *ins = imp_alloc(b, n->n_input * sizeof *ins);
    NEED_MEM(ins);
    for (size_t k = 0; k < n->n_input; k++) {
        Val *x;
        FH_CHECK(imp_in_tensor(b, (int)k, &x));
        FH_CHECK(imp_need_rank4(b, x));
        ins[k] = x->t;
    }
    if (n->n_input == 1) return imp_put_alias(b, n->output[0], imp_in_val(b, 0)); /* of one tensor: that tensor */
    int t = nn_concat(b->m, ins, (int)n->n_input);
    if (t < 0) return b->m->status;
    NEED_MEM(imp_put_tensor(b, n->output[0], t, 4));
    return FH_OK;
}

static int slice_to(Bld *b, Val *x, int64_t start, int64_t end, const char *out)
{
    const int c = b->m->tensors[x->t].shape.c;
    if (start < 0) start += c;
    if (end < 0) end += c;
    if (start < 0) start = 0;
    if (end > c) end = c;
    int t = nn_slice_channels(b->m, x->t, (int)start, (int)end);
    if (t < 0) return b->m->status;
    if (!imp_put_tensor(b, out, t, 4)) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    return FH_OK;
}

/* Slice on the channel axis 1 of N x C x H x W with step 1 */
int imp_nchw_slice(Bld *b, int *done)
{
    Val *x = imp_in_val(b, 0);
    const Const *st = imp_in_const(b, 1), *en = imp_in_const(b, 2), *ax = imp_in_const(b, 3), *sp = imp_in_const(b, 4);
    *done = 0;
    if (!x || !is_plain(x, 4) || !st || !en || !ax || st->n != 1 || en->n != 1 || ax->n != 1 ||
        imp_norm_axis((int64_t)imp_cval(ax, 0), 4) != 1 || (sp && (sp->n != 1 || imp_cval(sp, 0) != 1)) ||
        (st->ib && st->ib[0]) || (en->ib && en->ib[0]))
        return FH_OK;
    FH_CHECK(imp_check_attrs(b, (const char *[]){ NULL }));
    *done = 1;
    FH_CHECK(imp_need_rank4(b, x));
    return slice_to(b, x, (int64_t)imp_cval(st, 0), (int64_t)fmin(imp_cval(en, 0), 1e9), imp_cur(b)->output[0]);
}

/* Split on the channel axis 1 of N x C x H x W */
int imp_nchw_split(Bld *b, int *done)
{
    const Onnx__NodeProto *n = imp_cur(b);
    Val *x = imp_in_val(b, 0);
    *done = 0;
    if (!x || !is_plain(x, 4) || imp_norm_axis(imp_attr_i(n, "axis", 0), 4) != 1) return FH_OK;
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "axis", "split", NULL }));
    *done = 1;
    FH_CHECK(imp_need_rank4(b, x));
    const int c = b->m->tensors[x->t].shape.c, parts = (int)n->n_output;
    const int64_t *sizes = NULL;
    int n_sizes = imp_attr_ints(n, "split", &sizes);
    const Const *sc = imp_in_const(b, 1);
    int64_t start = 0;
    for (int k = 0; k < parts; k++) {
        int64_t len = sc ? (int64_t)imp_cval(sc, k < sc->n ? k : 0) : n_sizes ? sizes[k < n_sizes ? k : 0] : c / parts;
        if ((sc && sc->n != parts) || (n_sizes && n_sizes != parts) || (!sc && !n_sizes && c % parts))
            NODE_FAIL(b, FH_ERR_USAGE, "split sizes do not fit %d channels in %d parts", c, parts);
        FH_CHECK(slice_to(b, x, start, start + len, n->output[k]));
        start += len;
    }
    return FH_OK;
}

/* Pad, constant mode with value 0: on H and W of N x C x H x W kept for the Conv or AveragePool that reads it, on
 * other axes (Swin pads its N x H x W x C maps to a multiple of the window) zero entries of the tensor ops */
int imp_op_pad(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "mode", "pads", "value", NULL }));
    const Onnx__NodeProto *n = imp_cur(b);
    const Onnx__AttributeProto *mode = imp_attr(n, "mode");
    if (mode && mode->has_s && !(mode->s.len == 8 && !memcmp(mode->s.data, "constant", 8)))
        NODE_FAIL(b, FH_ERR_USAGE, "attribute mode = %.*s is not supported (constant is)", (int)mode->s.len, (const char *)mode->s.data);
    Val *x;
    FH_CHECK(imp_in_tensor(b, 0, &x));
    int64_t p[16] = { 0 };
    const int64_t *pa;
    int c = imp_attr_ints(n, "pads", &pa);
    const Const *pc = imp_in_const(b, 1), *vc = imp_in_const(b, 2);
    if (n->n_input > 1 && *n->input[1] && !pc) NODE_FAIL(b, FH_ERR_USAGE, "pads must be a constant");
    if (pc) c = (int)pc->n;
    const int rank = x->od.rank;
    if (c != 2 * rank) NODE_FAIL(b, FH_ERR_USAGE, "pads of %d values for a rank-%d input (begins, then ends)", c, rank);
    int any = 0;
    for (int k = 0; k < c; k++) {
        p[k] = pc ? imp_cint(pc, k) : pa[k];
        if (p[k] < 0) NODE_FAIL(b, FH_ERR_USAGE, "a negative pad (a crop) is not supported");
        any |= p[k] != 0;
    }
    double value = vc ? imp_cval(vc, 0) : imp_attr_f(n, "value", 0.0f);
    if (value != 0.0) NODE_FAIL(b, FH_ERR_USAGE, "a pad value of %g is not supported (0 is)", value);
    if (!any) return imp_put_alias(b, n->output[0], x);
    int pooled = 1; /* read only by convs and average pools: their own pads */
    for (size_t k = (size_t)b->node + 1; k < b->g->n_node; k++)
        for (size_t j = 0; j < b->g->node[k]->n_input; j++)
            if (!strcmp(b->g->node[k]->input[j], n->output[0]))
                pooled &= !strcmp(b->g->node[k]->op_type, "Conv") || !strcmp(b->g->node[k]->op_type, "AveragePool");
    if (!pooled || !is_plain(x, 4) || p[0] || p[1] || p[4] || p[5]) return imp_pad_nd(b, x, p);
    FH_CHECK(imp_need_rank4(b, x));
    Val *v = imp_put_tensor(b, n->output[0], x->t, 4);
    if (!v) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    v->layer = -1; /* an alias: an activation after it must not fuse into the layer that others read */
    v->pad[0] = (int)p[2], v->pad[1] = (int)p[3], v->pad[2] = (int)p[6], v->pad[3] = (int)p[7];
    return FH_OK;
}

/* the channel shuffle's Transpose */
int imp_nchw_transpose(Bld *b, int *done)
{
    Val *x = imp_in_val(b, 0);
    const int64_t *p;
    int c = imp_attr_ints(imp_cur(b), "perm", &p);
    *done = 0;
    if (!x || x->kind != V_SHUF_SPLIT) return FH_OK;
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "perm", NULL }));
    if (c != 5 || p[0] != 0 || p[1] != 2 || p[2] != 1 || p[3] != 3 || p[4] != 4)
        NODE_FAIL(b, FH_ERR_USAGE, "a channel shuffle's Transpose must have perm [0, 2, 1, 3, 4]");
    *done = 1;
    Val *v = imp_put(b, imp_cur(b)->output[0], V_SHUF_SWAPPED);
    NEED_MEM(v);
    v->t = x->t;
    v->groups = x->groups;
    return FH_OK;
}

/* two activations of the same batch-first shape, or the second C x 1 x 1 of the first's C (a residual, a
 * squeeze-and-excitation): the NCHW add and mul layers */
static int legacy_operands(Bld *b, Val **a, Val **c)
{
    Val *x = imp_in_val(b, 0), *y = imp_in_val(b, 1);
    if (!x || !y || x->kind != V_TENSOR || y->kind != V_TENSOR || x->od.rank != y->od.rank || x->od.rank < 2 ||
        x->od.rank > 4 || !is_plain(x, x->od.rank) || !is_plain(y, y->od.rank) || (x->pad[0] | x->pad[1] | x->pad[2] |
                                                                                    x->pad[3] | y->pad[0] | y->pad[1] |
                                                                                    y->pad[2] | y->pad[3]))
        return 0;
    int same = 1, small = 1, large = 1;
    for (int k = 1; k < x->od.rank; k++) {
        same &= x->od.d[k] == y->od.d[k];
        small &= k == 1 ? x->od.d[k] == y->od.d[k] : y->od.d[k] == 1; /* y is C x 1 x 1 */
        large &= k == 1 ? x->od.d[k] == y->od.d[k] : x->od.d[k] == 1;
    }
    if (!same && !(x->od.rank == 4 && (small || large))) return 0;
    *a = x;
    *c = y;
    if (!same && large) { /* the broadcast operand second */
        *a = y;
        *c = x;
    }
    return 1;
}

/* Add and Mul: the steps of the GroupNorm pattern, and the NCHW add and mul layers */
int imp_nchw_binary(Bld *b, int *done)
{
    const int mul = !strcmp(imp_cur(b)->op_type, "Mul");
    Val *x = imp_in_val(b, 0), *y = imp_in_val(b, 1);
    *done = 1;
    if (x && y && x->kind == V_CONST && y->kind != V_CONST) {
        Val *s = x;
        x = y;
        y = s;
    }
    if (mul && x && y && x->kind == V_GN_BACK && y->kind == V_CONST &&
        per_channel(&y->c, b->m->tensors[x->t].shape.c) && !y->c.is_int) {
        Val *v = imp_put(b, imp_cur(b)->output[0], V_GN_SCALED);
        NEED_MEM(v);
        *v = *x;
        v->name = imp_cur(b)->output[0];
        v->kind = V_GN_SCALED;
        v->gamma = &y->c;
        return FH_OK;
    }
    if (!mul && x && y && (x->kind == V_GN_SCALED || x->kind == V_GN_BACK) && y->kind == V_CONST &&
        per_channel(&y->c, b->m->tensors[x->t].shape.c) && !y->c.is_int)
        return make_groupnorm(b, x, &y->c, imp_cur(b)->output[0]);
    Val *a, *c;
    if (!legacy_operands(b, &a, &c)) {
        *done = 0;
        return FH_OK;
    }
    FH_CHECK(imp_as_engine(b, a));
    FH_CHECK(imp_as_engine(b, c));
    int t = mul ? nn_mul(b->m, a->t, c->t) : nn_add(b->m, a->t, c->t, NN_ACT_NONE);
    if (t < 0) return b->m->status;
    NEED_MEM(imp_put_nd(b, imp_cur(b)->output[0], t, &a->od));
    return FH_OK;
}

/* a value that ends a GroupNorm pattern early (no Mul or Add after it) becomes its layer when something reads it */
int imp_finish_pattern(Bld *b, Val *v)
{
    if (v->kind == V_GN_BACK || v->kind == V_GN_SCALED) {
        Val p = *v;
        v->kind = V_NONE;
        v->name = "";
        return make_groupnorm(b, &p, NULL, p.name);
    }
    return FH_OK;
}

/* the classifier: Gemm (alpha, beta, transB) or MatMul (+ an Add of a bias right after) */
/* a bias the Add after a MatMul adds per output: [out], [1, out], ... */
static int per_output(const Const *c, int64_t out)
{
    if (!c || c->is_int || c->n != out || c->ndim < 1 || c->dims[c->ndim - 1] != out) return 0;
    return 1;
}

/* Gemm, and MatMul by a constant weight (then an Add of a bias, absorbed): a linear layer, on N x F values (the zoo's
 * layer, which MOON's projection head may precede), or on the last axis of any activation (every token) */
int imp_op_linear(Bld *b, int gemm)
{
    const Onnx__NodeProto *n = imp_cur(b);
    if (gemm) FH_CHECK(imp_check_attrs(b, (const char *[]){ "alpha", "beta", "transA", "transB", NULL }));
    else FH_CHECK(imp_check_attrs(b, (const char *[]){ NULL }));
    Val *x;
    const Const *w, *bias = NULL;
    FH_CHECK(imp_in_tensor(b, 0, &x));
    FH_CHECK(imp_need_const(b, 1, &w, "weight"));
    const int flat = is_plain(x, 2);
    if (gemm && x->od.rank != 2)
        NODE_FAIL(b, FH_ERR_USAGE, "an input of rank %d is not supported (rank 2 only: Flatten first)", x->od.rank);
    if (!flat && (x->od.rank < 2 || x->od.bax == x->od.rank - 1))
        NODE_FAIL(b, FH_ERR_USAGE, "a MatMul of a rank-%d activation by weights: the batch must not be in its last "
                  "axis", x->od.rank);
    if (w->ndim != 2 || w->is_int) NODE_FAIL(b, FH_ERR_USAGE, "weight must be a 2-D float tensor");
    if (gemm && imp_attr_i(n, "transA", 0)) NODE_FAIL(b, FH_ERR_USAGE, "attribute transA = 1 is not supported");
    const int trans = gemm && imp_attr_i(n, "transB", 0);
    const float alpha = gemm ? imp_attr_f(n, "alpha", 1.0f) : 1.0f, beta = gemm ? imp_attr_f(n, "beta", 1.0f) : 1.0f;
    const int64_t in = trans ? w->dims[1] : w->dims[0], out = trans ? w->dims[0] : w->dims[1];
    const int64_t have = flat ? b->m->tensors[x->t].size : x->od.d[x->od.rank - 1];
    if (in != have)
        NODE_FAIL(b, FH_ERR_USAGE, "weight takes %lld inputs, the input has %lld", (long long)in, (long long)have);
    const char *result = n->output[0];
    if (gemm && n->n_input > 2 && *n->input[2]) FH_CHECK(imp_need_const(b, 2, &bias, "C"));
    if (!gemm) { /* MatMul then Add(bias): one layer */
        int r = imp_sole_reader(b, result, "Add");
        if (r >= 0) {
            const Onnx__NodeProto *add = b->g->node[r];
            const char *other = !strcmp(add->input[0], result) ? add->input[1] : add->input[0];
            Val *bv = imp_find(b, other);
            if (bv && bv->kind == V_CONST && per_output(&bv->c, out) && bv->c.ndim <= x->od.rank) {
                bias = &bv->c;
                b->absorbed[r] = 1;
                result = add->output[0];
            }
        }
    }
    if (bias && bias->n != out)
        NODE_FAIL(b, FH_ERR_USAGE, "bias of %lld values for %lld outputs (only a per-output bias is supported)",
                  (long long)bias->n, (long long)out);
    if (!flat) { /* on every row */
        FH_CHECK(imp_as_engine(b, x));
        int t = nn_linear_rows(b->m, x->t, (int)out, bias != NULL, NN_ACT_NONE);
        if (t < 0) return b->m->status;
        int li = b->m->n_layers - 1;
        FH_CHECK(imp_record_weight(b, li, ONNX_W, w, trans ? 0 : (int)in, alpha));
        if (bias) FH_CHECK(imp_record_weight(b, li, ONNX_B, bias, 0, beta));
        Od od = x->od;
        od.d[od.rank - 1] = out;
        NEED_MEM(imp_put_nd(b, result, t, &od));
        return FH_OK;
    }
    FH_CHECK(imp_as_engine(b, x));
    b->features = x->t;
    int xt = x->t;
    const int last = imp_consumers(b, result, b->node) == 1 && b->g->n_output && !strcmp(b->g->output[0]->name, result) &&
                     imp_next_reader(b, result) < 0;
    if (last && b->proj_dim > 0) { /* a projection head (MOON) before the classifier, fresh weights for both */
        const int f = (int)b->m->tensors[xt].size;
        xt = nn_linear(b->m, xt, f, 1, NN_ACT_RELU);
        xt = nn_linear(b->m, xt, b->proj_dim, 1, NN_ACT_NONE);
        b->features = xt;
        int t = nn_linear(b->m, xt, (int)out, 1, NN_ACT_NONE);
        if (t < 0) return b->m->status;
        NEED_MEM(imp_put_tensor(b, result, t, 2));
        return FH_OK;
    }
    int t = nn_linear(b->m, xt, (int)out, bias != NULL, NN_ACT_NONE);
    if (t < 0) return b->m->status;
    int li = b->m->n_layers - 1;
    FH_CHECK(imp_record_weight(b, li, ONNX_W, w, trans ? 0 : (int)in, alpha));
    if (bias) FH_CHECK(imp_record_weight(b, li, ONNX_B, bias, 0, beta));
    NEED_MEM(imp_put_tensor(b, result, t, 2));
    return FH_OK;
}

int imp_op_dropout(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "ratio", "seed", NULL }));
    const Onnx__NodeProto *n = imp_cur(b);
    Val *x;
    FH_CHECK(imp_in_tensor(b, 0, &x));
    float p = imp_attr_f(n, "ratio", 0.5f);
    const Const *r = imp_in_const(b, 1), *tm = imp_in_const(b, 2);
    if (n->n_input > 1 && *n->input[1] && !r) NODE_FAIL(b, FH_ERR_USAGE, "ratio must be a constant");
    if (r) p = (float)imp_cval(r, 0);
    if (n->n_output > 1 && *n->output[1] && imp_consumers(b, n->output[1], b->node))
        NODE_FAIL(b, FH_ERR_USAGE, "output mask is read by the graph, which is not supported");
    (void)tm; /* training_mode: fedhet's own training flag decides, as for batch norm */
    if (p == 0.0f) return imp_put_alias(b, n->output[0], x); /* drops nothing: no layer, no copy */
    FH_CHECK(imp_as_engine(b, x));
    int t = nn_dropout(b->m, x->t, p);
    if (t < 0) return b->m->status;
    NEED_MEM(imp_put_nd(b, n->output[0], t, &x->od));
    return FH_OK;
}

int imp_op_clip(Bld *b)
{
    FH_CHECK(imp_check_attrs(b, (const char *[]){ "min", "max", NULL }));
    const Onnx__NodeProto *n = imp_cur(b);
    double lo = imp_attr_f(n, "min", -INFINITY), hi = imp_attr_f(n, "max", INFINITY);
    const Const *cl = imp_in_const(b, 1), *ch = imp_in_const(b, 2);
    if ((n->n_input > 1 && *n->input[1] && !cl) || (n->n_input > 2 && *n->input[2] && !ch))
        NODE_FAIL(b, FH_ERR_USAGE, "min and max must be constants");
    if (cl) lo = imp_cval(cl, 0);
    if (ch) hi = imp_cval(ch, 0);
    if (lo == 0.0 && hi == 6.0) return imp_act_node(b, NN_ACT_RELU6);
    if (lo == 0.0 && isinf(hi) && hi > 0) return imp_act_node(b, NN_ACT_RELU);
    if (!(lo <= hi)) NODE_FAIL(b, FH_ERR_USAGE, "bounds [%g, %g] are not supported (min above max)", lo, hi);
    return imp_act_node_ex(b, (NnActSpec){ NN_ACT_CLIP, (float)lo, (float)hi }, n->output[0]);
}

