/* Finalising a model: the state's layout, the activation memory planned by liveness, the activations' layouts
 * (channel-blocked for oneDNN), the oneDNN primitives and the layers' scratch, all from the shapes alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"
#include "kernels.h"
#include "model_internal.h"

static int view_by_offset(const void *a, const void *b)
{
    const NnParamView *va = a, *vb = b;
    return (va->offset > vb->offset) - (va->offset < vb->offset);
}

static int model_finalize(NnModel *m, int logits, int features, int classes);


/* Packs buffers of per-sample sizes size[t] that are live over steps [first[t], last[t]] into one pool: buffers whose
 * spans do not overlap share a slot. The n_ids tensors ids[] are taken in order of first step (stable), each
 * into the free slot that fits best (the smallest that is large enough, else the largest, grown). offset[t]
 * receives the per-sample offset of t's slice (share = 0: every buffer a slot of its own); returns the pool's floats per sample (slices 64-byte aligned),
 * -1 when out of memory. */
static int64_t pack_spans(int *ids, int n_ids, const int *first, const int *last, const NnTensor *tensors,
                          int share, int64_t *offset)
{
    int *busy = calloc((size_t)n_ids + 1, sizeof *busy);
    int64_t *size = calloc((size_t)n_ids + 1, sizeof *size), total = -1;
    if (!busy || !size) goto done;
    for (int i = 1; i < n_ids; i++) { /* insertion sort by first step, stable */
        int t = ids[i], j = i;
        for (; j > 0 && first[ids[j - 1]] > first[t]; j--) ids[j] = ids[j - 1];
        ids[j] = t;
    }
    int n_slots = 0;
    for (int k = 0; k < n_ids; k++) {
        const int t = ids[k];
        const int64_t need = tensors[t].size;
        int best = -1;
        for (int q = 0; q < n_slots; q++) {
            if (!share || busy[q] >= first[t]) continue;
            if (best < 0 || (size[best] >= need ? size[q] >= need && size[q] < size[best] : size[q] > size[best]))
                best = q;
        }
        if (best < 0) best = n_slots++;
        if (size[best] < need) size[best] = need;
        busy[best] = last[t];
        offset[t] = best;
    }
    total = 0;
    for (int q = 0; q < n_slots; q++) { /* slot sizes become slot offsets */
        const int64_t at = total;
        total += (size[q] + 15) & ~(int64_t)15;
        size[q] = at;
    }
    for (int k = 0; k < n_ids; k++) offset[ids[k]] = size[offset[ids[k]]];
done:
    free(busy);
    free(size);
    return total;
}

/* Whether backward reads the data of root tensor t: a layer's output when its activation's mask is taken from it,
 * an input of the layers whose backward needs x; the logits and features are read by callers after forward. */
static int data_read_by_backward(const NnModel *m, int t)
{
    if (t == nn_tensor_root(m, m->logits) || t == nn_tensor_root(m, m->features)) return 1;
    for (int i = 0; i < m->n_layers; i++) {
        const NnLayer *l = &m->layers[i];
        if (nn_layer_is_view(l)) continue;
        if (nn_tensor_root(m, l->out) == t && l->act != NN_ACT_NONE && !nn_layer_own_act(l)) return 1;
        if (nn_nd_is_op(l->type)) {
            if (nn_tensor_root(m, l->out) == t && nn_nd_reads(m, l, -1)) return 1;
            for (int k = 0; k < nn_layer_inputs(l); k++)
                if (nn_tensor_root(m, nn_layer_input(l, k)) == t && nn_nd_reads(m, l, k)) return 1;
            continue;
        }
        const int needs_x = l->type == NN_OP_LINEAR || l->type == NN_OP_CONV2D || l->type == NN_OP_BATCHNORM ||
                            l->type == NN_OP_GROUPNORM || l->type == NN_OP_MUL || nn_layer_own_act(l);
        if (needs_x && (nn_tensor_root(m, l->in) == t || (l->in2 >= 0 && nn_tensor_root(m, l->in2) == t))) return 1;
    }
    return 0;
}

/* Activation memory by liveness, planned from shapes at finalize.
 * Gradients: backward visits the layers last to first (layer i at step L - 1 - i, -1 being its start); a tensor's
 * gradient is live from the first step that writes it (that of the last layer reading the tensor, or the start
 * for the logits, the features and tensors nothing reads) to its producer's step, which reads it last; a layer's
 * dx and dy overlap at its step, so they never share. Sets grad_from_start and the layers' zero_in / zero_in2.
 * Data: a tensor that backward never reads (data_read_by_backward) is live from its producer's forward step to its
 * last reader's; the others stay live until backward ends, in buffers of their own.
 * grad_offset[t] / data_offset[t]: per-sample offsets into the two pools (data_offset -1: its own buffer); returns
 * FH_OK with the pools' floats per sample in m->grad_pool_floats and m->data_pool_floats. The input's buffers are
 * not planned (its data is the caller's; its gradient, for need_input_grad, its own). */
static int plan_activations(NnModel *m, int64_t *grad_offset, int64_t *data_offset)
{
    const int n = m->n_tensors, L = m->n_layers;
    int *first = calloc((size_t)n + 1, sizeof *first), *last = calloc((size_t)n + 1, sizeof *last);
    int *ids = calloc((size_t)n + 1, sizeof *ids);
    int status = FH_ERR_MEMORY;
    if (!first || !last || !ids) goto done;
    for (int t = 0; t < n; t++) first[t] = last[t] = L;
    for (int i = 0; i < L; i++) {
        NnLayer *l = &m->layers[i];
        l->zero_in = l->zero_in2 = 0;
        if (l->zero_ins) memset(l->zero_ins, 0, (size_t)l->n_ins);
        if (nn_layer_is_view(l)) continue; /* a view: its gradient is its input's */
        last[nn_tensor_root(m, l->out)] = L - 1 - i;
        for (int k = 0; k < nn_layer_inputs(l); k++) {
            const int r = nn_tensor_root(m, nn_layer_input(l, k));
            if (L - 1 - i < first[r]) first[r] = L - 1 - i;
        }
    }
    first[nn_tensor_root(m, m->logits)] = first[nn_tensor_root(m, m->features)] = -1;
    int n_ids = 0;
    for (int t = 0; t < n; t++) {
        m->tensors[t].grad_from_start = 0;
        if (m->tensors[t].alias_of >= 0 || t == m->input) continue;
        if (first[t] == L) first[t] = -1; /* nothing reads it: zeros from the start */
        if (m->tensors[t].dims.batch < 0) { /* no batch: buffers of its own (finalize), zeroed at the start */
            m->tensors[t].grad_from_start = 1;
            continue;
        }
        m->tensors[t].grad_from_start = first[t] < 0;
        if (first[t] >= 0) {
            NnLayer *w = &m->layers[L - 1 - first[t]];
            if (w->ins) {
                for (int k = 0; k < w->n_ins; k++) w->zero_ins[k] |= nn_tensor_root(m, w->ins[k]) == t;
            } else if (nn_tensor_root(m, w->in) == t) {
                w->zero_in = 1;
            } else {
                w->zero_in2 = 1;
            }
        }
        ids[n_ids++] = t;
    }
    m->grad_pool_floats = pack_spans(ids, n_ids, first, last, m->tensors, !m->no_activation_reuse, grad_offset);
    if (m->grad_pool_floats < 0) goto done;

    /* data: forward steps; a producer writes at its step, readers read at theirs */
    for (int t = 0; t < n; t++) first[t] = last[t] = -1;
    for (int i = 0; i < L; i++) {
        const NnLayer *l = &m->layers[i];
        if (!nn_layer_is_view(l)) first[nn_tensor_root(m, l->out)] = last[nn_tensor_root(m, l->out)] = i;
        for (int k = 0; k < nn_layer_inputs(l); k++)
            if (i > last[nn_tensor_root(m, nn_layer_input(l, k))]) last[nn_tensor_root(m, nn_layer_input(l, k))] = i;
    }
    n_ids = 0;
    for (int t = 0; t < n; t++) {
        data_offset[t] = -1;
        if (m->tensors[t].alias_of >= 0 || t == m->input || m->tensors[t].dims.batch < 0 ||
            data_read_by_backward(m, t))
            continue;
        ids[n_ids++] = t;
    }
    m->data_pool_floats = pack_spans(ids, n_ids, first, last, m->tensors, !m->no_activation_reuse, data_offset);
    if (m->data_pool_floats >= 0) status = FH_OK;
done:
    free(first);
    free(last);
    free(ids);
    if (status != FH_OK) FH_FAIL(status, "out of memory planning the activations of model %s", m->arch);
    return FH_OK;
}

/* Activation layouts (NnTensor.block). oneDNN's convs run fastest on channel-blocked tensors (nChw16c with
 * AVX-512, nChw8c else), and batch norm, group norm (a block within a group), max and global average pooling
 * and the element-wise layers run on them as well; the other layers (linear, average pooling, flatten, a conv
 * on blas) read NCHW, and so do the callers of the logits and features. A tensor is blocked when a oneDNN conv
 * writes it (its channels a multiple of the block), or a layout-keeping layer makes it from blocked inputs,
 * and every reader takes it: then only the convs at the boundaries reorder (the first conv's input, a conv
 * that feeds a pool). The layouts depend on the shapes and the CPU alone, never on the data or the ranks. */
static int keeps_layout(const NnModel *m, const NnLayer *l, int block)
{
    switch (l->type) {
    case NN_OP_GROUPNORM: return (l->cin / l->groups) % block == 0; /* a block within one group */
    case NN_OP_MAXPOOL: return !nn_pool_general(m, l);
    case NN_OP_CONCAT: /* whole blocks: each input's channels one run of every sample, as in NCHW */
        if (l->axis != 1 || m->tensors[l->out].dims.ndim != 4) return 0;
        for (int k = 0; k < l->n_ins; k++)
            if (m->tensors[l->ins[k]].shape.c % block) return 0;
        return 1;
    case NN_OP_SLICE:
        return l->axis == 1 && m->tensors[l->out].dims.ndim == 4 && l->start % block == 0 && l->end % block == 0;
    case NN_OP_BATCHNORM:
    case NN_OP_ACT:
    case NN_OP_DROPOUT:
    case NN_OP_ADD:
    case NN_OP_MUL: return 1;
    default: return 0;
    }
}

/* the inputs whose layout matters: a broadcast C x 1 x 1 operand is the same floats in every layout whose block
 * divides C, so it takes no part */
static int n_layout_inputs(const NnModel *m, const NnLayer *l) { return nn_layer_broadcasts(m, l) ? 1 : nn_layer_inputs(l); }

static int layout_inputs_blocked(const NnModel *m, const NnLayer *l)
{
    for (int k = 0; k < n_layout_inputs(m, l); k++)
        if (!m->tensors[nn_layer_input(l, k)].block) return 0;
    return 1;
}

static int on_onednn(const NnModel *m, const NnLayer *l)
{
    return l->type == NN_OP_CONV2D && m->onednn && !l->onednn_refused;
}

static int reads_blocks(const NnModel *m, const NnLayer *l, int block)
{
    return on_onednn(m, l) || keeps_layout(m, l, block) || l->type == NN_OP_GAP;
}

static void plan_layouts(NnModel *m)
{
    const int block = m->onednn ? nn_onednn_block() : 0;
    for (int t = 0; t < m->n_tensors; t++) m->tensors[t].block = 0;
    if (!block) return;
    for (int i = 0; i < m->n_layers; i++) {
        const NnLayer *l = &m->layers[i];
        NnTensor *out = &m->tensors[l->out];
        if (on_onednn(m, l)) out->block = out->shape.c % block == 0 ? block : 0;
        else if (keeps_layout(m, l, block))
            out->block = layout_inputs_blocked(m, l) ? block : 0;
    }
    m->tensors[nn_tensor_root(m, m->logits)].block = m->tensors[nn_tensor_root(m, m->features)].block = 0;
    /* back to NCHW where a reader needs it, and on both sides of a layout-keeping layer that has NCHW on one,
     * until nothing changes */
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < m->n_layers; i++) {
            const NnLayer *l = &m->layers[i];
            NnTensor *out = &m->tensors[l->out];
            const int keeps = keeps_layout(m, l, block);
            if (reads_blocks(m, l, block) && (!keeps || (out->block && layout_inputs_blocked(m, l)))) continue;
            int any_blocked = keeps && out->block;
            for (int k = 0; k < n_layout_inputs(m, l); k++) {
                any_blocked |= m->tensors[nn_layer_input(l, k)].block;
                m->tensors[nn_layer_input(l, k)].block = 0;
            }
            if (keeps) out->block = 0;
            changed |= any_blocked;
        }
    }
}

/* After a oneDNN layer could not be created (status st): under backend auto a refusal (FH_ERR_USAGE) is a warning,
 * and the layer runs `instead`; anything else is the model's error. */
static int onednn_refused_under_auto(const NnModel *m, int st, const char *instead)
{
    if (m->backend != NN_BACKEND_AUTO || st != FH_ERR_USAGE) return st;
    fh_log_warn("%s; it runs %s (train.backend = auto)", fh_error_text(st), instead);
    fh_error_clear();
    return FH_OK;
}

/* The conv layers' oneDNN primitives, made for the tensors' layouts. Under backend auto a conv oneDNN cannot
 * build runs on blas: its tensors go back to NCHW, so the layouts are planned again and every conv remade. */
static int create_onednn_convs(NnModel *m)
{
    for (;;) {
        plan_layouts(m);
        int refused = 0;
        for (int i = 0; i < m->n_layers && !refused; i++) {
            NnLayer *l = &m->layers[i];
            if (!on_onednn(m, l)) continue;
            NnConvShape s = nn_layer_conv_shape(m, l, m->max_batch);
            char name[320]; /* for its errors: the model's name and the layer's */
            snprintf(name, sizeof name, "model %s: %s", m->arch, l->name);
            int st = nn_onednn_conv_create(&l->onednn, m->onednn, &s, l->b_off >= 0, m->tensors[l->in].block,
                                           m->tensors[l->out].block, name);
            if (st == FH_OK) continue;
            FH_CHECK(onednn_refused_under_auto(m, st, "on blas"));
            l->onednn_refused = 1;
            refused = 1;
        }
        if (!refused) return FH_OK;
        for (int i = 0; i < m->n_layers; i++) nn_onednn_conv_free(&m->layers[i].onednn);
    }
}

/* A blocked tensor of 1x1 planes whose channels fill whole blocks lies in memory as NCHW does, so the direct
 * kernels read it as it is: there oneDNN's depthwise kernels refuse a kernel wider than the plane and fall back
 * to a gemm about a hundred times slower (MobileNetV3's and EfficientNet's last 5x5 stage at 32 px). */
static int laid_out_as_nchw(const NnModel *m, int tensor)
{
    const NnTensor *t = &m->tensors[tensor];
    return !t->block || (t->shape.h == 1 && t->shape.w == 1 && t->shape.c % t->block == 0);
}

/* Depthwise convs on plain NCHW (a ConvNeXt's, between the transposes to and from its channel-last blocks), or on
 * tensors laid out as it: oneDNN 2.6 runs their backward weights as a gemm for every shape, its backward data
 * slowly, and its forward as a gemm where a 7 x 7 filter meets a 2 x 2 or 1 x 1 map, mostly padding. Where the map
 * is small enough for fedhet's channel-blocked kernels, they run both backward passes (NN_DW_BACKWARD; measured 5
 * to 20 x faster than oneDNN's on ConvNeXt's 16 x 16 to 2 x 2 maps) and the forward too where oneDNN's is a gemm
 * (NN_DW_ALL); oneDNN's jit forward stays, about 1.5 x faster. Larger maps: the plane-by-plane kernel runs the
 * backward weights where oneDNN's is a gemm (NN_DW_WEIGHTS). */
static void choose_direct_dwconvs(NnModel *m)
{
    for (int i = 0; i < m->n_layers; i++) {
        NnLayer *l = &m->layers[i];
        l->dw_direct = 0;
        if (!l->onednn || l->act != NN_ACT_NONE || !laid_out_as_nchw(m, l->in) || !laid_out_as_nchw(m, l->out))
            continue;
        const NnConvShape raw = nn_layer_conv_shape(m, l, m->max_batch), shape = nn_conv_shape_full(&raw);
        if (!nn_isa_dwconv_fits(&shape)) continue;
        const int forward_gemm = strstr(nn_onednn_conv_impl(l->onednn, 0), "gemm") != NULL;
        if (nn_isa_dwconv_blocked(&shape)) l->dw_direct = forward_gemm ? NN_DW_ALL : NN_DW_BACKWARD;
        else if (forward_gemm) l->dw_direct = NN_DW_ALL;
        else if (strstr(nn_onednn_conv_impl(l->onednn, 2), "gemm")) l->dw_direct = NN_DW_WEIGHTS;
    }
}

static int feeds_maxpool(const NnModel *m, int tensor)
{
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].type == NN_OP_MAXPOOL && m->layers[i].in == tensor) return 1;
    return 0;
}

/* Batch norms and max pools on oneDNN for training mode where that pays (1 thread, AVX-512: `fedhet bench
 * --profile`), in the layouts planned for the convs (which do not depend on these):
 *  - on blocked tensors only: oneDNN's batch norm on NCHW is a reference loop, 12x slower than fedhet's;
 *  - a batch norm that feeds a conv or an add (ResNets, MobileNetV2: 25 to 40 % less time than fedhet's), not
 *    one that feeds a max pool (smallcnn): oneDNN writes large outputs with streaming stores, past the cache, and
 *    the pool, which only moves memory, then took twice as long as the batch norm saved;
 *  - a max pool whose windows do not tile its input (ResNet's padded 3x3/2 stem: 2x faster); where they tile,
 *    fedhet's dense pass is as fast in a model.
 * Under backend auto one oneDNN cannot build runs fedhet's kernels, as it does in evaluation. */
static int create_onednn_train_layers(NnModel *m)
{
    for (int i = 0; i < m->n_layers; i++) {
        NnLayer *l = &m->layers[i];
        const NnShape si = m->tensors[l->in].shape, so = m->tensors[l->out].shape;
        const int block = m->tensors[l->in].block;
        const int pays = l->type == NN_OP_BATCHNORM ? !feeds_maxpool(m, l->out)
                         : l->type == NN_OP_MAXPOOL ? !nn_maxpool_tiles(si.h, si.w, l->k, l->stride, l->pad)
                                                    : 0;
        if (!block || !pays) continue;
        char name[320];
        snprintf(name, sizeof name, "model %s: %s", m->arch, l->name);
        int st = l->type == NN_OP_BATCHNORM
                     ? nn_onednn_bn_create(&l->onednn_train, m->onednn, m->max_batch, si.c, si.h, si.w, block, l->eps,
                                           l->act, name)
                     : nn_onednn_maxpool_create(&l->onednn_train, m->onednn, m->max_batch, si.c, si.h, si.w, block,
                                                l->k, l->stride, l->pad, so.h, so.w, name);
        if (st != FH_OK) FH_CHECK(onednn_refused_under_auto(m, st, "fedhet's kernel"));
    }
    return FH_OK;
}

int nn_model_finalize(NnModel *m, int logits, int features, int classes)
{
    if (m->status != FH_OK) return m->status;
    /* finalisation errors are build errors too: sticky in m->status like the builder's */
    m->status = model_finalize(m, logits, features, classes);
    return m->status;
}

static int model_finalize(NnModel *m, int logits, int features, int classes)
{
    if (m->finalized) FH_FAIL(FH_ERR_USAGE, "model %s: finalised twice", m->arch);
    if (logits < 0 || logits >= m->n_tensors || features < 0 || features >= m->n_tensors)
        FH_FAIL(FH_ERR_USAGE, "model %s: logits/features tensor index out of range", m->arch);
    if (m->tensors[logits].dims.batch != 0 || m->tensors[features].dims.batch != 0)
        FH_FAIL(FH_ERR_USAGE, "model %s: the logits and the features must be batch-first (N x ...)", m->arch);
    if (classes < 2) FH_FAIL(FH_ERR_USAGE, "model %s: class count %d must be at least 2", m->arch, classes);
    if (m->tensors[logits].size != classes)
        FH_FAIL(FH_ERR_USAGE, "model %s: the output has %lld values but %d classes were asked for", m->arch,
                (long long)m->tensors[logits].size, classes);
    m->logits = logits;
    m->features = features;
    m->classes = classes;

    for (int i = 0; i < m->n_views; i++)
        if (!m->views[i].trainable) m->views[i].offset += m->n_params;
    for (int i = 0; i < m->n_layers; i++) {
        if (m->layers[i].rm_off >= 0) m->layers[i].rm_off += m->n_params;
        if (m->layers[i].rv_off >= 0) m->layers[i].rv_off += m->n_params;
    }
    /* a model without parameters has views == NULL, which qsort must not be given */
    if (m->n_views > 1) qsort(m->views, (size_t)m->n_views, sizeof(NnParamView), view_by_offset);
    m->n_state = m->n_params + m->n_buffers;
    FH_CHECK(fh_alloc_aligned(&m->own_state, sizeof(float) * (size_t)(m->n_state ? m->n_state : 1), "model state"));
    FH_CHECK(fh_alloc_aligned(&m->grad, sizeof(float) * (size_t)(m->n_state ? m->n_state : 1), "model gradient"));
    m->state = m->own_state;

    size_t B = (size_t)m->max_batch;
    int64_t *grad_offset = calloc((size_t)m->n_tensors, sizeof *grad_offset);
    int64_t *data_offset = calloc((size_t)m->n_tensors, sizeof *data_offset);
    nn_nd_fold_products(m);
    int status = grad_offset && data_offset ? plan_activations(m, grad_offset, data_offset) : FH_ERR_MEMORY;
    if (status == FH_OK)
        status = fh_alloc_aligned(&m->grad_pool, sizeof(float) * B * (size_t)(m->grad_pool_floats + 1),
                                  "activation gradients");
    if (status == FH_OK)
        status = fh_alloc_aligned(&m->data_pool, sizeof(float) * B * (size_t)(m->data_pool_floats + 1), "activations");
    for (int t = 0; status == FH_OK && t < m->n_tensors; t++) {
        NnTensor *x = &m->tensors[t];
        if (x->alias_of >= 0) continue;
        if (t == m->input) {
            status = fh_alloc_aligned(&x->grad, sizeof(float) * B * (size_t)x->size, "input gradients");
            continue;
        }
        if (x->dims.batch < 0) { /* the same for every sample: held once */
            status = fh_alloc_aligned(&x->data, sizeof(float) * (size_t)x->size, "parameter tensors");
            if (status == FH_OK) status = fh_alloc_aligned(&x->grad, sizeof(float) * (size_t)x->size, "parameter tensors");
            continue;
        }
        x->grad = m->grad_pool + B * (size_t)grad_offset[t];
        if (data_offset[t] >= 0) x->data = m->data_pool + B * (size_t)data_offset[t];
        else status = fh_alloc_aligned(&x->data, sizeof(float) * B * (size_t)x->size, "activations");
    }
    free(grad_offset);
    free(data_offset);
    if (status == FH_ERR_MEMORY && !m->grad_pool) FH_FAIL(FH_ERR_MEMORY, "out of memory planning the activations of %s", m->arch);
    FH_CHECK(status);
    int64_t ws = 0;
    if (m->backend != NN_BACKEND_BLAS) {
        int st = nn_onednn_create(&m->onednn);
        if (st != FH_OK && m->backend == NN_BACKEND_ONEDNN) FH_CHECK(st);
        if (st != FH_OK) {
            fh_log_warn("model %s: %s; every conv layer runs on blas (train.backend = auto)", m->arch,
                        fh_error_text(st));
            fh_error_clear();
        }
    }
    if (m->onednn) FH_CHECK(create_onednn_convs(m));
    if (m->onednn) choose_direct_dwconvs(m);
    if (m->onednn) FH_CHECK(create_onednn_train_layers(m));
    for (int i = 0; i < m->n_layers; i++) {
        NnLayer *l = &m->layers[i];
        NnShape so = m->tensors[l->out].shape;
        switch (l->type) {
        case NN_OP_CONV2D: {
            if (l->onednn) break;
            NnConvShape s = nn_layer_conv_shape(m, l, m->max_batch);
            int64_t need = nn_conv2d_workspace(&s, nn_conv2d_chunk(&s));
            if (need > ws) ws = need;
            break;
        }
        case NN_OP_BATCHNORM:
            FH_CHECK(fh_calloc(&l->save_mean, (size_t)l->cin, sizeof(float), "batch-norm statistics"));
            FH_CHECK(fh_calloc(&l->save_invstd, (size_t)l->cin, sizeof(float), "batch-norm statistics"));
            break;
        case NN_OP_GROUPNORM:
            FH_CHECK(fh_calloc(&l->save_mean, B * (size_t)l->groups, sizeof(float), "group-norm statistics"));
            FH_CHECK(fh_calloc(&l->save_invstd, B * (size_t)l->groups, sizeof(float), "group-norm statistics"));
            break;
        case NN_OP_MAXPOOL:
            FH_CHECK(fh_calloc(&l->argmax, B * (size_t)so.c * so.h * so.w, sizeof(int32_t), "max-pool indices"));
            break;
        case NN_OP_DROPOUT:
            FH_CHECK(fh_calloc(&l->mask, B * (size_t)m->tensors[l->out].size, 1, "dropout mask"));
            break;
        default:
            if (nn_nd_is_op(l->type)) FH_CHECK(nn_nd_finalize_layer(m, l));
            break;
        }
    }
    m->workspace_floats = (size_t)ws;
    FH_CHECK(fh_alloc_aligned(&m->workspace, sizeof(float) * (size_t)(ws ? ws : 1), "convolution workspace"));
    m->finalized = 1;
    return FH_OK;
}
