/* fedhet inspect: what a file holds (FILE.h5: a partition file today; the kind is read from the root
 * attribute `format`, so checkpoints and run files can join the table of file kinds), or the layers of a
 * zoo model with its parameter counts, FLOPs and memory (--model NAME). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "fedhet/core.h"
#include "fedhet/data.h"
#include "fedhet/fl.h"
#include "fedhet/h5io.h"

static const char *op_name(NnOpType t)
{
    static const char *names[] = {"linear", "conv2d", "maxpool", "avgpool", "gap", "batchnorm", "groupnorm",
                                  "act", "dropout", "add", "flatten", "mul", "concat", "slice", "shuffle",
                                  "reshape", "transpose", "matmul", "layernorm", "softmax", "binary", "param",
                                  "const", "expand", "mean", "gather", "droppath"};
    return names[t];
}

static const char *act_name(NnAct a) { return a == NN_ACT_RELU ? "-relu" : a == NN_ACT_RELU6 ? "-relu6" : ""; }

/* the op column: the type with what sets it apart (kernel, strides, dilation, activation parameters, ...) */
static void layer_op(const NnModel *m, const NnLayer *l, char *op, size_t size)
{
    const int bcast = l->in2 >= 0 && m->tensors[l->in2].size != m->tensors[l->in].size;
    switch (l->type) {
    case NN_OP_CONV2D: {
        char stride[16] = "", dil[16] = "";
        if (l->stride_w != l->stride_h) snprintf(stride, sizeof stride, "x%d", l->stride_w);
        if (l->dil_h > 1 || l->dil_w > 1) snprintf(dil, sizeof dil, "/d%d", l->dil_h);
        snprintf(op, size, "conv%dx%d/%d%s%s%s%s", l->kh, l->kw, l->stride_h, stride, dil, l->groups > 1 ? "/g" : "",
                 act_name(l->act));
        return;
    }
    case NN_OP_MAXPOOL:
    case NN_OP_AVGPOOL:
        snprintf(op, size, "%s%dx%d/%d%s%s", op_name(l->type), l->kh, l->kw, l->stride_h, l->ceil_mode ? "/ceil" : "",
                 l->type == NN_OP_AVGPOOL && !l->count_include_pad && (l->pad_t || l->pad_l || l->pad_b || l->pad_r)
                     ? "/nopad"
                     : "");
        return;
    case NN_OP_ACT:
        switch (l->act) {
        case NN_ACT_LEAKY_RELU: snprintf(op, size, "leakyrelu%g", (double)l->act_a); return;
        case NN_ACT_CLIP: snprintf(op, size, "clip%g:%g", (double)l->act_a, (double)l->act_b); return;
        case NN_ACT_SIGMOID: snprintf(op, size, "sigmoid"); return;
        case NN_ACT_HARDSIGMOID: snprintf(op, size, "hardsigmoid"); return;
        case NN_ACT_HARDSWISH: snprintf(op, size, "hardswish"); return;
        case NN_ACT_SILU: snprintf(op, size, "silu"); return;
        case NN_ACT_TANH: snprintf(op, size, "tanh"); return;
        case NN_ACT_GELU: snprintf(op, size, "gelu"); return;
        case NN_ACT_GELU_TANH: snprintf(op, size, "gelu-tanh"); return;
        case NN_ACT_ERF: snprintf(op, size, "erf"); return;
        case NN_ACT_SQRT: snprintf(op, size, "sqrt"); return;
        case NN_ACT_EXP: snprintf(op, size, "exp"); return;
        case NN_ACT_POW: snprintf(op, size, "pow%g", (double)l->act_a); return;
        case NN_ACT_AFFINE: snprintf(op, size, "x*%g%+g", (double)l->act_a, (double)l->act_b); return;
        default: break;
        }
        break;
    case NN_OP_CONCAT: snprintf(op, size, "concat%d", l->n_ins); return;
    case NN_OP_SLICE: snprintf(op, size, "slice%d:%d", l->start, l->end); return;
    case NN_OP_SHUFFLE: snprintf(op, size, "shuffle/%d", l->groups); return;
    case NN_OP_LINEAR:
        if (l->per_row) {
            snprintf(op, size, "linear/rows%s", act_name(l->act));
            return;
        }
        break;
    case NN_OP_TRANSPOSE: {
        const int nd = m->tensors[l->out].dims.ndim;
        size_t o = (size_t)snprintf(op, size, "transpose");
        for (int k = 0; k < nd && o < size; k++) o += (size_t)snprintf(op + o, size - o, "%s%d", k ? "," : "", l->perm[k]);
        return;
    }
    case NN_OP_MATMUL: snprintf(op, size, "matmul%s", l->trans_b ? "-t" : ""); return;
    case NN_OP_SOFTMAX: snprintf(op, size, "softmax@%d", l->axis); return;
    case NN_OP_BINARY: {
        static const char *bin[] = {"add", "sub", "mul", "div"};
        snprintf(op, size, "%s%s", bin[l->bin_op], bcast ? "-bcast" : "");
        return;
    }
    case NN_OP_GATHER: snprintf(op, size, "gather%d@%d", l->n_index, l->axis); return;
    case NN_OP_DROP_PATH: snprintf(op, size, "droppath%g", (double)l->p); return;
    default: break;
    }
    snprintf(op, size, "%s%s%s", op_name(l->type), bcast ? "-bcast" : "", act_name(l->act));
}


static void print_help(void)
{
    printf("usage: fedhet inspect FILE.h5\n"
           "       fedhet inspect RUN/checkpoint.h5|RUN/run.h5 [--client-state OUT.h5]\n"
           "       fedhet inspect --model NAME|FILE.onnx [--input CxHxW] [--classes K] [--norm bn|gn] [--groups G]\n"
           "                      [--backend onednn|blas|auto] [--batch B]\n"
           "\n"
           "FILE.h5: a partition file written by `fedhet partition`. Prints its source, classes, image shape,\n"
           "  training and test rows, per-channel mean and std, seed, the scheme with the key=value parameters\n"
           "  it was made with, the corruption, the spread of client sizes, and the client x label count\n"
           "  matrix: one line per client (samples, corrupted yes/no, then one count per label; every client\n"
           "  and every label is printed, however many), then the label heterogeneity of each client and its\n"
           "  min / median / max / mean: label entropy (nats), effective classes exp(entropy), total-variation\n"
           "  distance and earth mover's distance (ground distance |i - j| on the label index) of the client's\n"
           "  label distribution to the pooled training labels, and the Gini coefficient of the client sizes.\n"
           "  They are read from the file's /stats, or computed from /clients/label_counts when it has none.\n"
           "\n"
           "RUN/checkpoint.h5 or RUN/run.h5: a run's checkpoint. Prints the rounds done, the model's size, the\n"
           "  clients and how many have trained, and the persistent state the method keeps per client, which\n"
           "  lies in RUN/client-state.bin (the checkpoint records where; docs/architecture.md).\n"
           "  --client-state OUT.h5  writes every client's persistent state to OUT.h5: /clients/vector_<i>\n"
           "             [K, n_state] (e.g. SCAFFOLD's c_k), /clients/floats [K, F], /clients/has_state [K, 1]\n"
           "             (0: the client has not trained; its rows are zeros)\n"
           "\n"
           "--model NAME: prints the model's layers (output shape, parameters, forward FLOPs), its trainable\n"
           "  and buffer counts, forward FLOPs per sample and memory per client.\n"
           "  --model    %s, or an ONNX file (FILE.onnx: its graph as fedhet imports it, docs/onnx.md; input shape\n"
           "             and classes default to the file's; a graph with convs but no normalisation gets a note)\n"
           "  --input    input shape, default 1x28x28 for mlp/cnn/lenet/smallcnn, 3x32x32 otherwise\n"
           "  --classes  class count, default 10\n"
           "  --norm     resnet18 normalisation: bn (default) or gn; --groups: GroupNorm groups (default 2)\n"
           "  --backend  what computes the conv layers (train.backend): onednn (default), blas or auto; oneDNN adds the\n"
           "             implementation oneDNN chose for each conv layer at batch B (forward, backward-data,\n"
           "             backward-weights; one name when they agree) and oneDNN's buffers at that batch\n"
           "  --batch    B for oneDNN's choices, default 64 (train.batch_size's default)\n"
           "\n"
           "FILE.h5 and the model options are two different uses: give one or the other.\n",
           nn_zoo_names());
}

/* ---- --model NAME ---- */

static int inspect_model(const AppModelArgs *a, int batch)
{
    NnModel m;
    NnBackend backend;
    FH_CHECK(nn_backend_parse(a->zoo.backend, &backend));
    FH_CHECK(app_model_args_check(a));
    const int onednn = backend != NN_BACKEND_BLAS;
    /* built for one sample, which the memory figures scale from, unless oneDNN's choices at `batch` are asked */
    FH_CHECK(nn_zoo_build(&m, a->model, a->input, a->classes, onednn ? batch : 1, &a->zoo));
    printf("model %s, input %dx%dx%d, %d classes, conv layers on %s", a->model, a->input.c, a->input.h, a->input.w,
           a->classes, nn_backend_name(m.backend));
    if (onednn) printf(" (implementations at batch %d; \"training\": a batch norm or max pool on oneDNN in training, "
                       "fedhet's kernel in evaluation)", batch);
    printf("\n%-4s %-12s %-16s %-16s %12s %14s%s\n", "#", "layer", "op", "output", "params", "fwd FLOPs",
           onednn ? "  layout   oneDNN implementation" : "");
    for (int i = 0; i < m.n_layers; i++) {
        const NnLayer *l = &m.layers[i];
        int64_t params = 0;
        for (int v = 0; v < m.n_views; v++)
            if (m.views[v].layer == i) params += m.views[v].count;
        char op[40], shape[40];
        layer_op(&m, l, op, sizeof op);
        NnShape s = m.tensors[l->out].shape;
        const NnDims *d = &m.tensors[l->out].dims;
        if (d->batch == 0 && d->ndim <= 4) {
            snprintf(shape, sizeof shape, "%dx%dx%d", s.c, s.h, s.w);
        } else { /* its dims, N where the batch is (none: the same for every sample) */
            size_t o = 0;
            shape[0] = 0;
            for (int k = 0; k < d->ndim && o < sizeof shape; k++) {
                if (k == d->batch) o += (size_t)snprintf(shape + o, sizeof shape - o, "%sN", k ? "x" : "");
                else o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%d", k ? "x" : "", d->d[k]);
            }
        }
        char impl[256];
        nn_model_layer_impl(&m, i, impl, sizeof impl);
        /* the output's layout between layers (NnTensor.block): what the next layers read */
        const int block = m.tensors[l->out].block;
        const char *layout = block == 16 ? "nChw16c" : block == 8 ? "nChw8c" : "nchw";
        printf("%-4d %-12s %-16s %-16s %12lld %14lld", i, l->name, op, shape, (long long)params, (long long)l->flops);
        if (onednn && *impl) printf("  %-8s %s", layout, impl);
        else if (onednn) printf("  %s", layout);
        printf("\n");
    }
    int64_t flops = nn_model_flops_forward(&m);
    printf("trainable parameters: %lld\n", (long long)m.n_params);
    printf("buffers (BatchNorm running statistics): %lld\n", (long long)m.n_buffers);
    printf("state vector: %lld floats (%.2f MiB)\n", (long long)m.n_state, (double)m.n_state * 4.0 / 1048576.0);
    printf("forward FLOPs per sample: %lld (%.4f GFLOP); training step ~3x\n", (long long)flops, (double)flops / 1e9);
    printf("activations + gradients + workspace per model instance:");
    const int batches[] = {32, 64, 256};
    for (int b = 0; b < 3; b++)
        printf(" batch %d: %.1f MiB%s", batches[b], (double)nn_model_activation_bytes(&m, batches[b]) / 1048576.0,
               b < 2 ? "," : "\n");
    if (onednn)
        printf("oneDNN staging, scratchpad and workspaces at batch %d: %.1f MiB\n", batch,
               (double)nn_model_backend_bytes(&m) / 1048576.0);
    if (a->net) {
        int convs = 0, norms = 0;
        for (int i = 0; i < m.n_layers; i++) {
            convs += m.layers[i].type == NN_OP_CONV2D;
            norms += m.layers[i].type == NN_OP_BATCHNORM || m.layers[i].type == NN_OP_GROUPNORM ||
                     m.layers[i].type == NN_OP_LAYERNORM;
        }
        if (convs && !norms)
            printf("note: %d conv layers and no normalisation layer: if the network has batch norms, the export folded "
                   "them into the convs (torch.onnx.export's default in eval mode). Export again with\n"
                   "  model.train(); torch.onnx.export(model, x, FILE, training=torch.onnx.TrainingMode.TRAINING)\n"
                   "or\n"
                   "  model.eval(); torch.onnx.export(model, x, FILE, training=torch.onnx.TrainingMode.PRESERVE, "
                   "do_constant_folding=False)\n(docs/onnx.md)\n", convs);
    }
    nn_model_free(&m);
    return FH_OK;
}

/* ---- partition files ---- */

static int digits(int64_t v)
{
    int d = 1;
    for (; v >= 10; v /= 10) d++;
    return d;
}

static void print_corruption(const DataPartFile *f)
{
    int first = -1, last = -1, n = 0;
    for (int k = 0; k < f->n_clients; k++)
        if (f->corruption[k] != DATA_CORRUPT_NONE) {
            if (first < 0) first = k;
            last = k;
            n++;
        }
    if (n == 0) {
        printf("corruption  none\n");
        return;
    }
    printf("corruption  %s severity %d: %d of %d clients", f->corruption_name, f->severity, n, f->n_clients);
    /* the writer corrupts the last n_corrupted clients; say so only when the table agrees */
    if (last - first + 1 == n) printf(" (%d..%d)", first, last);
    printf("; n_corrupted = %d\n", f->n_corrupted);
}

/* One line per client: id, samples, corrupted yes/no, then the count of every label. */
static void print_label_matrix(const DataPartFile *f)
{
    const int K = f->n_clients, C = f->classes;
    int64_t largest_count = 0, largest_size = 0;
    for (size_t i = 0; i < (size_t)K * C; i++)
        if (f->label_counts[i] > largest_count) largest_count = f->label_counts[i];
    for (int k = 0; k < K; k++)
        if (f->offsets[k + 1] - f->offsets[k] > largest_size) largest_size = f->offsets[k + 1] - f->offsets[k];
    const int wk = digits(K - 1) > 6 ? digits(K - 1) : 6;
    const int ws = digits(largest_size) > 7 ? digits(largest_size) : 7;
    const int wc = digits(largest_count) > digits(C - 1) ? digits(largest_count) : digits(C - 1);

    printf("\nlabel counts: one line per client, one column per label 0..%d\n", C - 1);
    if (C > 20) printf("(%d classes: all %d columns are printed; the lines are wide, e.g. pipe into less -S)\n", C, C);
    printf("%*s  %*s  %-9s", wk, "client", ws, "samples", "corrupted");
    for (int c = 0; c < C; c++) printf(" %*d", wc, c);
    printf("\n");
    for (int k = 0; k < K; k++) {
        printf("%*d  %*lld  %-9s", wk, k, ws, (long long)(f->offsets[k + 1] - f->offsets[k]),
               f->corruption[k] != DATA_CORRUPT_NONE ? "yes" : "no");
        const int32_t *row = f->label_counts + (size_t)k * C;
        for (int c = 0; c < C; c++) printf(" %*d", wc, (int)row[c]);
        printf("\n");
    }
}

/* One line per client: the heterogeneity statistics of its labels (DataHetero). */
static void print_hetero_table(const DataPartFile *f, const DataHetero *h)
{
    const int K = f->n_clients;
    const int wk = digits(K - 1) > 6 ? digits(K - 1) : 6;
    printf("\nlabel heterogeneity: one line per client; entropy in nats, TV and EMD (ground distance |i - j| on the "
           "label index) to the global label distribution\n");
    printf("%*s  %7s  %11s  %5s  %5s\n", wk, "client", "entropy", "eff classes", "TV", "EMD");
    for (int k = 0; k < K; k++)
        printf("%*d  %7.3f  %11.2f  %5.3f  %5.3f\n", wk, k, h->entropy[k], h->effective_classes[k], h->tv[k],
               h->emd[k]);
}

/* "classes     3: cat, dog, eel": the names the file records (/class_names, /domain_names), the first few */
static void print_names(const char *what, char *const *names, int n)
{
    enum { SHOWN = 12 };
    printf("%-11s %d:", what, n);
    for (int i = 0; i < n && i < SHOWN; i++) printf("%s %s", i ? "," : "", names[i]);
    if (n > SHOWN) printf(", ... (%d more)", n - SHOWN);
    printf("\n");
}

static int inspect_partition(const char *path)
{
    DataPartFile f;
    FH_CHECK(data_partfile_open(&f, path));
    const int K = f.n_clients, C = f.classes;
    printf("file        %s (%s)\n", f.path, DATA_PARTFILE_FORMAT);
    printf("source      %s\n", f.source);
    if (f.class_names) print_names("classes", f.class_names, C);
    else printf("classes     %d\n", C);
    if (f.n_domains) print_names("domains", f.domain_names, f.n_domains);
    printf("shape       %dx%dx%d\n", f.c, f.h, f.w);
    printf("training    %lld rows over %d clients\n", (long long)f.n_rows, K);
    if (f.n_test > 0)
        printf("test        %lld rows; corrupted copy: %s\n", (long long)f.n_test, f.has_test_corrupted ? "yes" : "no");
    else printf("test        none (the source had no test set)\n");
    printf("mean / std ");
    for (int ch = 0; ch < f.c; ch++) printf(" %.4f / %.4f", f.mean[ch], f.std[ch]);
    printf("\nseed        %lld\n", (long long)f.seed);
    printf("scheme      %s (variant %s)\n", f.scheme, *f.variant ? f.variant : "default");
    printf("parameters  %s\n", *f.parameters ? f.parameters : "(not recorded)");
    print_corruption(&f);

    DataHetero h;
    int stored = 0;
    int status = data_partfile_hetero(&f, &h, &stored);
    if (status != FH_OK) {
        data_partfile_close(&f);
        return status;
    }
    data_print_client_spread(stdout, f.offsets, f.label_counts, K, C);
    data_print_hetero_summary(stdout, &h);
    printf("(heterogeneity %s)\n", stored ? "as stored in /stats" : "computed from /clients/label_counts: the file has no /stats");
    print_label_matrix(&f);
    print_hetero_table(&f, &h);
    data_hetero_free(&h);
    data_partfile_close(&f);
    return FH_OK;
}

/* ---- which kind of file ---- */

#define CHECKPOINT_KIND "checkpoint" /* a file with /meta: checkpoint.h5 or run.h5 */

typedef struct {
    const char *format; /* value of the root attribute `format` */
    int (*inspect)(const char *path);
} InspectFileKind;

static const InspectFileKind file_kinds[] = {
    {DATA_PARTFILE_FORMAT, inspect_partition},
};

/* The root attribute `format` into buf, or "" when the file cannot be read as HDF5 or has none; the
 * reader of the default kind then reports what is wrong with the file. */
static void file_format(const char *path, char *buf, size_t size)
{
    buf[0] = '\0';
    FhH5Quiet quiet;
    fh_h5_quiet_begin(&quiet);
    FhH5File h;
    int exists = 0, meta = 0;
    char *format = NULL;
    if (fh_h5_open(&h, path, FH_ERR_DATA) == FH_OK) {
        if (fh_h5_attr_exists(&h, h.id, "format", &exists) == FH_OK && exists &&
            fh_h5_attr_read_string(&h, h.id, "format", &format) == FH_OK)
            snprintf(buf, size, "%s", format);
        else if (fh_h5_exists(&h, "/meta", &meta) == FH_OK && meta) /* a checkpoint keeps its format in /meta */
            snprintf(buf, size, "%s", CHECKPOINT_KIND);
        free(format);
        fh_h5_close(&h);
    }
    fh_h5_quiet_end(&quiet);
    fh_error_clear();
}

static int inspect_file(const char *path, const char *client_state_out)
{
    char format[128];
    file_format(path, format, sizeof format);
    if (!strcmp(format, CHECKPOINT_KIND)) return fl_checkpoint_inspect(path, client_state_out);
    if (client_state_out)
        FH_FAIL(FH_ERR_USAGE, "--client-state: %s is no checkpoint (checkpoint.h5 or run.h5 of a run folder)", path);
    for (size_t i = 0; i < sizeof file_kinds / sizeof file_kinds[0]; i++)
        if (!strcmp(format, file_kinds[i].format)) return file_kinds[i].inspect(path);
    /* unknown, missing or unreadable: the partition reader's error names the file and the problem */
    return inspect_partition(path);
}

int app_cmd_inspect(int argc, char **argv)
{
    AppModelArgs a;
    app_model_args_default(&a);
    const char *file = NULL, *model_option = NULL, *value = NULL, *client_state_out = NULL;
    int batch = 64;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_help();
            return FH_OK;
        }
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] != '-' || !argv[i][1]) {
            if (file)
                FH_FAIL(FH_ERR_USAGE, "one FILE at a time ('%s' and '%s'; see fedhet inspect --help)", file, argv[i]);
            file = argv[i];
            continue;
        }
        int consumed = 0;
        const char *option = argv[i];
        FH_CHECK(app_model_args_take(&a, argc, argv, &i, &consumed));
        if (!strcmp(option, "--client-state")) {
            FH_CHECK(app_option_value(argc, argv, &i, &client_state_out));
            continue;
        }
        if (!consumed && !strcmp(option, "--batch")) {
            FH_CHECK(app_option_value(argc, argv, &i, &value));
            FH_CHECK(app_parse_int(value, "--batch", 1, 1 << 16, &batch));
            consumed = 1;
        }
        if (!consumed) FH_FAIL(FH_ERR_USAGE, "unknown option '%s' (see fedhet inspect --help)", argv[i]);
        if (!model_option) model_option = option;
    }
    if (file && model_option)
        FH_FAIL(FH_ERR_USAGE, "%s and %s: give FILE.h5 or the model options, not both (see fedhet inspect --help)",
                file, model_option);
    if (client_state_out && !file) FH_FAIL(FH_ERR_USAGE, "--client-state needs a checkpoint FILE.h5 to read");
    if (file) return inspect_file(file, client_state_out);
    if (!a.model)
        FH_FAIL(FH_ERR_USAGE, "--model NAME is required, or a FILE.h5 to inspect (models: %s)", nn_zoo_names());
    return inspect_model(&a, batch);
}
