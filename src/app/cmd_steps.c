/* fedhet steps: a model's first logits and training steps on given data, as files, for comparing the engine with
 * another framework on the same weights (tools/fedhet-torch compare does it against PyTorch). Evaluation-mode
 * logits of the first batch, then plain SGD steps (no momentum, no weight decay) in training mode, step k on rows
 * [kB, (k + 1)B), the mean softmax cross-entropy of each step written before its update. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "fedhet/core.h"
#include "fedhet/onnx.h"

static void print_help(void)
{
    printf("usage: fedhet steps --model M --data X.bin --labels Y.bin --batch B [--steps S] [--lr LR] [--out DIR]\n"
           "                    [--input CxHxW] [--classes K] [--backend onednn|blas|auto] [--threads T] [--seed N]\n"
           "  The model's logits on the first B rows of X.bin in evaluation mode, then S plain SGD steps (default\n"
           "  10; lr default 0.01, no momentum or weight decay) in training mode, step k on rows [kB, (k+1)B) of X.bin\n"
           "  and Y.bin, each step's mean softmax cross-entropy taken before its update. Prints one line per step and\n"
           "  writes DIR/logits.bin (float32, B x K) and DIR/losses.bin (float32, S values); DIR defaults to '.'.\n"
           "  X.bin: float32 samples of C x H x W, back to back (numpy's tofile); Y.bin: int32 labels in [0, K).\n"
           "  The weights are an ONNX file's own initializers, or a zoo model's initialisation from --seed (default 1).\n"
           "  Dropout and stochastic depth draw fedhet's masks: compare such models with them at p = 0.\n"
           "  tools/fedhet-torch compare MODEL.onnx runs this and PyTorch side by side (docs/onnx.md).\n"
           "  Models: %s, or an ONNX file (FILE.onnx: input shape and classes from the file).\n",
           nn_zoo_names());
}

/* exactly `count` items of `size` bytes from `path`, or an error naming the file */
static int read_exact(const char *path, void *out, size_t size, size_t count, const char *what)
{
    char *bytes;
    size_t len;
    FH_CHECK(fh_read_bytes(path, &bytes, &len, FH_ERR_DATA));
    int status = FH_OK;
    if (len < size * count)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: holds %zu bytes, %zu %s need %zu", path, len,
                                count, what, size * count);
    else memcpy(out, bytes, size * count);
    free(bytes);
    return status;
}

static int write_floats(const char *dir, const char *name, const float *x, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FhAtomicFile f;
    FH_CHECK(fh_atomic_open(&f, path));
    if (fwrite(x, sizeof *x, n, f.f) != n) {
        fh_atomic_discard(&f);
        FH_FAIL(FH_ERR_IO, "%s: write failed", path);
    }
    return fh_atomic_commit(&f);
}

typedef struct {
    const char *data, *labels, *out;
    int batch, steps, threads, seed;
    double lr;
} StepsArgs;

static int run_steps(const AppModelArgs *a, const StepsArgs *s)
{
    NnModel m;
    NnSgd opt = { 0 };
    float *x = NULL, *dl = NULL, *losses = NULL;
    int32_t *y = NULL;
    const size_t per = (size_t)a->input.c * a->input.h * a->input.w, rows = (size_t)s->steps * s->batch;
    FH_CHECK(nn_zoo_build(&m, a->model, a->input, a->classes, s->batch, &a->zoo));
    nn_model_init_params(&m, (uint64_t)s->seed);
    int status = a->net ? onnx_net_copy_weights(a->net, &m, m.state) : FH_OK;
    if (status == FH_OK) status = fh_calloc(&x, rows * per, sizeof *x, "the data");
    if (status == FH_OK) status = fh_calloc(&y, rows, sizeof *y, "the labels");
    if (status == FH_OK) status = fh_calloc(&dl, (size_t)s->batch * m.classes, sizeof *dl, "the loss gradient");
    if (status == FH_OK) status = fh_calloc(&losses, (size_t)s->steps, sizeof *losses, "the losses");
    if (status == FH_OK) status = read_exact(s->data, x, sizeof *x * per, rows, "samples (steps x batch)");
    if (status == FH_OK) status = read_exact(s->labels, y, sizeof *y, rows, "labels (steps x batch)");
    for (size_t i = 0; status == FH_OK && i < rows; i++)
        if (y[i] < 0 || y[i] >= m.classes)
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: label %d at row %zu is outside [0, %d)",
                                    s->labels, (int)y[i], i, m.classes);
    if (status == FH_OK) status = nn_sgd_init(&opt, m.n_params, 0.0f, 0.0f, 0);
    m.dropout_seed = (uint64_t)s->seed;
    nn_model_set_training(&m, 0);
    if (status == FH_OK) status = nn_model_forward(&m, x, s->batch);
    if (status == FH_OK) status = write_floats(s->out, "logits.bin", nn_model_logits(&m), (size_t)s->batch * m.classes);
    nn_model_set_training(&m, 1);
    for (int k = 0; status == FH_OK && k < s->steps; k++) {
        m.dropout_ctr[2] = (uint32_t)k;
        status = nn_model_forward(&m, x + (size_t)k * s->batch * per, s->batch);
        if (status != FH_OK) break;
        memset(dl, 0, sizeof *dl * (size_t)s->batch * m.classes);
        losses[k] = nn_softmax_xent(dl, NULL, nn_model_logits(&m), y + (size_t)k * s->batch, NULL, NULL, s->batch,
                                    m.classes);
        nn_model_zero_grad(&m);
        nn_model_backward(&m, dl, NULL);
        nn_sgd_step(&opt, m.state, m.grad, (float)s->lr);
        printf("step %d loss %.8g\n", k + 1, (double)losses[k]);
    }
    if (status == FH_OK) status = write_floats(s->out, "losses.bin", losses, (size_t)s->steps);
    nn_sgd_free(&opt);
    nn_model_free(&m);
    free(x);
    free(y);
    free(dl);
    free(losses);
    return status;
}

int app_cmd_steps(int argc, char **argv)
{
    AppModelArgs a;
    app_model_args_default(&a);
    StepsArgs s = { .out = ".", .steps = 10, .threads = 1, .seed = 1, .lr = 0.01 };
    const char *value = NULL;
    for (int i = 1; i < argc; i++) {
        int consumed = 0;
        const char *opt = argv[i];
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            print_help();
            return FH_OK;
        }
        FH_CHECK(app_model_args_take(&a, argc, argv, &i, &consumed));
        if (consumed) continue;
        FH_CHECK(app_option_value(argc, argv, &i, &value));
        if (!strcmp(opt, "--data")) s.data = value;
        else if (!strcmp(opt, "--labels")) s.labels = value;
        else if (!strcmp(opt, "--out")) s.out = value;
        else if (!strcmp(opt, "--batch")) FH_CHECK(app_parse_int(value, "--batch", 1, 1 << 16, &s.batch));
        else if (!strcmp(opt, "--steps")) FH_CHECK(app_parse_int(value, "--steps", 1, 1 << 20, &s.steps));
        else if (!strcmp(opt, "--threads")) FH_CHECK(app_parse_int(value, "--threads", 1, 1024, &s.threads));
        else if (!strcmp(opt, "--seed")) FH_CHECK(app_parse_int(value, "--seed", 0, 1 << 30, &s.seed));
        else if (!strcmp(opt, "--lr")) FH_CHECK(app_parse_float(value, "--lr", 0.0, 1e6, &s.lr));
        else FH_FAIL(FH_ERR_USAGE, "unknown option '%s' (see fedhet steps --help)", opt);
    }
    if (!a.model) FH_FAIL(FH_ERR_USAGE, "--model NAME is required (one of %s, or FILE.onnx)", nn_zoo_names());
    if (!s.data || !s.labels || !s.batch) FH_FAIL(FH_ERR_USAGE, "--data, --labels and --batch are required");
    if (a.classes < 2) FH_FAIL(FH_ERR_USAGE, "--classes %d: a model needs at least 2 classes", a.classes);
    nn_set_threads(s.threads);
    return run_steps(&a, &s);
}
